"""Serve plotly.min.js from the installed plotly wheel as ``vendor/plotly.min.js``.

Many clusters are air-gapped, so pages never load Plotly from a CDN; and a 4.8 MB
bundle does not belong in git. This finder exposes exactly that one file, so
``collectstatic`` copies it and nothing else of the wheel's package data.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PUBLIC_PATH = "vendor/plotly.min.js"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(PLOTLY_JS.parent))

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    @overload
    def find(self, path: str, find_all: Literal[False] = False, **kwargs: Any) -> str: ...
    @overload
    def find(self, path: str, find_all: Literal[True], **kwargs: Any) -> list[str]: ...

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        if path == PUBLIC_PATH and PLOTLY_JS.exists():
            return [str(PLOTLY_JS)] if find_all else str(PLOTLY_JS)
        return [] if find_all else ""

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        if PLOTLY_JS.exists():
            yield PUBLIC_PATH, _PrefixedStorage(PLOTLY_JS.parent)


class _PrefixedStorage(FileSystemStorage):
    """collectstatic asks the storage for the file under the public name."""

    def __init__(self, location: Path) -> None:
        super().__init__(location=str(location))

    def path(self, name: str) -> str:
        return super().path(PLOTLY_JS.name if name == PUBLIC_PATH else name)
