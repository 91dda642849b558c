"""The progress display: a bar on a terminal, plain lines elsewhere (render is pure)."""

from __future__ import annotations

import io

import pytest
from django.core.management.base import OutputWrapper

from apps.core.progress import Progress, render


@pytest.mark.parametrize(("done", "total", "elapsed", "bar", "expected"), [
    (12, 40, 8.0, True, "archive      [###.......] 12/40  30%  8 s elapsed, ETA 19 s"),
    (12, 40, 8.0, False, "archive: 12/40 (30%), 8 s elapsed, ETA 19 s"),
    (0, 40, 0.4, True, "archive      [..........]  0/40   0%  0 s elapsed, ETA ?"),
    (40, 40, 31.0, True, "archive      [##########] 40/40 100%  31 s elapsed, ETA 0 s"),
    (45, 40, 31.0, False, "archive: 40/40 (100%), 31 s elapsed, ETA 0 s"),  # clamped
    (1, 3, 2.0, True, "archive      [###.......] 1/3  33%  2 s elapsed, ETA 4 s"),
])
def test_it_renders_a_bar_or_a_plain_line(done, total, elapsed, bar, expected):
    assert render("archive", done, total, elapsed, bar=bar, width=10) == expected


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_on_a_terminal_it_redraws_one_line_and_ends_it_when_done():
    out = _Terminal()
    progress = Progress(OutputWrapper(out), clock=_Clock())
    for done in range(5):
        progress("traces", done, 4)
    text = out.getvalue()
    assert text.count("\r") == 5 and text.count("\n") == 1 and text.endswith("\n")
    assert "[" + "#" * 24 + "] 4/4 100%  4 s elapsed" in text


def test_elsewhere_it_prints_a_plain_line_every_ten_percent():
    out = io.StringIO()
    progress = Progress(out, clock=_Clock())
    for done in range(101):
        progress("archive", done, 100)
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == [f"{p}/100" for p in range(0, 101, 10)]
    assert "[" not in out.getvalue() and "\r" not in out.getvalue()
