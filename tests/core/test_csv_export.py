"""CSV cells a spreadsheet shows as typed: formulas defused, numbers kept (issue 26)."""

from __future__ import annotations

import pytest

from apps.core.csv_export import safe_cell


@pytest.mark.parametrize(("value", "cell"), [
    ("=1+1", "'=1+1"),
    ('=HYPERLINK("http://evil")', '\'=HYPERLINK("http://evil")'),
    ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
    ("@SUM(A1)", "'@SUM(A1)"),
    ("-2+3", "'-2+3"),
    ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"),
    ("-12.5", "-12.5"),
    ("+3", "+3"),
    ("-inf", "'-inf"),
    (" =1", " =1"),
    ("train=3", "train=3"),
    (None, ""),
    (0, "0"),
    (-4, "-4"),
    ("Überprüfung", "Überprüfung"),
])
def test_safe_cell(value, cell):
    assert safe_cell(value) == cell
