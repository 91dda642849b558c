"""The archive's month arithmetic (apps/analysis/months.py): partition keys and retention."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from apps.analysis import months as m

D = date


@pytest.mark.parametrize(("moment", "want"), [
    (datetime(2026, 12, 31, 23, 59, tzinfo=UTC), D(2026, 12, 1)),
    # 00:30 on 1 January in UTC+2 is still December in UTC
    (datetime(2027, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=2))), D(2026, 12, 1)),
    (D(2027, 2, 14), D(2027, 2, 1)),
])
def test_month_of_is_the_first_day_in_utc(moment, want):
    assert m.month_of(moment) == want


@pytest.mark.parametrize(("month", "n", "want"), [
    (D(2026, 12, 1), 1, D(2027, 1, 1)), (D(2026, 1, 1), -1, D(2025, 12, 1)),
    (D(2026, 3, 1), -14, D(2025, 1, 1)), (D(2026, 3, 1), 0, D(2026, 3, 1)),
    (D(2026, 11, 1), 26, D(2029, 1, 1)),
])
def test_add_months_crosses_years(month, n, want):
    assert m.add_months(month, n) == want


SUBMIT = datetime(2026, 10, 31, 22, tzinfo=UTC)


@pytest.mark.parametrize(("end", "key", "months"), [
    (None, D(2026, 10, 1), (D(2026, 10, 1),)),  # running: its submit month
    (datetime(2026, 11, 2, tzinfo=UTC), D(2026, 11, 1), (D(2026, 10, 1), D(2026, 11, 1))),
    (datetime(2026, 10, 31, 23, tzinfo=UTC), D(2026, 10, 1), (D(2026, 10, 1),)),
])
def test_a_jobs_rows_are_in_its_end_month_or_while_running_its_submit_month(end, key, months):
    assert m.archive_month(SUBMIT, end) == key
    assert m.archive_months(SUBMIT, end) == months
    assert key in months


def test_months_ahead_starts_at_the_current_month():
    assert m.months_ahead(D(2026, 11, 30), 3) == [D(2026, 11, 1), D(2026, 12, 1),
                                                   D(2027, 1, 1), D(2027, 2, 1)]


HAVE = [D(2025, 10, 1), D(2025, 11, 1), D(2025, 12, 1), D(2026, 1, 1), D(2026, 12, 1)]


@pytest.mark.parametrize(("keep", "want"), [
    (0, []),  # retention off
    (12, [D(2025, 10, 1), D(2025, 11, 1)]),  # December 2025 is the 12th month back: kept
    (11, [D(2025, 10, 1), D(2025, 11, 1), D(2025, 12, 1)]),
    (60, []),
])
def test_expired_keeps_the_current_month_and_keep_months_before_it(keep, want):
    assert m.expired(HAVE, D(2026, 12, 7), keep) == want


def test_partition_names_sort_by_month():
    assert m.partition_name("t", D(2027, 1, 1)) == "t_p2027_01"
    assert m.partition_name("t", D(2026, 12, 1)) < m.partition_name("t", D(2027, 1, 1))
