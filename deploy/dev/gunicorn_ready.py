"""gunicorn settings for ``make serve`` / ``make demo``: say when the portal answers.

``when_ready`` runs once the workers listen: the first page can be asked for from then on.
The time counts from the ``make`` command's start (``DEMO_T0``, set by the Makefile before
anything is installed), so "ready in" is what the person who typed ``make demo`` waited
(issue 26: "demo ready in 106 s" was printed when the portal answered 159 s after it).
"""

from __future__ import annotations

import os
import time
from typing import Any


def when_ready(server: Any) -> None:
    started = os.environ.get("DEMO_T0", "")
    took = f" in {time.time() - int(started):.0f} s" if started.isdigit() else ""
    where = os.environ.get("SITE_URL", "")
    print(f"==> ready{took}: {where}/  (Ctrl-C stops it)", flush=True)
