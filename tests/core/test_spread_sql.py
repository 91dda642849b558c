"""``apps.core.sql.spread_sums``: the seconds SQL spreads over periods are the pure
``periods.spread`` of each job, added up per group (issue 30: the usage reports' days)."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest
from django.db.models import DateTimeField, F, FloatField, Sum, Value
from django.db.models.functions import Greatest, Least

from apps.analysis.periods import spread
from apps.core.sql import Seconds, period_index, spread_sums
from apps.jobs.models import Job
from tests.conftest import T0, make_job

LO = T0.replace(hour=0, minute=0, second=0, microsecond=0)
EDGES = [LO + timedelta(days=d) for d in range(4)]  # three days
H = timedelta(hours=1)
# (user, gpus, start, end): inside a day, across three days, ending on an edge, starting
# before the range, ending after it, and no time at all on the first edge
JOBS = [("ann", 2.0, LO + 2 * H, LO + 5 * H), ("ann", 1.0, LO + 20 * H, LO + 50 * H),
        ("bob", 4.0, LO + 10 * H, LO + 24 * H), ("bob", 8.0, LO - 5 * H, LO + 30 * H),
        ("cy", 1.5, LO + 70 * H, LO + 80 * H), ("cy", 3.0, LO, LO)]


def _dt(value: object) -> Value:
    return Value(value, output_field=DateTimeField())


def _grouped() -> object:
    lo, hi = _dt(EDGES[0]), _dt(EDGES[-1])
    s0 = Greatest(F("start_time"), lo)
    e0 = Greatest(Least(F("end_time"), hi), s0)
    w = F("gpu_equivalent")
    return (Job.objects.annotate(rs=Seconds(s0, lo), re=Seconds(e0, lo),
                                 sd=period_index(s0, EDGES), ed=period_index(e0, EDGES, end=True))
            .values("user_name", "sd", "ed")
            .annotate(a_g=Sum(w, output_field=FloatField()), a_s=Sum(w * F("rs")),
                      a_e=Sum(w * F("re")))
            .order_by())


def _by_hand() -> dict[tuple[str, int], float]:
    """Each job on its own through the pure spread, added up per user and day."""
    rel = [(e - EDGES[0]).total_seconds() for e in EDGES]
    out: dict[tuple[str, int], float] = defaultdict(float)
    for user, g, start, end in JOBS:
        s0, e0 = max(start, EDGES[0]), max(min(end, EDGES[-1]), max(start, EDGES[0]))
        rs, re = (s0 - EDGES[0]).total_seconds(), (e0 - EDGES[0]).total_seconds()
        sd = min(int(rs // 86400), 2)
        ed = max(int(-(-re // 86400)) - 1, sd)  # an end on an edge is the day before's
        first, values = spread(g, g * rs, g * re, sd, min(ed, 2), rel)
        for day, seconds in enumerate(values, start=first):
            out[(user, day)] += seconds
    return out


@pytest.mark.django_db
def test_the_sql_spread_is_the_pure_spread_of_each_job_added_up(world):
    for i, (user, g, start, end) in enumerate(JOBS):
        make_job(world.cluster, 9000 + i, None, None, user_name=user, gpu_equivalent=g,
                 start_time=start, end_time=end)
    Job.objects.exclude(job_id__gte=9000).delete()
    rows = spread_sums(_grouped(), ["user_name"], ["a"], [
        (e - EDGES[0]).total_seconds() for e in EDGES])
    ours = {(user, day): seconds for user, day, seconds in rows if seconds}
    expected = {k: v for k, v in _by_hand().items() if v}
    assert ours.keys() == expected.keys()
    for key, seconds in expected.items():
        # SQLite's seconds come from julianday(): a few microseconds off
        assert ours[key] == pytest.approx(seconds, abs=1e-3), key
    assert ours[("ann", 1)] == pytest.approx(1.0 * 24 * 3600)  # a whole middle day
