"""Progress of long commands, per stage: a bar on a terminal, plain lines otherwise.

On a terminal one line is redrawn in place::

    archive  [#########...............]  1200/3100  38%  14 s elapsed, ETA 22 s

Elsewhere (a log, a pipe, CI) the same facts are printed as a plain line every 10 %::

    archive: 1200/3100 (38%), 14 s elapsed, ETA 22 s
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from django.core.management.base import OutputWrapper

BAR_WIDTH = 24
LINE_WIDTH = 79


def render(stage: str, done: int, total: int, elapsed: float, bar: bool,
           width: int = BAR_WIDTH) -> str:
    """One progress line (pure): the bar form for a terminal, the plain form otherwise.

    ``done`` is clamped to ``[0, total]``; the ETA is unknown until something is done.
    """
    done = max(0, min(done, total))
    percent = 100 * done // total if total > 0 else 100
    eta = f"ETA {elapsed / done * (total - done):.0f} s" if done else "ETA ?"
    timing = f"{elapsed:.0f} s elapsed, {eta}"
    if not bar:
        return f"{stage}: {done}/{total} ({percent}%), {timing}"
    filled = width * done // total if total > 0 else width
    digits = len(str(total))
    return (f"{stage:<12} [{'#' * filled}{'.' * (width - filled)}] "
            f"{done:>{digits}}/{total} {percent:>3}%  {timing}")


class Progress:
    """``progress(stage, done, total)``: redraws a bar (a terminal) or prints every 10 %."""

    def __init__(self, out: TextIO | OutputWrapper = sys.stdout,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.clock = clock
        self.started: dict[str, float] = {}
        self.printed: dict[str, int] = {}

    def _write(self, text: str) -> None:
        # Django's OutputWrapper ends every write with a newline unless told otherwise
        kwargs: dict[str, Any] = {"ending": ""} if isinstance(self.out, OutputWrapper) else {}
        self.out.write(text, **kwargs)
        self.out.flush()

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self.clock()
        started = self.started.setdefault(stage, now)
        if total <= 0:
            return
        elapsed = now - started
        if self.tty:
            line = render(stage, done, total, elapsed, bar=True)
            self._write(f"\r{line:<{LINE_WIDTH}}" + ("\n" if done >= total else ""))
        elif done >= total or 10 * done // total > self.printed.get(stage, -1):
            self.printed[stage] = 10 * done // total
            self._write(render(stage, done, total, elapsed, bar=False) + "\n")
