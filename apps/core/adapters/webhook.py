"""The one way Beacon posts to a webhook: guardrails, SLOs, security findings and quotas.

A webhook URL is typed by users (My alerts' preferences), so the sender must not become a way
to reach what only the portal's host can reach (issue 27). For each send:

1. the URL must be ``http``/``https`` with a host;
2. the host is resolved once and every address is judged by the egress policy
   (``apps.analysis.egress.check``): only public addresses, unless the allow-list names it;
3. the connection goes to the address that was judged (a urllib3 pool pinned to it), while the
   Host header, TLS SNI and the certificate check use the URL's host name: a DNS answer that
   changes between the check and the connection (rebinding) cannot move the request;
4. one timeout bounds connecting and the answer together; no redirects are followed, no proxy
   or CA bundle is taken from the environment, the library does not retry;
5. the answer is classified by ``egress.answer_outcome``, the same for every caller.

Every failure is an ``AdapterError`` (``TransientAdapterError`` when a later try can help,
carrying the server's Retry-After). Its message is what a user may see, and it is the same
``egress.UNDELIVERED`` whether the policy refused the address, nobody listened, nothing
answered in time or the name did not resolve: an error must not tell a user what listens
where. The reason, the address and the library's error go to ``detail`` and the log; the
URL's path is never logged (Slack and Mattermost put the secret there).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.util import Timeout

from apps.analysis import egress
from apps.analysis.egress import Address, AllowList
from apps.core.errors import AdapterError, TransientAdapterError

SERVICE = "webhook"
log = logging.getLogger("beacon.webhook")
Resolver = Callable[[str, int], list[Address]]


def resolve(host: str, port: int) -> list[Address]:
    """Every address ``host`` has, in the resolver's order; a literal address (any spelling
    ``egress.parse_address`` reads) is itself. Raises ``OSError`` when the name does not resolve."""
    literal = egress.parse_address(host)
    if literal is not None:
        return [literal]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found = (ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos)
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Target:
    """A webhook URL taken apart: what the policy judges and what the request carries."""

    scheme: str
    host: str  # lower case, IDNA-encoded, no brackets
    port: int

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    def __str__(self) -> str:  # for logs: never the path
        return f"{self.scheme}://{self.host_header}"


def target(url: str) -> Target:
    """Parse ``url``; ``AdapterError`` when it is not an http(s) URL with a host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
        host = (parts.hostname or "").encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        raise AdapterError("the webhook URL is not a valid http(s) URL", service=SERVICE) \
            from None
    if parts.scheme not in ("http", "https") or not host:
        raise AdapterError("the webhook URL is not a valid http(s) URL", service=SERVICE)
    return Target(parts.scheme, host, port or (443 if parts.scheme == "https" else 80))


class _PinnedAdapter(HTTPAdapter):
    """Connects to ``address`` whatever the request's URL names; TLS still sends and checks
    ``hostname`` (SNI and the certificate's names), and no proxy is ever used."""

    def __init__(self, address: Address, destination: Target) -> None:
        self._address, self._destination = str(address), destination
        super().__init__(max_retries=0)

    def get_connection_with_tls_context(self, request: requests.PreparedRequest,
                                        verify: bool | str | None,
                                        proxies: Mapping[str, str] | None = None,
                                        cert: Any = None) -> Any:
        _, pool_kwargs = self.build_connection_pool_key_attributes(
            request, True if verify is None else verify, cert)
        if self._destination.scheme == "https":
            pool_kwargs = {**pool_kwargs, "server_hostname": self._destination.host,
                           "assert_hostname": self._destination.host}
        return self.poolmanager.connection_from_host(
            host=self._address, port=self._destination.port, scheme=self._destination.scheme,
            pool_kwargs=pool_kwargs)


@dataclass(frozen=True)
class Egress:
    """The sender's configuration (from settings, by ``apps.core.webhooks``)."""

    allow: AllowList = field(default_factory=AllowList)
    timeout: float = 10.0  # connect and answer together
    retry_after_max: float = 3600.0
    ca_bundle: str = ""  # "": certifi's bundle


class WebhookSender:
    """POSTs JSON under the egress policy; see the module's docstring for the steps."""

    def __init__(self, config: Egress, resolver: Resolver = resolve) -> None:
        self.config, self._resolve = config, resolver

    def post_json(self, url: str, payload: Mapping[str, Any],
                  headers: Mapping[str, str] | None = None) -> int:
        """POST ``payload``; return the status of a 2xx answer, else raise."""
        dest = target(url)
        try:
            addresses = self._resolve(dest.host, dest.port)
        except (OSError, UnicodeError) as exc:
            raise _undelivered(dest, f"the name does not resolve: {exc}", retry=True) from None
        verdict = egress.check(dest.host, addresses, self.config.allow)
        if verdict.address is None or not verdict.ok:
            raise _undelivered(dest, f"refused by the egress policy: {verdict.refused} "
                                     f"address among {[str(a) for a in addresses]}", retry=False)
        if verdict.allowed_by:
            log.info("webhook: posting to %s at internal address %s, allowed by "
                     "BEACON_WEBHOOK_ALLOW entry %r", dest, verdict.address, verdict.allowed_by)
        body = json.dumps(dict(payload), sort_keys=True, default=str)
        return self._send(url, dest, verdict.address, body, headers or {})

    def _send(self, url: str, dest: Target, address: Address, body: str,
              headers: Mapping[str, str]) -> int:
        session = requests.Session()
        session.trust_env = False  # no proxy, .netrc or CA bundle from the environment
        adapter = _PinnedAdapter(address, dest)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        try:
            with session, session.post(
                    url, data=body.encode(), stream=True, allow_redirects=False,
                    # one deadline for connecting and answering; HTTPAdapter.send takes
                    # urllib3's Timeout as it is, though the annotation lists only floats
                    timeout=Timeout(total=self.config.timeout),  # type: ignore[arg-type]
                    verify=self.config.ca_bundle or True,
                    headers={**headers, "Content-Type": "application/json",
                             "Host": dest.host_header}) as response:
                status, said = response.status_code, _start_of(response)
                retry_after = response.headers.get("Retry-After")
        except requests.RequestException as exc:
            raise _undelivered(dest, f"at {address}: {_cause(exc, url)}", retry=True) from None
        outcome = egress.answer_outcome(status, retry_after, datetime.now(UTC),
                                        self.config.retry_after_max)
        if outcome.delivered:
            return status
        detail = f"{dest} ({address}) answered HTTP {status}: {said}"
        log.warning("webhook: %s", detail)
        if outcome.retry:
            raise TransientAdapterError(outcome.reason, service=SERVICE, detail=detail,
                                        retry_after=outcome.retry_after)
        raise AdapterError(outcome.reason, service=SERVICE, detail=detail)


def _start_of(response: requests.Response, limit: int = 500) -> str:
    """The first bytes of an answer (a hostile server could send gigabytes)."""
    try:
        start: bytes = response.raw.read(limit, decode_content=True)
        return start.decode("utf-8", "replace")
    except Exception:  # only a detail for the log: never fail the send over it
        return ""


def _cause(exc: BaseException, url: str) -> str:
    """The library's innermost reason ("[Errno 111] Connection refused"), without the URL's
    path: urllib3 wraps it in errors that quote the path, which holds the webhook's secret."""
    inner: BaseException = exc
    while inner.args and isinstance(inner.args[0], BaseException):
        inner = inner.args[0]
    inner = getattr(inner, "reason", None) or inner
    text = f"{type(exc).__name__}: {inner}"
    path = urlsplit(url).path
    return text.replace(path, "/...") if len(path) > 1 else text


def _undelivered(dest: Target, why: str, *, retry: bool) -> AdapterError:
    """The one error a user sees for every failure that could map the network."""
    detail = f"{dest}: {why}"
    log.warning("webhook not delivered: %s", detail)
    error = TransientAdapterError if retry else AdapterError
    return error(egress.UNDELIVERED, service=SERVICE, detail=detail)
