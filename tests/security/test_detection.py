"""A detection run end to end on small inputs: telemetry files, Slurm scripts, stored sshd
events; what it skips; the command twin; the scheduled path; idempotency."""

from __future__ import annotations

import io
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.core.errors import AdapterError
from apps.core.models import TaskRun
from apps.security import services
from apps.security.detection import Sources, detect
from apps.security.ingest import ingest_sshd
from apps.security.models import (
    AllowListEntry,
    DetectionState,
    Finding,
    ScriptScan,
    SecurityRule,
)
from tests.analysis.security_builders import hf_token
from tests.security.telemetry_files import gpu_lines, merge, write

pytestmark = pytest.mark.django_db
START = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)  # bob's job 101 ran 09:06..10:06
STEP = 60.0


def busy_gpu_file(folder: Path, minutes: int = 20, host: str = "gpu01") -> Path:
    t0 = START.timestamp()
    free = gpu_lines(host, 0, t0, minutes, STEP, lambda i: {"util": 97, "fb": 24000,
                                                            "tensor": 0.0})
    owned = gpu_lines(host, 1, t0, minutes, STEP, lambda i: {"util": 95, "fb": 60000,
                                                             "tensor": 0.4},
                      job=lambda i: "4242")
    return write(folder / "20261102T1200Z.om", merge(free, owned))


def run(world, folder: Path | None = None, **kw) -> object:
    return detect(world.cluster, START, START + timedelta(minutes=30),
                  Sources(openmetrics=folder, **kw))


def test_a_busy_gpu_without_a_job_is_found_from_telemetry_files(world, tmp_path):
    busy_gpu_file(tmp_path)
    report = run(world, tmp_path)
    [finding] = Finding.objects.all()
    assert (finding.rule_key, finding.node_name, finding.gpu_index) == \
        ("gpu_activity_without_job", "gpu01", 0)
    assert finding.gpu_uuid == "GPU-gpu01-0" and finding.severity == "high"
    assert report.telemetry_ok and report.hits["gpu_activity_without_job"] == 1
    assert "openmetrics" in report.sources["telemetry"]


def test_running_the_same_window_again_stores_nothing_new(world, tmp_path):
    busy_gpu_file(tmp_path)
    run(world, tmp_path)
    again = run(world, tmp_path)
    assert again.recorded.created == 0 and again.recorded.unchanged == 1
    assert Finding.objects.get().occurrences == 1


def test_a_broken_telemetry_file_fails_telemetry_and_the_other_rules_still_run(world, tmp_path):
    (tmp_path / "20261102T1200Z.om").write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0" 1\n')
    ingest_sshd(world.cluster, ["Nov  2 12:10:00 gpu01 sshd[7]: Accepted publickey for carol "
                                "from 10.1.1.1 port 4 ssh2"], reference=START)
    report = run(world, tmp_path)
    assert not report.telemetry_ok and report.sources["telemetry"].startswith("failed")
    assert any("telemetry" in s and "20261102T1200Z.om" in s for s in report.skipped)
    [failure] = report.failures  # asked for and failed: not a quiet skip
    assert failure.startswith("telemetry: 20261102T1200Z.om")
    assert Finding.objects.get().rule_key == "ssh_without_allocation"


def test_no_telemetry_source_is_recorded_not_fatal(world):
    report = run(world)
    assert report.sources["telemetry"].startswith("skipped: no Prometheus URL")
    assert report.sources["job scripts"] == "skipped: no Slurm backend and no scripts folder"
    assert report.failures == []  # not set up is not a failure


class Scripts:
    """The Slurm adapter's job_scripts, in memory (a fake at the adapter boundary)."""

    def __init__(self, scripts: dict[str, str],
                 envs: dict[str, str] | AdapterError | None = None) -> None:
        self.scripts, self.envs = scripts, envs or {}
        self.asked: list[list[int]] = []

    def job_scripts(self, job_ids):
        ids = list(job_ids)
        self.asked.append(ids)
        return {str(i): self.scripts[str(i)] for i in ids if str(i) in self.scripts}

    def job_environments(self, job_ids):
        if isinstance(self.envs, AdapterError):
            raise self.envs
        return {str(i): self.envs[str(i)] for i in job_ids if str(i) in self.envs}


def test_job_scripts_from_slurm_are_scanned_once_and_never_kept(world):
    from tests.conftest import make_job

    token = hf_token(random.Random(11))
    make_job(world.cluster, 150, world.users["bob"], world.team_a,
             submit_time=START + timedelta(minutes=5))
    slurm = Scripts({"150": f"#!/bin/bash\nexport HF_TOKEN={token}\npython x.py\n"})
    run(world, slurm=slurm)
    [finding] = Finding.objects.filter(rule_key="secret_in_job_script")
    assert (finding.job_id_raw, finding.user_name, finding.team) == (150, "bob", world.team_a)
    assert token not in json.dumps(finding.evidence) and token not in finding.title
    assert ScriptScan.objects.get(job__job_id=150).had_script
    assert slurm.asked == [[101, 102, 103, 150, 201]]  # the window's jobs and a week back
    run(world, slurm=slurm)
    assert len(slurm.asked) == 1  # not fetched again


def test_a_secret_in_the_stored_environment_is_found_and_never_kept(world):
    from tests.conftest import make_job

    token = hf_token(random.Random(12))
    make_job(world.cluster, 150, world.users["bob"], world.team_a,
             submit_time=START + timedelta(minutes=5))
    slurm = Scripts({"150": "#!/bin/bash\npython x.py\n"},
                    envs={"150": f"HOME=/home/bob\nHF_TOKEN={token}\nUSER=bob\n"})
    report = run(world, slurm=slurm)
    [finding] = Finding.objects.filter(rule_key="secret_in_job_script")
    assert finding.job_id_raw == 150 and "environment" in json.dumps(finding.evidence)
    assert token not in json.dumps(finding.evidence) and token not in finding.title
    assert "1 an environment" in report.sources["job scripts"]


def test_environments_slurm_cannot_give_are_noted_and_the_scripts_still_scanned(world):
    from tests.conftest import make_job

    token = hf_token(random.Random(13))
    make_job(world.cluster, 150, world.users["bob"], world.team_a,
             submit_time=START + timedelta(minutes=5))
    slurm = Scripts({"150": f"export HF_TOKEN={token}\n"},
                    envs=AdapterError("slurmrestd 22.05 returns no job environments",
                                      service="slurm"))
    report = run(world, slurm=slurm)
    assert Finding.objects.filter(rule_key="secret_in_job_script").count() == 1
    assert "environments not read" in report.sources["job scripts"]
    assert any("job environments" in line for line in report.skipped)


def test_admin_thresholds_quiet_windows_and_disabled_rules_apply(world, tmp_path):
    busy_gpu_file(tmp_path)
    rule = SecurityRule.objects.get(key="gpu_activity_without_job")
    rule.params = {"min_minutes": 60}
    rule.save()
    run(world, tmp_path)
    assert not Finding.objects.exists()
    rule.params = {}
    rule.save()
    entry = AllowListEntry.objects.create(kind="quiet_nodes", value="gpu0*", reason="burn-in")
    run(world, tmp_path)
    assert not Finding.objects.exists()
    entry.delete()
    rule.enabled = False
    rule.save()
    assert run(world, tmp_path).hits.get("gpu_activity_without_job") is None
    rule.enabled = True
    rule.save()
    run(world, tmp_path)
    assert Finding.objects.count() == 1


def test_the_command_prints_a_json_list_and_records_a_run(world, tmp_path):
    busy_gpu_file(tmp_path)
    out = io.StringIO()
    call_command("detect", "--cluster", "testcluster", "--since", "2026-11-02T12:00:00Z",
                 "--until", "2026-11-02T12:30:00Z", "--json", "--openmetrics", str(tmp_path),
                 stdout=out, stderr=io.StringIO())
    [row] = json.loads(out.getvalue())
    assert row["rule"] == "gpu_activity_without_job" and row["entity"]["node"] == "gpu01"
    assert row["entity"]["gpu"] == 0 and row["severity"] == "high" and row["occurrences"] == 1
    run_row = TaskRun.objects.get(kind="security.detect")
    assert run_row.status == "succeeded" and run_row.stats["created"] == 1
    assert run_row.stats["hits"]["gpu_activity_without_job"] == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--cluster", "nope"], "no cluster named"),
    (["--cluster", "testcluster", "--since", "yesterday"], "not an ISO 8601 time"),
    (["--cluster", "testcluster", "--since", "2026-11-02T12:00:00Z", "--until",
      "2026-11-02T11:00:00Z"], "must be after"),
])
def test_the_command_refuses_bad_arguments(world, args, message):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match=message):
        call_command("detect", *args, stdout=io.StringIO(), stderr=io.StringIO())


def test_the_command_ingests_files_first(world, tmp_path):
    log = tmp_path / "sshd-gpu01.log"
    log.write_text("Nov  2 12:10:00 gpu01 sshd[7]: Accepted publickey for carol from 10.1.1.1 "
                   "port 4 ssh2\n" + "x" * 10000 + "\nnot sshd at all\n")
    inventory = tmp_path / "gpu01.json"
    inventory.write_text(json.dumps({"node": "gpu01", "collected_at": START.timestamp(),
                                     "software": {"slurm": "23.11.0"}}))
    out = io.StringIO()
    call_command("detect", "--cluster", "testcluster", "--since", "2026-11-02T12:00:00Z",
                 "--until", "2026-11-02T12:30:00Z", "--json", "--sshd-log", str(log),
                 "--inventory", str(tmp_path), stdout=out, stderr=io.StringIO())
    rules = {row["rule"] for row in json.loads(out.getvalue())}
    assert rules == {"ssh_without_allocation", "vulnerable_software"}
    skipped = TaskRun.objects.get(kind="security.detect").stats["skipped"]
    assert any(s.startswith("sshd logs: 1 skipped (") and "over 4096" in s
               for s in skipped), skipped


def test_scheduled_runs_claim_slide_and_catch_up(world, settings):
    now = timezone.now()
    state = DetectionState.objects.create(cluster=world.cluster,
                                          telemetry_until=now - timedelta(hours=5))
    since, until = services.scheduled_window(state, now)
    assert until == now and since == state.telemetry_until  # catches up after an outage
    state.telemetry_until = now - timedelta(days=3)
    assert services.scheduled_window(state, now)[0] == now - timedelta(hours=24)
    state.telemetry_until = None
    assert services.scheduled_window(state, now)[0] == now - timedelta(minutes=60)
    state.running_since = now
    state.save()
    assert services.run_scheduled(world.cluster, now) is None  # claimed elsewhere
    DetectionState.objects.filter(pk=state.pk).update(running_since=now - timedelta(hours=2))
    report = services.run_scheduled(world.cluster, now)  # a stale claim is taken over
    assert report is not None
    state.refresh_from_db()
    assert state.running_since is None and state.last_finished_at is not None
    assert state.telemetry_until is None  # no telemetry read: the watermark stays


def test_the_celery_task_runs_one_detection(world, django_capture_on_commit_callbacks):
    from apps.security.tasks import detect_all

    with django_capture_on_commit_callbacks(execute=True):
        assert detect_all.delay().get() == 1
    assert TaskRun.objects.filter(kind="security.detect", cluster=world.cluster).count() == 1
