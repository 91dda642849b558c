"""The API's documentation pages (Swagger UI, ReDoc), served from the installed
``drf-spectacular-sidecar`` package: nothing is loaded from another site."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from csp.decorators import csp_replace

# Swagger UI and ReDoc insert <style> elements at run time, and ReDoc's search runs in a
# worker made from a blob: only these two pages allow that; scripts stay 'self' only.
DOCS_CSP = {"style-src-elem": ["'self'", "'unsafe-inline'"], "worker-src": ["'self'", "blob:"]}


def docs_csp(view: Callable[..., Any]) -> Callable[..., Any]:
    return csp_replace(DOCS_CSP)(view)
