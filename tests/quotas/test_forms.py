"""The quota edit page's forms: what an admin types -> typed values, or the page's message."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from apps.chargeback.forms import MonthForm
from apps.chargeback.services import current_month
from apps.quotas.forms import QuotaApplyForm, QuotaForm


@pytest.mark.parametrize(("raw", "month", "error"), [
    ({}, "now", None),
    ({"month": ""}, "now", None),
    ({"month": "2027-01"}, date(2027, 1, 1), None),
    ({"month": "2026-13"}, None, "'2026-13' is not YYYY-MM"),
    ({"month": "nov"}, None, "'nov' is not YYYY-MM"),
    ({"month": " "}, None, "' ' is not YYYY-MM"),
])
def test_month(raw, month, error):
    form = MonthForm(raw)
    got = form.month_error()
    if error is None:
        expected = current_month() if month == "now" else month
        assert got is None and form.cleaned_data["month"] == expected
    else:
        assert got is not None and got.startswith(f"month {error}")


@pytest.mark.parametrize(("hours", "typed", "error"), [
    ("100", Decimal("100"), None),
    (" 1.5 ", Decimal("1.5"), None),
    ("", None, None),
    ("   ", None, None),
    ("-5", Decimal("-5"), None),  # refused by the service, which knows the ceiling
    ("ten", None, "'ten' is not a number of GPU-hours"),
    ("Infinity", None, "'Infinity' is not a number of GPU-hours"),
    ("NaN", None, "'NaN' is not a number of GPU-hours"),
])
def test_hours(hours, typed, error):
    form = QuotaForm({"month": "2026-11", "hours": hours, "reason": "Q4"})
    if error is None:
        assert form.is_valid() and form.cleaned_data["hours"] == typed
    else:
        assert not form.is_valid() and form.first_error() == error


@pytest.mark.parametrize(("seen", "version", "typed", "error"), [
    ("6000", "3", (6000, 3), None),
    ("", "", (None, 0), None),
    (" 12 ", "0", (12, 0), None),
    ("-1", "1", (-1, 1), None),
    ("6000.5", "1", None, "'6000.5' is not a whole number"),
    ("--5", "1", None, "'--5' is not a whole number"),
    ("6000", "v2", None, "'v2' is not a whole number"),
])
def test_seen_values(seen, version, typed, error):
    form = QuotaApplyForm({"month": "2026-11", "hours": "100", "reason": "Q4",
                           "seen_minutes": seen, "seen_version": version})
    if error is None:
        assert form.is_valid()
        assert (form.cleaned_data["seen_minutes"], form.cleaned_data["seen_version"]) == typed
    else:
        assert not form.is_valid() and form.first_error() == error


def test_the_first_error_is_the_one_the_page_met_first():
    form = QuotaApplyForm({"month": "2026-11", "hours": "ten", "seen_minutes": "x",
                           "seen_version": "y"})
    assert not form.is_valid() and form.first_error() == "'x' is not a whole number"
