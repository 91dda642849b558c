"""Bad arguments get a clear error that names them; good ones run from the command line."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from apps.simulator import SimConfig, SimulationError, simulate
from apps.simulator.run import plan
from apps.simulator.traces import plan_traces
from apps.simulator.truth import INCIDENT_KINDS, PATHOLOGY_KINDS, TELEMETRY_BOUND

NOW = 1796000400


@pytest.mark.parametrize(("overrides", "message"), [
    ({"nodes": 0}, "--nodes"),
    ({"nodes": 513}, "--nodes"),
    ({"days": 0}, "--days"),
    ({"days": 400}, "--days"),
    ({"seed": -1}, "--seed"),
    ({"now": 0}, "--now"),
    ({"telemetry_step": 7}, "--telemetry-step"),
    ({"telemetry_step": 5}, "--telemetry-step"),
    ({"telemetry_days": 31}, "--telemetry-days"),
    ({"telemetry_days": -1}, "--telemetry-days"),
    ({"cluster": "bad name"}, "--cluster"),
])
def test_it_rejects_invalid_settings(overrides, message):
    settings = {"now": NOW, **overrides}
    with pytest.raises(SimulationError, match=message):
        SimConfig(**settings).validated()


def test_valid_settings_pass():
    assert SimConfig(now=NOW, telemetry_step=900, telemetry_days=2).validated().nodes == 16


def test_the_command_names_the_bad_argument(tmp_path):
    with pytest.raises(CommandError, match="--telemetry-step"):
        call_command("simulate", "--out", str(tmp_path), "--telemetry-step", "7")
    with pytest.raises(CommandError, match="--now"):
        call_command("simulate", "--out", str(tmp_path), "--now", "yesterday")


def test_a_run_too_big_for_its_limit_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "month"
    # the issue's own command at the default 30 s step: about 1 GB a day for 16 nodes
    with pytest.raises(CommandError, match=r"about 3\d\.\d GB \(16 nodes, 30 s samples\)"):
        call_command("simulate", "--nodes", "16", "--days", "30", "--out", str(out),
                     "--now", "2026-11-30T00:00:00Z")
    assert not out.exists()
    with pytest.raises(CommandError, match=r"more than --max-telemetry-gb 0\.001"):
        call_command("simulate", "--nodes", "2", "--days", "1", "--out", str(out),
                     "--telemetry-step", "3600", "--max-telemetry-gb", "0.001")


def test_the_size_estimate_is_close_to_what_is_written(tmp_path):
    cfg = SimConfig(nodes=2, days=2, seed=1, now=NOW, telemetry_step=900)
    summary = simulate(cfg, tmp_path)
    written = sum(p.stat().st_size for p in summary.telemetry_files)
    assert 0.7 * written <= cfg.telemetry_bytes <= 1.3 * written, (cfg.telemetry_bytes, written)
    assert SimConfig(nodes=2, days=2, now=NOW, telemetry_days=0).telemetry_bytes == 0


def test_the_command_writes_the_layout_and_reports_counts(tmp_path, capsys):
    call_command("simulate", "--nodes", "2", "--days", "1", "--seed", "1", "--out",
                 str(tmp_path), "--now", "2026-11-30T00:00:00Z", "--telemetry-step", "3600")
    out = capsys.readouterr().out
    assert "telemetry: 4/4 (100%)" in out and "simulated 2 nodes x 1 days" in out
    for name in ("slurm/sacct.json", "slurm/squeue.json", "slurm/sinfo.json",
                 "slurm/sacct_exitcodes.txt", "ground_truth.json", "cluster.json",
                 "collector/services.json", "inventory/gpu01.json", "logs/sshd-gpu01.log"):
        assert (tmp_path / name).is_file(), name


def test_the_command_can_leave_the_incidents_out(tmp_path, capsys):
    call_command("simulate", "--nodes", "2", "--days", "1", "--seed", "1", "--out",
                 str(tmp_path), "--now", "2026-11-30T00:00:00Z", "--telemetry-step", "3600",
                 "--no-incidents")
    truth = json.loads((tmp_path / "ground_truth.json").read_text())
    assert truth["meta"]["incidents"] is False
    assert json.loads((tmp_path / "cluster.json").read_text())["incidents"] is False
    assert not [f for f in truth["findings"] if f["category"] == "incident"]


# --- Every valid argument runs -----------------------------------------------------------
# Planting is where odd months used to crash (a job cancelled while pending has an end
# time but no GPUs; an empty telemetry period left nothing to draw from). ``plan`` builds,
# schedules and plants without writing anything, so every seed is cheap to try.


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(31))
def test_every_seed_plants_the_demo_month(seed):
    planned = plan(SimConfig(nodes=16, days=30, seed=seed, now=NOW))
    _check_planted(planned)
    traces = plan_traces(planned.cluster, planned.jobs, planned.truth.job_effects,
                         planned.cfg.traced_jobs, seed)
    assert {(p.backend, p.kernel) for p in traces} == {("gloo", "none"), ("nccl", "new"),
                                                       ("nccl", "old")}


@pytest.mark.parametrize("seed", [3, 5])
def test_a_bigger_cluster_plants_too(seed):
    _check_planted(plan(SimConfig(nodes=32, days=30, seed=seed, now=NOW)))


def _check_planted(planned):
    jobs = {j.job_id: j for j in planned.jobs}
    assert planned.truth.findings
    for finding in planned.truth.findings:
        assert planned.cfg.start <= finding.start <= finding.end <= planned.cfg.now, finding
        if finding.kind == "gpu_memory_left_after_job":
            assert jobs[int(finding.details["after_job"])].alloc  # it held GPUs


def test_a_telemetry_period_shorter_than_the_incidents_plants_none_past_now():
    # now is 1 h past a 6 h window: the telemetry covers 1 h, shorter than a 3 h incident
    now = NOW - NOW % 21600 + 3600
    planned = plan(SimConfig(nodes=8, days=3, seed=1, now=now, telemetry_days=0.01))
    assert planned.t0 == now - 3600
    assert all(f.end <= now for f in planned.truth.findings)
    assert "gpu_activity_without_job" in planned.truth.not_planted


def test_no_telemetry_skips_what_only_telemetry_shows_and_says_so(tmp_path):
    out = tmp_path / "sim"
    summary = simulate(SimConfig(nodes=4, days=2, seed=7, now=NOW, telemetry_days=0), out)
    assert summary.telemetry_files == [] and not list((out / "telemetry").iterdir())
    truth = json.loads((out / "ground_truth.json").read_text())
    skipped = {n["kind"]: n["reason"] for n in truth["not_planted"]}
    assert set(skipped) == set(TELEMETRY_BOUND)
    assert all("--telemetry-days 0" in why for why in skipped.values())
    planted = {f["kind"] for f in truth["findings"]}
    assert planted == set(PATHOLOGY_KINDS + INCIDENT_KINDS) - set(TELEMETRY_BOUND)
    # the sshd logs cover the whole month instead, with the intrusion in them
    (ssh,) = [f for f in truth["findings"] if f["kind"] == "ssh_without_allocation"]
    assert NOW - 2 * 86400 <= ssh["window"]["start"] < NOW
    assert "Accepted publickey for mallory" in (out / ssh["details"]["log"]).read_text()
    logs = "".join(p.read_text() for p in (out / "logs").glob("sshd-*.log"))
    assert "\nNov 28 " in "\n" + logs  # the first simulated day (now: Nov 30, 01:00)
