"""The security webhook: one JSON POST, an explicit timeout, no automatic retries.

Failures become ``AdapterError``; the ones a later retry can fix (timeouts, refused
connections, 429 and 5xx answers) a ``TransientAdapterError``, which the Celery task
retries with backoff. Redirects are not followed (a webhook that moved is a config error).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import requests

from apps.core.errors import AdapterError, TransientAdapterError

SERVICE = "webhook"


def post_json(url: str, payload: Mapping[str, Any], *, timeout: float = 10.0,
              headers: Mapping[str, str] | None = None,
              session: requests.Session | None = None) -> int:
    """POST ``payload`` to ``url``; return the HTTP status of a 2xx answer."""
    if not url.startswith(("http://", "https://")):
        raise AdapterError(f"webhook URL {url[:100]!r} has no http(s) scheme", service=SERVICE)
    body = json.dumps(payload, sort_keys=True, default=str)
    sender = session or requests.Session()
    try:
        response = sender.post(url, data=body, timeout=(min(timeout, 5.0), timeout),
                               allow_redirects=False,
                               headers={"Content-Type": "application/json", **(headers or {})})
    except requests.Timeout as exc:
        raise TransientAdapterError("webhook did not answer in time", service=SERVICE,
                                    detail=str(exc)) from exc
    except requests.RequestException as exc:
        raise TransientAdapterError("cannot reach the webhook", service=SERVICE,
                                    detail=str(exc)) from exc
    status = response.status_code
    if 200 <= status < 300:
        return status
    detail = f"HTTP {status}: {response.text[:500]}"
    if status == 429 or status >= 500:
        raise TransientAdapterError(f"webhook answered {status}", service=SERVICE, detail=detail)
    raise AdapterError(f"webhook refused the message ({status})", service=SERVICE, detail=detail)
