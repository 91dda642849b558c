"""The one error type every adapter raises (STYLE.md §2.3): in core, so every layer can catch it."""

from __future__ import annotations


class AdapterError(Exception):
    """An external system failed or answered something we cannot use.

    ``service`` names the system ("slurm", "prometheus", "kineto"); ``detail`` keeps
    what it said (trimmed), for the run record and the page banner.
    """

    def __init__(self, message: str, *, service: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.service = service
        self.detail = detail[:2000]


class TransientAdapterError(AdapterError):
    """A failure a later retry can fix: timeouts, 503s, refused connections, daemons down.

    ``retry_after`` is how long the other side asked us to wait (seconds, from its
    Retry-After), when it said; whoever retries waits at least that long.
    """

    def __init__(self, message: str, *, service: str = "", detail: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(message, service=service, detail=detail)
        self.retry_after = retry_after
