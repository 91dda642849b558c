"""CSV downloads of what a page lists: UTF-8, streamed, safe to open in a spreadsheet."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.http import StreamingHttpResponse

# A cell starting with one of these is a formula to Excel, LibreOffice and Google Sheets
# (OWASP "CSV injection"); tab and carriage return start one after a paste, too.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> str:
    """``value`` as text a spreadsheet shows as typed: a leading ``'`` before anything that
    would start a formula, except a plain number (a negative amount stays a number)."""
    text = "" if value is None else str(value)
    if text.startswith(FORMULA_STARTS) and not _is_number(text):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip() == text and text.lower().lstrip("+-") not in ("inf", "infinity", "nan")


class _Echo:
    """csv.writer writes into this; each row comes back as the string to send."""

    def write(self, value: str) -> str:
        return value


def csv_response(filename: str, header: Sequence[str],
                 rows: Iterable[Sequence[Any]]) -> StreamingHttpResponse:
    """A streamed ``text/csv; charset=utf-8`` attachment; every cell through ``safe_cell``."""
    writer = csv.writer(_Echo(), lineterminator="\r\n")

    def lines() -> Iterator[str]:
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([safe_cell(v) for v in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "private, no-store"  # a signed-in user's data (issue 27)
    return response
