"""Report periods and the spread of a group's seconds over them (pure, table tests)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise

import pytest

from apps.analysis.periods import Granularity, PeriodError, count_periods, period_edges, spread
from apps.analysis.reports import Row, dominant_model, table, total
from apps.analysis.slo import Counts

ZURICH = zoneinfo.ZoneInfo("Europe/Zurich")
D, W, M = Granularity.DAY, Granularity.WEEK, Granularity.MONTH


@pytest.mark.parametrize(("first", "last", "g", "n"), [
    (date(2026, 11, 1), date(2026, 11, 30), D, 30),
    (date(2026, 11, 1), date(2026, 11, 30), W, 6),   # Sun 1st .. Mon 30th: 6 weeks touched
    (date(2026, 11, 2), date(2026, 11, 8), W, 1),    # Monday to Sunday
    (date(2026, 11, 15), date(2027, 2, 1), M, 4),
    (date(2026, 11, 15), date(2026, 11, 15), M, 1),
])
def test_periods_are_counted_and_edged_alike(first, last, g, n):
    edges = period_edges(first, last, g, UTC)
    assert count_periods(first, last, g) == n == len(edges) - 1
    assert edges[0] == datetime(first.year, first.month, first.day, tzinfo=UTC)
    assert edges[-1] == datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)


def test_weeks_start_on_mondays_and_months_on_the_first():
    weeks = period_edges(date(2026, 11, 1), date(2026, 11, 30), W, UTC)
    assert [e.weekday() for e in weeks[1:-1]] == [0] * 5
    months = period_edges(date(2026, 11, 15), date(2027, 2, 1), M, UTC)
    assert [e.day for e in months[1:-1]] == [1, 1, 1]


def test_local_days_follow_the_clock_change():
    edges = period_edges(date(2026, 10, 24), date(2026, 10, 26), D, ZURICH)
    lengths = [(b - a).total_seconds() / 3600 for a, b in pairwise(edges)]
    assert lengths == [24, 25, 24]


@pytest.mark.parametrize(("first", "last", "g", "words"), [
    (date(2026, 11, 2), date(2026, 11, 1), None, "before it starts"),
    (date(2020, 1, 1), date(2026, 1, 1), D, "more than 400 periods"),
])
def test_bad_ranges_are_refused_with_words(first, last, g, words):
    with pytest.raises(PeriodError, match=words):
        period_edges(first, last, g, UTC)


@pytest.mark.parametrize(("g", "s", "e", "sd", "ed", "expected"), [
    (1.0, 10.0, 50.0, 0, 0, (0, [40.0])),                 # inside one period
    (2.0, 2 * 90.0, 2 * 250.0, 0, 2, (0, [20.0, 200.0, 100.0])),  # two jobs 90..250 s
])
def test_spread_gives_each_period_its_seconds(g, s, e, sd, ed, expected):
    assert spread(g, s, e, sd, ed, [0.0, 100.0, 200.0, 300.0]) == expected


@pytest.mark.parametrize(("types", "model"), [
    ({"h100": 8}, "h100"), ({"a100": 2, "h100": 6}, "h100"), ({"a100": 4, "h100": 4}, "a100"),
    ({}, ""), (None, ""),
])
def test_a_jobs_model_is_the_one_holding_most_gpus(types, model):
    assert dominant_model(types) == model


def test_totals_add_hours_counts_and_events_but_not_percentiles():
    rows = [Row(("a",), 0, 2.0, 1.0, started=3, wait_p50=10.0, ended=2, success=Counts(1, 2),
                efficiency=Counts(5, 10)),
            Row(("b",), 0, 1.0, 0.5, started=1, ended=1, success=Counts(1, 1)),
            Row(("c",), 0)]
    assert [r.group for r in table(rows)] == [("a",), ("b",)]
    t = total(rows)
    assert (t.gpu_hours, t.started, t.ended, t.success_rate, t.wait_p50) == (
        3.0, 4, 3, 2 / 3, None)
    assert t.efficiency_share == 0.5
