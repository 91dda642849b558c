"""The SLIs three ways over the same jobs: Beacon's ORM aggregates (``apps.slo.queries``),
the pure job-by-job reference (``apps.analysis.slo``), and plain SQL written here by hand.
All three must agree, per team, window, burn window, trend day and breakdown row."""

from __future__ import annotations

import zoneinfo
from collections import defaultdict
from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from apps.analysis import slo as maths
from apps.analysis.pending import OWN_REASONS
from apps.jobs.models import Job
from apps.slo import services
from tests.slo.conftest import NOW, objective

pytestmark = pytest.mark.django_db
BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def _reference(obj: Any, window: maths.Window) -> dict[str, maths.Reference]:
    """The pure path, per team slug."""
    facts = services.job_facts(Job.objects.all())
    by_team: dict[str, list[maths.JobFacts]] = defaultdict(list)
    for f in facts:
        if f.team:
            by_team[f.team].append(f)
    return {team: maths.reference_counts(maths.Sli(obj.sli), rows, window, obj.tz,
                                         target_wait_s=(obj.wait_minutes or 0) * 60,
                                         rules=services.ending_rules())
            for team, rows in by_team.items()}


def _by_slug(world: Any, parts: dict[str, Any]) -> dict[str, Any]:
    slugs = {f"team:{t.pk}": t.slug for t in (world.team_a, world.team_b)}
    return {slugs[k]: v for k, v in parts.items()}


def _assert_counts(ours: maths.Counts, ref: maths.Counts, what: str) -> None:
    assert ours.good == pytest.approx(ref.good, rel=1e-6, abs=1e-3), what
    assert ours.total == pytest.approx(ref.total, rel=1e-6, abs=1e-3), what


@pytest.mark.parametrize("sli", ["queue_wait", "job_success", "gpu_efficiency"])
@pytest.mark.parametrize("window", ["rolling_7d", "calendar_month"])
def test_the_orm_aggregates_match_the_job_by_job_reference(world, jobs, sli, window):
    world.cluster.timezone = "Europe/Berlin"
    world.cluster.save()
    obj = objective(sli, window=window, cluster=world.cluster)
    win = services.window_of(obj, NOW)
    edges = maths.day_edges(win, obj.tz)
    ours = _by_slug(world, services.counts(obj, win, edges, services.ending_rules()))
    ref = _reference(obj, win)
    assert set(ours) == set(ref) == {"nlp", "vision"}
    for team, sc in ours.items():
        _assert_counts(sc.window, ref[team].window, f"{team} window")
        assert sc.window.total > 0  # the test data reach every SLI
        for s in maths.BURN_WINDOWS:
            _assert_counts(sc.burn[s], ref[team].burn[s], f"{team} burn {s}")
        assert len(sc.days) == len(ref[team].days)
        for day, (ours_day, (_, _, ref_day)) in enumerate(zip(sc.days, ref[team].days,
                                                              strict=True)):
            _assert_counts(ours_day, ref_day, f"{team} day {day}")


def test_the_queue_wait_breakdown_matches_the_reference(world, jobs):
    obj = objective("queue_wait")
    win = services.window_of(obj, NOW)
    parts = _by_slug(world, services.counts(obj, win, maths.day_edges(win, obj.tz), []))
    rows: dict[tuple[str, str, str], list[maths.Wait]] = defaultdict(list)
    for f in services.job_facts(Job.objects.all()):
        wait = maths.job_wait(f)
        if f.team and wait and f.start and win.start <= f.start < NOW:
            rows[(f.team, f.partition, maths.gpu_bucket(f.gpus))].append(wait)
    seen = 0
    for team, sc in parts.items():
        for b in sc.details["breakdown"]:
            waits = rows[(team, b["partition"], b["bucket"])]
            counted = [w.resource_s for w in waits if not w.own_limited]
            assert b["total"] == len(counted) and b["own_jobs"] == len(waits) - len(counted)
            assert b["good"] == sum(w <= 1800 for w in counted)
            for q, key in ((0.5, "p50"), (0.9, "p90")):
                assert b[key] == pytest.approx(maths.percentile(counted, q), abs=1e-3)
            own = [w.own_s for w in waits if w.own_limited]
            assert b["own_p90"] == pytest.approx(maths.percentile(own, 0.9), abs=1e-3)
            assert b["before_jobs"] == len([w for w in waits
                                            if not w.own_limited and w.own_s > 0])
            seen += len(waits)
    assert seen == sum(len(v) for v in rows.values()) > 50


def test_a_teams_wait_percentiles_cover_all_its_breakdown_cells(world, jobs):
    # the team's p50/p90 come from its cells' sorted waits merged, not from any one cell
    obj = objective("queue_wait")
    win = services.window_of(obj, NOW)
    parts = _by_slug(world, services.counts(obj, win, maths.day_edges(win, obj.tz), []))
    waits: dict[str, list[maths.Wait]] = defaultdict(list)
    for f in services.job_facts(Job.objects.all()):
        wait = maths.job_wait(f)
        if f.team and wait and f.start and win.start <= f.start < NOW:
            waits[f.team].append(wait)
    for team, sc in parts.items():
        counted = [w.resource_s for w in waits[team] if not w.own_limited]
        own = [w.own_s for w in waits[team] if w.own_limited]
        assert len(sc.details["breakdown"]) > 1 and counted and own
        for q, key in ((0.5, "p50"), (0.9, "p90")):
            assert sc.details[key] == pytest.approx(maths.percentile(counted, q), abs=1e-3)
            assert sc.details[f"own_{key}"] == pytest.approx(maths.percentile(own, q), abs=1e-3)
        assert sc.details["total"] == len(counted) and sc.details["own_jobs"] == len(own)


def test_ending_rules_edited_by_admins_change_the_sql_as_they_change_the_reference(world,
                                                                                     jobs):
    from apps.slo.models import EndingRule

    EndingRule.objects.filter(key="preempted").update(cause="user")
    obj = objective("job_success")
    win = services.window_of(obj, NOW)
    ours = _by_slug(world, services.counts(obj, win, maths.day_edges(win, obj.tz),
                                           services.ending_rules()))
    ref = _reference(obj, win)
    for team in ours:
        _assert_counts(ours[team].window, ref[team].window, team)
        assert "preempted" in ours[team].details["endings"]
        assert "platform" in ours[team].details["causes"]


# --- Plain SQL, by hand --------------------------------------------------------------------


def _seconds(a: str, b: str) -> str:
    """SQL for the seconds from ``b`` to ``a``."""
    if connection.vendor == "postgresql":
        return f"EXTRACT(EPOCH FROM ({a} - {b}))"
    return f"((julianday({a}) - julianday({b})) * 86400.0)"


def _param(value: datetime) -> Any:
    # SQLite stores naive UTC text; PostgreSQL takes the aware datetime
    return value if connection.vendor == "postgresql" else \
        value.astimezone(maths.UTC).replace(tzinfo=None).isoformat(" ")


def _fetch(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run SQL built in this module from constants (values are always parameters)."""
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


OWN = " OR ".join([f"j.wait_reason = '{r}'" for r in sorted(OWN_REASONS)]
                  + ["j.wait_reason LIKE 'Assoc%%'", "j.wait_reason LIKE 'QOS%%'"])
BASE = ("FROM jobs_job j WHERE j.team_id IS NOT NULL AND j.gpu_equivalent > 0 "
        "AND j.node_count > 0 AND j.start_time IS NOT NULL")


def _wait_rows(lo: datetime, hi: datetime) -> dict[int, tuple[int, int, float, float]]:
    """team -> (on time, counted, p50, p90): nearest rank with ROW_NUMBER()."""
    wait = (f"CASE WHEN {_seconds('j.start_time', 'COALESCE(j.eligible_time, j.submit_time)')}"
            f" > 0 THEN {_seconds('j.start_time', 'COALESCE(j.eligible_time, j.submit_time)')}"
            " ELSE 0 END")
    sql = f"""
        WITH w AS (SELECT j.team_id AS team, {wait} AS wait {BASE}
                   AND j.start_time >= %(lo)s AND j.start_time < %(hi)s AND NOT ({OWN})),
             r AS (SELECT team, wait, ROW_NUMBER() OVER (PARTITION BY team ORDER BY wait) AS rn,
                          COUNT(*) OVER (PARTITION BY team) AS n FROM w)
        SELECT team, SUM(CASE WHEN wait <= 1800 THEN 1 ELSE 0 END), COUNT(*),
               MAX(CASE WHEN rn = (n + 1) / 2 THEN wait END),
               MAX(CASE WHEN rn = (9 * n + 9) / 10 THEN wait END)
        FROM r GROUP BY team"""  # noqa: S608 (constants of this module; values are params)
    return {row[0]: row[1:] for row in _fetch(sql, {"lo": _param(lo), "hi": _param(hi)})}


def _success_rows(lo: datetime, hi: datetime) -> dict[int, tuple[int, int]]:
    """team -> (not the platform's fault, ended): the default rules, written out."""
    fault = "(COALESCE(m.xid_gpus, 0) > 0 OR COALESCE(m.ecc_dbe, 0) > 0)"
    platform = (f"(j.state IN ('FAILED','TIMEOUT','CANCELLED','NODE_FAIL','OUT_OF_MEMORY',"
                f"'PREEMPTED','BOOT_FAIL','DEADLINE') AND {fault}) "
                "OR j.state IN ('NODE_FAIL', 'PREEMPTED', 'BOOT_FAIL') "
                "OR (j.state = 'FAILED' AND (LOWER(j.wait_reason) LIKE '%%launch%%' "
                "OR LOWER(j.wait_reason) LIKE '%%prolog%%' "
                "OR LOWER(j.wait_reason) LIKE '%%systemfailure%%'))")
    counted = "j.state IN ('COMPLETED','FAILED','OUT_OF_MEMORY','CANCELLED','TIMEOUT'," \
              "'DEADLINE','NODE_FAIL','PREEMPTED','BOOT_FAIL')"
    sql = f"""SELECT j.team_id, SUM(CASE WHEN {platform} THEN 0 ELSE 1 END), COUNT(*)
              FROM jobs_job j LEFT JOIN jobs_jobmetrics m ON m.job_id = j.id
              {BASE[len('FROM jobs_job j '):]} AND j.end_time >= %(lo)s AND j.end_time < %(hi)s
              AND {counted} GROUP BY j.team_id"""  # noqa: S608
    return {row[0]: row[1:] for row in _fetch(sql, {"lo": _param(lo), "hi": _param(hi)})}


def _efficiency_rows(lo: datetime, hi: datetime) -> dict[int, tuple[float, float]]:
    """team -> (useful GPU-seconds, measured GPU-seconds) prorated to [lo, hi)."""
    end = "CASE WHEN COALESCE(j.end_time, %(hi)s) < %(hi)s THEN COALESCE(j.end_time, %(hi)s) " \
          "ELSE %(hi)s END"
    start = "CASE WHEN j.start_time > %(lo)s THEN j.start_time ELSE %(lo)s END"
    overlap = f"j.gpu_equivalent * {_seconds(f'({end})', f'({start})')}"
    ok = ("m.status IN ('complete', 'live', 'partial') AND m.measure <> '' "
          "AND m.allocated_gpu_hours > 0")
    sql = f"""SELECT j.team_id,
                     SUM(CASE WHEN {ok} THEN {overlap} * m.useful_hours / m.allocated_gpu_hours
                         ELSE 0 END),
                     SUM(CASE WHEN {ok} THEN {overlap} ELSE 0 END)
              FROM jobs_job j LEFT JOIN jobs_jobmetrics m ON m.job_id = j.id
              {BASE[len('FROM jobs_job j '):]} AND j.start_time < %(hi)s
              AND (j.end_time IS NULL OR j.end_time > %(lo)s) GROUP BY j.team_id"""  # noqa: S608
    return {row[0]: row[1:] for row in _fetch(sql, {"lo": _param(lo), "hi": _param(hi)})}


@pytest.mark.parametrize("window", ["rolling_7d", "rolling_28d", "calendar_month"])
def test_the_slis_match_plain_sql_written_by_hand(world, jobs, window):
    objectives = {sli: objective(sli, window=window)
                  for sli in ("queue_wait", "job_success", "gpu_efficiency")}
    win = services.window_of(objectives["queue_wait"], NOW)
    lo, hi = win.start, win.observed_end
    expected = {"queue_wait": _wait_rows(lo, hi), "job_success": _success_rows(lo, hi),
                "gpu_efficiency": _efficiency_rows(lo, hi)}
    for sli, obj in objectives.items():
        parts = services.counts(obj, win, maths.day_edges(win, obj.tz), services.ending_rules())
        for team in (world.team_a, world.team_b):
            sc, row = parts[f"team:{team.pk}"], expected[sli][team.pk]
            assert sc.window.good == pytest.approx(row[0], rel=1e-9, abs=1e-3), (sli, team)
            assert sc.window.total == pytest.approx(row[1], rel=1e-9, abs=1e-3), (sli, team)
            if sli == "queue_wait":
                assert sc.details["p50"] == pytest.approx(row[2], abs=1e-3)
                assert sc.details["p90"] == pytest.approx(row[3], abs=1e-3)
