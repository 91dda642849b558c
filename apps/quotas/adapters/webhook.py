"""POST a JSON warning to a webhook (Slack/Mattermost-compatible ``text`` plus fields).

One HTTP call, an explicit timeout, no retries in the library (the periodic check retries an
alert that was not sent). Failures are ``AdapterError``; what a retry can fix (timeouts,
refused connections, 5xx) is ``TransientAdapterError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from apps.core.errors import AdapterError, TransientAdapterError


class Webhook:
    """A webhook endpoint, configured through the constructor."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise AdapterError(f"webhook URL {url!r} has no http(s) scheme", service="webhook")
        self.url, self.timeout = url, timeout
        self.session = requests.Session()
        self.session.mount("http://", HTTPAdapter(max_retries=0))
        self.session.mount("https://", HTTPAdapter(max_retries=0))

    def post(self, payload: Mapping[str, Any]) -> None:
        """Send one JSON body; any answer but 2xx is an error."""
        try:
            resp = self.session.post(self.url, json=dict(payload), timeout=self.timeout)
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise TransientAdapterError(f"webhook unreachable: {exc}", service="webhook") from exc
        except requests.RequestException as exc:
            raise AdapterError(f"webhook request failed: {exc}", service="webhook") from exc
        if not 200 <= resp.status_code < 300:
            error = TransientAdapterError if resp.status_code >= 500 else AdapterError
            raise error(f"webhook answered HTTP {resp.status_code}", service="webhook",
                        detail=resp.text[:2000])
