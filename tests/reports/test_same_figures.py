"""The report's figures are the statements' and the SLO scorecards' for the same period and
scope: the same queries, grouped the report's way (issue 30: "the same figure reads the
same everywhere")."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from apps.analysis import chargeback as cb
from apps.analysis.periods import Granularity
from apps.chargeback import services as chargeback
from apps.jobs.models import Job
from apps.reports import services
from apps.slo import services as slo
from tests.slo.conftest import NOW, objective, population

NOV = (date(2026, 11, 1), date(2026, 11, 30))


@pytest.fixture
def jobs(world):
    made = population(world)
    # an implausible record: counted nowhere, here neither
    Job.objects.filter(pk=made[0].pk).update(implausible=["gpus_over_cluster"])
    return made


def _report(user, group, period=None, team=None):
    params = services.Params(*NOV, group=group, period=period, team=team)
    return services.build(user, params, now=NOW)


def _row(report, *group):
    rows = [r for r in report.rows if r.group == group]
    assert len(rows) == 1, (group, [r.group for r in report.rows])
    return rows[0]


def test_each_statement_line_is_the_reports_row_for_its_key(world, jobs):
    lines = chargeback.compute_lines(date(2026, 11, 1), now=NOW)["nlp"]
    assert len(lines) > 3
    report = _report(world.users["staff"], ("team", "user", "partition", "gpu_model"))
    for line in lines:
        row = _row(report, "nlp", line.user, line.partition, line.gpu_model or "(unknown)")
        assert cb.round_hours(cb.Hours(row.gpu_hours)).allocated == line.hours.allocated


def test_a_teams_month_equals_its_statement_by_month_and_by_day(world, jobs):
    lines = chargeback.compute_lines(date(2026, 11, 1), now=NOW)["nlp"]
    statement = sum((ln.hours.allocated for ln in lines), Decimal(0))
    useful = sum((ln.hours.useful for ln in lines), Decimal(0))
    by_month = _row(_report(world.users["staff"], ("team",), Granularity.MONTH), "nlp")
    # lines are rounded to 0.0001 h each: the unrounded total is within that of their sum
    assert by_month.gpu_hours == pytest.approx(float(statement), abs=1e-4 * len(lines))
    assert by_month.useful_hours == pytest.approx(float(useful), abs=1e-4 * len(lines))
    by_day = _report(world.users["staff"], ("team",), Granularity.DAY)
    days = [r for r in by_day.rows if r.group == ("nlp",)]
    assert len(days) > 5
    assert sum(r.gpu_hours for r in days) == pytest.approx(by_month.gpu_hours, rel=1e-9)


def test_a_lead_reads_the_same_team_figure_as_the_admin(world, jobs):
    nlp = world.team_a
    admin = _row(_report(world.users["staff"], ("team",), team=nlp), "nlp")
    lead = _row(_report(world.users["alice"], ("team",), team=nlp), "nlp")
    assert lead == admin


@pytest.mark.parametrize("sli", ["queue_wait", "job_success", "gpu_efficiency"])
def test_the_team_rows_equal_the_slo_scorecards_of_the_month(world, jobs, sli):
    obj = objective(sli, window="calendar_month")
    cards = {c.subject: c for c in slo.evaluate_objective(obj, NOW, slo.ending_rules())}
    report = _report(world.users["staff"], ("team",))
    for team in (world.team_a, world.team_b):
        card, row = cards[f"team:{team.pk}"], _row(report, team.slug)
        assert card.total > 0
        if sli == "queue_wait":
            assert row.started == card.details["total"] + card.details["own_jobs"]
            assert (row.wait_p50, row.wait_p90, row.wait_p95) == (
                card.details["p50"], card.details["p90"], card.details["p95"])
        elif sli == "job_success":
            assert (row.success.good, row.success.total) == (card.good, card.total)
            assert row.success_rate == card.sli
        else:
            assert row.efficiency.total == pytest.approx(card.total, rel=1e-9)
            assert row.efficiency_share == pytest.approx(card.sli, rel=1e-9)


def test_grouped_by_size_and_model_the_counts_add_up_to_the_whole(world, jobs):
    whole = _report(world.users["staff"], ("team",)).total
    split = _report(world.users["staff"], ("size", "gpu_model")).total
    assert split.started == whole.started and split.ended == whole.ended
    assert split.gpu_hours == pytest.approx(whole.gpu_hours, rel=1e-9)
    assert {r.group[0] for r in _report(world.users["staff"], ("size",)).rows} <= {
        "1", "2-4", "5-8", "9-32", "33+"}
