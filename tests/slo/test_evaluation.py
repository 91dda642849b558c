"""The evaluation: scorecards for every team, derived figures, idempotence, monthly snapshots
kept per period, the management command and its TaskRun, and the inputs the sync keeps."""

from __future__ import annotations

import io
import zoneinfo
from datetime import UTC, date, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from apps.accounts.models import Team
from apps.analysis import slo as maths
from apps.core.models import TaskRun
from apps.jobs.models import Job
from apps.slo import services
from apps.slo.models import Objective, Scorecard, Snapshot
from tests.conftest import make_job
from tests.slo.conftest import NOW, objective

pytestmark = pytest.mark.django_db


def _fields(card: Scorecard) -> tuple:
    return (card.subject, card.good, card.total, card.sli, card.budget_remaining, card.status,
            card.burn_rates, card.alerts, card.trend, card.worst_jobs, card.details)


def test_every_team_gets_a_scorecard_per_slo_even_without_jobs(world, jobs):
    Team.objects.create(slug="quiet", name="Quiet team")
    services.compute_scorecards(NOW)
    quiet = Scorecard.objects.filter(team__slug="quiet")
    assert quiet.count() == 3
    assert {c.status for c in quiet} == {"no_data"}
    assert {c.budget_remaining for c in quiet} == {1.0} and {c.sli for c in quiet} == {None}
    assert Scorecard.objects.filter(team__isnull=True).count() == 0  # jobs without a team


def test_derived_figures_agree_with_the_pure_maths(world, jobs):
    services.compute_scorecards(NOW)
    for card in Scorecard.objects.select_related("objective"):
        assert card.budget_remaining == pytest.approx(
            maths.budget_remaining(maths.Counts(card.good, card.total), card.target))
        assert card.window_end - card.window_start == timedelta(days=28)
        assert set(card.burn_rates) == {"5m", "30m", "1h", "2h", "6h", "1d", "3d"}
        assert len(card.trend) == 28
        assert sum(p["total"] for p in card.trend) == pytest.approx(card.total)
        assert card.trend[-1]["remaining"] == pytest.approx(card.budget_remaining)
        if card.exhaustion_at:
            assert card.exhaustion_at >= NOW


def test_evaluating_twice_at_the_same_instant_writes_the_same_rows(world, jobs):
    services.run_evaluation(NOW, notify=False)
    first = sorted(_fields(c) for c in Scorecard.objects.all())
    snaps = Snapshot.objects.count()
    services.run_evaluation(NOW, notify=False, force_snapshots=True)
    assert sorted(_fields(c) for c in Scorecard.objects.all()) == first
    assert Snapshot.objects.count() == snaps


def test_a_disabled_slo_loses_its_scorecards(world, jobs):
    services.compute_scorecards(NOW)
    Objective.objects.filter(name="GPU efficiency").update(enabled=False)
    services.compute_scorecards(NOW)
    assert not Scorecard.objects.filter(objective__name="GPU efficiency").exists()
    assert Scorecard.objects.count() == 4


def test_a_team_scope_slo_for_one_team_and_a_partition_slo(world, jobs):
    one = objective("job_success", team=world.team_b, target=0.95)
    part = objective("queue_wait", scope="partition", partition="a100")
    services.compute_scorecards(NOW, [one, part])
    assert list(Scorecard.objects.filter(objective=one).values_list("team__slug", flat=True)) \
        == ["vision"]
    card = Scorecard.objects.get(objective=part)
    assert card.subject == "partition:a100" and card.team is None and card.total > 0
    assert {b["partition"] for b in card.details["breakdown"]} == {"a100"}


def test_a_calendar_month_follows_the_clusters_time_zone(world, jobs):
    world.cluster.timezone = "America/New_York"
    world.cluster.save()
    obj = objective("queue_wait", window="calendar_month", cluster=world.cluster)
    services.compute_scorecards(NOW, [obj])
    card = Scorecard.objects.filter(objective=obj).first()
    # November in New York: from 1 Nov 04:00 UTC (DST ended at 2:00 local) to 1 Dec 05:00 UTC
    assert card.window_start == datetime(2026, 11, 1, 4, tzinfo=UTC)
    assert card.window_end == datetime(2026, 12, 1, 5, tzinfo=UTC)
    local = [datetime.fromisoformat(p["start"]).astimezone(zoneinfo.ZoneInfo(
        "America/New_York")) for p in card.trend]
    assert all(t.hour == 0 for t in local) and local[0].day == 1 and len(local) == 30


def test_snapshots_keep_each_month_and_freeze_the_last_one(world, jobs):
    services.record_snapshots(NOW)
    months = set(Snapshot.objects.values_list("month", "final"))
    assert months == {(date(2026, 11, 1), False), (date(2026, 10, 1), True)}
    nov = Snapshot.objects.get(objective__name="Queue wait", team=world.team_a,
                               month=date(2026, 11, 1))
    assert nov.period_start == datetime(2026, 11, 1, tzinfo=UTC) and nov.total > 0
    # December: November is computed one last time and frozen; October is left alone
    later = datetime(2026, 12, 3, tzinfo=UTC)
    make_job(world.cluster, 9001, world.users["bob"], world.team_a,
             submit_time=datetime(2026, 11, 30, 20, tzinfo=UTC),
             start_time=datetime(2026, 11, 30, 23, tzinfo=UTC),
             end_time=datetime(2026, 12, 1, 1, tzinfo=UTC))
    services.record_snapshots(later)
    final = Snapshot.objects.get(pk=nov.pk)
    assert final.final and final.total == nov.total + 1 and final.computed_at == later
    again = Snapshot.objects.get(pk=nov.pk)
    services.record_snapshots(later + timedelta(hours=1))
    assert Snapshot.objects.get(pk=nov.pk).computed_at == again.computed_at  # frozen


def test_a_backfill_writes_final_snapshots_of_past_months(world, jobs):
    assert services.backfill_snapshots(3, NOW) == 3 * 3 * 2  # 3 months x 3 SLOs x 2 teams
    assert set(Snapshot.objects.values_list("month", flat=True)) == {
        date(2026, 10, 1), date(2026, 9, 1), date(2026, 8, 1)}
    assert set(Snapshot.objects.values_list("final", flat=True)) == {True}


def test_the_command_is_the_tasks_twin_and_records_a_task_run(world, jobs):
    out, err = io.StringIO(), io.StringIO()
    call_command("evaluate_slos", "--now", "2026-11-30T12:00:00Z", "--no-notify", stdout=out,
                 stderr=err)
    assert "Queue wait" in out.getvalue() and "scorecards" in err.getvalue()
    run = TaskRun.objects.get(kind="slo.evaluate")
    assert run.status == TaskRun.Status.SUCCEEDED and run.stats["scorecards"] == 6
    with pytest.raises(CommandError, match="time zone"):
        call_command("evaluate_slos", "--now", "2026-11-30T12:00:00")


def test_the_task_runs_the_same_evaluation(world, jobs):
    from apps.slo.tasks import evaluate_slos

    stats = evaluate_slos.delay().get()
    assert stats["scorecards"] == 6 and "alerts_opened" in stats


def test_the_defaults_are_seeded_once_and_edits_survive(world):
    Objective.objects.filter(name="Queue wait").update(target=0.8)
    out = io.StringIO()
    call_command("slo_defaults", stdout=out)
    assert "added 0 ending rule(s), 0 SLO(s)" in out.getvalue()
    assert Objective.objects.get(name="Queue wait").target == 0.8


def test_the_sacct_importer_keeps_the_last_pending_reason_of_started_jobs(world):
    from apps.clusters.adapters.slurm.parse import parse_sacct_job

    def rec(state: str, reason: str) -> dict:
        return {"job_id": 7, "time": {"submission": 1795000000, "start": 1795000600,
                                      "end": 1795004000, "eligible": 1795000000},
                "state": {"current": state, "reason": reason}, "tres": {"allocated": []}}

    assert parse_sacct_job(rec("COMPLETED", "AssocGrpGRES")).wait_reason == "AssocGrpGRES"
    assert parse_sacct_job(rec("COMPLETED", "None")).wait_reason == ""
    pending = parse_sacct_job(rec("PENDING", "Priority"))
    assert (pending.reason, pending.wait_reason) == ("Priority", "")


def test_the_archive_keeps_hardware_faults_for_the_success_slo(world):
    from apps.analysis.health import GpuHealth
    from apps.analysis.timeseries import GpuKey
    from apps.jobs.archive_rows import hardware_fields as _hardware_fields

    health = {GpuKey("gpu01", 0): GpuHealth(xids=(79,), ecc_dbe=0),
              GpuKey("gpu01", 1): GpuHealth(xids=(13,), ecc_dbe=2),
              GpuKey("gpu01", 2): GpuHealth()}
    assert _hardware_fields(health) == {"xid_gpus": 1, "ecc_dbe": 2}
    assert _hardware_fields({}) == {"xid_gpus": None, "ecc_dbe": None}
    assert Job.objects.filter(wait_reason="").count() == Job.objects.count()
