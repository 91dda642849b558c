"""Reconciliation service: Beacon's job records against a Slurm (fake at the adapter boundary)
report and jobs; the window stops at the last rolled-up hour; the command's exit status."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime

import pytest
from django.core.management import CommandError, call_command

from apps.chargeback import reconciliation
from apps.chargeback.models import Reconciliation
from apps.clusters.adapters.slurm import JobAllocation, UsageRow
from apps.core.errors import TransientAdapterError
from apps.core.models import TaskRun
from tests.conftest import make_job
from tests.fake import FakeSlurm

NOV = date(2026, 11, 1)
NOW = datetime(2026, 11, 30, 8, 39, tzinfo=UTC)


def _slurm_agreeing(world) -> FakeSlurm:
    """What Slurm would say about the world's jobs (8 GPUs x 1 h each)."""
    jobs = [j for j in world.jobs.values() if j.account]
    allocations = [JobAllocation(j.job_id, j.account, j.user_name, 8, 0, 3600) for j in jobs]
    totals: dict[str, float] = {}
    for a in allocations:
        totals[a.account] = totals.get(a.account, 0.0) + a.gpus * a.elapsed_s / 60
    report = [UsageRow("root", "", "gres/gpu", sum(totals.values()))]
    report += [UsageRow(acct, "", "gres/gpu", minutes) for acct, minutes in totals.items()]
    return FakeSlurm(report=report, allocations=allocations)


@pytest.mark.parametrize(("now", "end"), [
    (datetime(2026, 11, 30, 8, 39, tzinfo=UTC), datetime(2026, 11, 30, 8, tzinfo=UTC)),
    (datetime(2026, 11, 30, 8, 5, tzinfo=UTC), datetime(2026, 11, 30, 7, tzinfo=UTC)),
    (datetime(2026, 12, 3, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),  # month over
])
def test_the_window_ends_at_the_last_hour_slurm_rolled_up(world, now, end):
    slurm = _slurm_agreeing(world)
    row = reconciliation.reconcile_month(world.cluster, NOV, slurm, now=now)
    assert (row.window_start, row.window_end) == (datetime(2026, 11, 1, tzinfo=UTC), end)
    _, (lo, hi, tres) = next(c for c in slurm.calls if c[0] == "usage_report")
    assert (lo, hi, tres) == (row.window_start, end, "gres/gpu")


def test_agreeing_records_reconcile(world):
    row = reconciliation.reconcile_month(world.cluster, NOV, _slurm_agreeing(world), now=NOW)
    assert row.ok and row.jobs == []
    assert {a["account"]: a["beacon_minutes"] for a in row.accounts} == {
        "nlp": 3 * 480.0, "vision": 480.0, "unmapped": 480.0}
    assert TaskRun.objects.get(kind="chargeback.reconcile").stats["ok"] is True


def test_differences_are_listed_job_by_job(world):
    slurm = _slurm_agreeing(world)
    slurm.allocations.append(JobAllocation(999, "nlp", "bob", 2, 0, 600))  # never synced
    slurm.report[1] = UsageRow("nlp", "", "gres/gpu", 3 * 480.0 + 20)
    make_job(world.cluster, 150, world.users["bob"], world.team_a, account="nlp",
             gpus=8, end_time=None, state="RUNNING")  # Slurm has it ended long ago
    row = reconciliation.reconcile_month(world.cluster, NOV, slurm, now=NOW)
    assert not row.ok
    kinds = {j["job_id"]: j["kind"] for j in row.jobs}
    assert kinds == {999: "missing_in_beacon", 150: "missing_in_slurm"}
    nlp = next(a for a in row.accounts if a["account"] == "nlp")
    assert nlp["ok"] is False and nlp["report_minutes"] == 1460.0


def test_shards_are_not_whole_gpus_in_the_reconciliation(world):
    make_job(world.cluster, 160, world.users["bob"], world.team_a, gpus=0, gpu_shards=4,
             gpu_equivalent=0.5)
    row = reconciliation.reconcile_month(world.cluster, NOV, _slurm_agreeing(world), now=NOW)
    assert row.ok


def test_a_month_without_a_complete_hour_is_refused(world):
    with pytest.raises(reconciliation.ReconcileError, match="no complete hour"):
        reconciliation.reconcile_month(world.cluster, date(2026, 12, 1), FakeSlurm(),
                                       now=datetime(2026, 12, 1, 0, 30, tzinfo=UTC))


def test_slurm_down_stores_nothing_and_records_a_failed_run(world):
    slurm = FakeSlurm(fail=TransientAdapterError("sreport: Connection refused"))
    with pytest.raises(TransientAdapterError):
        reconciliation.reconcile_month(world.cluster, NOV, slurm, now=NOW)
    assert not Reconciliation.objects.exists()
    assert TaskRun.objects.get(kind="chargeback.reconcile").status == "failed"


def test_the_command_refuses_an_unknown_cluster_and_a_cluster_without_slurm(world):
    with pytest.raises(CommandError, match="no cluster"):
        call_command("reconcile_chargeback", "nosuch", "--month", "2026-11")
    with pytest.raises(CommandError, match="no Slurm backend"):
        call_command("reconcile_chargeback", world.cluster.name, "--month", "2026-11",
                     stdout=io.StringIO())
