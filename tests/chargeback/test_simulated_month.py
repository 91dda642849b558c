"""Done-when checks on the simulator's month, through the real importers (sacct JSON, then the
archive from its OpenMetrics files):

- the month's statements reconcile with its sacct data, per account and job by job;
- the useful/waste split makes the planted idle notebooks and stalled input pipelines stand
  out: their teams' statements list them among the jobs that wasted most of their hours, each
  with the right kind of waste and a higher share of that kind than any other job's;
- and the teams: the team that keeps notebooks idle for days and the team whose input
  pipelines stall (their traits in ``ground_truth.json``) have the highest waste shares.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction

from apps.analysis import reconcile as rc
from apps.chargeback import services
from apps.chargeback.models import Statement
from apps.chargeback.usage import gpu_seconds_by_job
from apps.jobs.models import Job
from tests.jobs.sim_jobs import load_cluster

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

NOV = date(2026, 11, 1)
LO, NOW = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """November 2026 on 4 nodes, with hourly telemetry for the whole month."""
    out = tmp_path_factory.mktemp("month")
    call_command("simulate", "--nodes", "4", "--days", "30", "--seed", "1", "--out", str(out),
                 "--now", "2026-12-01T00:00:00Z", "--telemetry-step", "3600",
                 "--telemetry-days", "30", stdout=io.StringIO(), stderr=io.StringIO())
    return out


@pytest.fixture(scope="module")
def month(simulated: Path, django_db_setup: Any, django_db_blocker: Any
          ) -> Iterator[dict[str, Statement]]:
    """Imported, archived and billed once for the module (about 20 s), inside a transaction
    that is rolled back at its end: each test's own transaction is a savepoint in it, and no
    other module sees these rows."""
    with django_db_blocker.unblock(), transaction.atomic():
        cluster = load_cluster(simulated)
        call_command("import_sacct", str(simulated / "slurm" / "sacct.json"), "--cluster",
                     cluster.name, "--exit-codes",
                     str(simulated / "slurm" / "sacct_exitcodes.txt"), stdout=io.StringIO())
        call_command("archive_jobs", "--cluster", cluster.name, "--all", "--openmetrics",
                     str(simulated / "telemetry"), stdout=io.StringIO(), stderr=io.StringIO())
        services.refresh_statements(NOV, now=NOW)
        yield {s.team.slug: s for s in Statement.objects.select_related("team", "period")}
        transaction.set_rollback(True)


def _sacct_seconds(simulated: Path) -> list[rc.JobSeconds]:
    """GPU-seconds of each job inside November, straight from the simulator's sacct JSON."""
    out = []
    for raw in json.loads((simulated / "slurm" / "sacct.json").read_text())["jobs"]:
        gpus = sum(t["count"] for t in raw["tres"]["allocated"]
                   if t["type"] == "gres" and t["name"] == "gpu")
        start, end = raw["time"]["start"], raw["time"]["end"] or NOW.timestamp()
        if not start or not gpus:
            continue
        seconds = max(min(end, NOW.timestamp()) - max(start, LO.timestamp()), 0)
        out.append(rc.JobSeconds(raw["job_id"], raw["account"], raw["association"]["user"],
                                 float(gpus * seconds)))
    return out


def test_the_months_statements_reconcile_with_the_simulators_sacct_data(simulated, month):
    slurm = _sacct_seconds(simulated)
    by_account: dict[str, float] = defaultdict(float)
    for job in slurm:
        by_account[job.account] += job.gpu_seconds / 3600
    assert set(month) == set(by_account) and len(month) == 5
    for team, statement in month.items():
        rounding = Decimal("0.00005") * statement.lines.count()  # per line, half a unit
        assert abs(statement.allocated_hours - Decimal(str(by_account[team]))) <= rounding, team
    ours = [rc.JobSeconds(r["job_id"], r["account"], r["user_name"], r["seconds"])
            for r in gpu_seconds_by_job(Job.objects.all(), LO, NOW, NOW)]
    assert rc.job_differences(ours, slurm) == []


def _planted(simulated: Path, kind: str) -> list[tuple[str, int]]:
    truth = json.loads((simulated / "ground_truth.json").read_text())
    return [(f["entity"]["team"], f["entity"]["job_id"]) for f in truth["findings"]
            if f["kind"] == kind]


def _measured(job_id: int) -> bool:
    metrics = getattr(Job.objects.get(job_id=job_id), "metrics", None)
    return metrics is not None and bool(metrics.measure) and metrics.status == "complete"


def test_idle_notebooks_and_stalled_input_pipelines_stand_out(simulated, month):
    flagged = {team: services.wasteful_jobs_of(s, now=NOW) for team, s in month.items()}
    for kind, waste in (("idle_notebook", "held_idle"), ("input_pipeline_stall", "waiting")):
        planted = [(team, job_id) for team, job_id in _planted(simulated, kind)
                   if _measured(job_id)]
        assert planted, f"no {kind} with telemetry in this month: the test would prove nothing"
        ids = {job_id for _, job_id in planted}
        others = max(w.share for rows in flagged.values() for w in rows
                     if w.kind == waste and w.job.job_id not in ids)
        for team, job_id in planted:
            [row] = [w for w in flagged[team] if w.job.job_id == job_id]
            assert row.kind == waste, (kind, job_id, row.kind)
            assert row.share > others, (kind, job_id, row.share, others)
            assert row.hours.waste / row.hours.allocated > 0.75


def test_the_teams_with_idle_notebooks_and_stalled_pipelines_waste_the_most(simulated, month):
    """Team level, from the statements: the two teams the simulator gave idle notebooks and
    input stalls have the highest waste shares of measured hours, well above the others."""
    traits = {info["trait"]: team for team, info in json.loads(
        (simulated / "ground_truth.json").read_text())["teams"].items()}
    designated = {traits["idle_notebooks"], traits["input_stalls"]}
    share = {team: statement.waste_share for team, statement in month.items()}
    ranked = sorted(share, key=share.get, reverse=True)
    assert set(ranked[:2]) == designated, share
    healthy = max(share[t] for t in ranked[2:])
    assert min(share[t] for t in designated) > healthy + 0.15, share
    assert 0.2 < healthy < 0.6  # healthy work wastes some (communication, serving, notebooks)
