"""On the simulator's cluster, the replayed guardrails find the planted idle GPUs, held
memory, stragglers and input stalls, and say nothing on healthy jobs (the real path:
simulated sacct jobs, OpenMetrics files, the archive's reader and summariser)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from apps.analysis.guardrails import Raised
from apps.demo import alerts as report
from apps.guardrails import replay
from apps.guardrails.live import alert_config
from apps.guardrails.models import Alert
from tests.jobs.sim_jobs import load_cluster, load_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    call_command("simulate", "--nodes", "4", "--days", "2", "--seed", "1", "--out", str(out),
                 "--telemetry-step", "300", "--now", "2026-11-30T00:00:00Z",
                 stdout=io.StringIO(), stderr=io.StringIO())
    return out


def test_the_replayed_alerts_match_the_truth(simulated):
    cluster = load_cluster(simulated)
    load_jobs(cluster, simulated)
    truth = json.loads((simulated / "ground_truth.json").read_text())
    now = datetime.fromtimestamp(truth["meta"]["now"], tz=UTC)
    seen = list(replay.replay(cluster, simulated / "telemetry", now, 900, alert_config()))
    result = report.score(truth, seen)
    by_kind = {k.kind: k for k in result.kinds}
    for kind in ("gpus_idle", "straggler"):
        assert by_kind[kind].planted >= 1, kind
    for k in result.kinds:
        assert k.true_positives == k.planted == k.raised, (k.kind, k.missed, k.wrong)
    assert result.healthy_measured >= 30 and result.false_alarms == {}
    # the idle-job policy as a dry run: it cancels only jobs that held every GPU idle
    cancelled = result.policy["cancelled"]
    assert "healthy" not in cancelled and "healthy" not in result.policy["warned"]
    assert set(cancelled) <= {"idle_notebook"}
    assert not Alert.objects.exists()  # the replay stores nothing


def test_a_wrong_straggler_gpu_is_a_false_positive():
    truth = {"findings": [{"kind": "straggler_gpu", "entity": {"job_id": 7, "node": "gpu01",
                                                              "gpu": 2},
                           "window": {"start": 0}, "details": {}}],
             "jobs": {"7": {"pathologies": ["straggler_gpu"], "failure_cause": None},
                      "8": {"pathologies": [], "failure_cause": None}}}
    seen = [replay.Replayed(7, True, 3, {"straggler": (3600.0, Raised("straggler", ("gpu01:5",),
                                                                      0.0))}),
            replay.Replayed(8, True, 3, {"gpus_idle": (3600.0, Raised("gpus_idle", ("gpu02:0",),
                                                                      0.0))})]
    result = report.score(truth, seen)
    straggler = next(k for k in result.kinds if k.kind == "straggler")
    assert straggler.precision == 0 and straggler.recall == 0
    assert straggler.wrong == [(7, "named gpu01:5, planted gpu01:2")]
    assert result.false_alarms == {8: ["gpus_idle"]}
    assert "straggler" in report.render(result)


def test_check_times_end_at_the_job_end():
    from apps.analysis.timeseries import Window

    assert replay.check_times(Window(0, 2500), 1000) == [1000, 2000, 2500]


def test_the_command_refuses_what_is_not_a_ground_truth(tmp_path, db):
    bad = tmp_path / "truth.json"
    bad.write_text("[]")
    with pytest.raises(CommandError, match="not a simulator ground truth"):
        call_command("guardrail_report", str(bad), "--telemetry", str(tmp_path))


def test_store_keeps_the_replayed_alerts_marked_simulated(db, world):
    from apps.guardrails.alerts import store_replayed
    from tests.conftest import make_job

    job = make_job(world.cluster, 900, world.users["bob"], world.team_a)
    raised = [(1_800_000_000.0, Raised("gpus_idle", ("gpu01:3",), 1_799_990_000.0,
                                       detail={"idle_gpus": 1, "gpus": 8, "idle_hours": 2.8}))]
    assert store_replayed(job, raised) == 1
    assert store_replayed(job, raised) == 0  # once per job and kind
    alert = Alert.objects.get(job=job)
    assert alert.status == Alert.Status.SIMULATED and "1 of the job's 8 GPUs" in alert.text
