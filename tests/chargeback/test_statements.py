"""Statements: the SQL path agrees with the pure maths, drafts, finalising, immutability,
adjustments, terms, exports and the ``chargeback`` command."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from apps.analysis import chargeback as cb
from apps.audit.models import AuditEvent
from apps.chargeback import services
from apps.chargeback.models import ImmutableStatement, Rate, Statement, StatementLine
from apps.chargeback.usage import grouped_rows, job_usages
from apps.jobs.models import Job
from tests.chargeback.conftest import NOV, archive
from tests.conftest import make_job

DEC1 = datetime(2026, 12, 1, tzinfo=UTC)
AFTER = DEC1 + timedelta(days=2)  # November is over
D = Decimal


def _edge_jobs(world):
    """Jobs at the month's edges, running, sharded and of two models."""
    a, b = world.team_a, world.team_b
    bob, carol = world.users["bob"], world.users["carol"]
    return [
        make_job(world.cluster, 401, bob, a, start_time=datetime(2026, 10, 31, 20, tzinfo=UTC),
                 end_time=datetime(2026, 11, 1, 2, tzinfo=UTC), gpu_equivalent=4.0),
        make_job(world.cluster, 402, bob, a, start_time=datetime(2026, 11, 30, 22, tzinfo=UTC),
                 end_time=datetime(2026, 12, 1, 3, tzinfo=UTC), gpu_equivalent=2.0,
                 gpu_types={"a100": 2}),
        make_job(world.cluster, 403, carol, b, start_time=datetime(2026, 11, 29, tzinfo=UTC),
                 end_time=None, state="RUNNING", gpu_equivalent=0.25, gpus=0, gpu_shards=2,
                 gpu_types={}),
        make_job(world.cluster, 404, carol, b, gpu_equivalent=4.0,
                 gpu_types={"h100": 2, "a100": 2}, partition="debug"),
        make_job(world.cluster, 405, carol, b, start_time=None, end_time=None,
                 state="CANCELLED"),  # never ran
    ]


def test_the_sql_group_by_agrees_with_the_pure_maths_job_by_job(world):
    jobs = _edge_jobs(world)
    archive(world.jobs["bob"], 0.5, 0.3, 0.1, 0.1)
    archive(jobs[0], 0.25, 0.25)
    archive(jobs[2], 0.6, status="live")
    archive(world.jobs["tom"], 0.9, status="pending")  # not measured yet
    period, now = services.month_period(NOV), datetime(2026, 11, 30, 12, tzinfo=UTC)
    sql = cb.spread_models(grouped_rows(Job.objects.all(), period.start, period.end, now))
    pure = cb.usage_by_key(job_usages(Job.objects.all(), period.start, period.end, now),
                           period.start, period.end)
    assert sql.keys() == pure.keys()
    for key, hours in pure.items():
        got = sql[key]
        for part in ("allocated", "useful", "waiting", "held_idle", "no_process"):
            assert getattr(got, part) == pytest.approx(getattr(hours, part), abs=1e-6), key
    assert sql[("nlp", "bob", "gpu", "h100")].allocated == pytest.approx(8 + 4 * 2)
    assert sql[("nlp", "bob", "gpu", "a100")].allocated == pytest.approx(2 * 2)
    assert sql[("vision", "carol", "gpu", "")].allocated == pytest.approx(0.25 * 36)
    assert sql[("vision", "carol", "debug", "a100")].allocated == pytest.approx(2.0)


def test_drafts_are_written_per_team_and_a_second_refresh_changes_nothing(world, rates):
    archive(world.jobs["bob"], 0.5, held_idle=0.5)
    first = services.refresh_statements(NOV, now=AFTER)
    nlp = Statement.objects.get(team=world.team_a, period__month=NOV)
    assert (first.drafts, nlp.status, nlp.allocated_hours) == (2, "draft", D("24.0000"))
    assert (nlp.useful_hours, nlp.held_idle_hours, nlp.unmeasured_hours) == (
        D("4.0000"), D("4.0000"), D("16.0000"))
    assert nlp.amount == D("72.00")  # 24 h x 3.00 (h100)
    assert first.unmapped_hours == D("8.0000")  # the orphan job's account maps to no team
    lines_before = list(nlp.lines.values_list("user_name", "allocated_hours", "amount"))
    services.refresh_statements(NOV, now=AFTER)
    nlp.refresh_from_db()
    assert list(nlp.lines.values_list("user_name", "allocated_hours", "amount")) == lines_before
    assert Statement.objects.count() == 2 and StatementLine.objects.count() == 4


def test_a_month_still_open_cannot_be_finalised(world, rates):
    services.refresh_statements(NOV, now=AFTER)
    statement = Statement.objects.get(team=world.team_a)
    with pytest.raises(services.ChargebackError, match="still open"):
        services.finalise(statement, world.users["staff"], now=datetime(2026, 11, 20, tzinfo=UTC))


def _final(world):
    services.refresh_statements(NOV, now=AFTER)
    statement = Statement.objects.get(team=world.team_a)
    return services.finalise(statement, world.users["staff"], now=AFTER)


def test_a_final_statement_is_immutable_by_every_path(world, rates):
    final = _final(world)
    line = final.lines.first()
    attempts = [
        lambda: final.save(),
        lambda: final.delete(),
        lambda: Statement.objects.filter(pk=final.pk).update(amount=0),
        lambda: Statement.objects.filter(pk=final.pk).delete(),
        lambda: (setattr(line, "amount", D("0.01")), line.save()),
        lambda: line.delete(),
        lambda: StatementLine.objects.filter(pk=line.pk).update(amount=0),
        lambda: StatementLine.objects.filter(statement=final).delete(),
        lambda: StatementLine.objects.create(statement=final, kind="usage", amount=1),
    ]
    for attempt in attempts:
        with pytest.raises(ImmutableStatement):
            attempt()
    final.refresh_from_db()
    assert final.amount == D("72.00") and final.lines.count() == 3


def test_a_final_statement_survives_later_refreshes_and_new_jobs(world, rates):
    final = _final(world)
    make_job(world.cluster, 150, world.users["bob"], world.team_a)  # synced late
    result = services.refresh_statements(NOV, now=AFTER)
    assert result.finals_kept == 1
    final.refresh_from_db()
    assert final.allocated_hours == D("24.0000")
    assert Statement.objects.get(team=world.team_b).status == "draft"


def test_a_correction_is_an_adjustment_line_that_moves_only_the_total_due(world, rates):
    final = _final(world)
    services.add_adjustment(final, world.users["staff"], D("-12.50"), "GPU gpu01:3 was faulty")
    final.refresh_from_db()
    assert (final.amount, final.adjustments_total, final.total_due) == (
        D("72.00"), D("-12.50"), D("59.50"))
    event = AuditEvent.objects.filter(action="chargeback").first()
    assert event.details["change"] == "adjustment" and event.username == "staff"


@pytest.mark.parametrize(("amount", "description", "message"), [
    (D("0"), "x", "non-zero"), (D("NaN"), "x", "non-zero"), (D("1.005"), "x", "two decimals"),
    (D("5"), "  ", "needs a reason"), (D("1e13"), "x", "below"),
])
def test_bad_adjustments_are_refused(world, rates, amount, description, message):
    final = _final(world)
    with pytest.raises(services.ChargebackError, match=message):
        services.add_adjustment(final, world.users["staff"], amount, description)
    assert final.lines.filter(kind="adjustment").count() == 0


def test_the_policy_per_month_changes_drafts_and_is_fixed_once_a_statement_is_final(world,
                                                                                    rates):
    archive(world.jobs["bob"], 0.5, held_idle=0.5)
    services.set_terms(NOV, cb.Policy.USEFUL_PLUS_FEE, D("0.5"), world.users["staff"])
    services.refresh_statements(NOV, now=AFTER)
    nlp = Statement.objects.get(team=world.team_a)
    # bob: 4 useful + 4 held idle x 0.5; tom and alice unmeasured: 16 -> 22 h x 3.00
    assert (nlp.policy, nlp.charged_hours, nlp.amount) == ("useful_plus_fee", D("22.0000"),
                                                          D("66.00"))
    services.finalise(nlp, world.users["staff"], now=AFTER)
    with pytest.raises(services.ChargebackError, match="terms are fixed"):
        services.set_terms(NOV, cb.Policy.ALLOCATED, D("0"), world.users["staff"])


@pytest.mark.parametrize("fee", [D("2"), D("-0.1")])
def test_bad_terms_are_refused(world, fee):
    with pytest.raises(services.ChargebackError, match="between 0 and 1"):
        services.set_terms(NOV, cb.Policy.USEFUL_PLUS_FEE, fee, world.users["staff"])


def test_a_rate_change_mid_month_splits_the_lines(world):
    Rate.objects.create(price=D("1.0000"), valid_from=date(2026, 1, 1),
                        valid_until=date(2026, 11, 2))
    Rate.objects.create(price=D("4.0000"), valid_from=date(2026, 11, 2))
    make_job(world.cluster, 160, world.users["bob"], world.team_a,
             start_time=datetime(2026, 11, 1, 22, tzinfo=UTC),
             end_time=datetime(2026, 11, 2, 2, tzinfo=UTC), gpu_equivalent=1.0)
    services.refresh_statements(NOV, now=AFTER)
    lines = Statement.objects.get(team=world.team_a).lines.filter(user_name="bob")
    assert sorted((ln.price, ln.allocated_hours) for ln in lines) == [
        (D("1.0000"), D("2.0000")), (D("4.0000"), D("10.0000"))]


def test_csv_and_json_exports_carry_the_same_lines(world, rates):
    services.refresh_statements(NOV, now=AFTER)
    statements = services.statements_of(NOV, Statement.objects.all())
    rows = list(csv.DictReader(io.StringIO(services.export_csv(statements))))
    data = json.loads(services.export_json(statements))
    assert len(rows) == sum(len(s["lines"]) for s in data) == 4
    assert {(r["team"], r["user"], r["amount"]) for r in rows} == {
        (s["team"], ln["user"], ln["amount"]) for s in data for ln in s["lines"]}
    assert sum(D(r["amount"]) for r in rows) == sum(D(s["amount"]) for s in data)


def test_a_user_name_that_looks_like_a_formula_is_quoted_in_csv(world, rates):
    make_job(world.cluster, 170, None, world.team_a, user_name="=cmd|calc")
    services.refresh_statements(NOV, now=AFTER)
    text = services.export_csv(services.statements_of(NOV, Statement.objects.all()))
    assert "'=cmd|calc" in text and ",=cmd" not in text


def test_the_command_prints_exactly_the_export(world, rates):
    out = io.StringIO()
    call_command("chargeback", "--month", "2026-11", "--format", "json", stdout=out,
                 stderr=io.StringIO())
    statements = services.statements_of(NOV, Statement.objects.all())
    assert out.getvalue() == services.export_json(statements)
    out = io.StringIO()
    call_command("chargeback", "--month", "2026-11", "--format", "csv", "--no-refresh",
                 stdout=out)
    assert out.getvalue() == services.export_csv(statements)


@pytest.mark.parametrize("month", ["2026-13", "11-2026", "2026-1", "nope"])
def test_the_command_refuses_a_bad_month(db, month):
    with pytest.raises(CommandError, match="not YYYY-MM"):
        call_command("chargeback", "--month", month)


def test_a_researcher_sees_their_own_usage_and_its_cost_at_useful_hours(world, rates):
    archive(world.jobs["bob"], 0.25, held_idle=0.75)
    usage = services.user_usage(world.users["bob"], NOV, now=AFTER)
    assert [(ln.user, ln.hours.allocated) for ln in usage.lines] == [("bob", D("8.0000"))]
    assert (usage.totals.amount, usage.totals.useful_amount, usage.saving) == (
        D("24.00"), D("6.00"), D("18.00"))


def test_the_periodic_refresh_covers_last_month_while_it_has_drafts(world, rates):
    services.refresh_statements(NOV, now=AFTER)
    months = [r.month for r in services.refresh_open_months(now=AFTER)]
    assert months == ["2026-11", "2026-12"]
    for statement in Statement.objects.filter(period__month=NOV):
        services.finalise(statement, world.users["staff"], now=AFTER)
    assert [r.month for r in services.refresh_open_months(now=AFTER)] == ["2026-12"]
