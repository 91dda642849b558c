"""How figures print (issue 26): one function per kind of number, every page through it."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from apps.analysis.figures import (
    as_of_text,
    gpu_hours_text,
    gpu_seconds_text,
    money_text,
    share_text,
)


@pytest.mark.parametrize(("hours", "text"), [
    (0, "0.0 GPU-h"), (0.04, "0.0 GPU-h"), (0.05, "0.1 GPU-h"), (1500.94, "1,500.9 GPU-h"),
    (Decimal("1490.6500"), "1,490.7 GPU-h"), (2710.8, "2,710.8 GPU-h"),
])
def test_gpu_hours_have_one_decimal_and_their_unit(hours, text):
    assert gpu_hours_text(hours) == text
    assert gpu_hours_text(hours, unit=False) == text.removesuffix(" GPU-h")


def test_an_slo_events_count_of_gpu_seconds_reads_as_gpu_hours():
    assert gpu_seconds_text(26130362) == "7,258.4 GPU-h"


@pytest.mark.parametrize(("share", "text"), [(0.0, "0%"), (0.08, "8%"), (0.925, "92%"),
                                             (0.935, "94%"), (1.0, "100%")])
def test_shares_are_whole_percents(share, text):
    assert share_text(share) == text


def test_amounts_carry_their_currency():
    assert money_text(Decimal("1234.5"), "EUR") == "1,234.50 EUR"
    assert money_text(-3, "CHF") == "-3.00 CHF"
    with pytest.raises(ValueError, match="currency"):
        money_text(Decimal("1"), "")


def test_a_snapshot_says_when_it_was_taken():
    when = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
    assert as_of_text(when, "statement draft") == "as of 2026-12-01 01:00 UTC (statement draft)"
    assert as_of_text(when, "") == "as of 2026-12-01 01:00 UTC"
