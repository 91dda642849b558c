"""The active probe of exposed services: GET only, allow-listed targets, rate-limited.

Beacon asks each target one question: does ``GET http://node:port/path`` answer without
authentication? It sends no body and no credentials, follows no redirect, reads at most
``MAX_BODY`` bytes, waits at most ``timeout`` seconds and never more than ``per_second``
requests a second. What it probes (allocated nodes, the rule's ports) is decided by the
caller; this module only refuses anything that is not a plain http GET of a host name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import requests

MAX_BODY = 64 * 1024
USER_AGENT = "beacon-security-probe (GET only; see your portal's security page)"
# What to ask each service: an API that runs code (or lists what it ran) when open.
PATHS = {"ray-dashboard": "/api/jobs/", "ray-jobs": "/api/jobs/", "jupyter": "/api/kernels",
         "tensorboard": "/data/environment", "mlflow": "/api/2.0/mlflow/experiments/search",
         "gradio": "/config"}
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$")


@dataclass(frozen=True)
class ProbeTarget:
    node: str
    port: int
    service: str
    job_id: int | None = None
    user: str = ""

    @property
    def url(self) -> str:
        return f"http://{self.node}:{self.port}{PATHS.get(self.service, '/')}"


@dataclass(frozen=True)
class ProbeAnswer:
    """``status`` None: nothing answered (closed, filtered, not HTTP)."""

    target: ProbeTarget
    status: int | None
    auth_required: bool | None
    observed_at: float
    error: str = ""


class Prober:
    """GETs targets one by one at ``per_second`` at most."""

    def __init__(self, timeout: float = 3.0, per_second: float = 5.0,
                 session: requests.Session | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.timeout = float(timeout)
        self.gap = 1.0 / max(per_second, 0.01)
        self.session = session or requests.Session()
        self.sleep = sleep

    def probe(self, targets: Iterable[ProbeTarget]) -> list[ProbeAnswer]:
        answers = []
        for i, target in enumerate(targets):
            if i:
                self.sleep(self.gap)
            answers.append(self.ask(target))
        return answers

    def ask(self, target: ProbeTarget) -> ProbeAnswer:
        now = time.time()
        if not _HOST.match(target.node) or not 0 < target.port < 65536:
            return ProbeAnswer(target, None, None, now, "not a host name and port")
        try:
            with self.session.get(target.url, timeout=(self.timeout, self.timeout),
                                  allow_redirects=False, stream=True,
                                  headers={"User-Agent": USER_AGENT}) as response:
                next(response.iter_content(MAX_BODY), b"")  # read a little, at most
                return ProbeAnswer(target, response.status_code, _auth(response), now)
        except requests.RequestException as exc:
            return ProbeAnswer(target, None, None, now, type(exc).__name__)


def _auth(response: requests.Response) -> bool:
    """Asked for credentials: 401/403/407, or a redirect (a login page or an
    authenticating proxy; the probe never follows it)."""
    return response.status_code in (401, 403, 407) or 300 <= response.status_code < 400
