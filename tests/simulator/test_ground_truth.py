"""Every pathology and incident is planted, listed once in ground_truth.json and visible in
the output where the portal will look for it."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from apps.simulator.truth import INCIDENT_KINDS, PATHOLOGY_KINDS
from tests.simulator.conftest import run
from tests.simulator.openmetrics import read


def _truth(root: Path) -> dict:
    return json.loads((root / "ground_truth.json").read_text())


def _findings(root: Path, kind: str) -> list[dict]:
    return [f for f in _truth(root)["findings"] if f["kind"] == kind]


def test_ground_truth_lists_every_pathology_and_incident_kind(full_run):
    kinds = Counter(f["kind"] for f in _truth(full_run)["findings"])
    assert set(kinds) == set(PATHOLOGY_KINDS) | set(INCIDENT_KINDS)


def test_findings_point_at_real_jobs_nodes_and_gpus(full_run):
    truth = _truth(full_run)
    cluster = json.loads((full_run / "cluster.json").read_text())
    uuids = {n["name"]: n["gpus"] for n in cluster["nodes"]}
    for finding in truth["findings"]:
        entity = finding["entity"]
        assert finding["severity"] in ("low", "medium", "high", "critical")
        assert finding["window"]["start"] <= finding["window"]["end"]
        if entity["job_id"] is not None:
            assert str(entity["job_id"]) in truth["jobs"]
        if entity["gpu"] is not None:
            assert uuids[entity["node"]][entity["gpu"]] == entity["uuid"]
    assert len({f["id"] for f in truth["findings"]}) == len(truth["findings"])


def test_the_secret_is_in_the_job_script_and_the_others_are_clean(full_run):
    shaped = re.compile(r"\b(hf_[A-Za-z]{34}|ghp_[A-Za-z0-9]{36})\b")
    planted = {f["entity"]["job_id"] for f in _findings(full_run, "secret_in_job_script")}
    found = {int(p.stem) for p in (full_run / "slurm/scripts").glob("*.sh")
             if shaped.search(p.read_text())}
    assert planted and found == planted


def test_the_ssh_login_without_an_allocation_is_in_the_sshd_log(full_run):
    (finding,) = _findings(full_run, "ssh_without_allocation")
    log = (full_run / finding["details"]["log"]).read_text()
    assert re.search(rf"sshd\[\d+\]: Accepted publickey for {finding['entity']['user']} from ",
                     log)


def test_exposed_services_are_in_the_collector_output(full_run):
    probes = json.loads((full_run / "collector/services.json").read_text())["probes"]
    open_ones = {(p["node"], p["port"]) for p in probes if not p["auth_required"]}
    planted = {(f["entity"]["node"], f["details"]["port"])
               for f in _findings(full_run, "exposed_service")}
    assert planted and open_ones == planted


def test_input_stalls_name_their_bottleneck(full_run):
    """Most stalls decode on pegged CPUs; every third waits on the file system (the job
    page's two readings; tests/jobs/test_verdict_report.py checks them end to end)."""
    stalls = _findings(full_run, "input_pipeline_stall")
    kinds = Counter(f["details"]["bottleneck"] for f in stalls)
    assert set(kinds) == {"cpu", "storage"} and kinds["cpu"] >= kinds["storage"]


def test_the_input_stall_shows_busy_gpus_with_idle_sms(full_run):
    stall = {str(f["entity"]["job_id"]) for f in _findings(full_run, "input_pipeline_stall")}
    util, sm = [], []
    for path in sorted((full_run / "telemetry").glob("*.om")):
        families = read(path)
        util += [v for _, lab, v, _ in families["DCGM_FI_DEV_GPU_UTIL"].samples
                 if lab.get("hpc_job") in stall]
        sm += [v for _, lab, v, _ in families.get("DCGM_FI_PROF_SM_ACTIVE").samples
               if lab.get("hpc_job") in stall]
    assert util and 80 <= sum(util) / len(util) <= 94
    if sm:  # absent when the job ran on default-counter nodes only
        assert 0.15 <= sum(sm) / len(sm) <= 0.23


def test_gpu_activity_without_a_job_has_no_hpc_job_label(full_run):
    (finding,) = _findings(full_run, "gpu_activity_without_job")
    busy = []
    for path in sorted((full_run / "telemetry").glob("*.om")):
        for _, lab, value, ts in read(path)["DCGM_FI_DEV_GPU_UTIL"].samples:
            if lab.get("UUID") == finding["entity"]["uuid"] and \
                    finding["window"]["start"] <= ts < finding["window"]["end"]:
                busy.append((value, "hpc_job" in lab))
    assert busy and all(v > 80 and not labelled for v, labelled in busy)


def _ranks(directory: Path) -> dict[int, dict]:
    docs = {}
    for path in directory.iterdir():
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        docs[doc["distributedInfo"]["rank"]] = doc
    return docs


def _collective_us(doc: dict) -> float:
    names = ("gloo:all_reduce", "ncclDevKernel_AllReduce", "ncclKernel_AllReduce")
    return sum(e["dur"] for e in doc["traceEvents"]
               if e.get("ph") == "X" and e["name"].startswith(names))


def test_traces_show_the_straggler_arriving_last(full_run):
    traced = _truth(full_run)["traces"]
    assert any(t["straggler_rank"] is not None for t in traced)
    assert {t["kernel_naming"] for t in traced} >= {"new", "old"}
    for trace in traced:
        docs = _ranks(full_run / trace["dir"])
        assert sorted(docs) == list(range(trace["world_size"]))
        events = docs[0]["traceEvents"]
        assert any(e["name"].startswith("ProfilerStep#") for e in events)
        assert any(e["name"].startswith("enumerate(DataLoader)#") for e in events)
        assert any(e["name"].startswith("Optimizer.step#") for e in events)
        assert any("Backward0" in e["name"] for e in events)
        comm = {rank: _collective_us(doc) for rank, doc in docs.items()}
        if trace["straggler_rank"] is not None:
            assert min(comm, key=comm.get) == trace["straggler_rank"]


def test_every_job_has_a_ground_truth_outcome(full_run):
    truth = _truth(full_run)["jobs"]
    window, by_id = ({str(j["job_id"]) for j in json.loads(
        (full_run / "slurm" / name).read_text())["jobs"]} for name in ("sacct.json",
                                                                      "sacct_by_id.json"))
    assert window | by_id <= set(truth) and not window & by_id
    # a window lists every job once eligible; the others are queued (read by id) or were
    # cancelled while held or waiting on a dependency (Slurm's accounting shows no window)
    assert {j for j, t in truth.items() if t["eligible"] is not None} == window
    assert {j for j in set(truth) - window if truth[j]["state"] == "PENDING"} == by_id
    causes = Counter(t["failure_cause"] for t in truth.values())
    assert causes["user"] and causes["infrastructure"]


def _notebook(job_id, start, hours):
    from apps.simulator.workload import Job

    return Job(job_id=job_id, name="jupyter", kind="notebook", user="u", account="a",
               partition="interactive", qos="normal", submit=start, time_limit_min=10080,
               gpus=1, nodes_wanted=1, planned_run=int(hours * 3600), outcome="CANCELLED",
               start=start, end=start + int(hours * 3600), state="CANCELLED")


def test_a_notebook_the_activity_model_left_idle_for_hours_is_in_the_truth():
    """Sampled hourly, a healthy notebook's half-hour bursts can all fall between samples:
    its telemetry then shows a GPU held idle for hours, which the idle-allocation rule
    rightly reports. The truth must say so too, or it counts a true finding as a false
    alarm (docs/diagnosis.md)."""
    import numpy as np

    from apps.simulator.telemetry import _burst, idle_notebooks
    from apps.simulator.truth import Truth

    t0, step = 1_790_000_000 - 1_790_000_000 % 21600, 3600
    # starts off the sample grid: a 4.6 h run then holds 4 hourly samples, not 5
    jobs = [_notebook(job_id, t0 + 7200 + offset, hours) for job_id in range(3100, 3110)
            for offset in (0, 900, 2700) for hours in (4.6, 3.5)]
    idle = idle_notebooks(jobs, Truth(), t0, t0 + 30 * 86400, step)
    assert idle, "no notebook fell between the bursts: the case is not exercised"
    for job in jobs:  # exactly those with no sample in a burst, and only runs of 4 h or more
        first = t0 + -(-(job.start - t0) // step) * step
        ts = np.arange(first, job.end, step)
        quiet = not (_burst("notebook", ts, job.job_id, None) > 1).any()
        assert (job in idle) == (quiet and job.end - job.start >= 4 * 3600), job.job_id
    assert idle_notebooks(jobs, Truth(), t0, t0 + 30 * 86400, 300) == []  # 5-min samples


def test_a_notebook_with_a_planted_effect_is_left_to_its_own_truth():
    from apps.simulator.telemetry import idle_notebooks
    from apps.simulator.truth import Truth

    t0 = 1_790_000_000 - 1_790_000_000 % 21600
    jobs = [_notebook(job_id, t0 + 7200 + offset, 4.6) for job_id in range(3100, 3110)
            for offset in (0, 900, 2700)]
    assert idle_notebooks(jobs, Truth(), t0, t0 + 30 * 86400, 3600)  # some would be idle
    truth = Truth(job_effects={j.job_id: {"profile": "idle_notebook"} for j in jobs})
    assert idle_notebooks(jobs, truth, t0, t0 + 30 * 86400, 3600) == []


def test_each_team_has_its_trait_and_the_month_shows_it(full_run):
    """``teams``: the trait the month gave each team, and only that team shows it: the
    contention team's sweep tasks (unthrottled, in its partition), the limited team's
    AssocGrpGRES waits, the idle notebooks and input stalls planted in their teams."""
    truth = _truth(full_run)
    traits = {info["trait"]: team for team, info in truth["teams"].items()}
    assert set(traits) == {"contention", "gpu_limit", "idle_notebooks", "input_stalls", "none"}
    scripts = full_run / "slurm" / "scripts"
    jobs = {j["job_id"]: j for j in json.loads((full_run / "slurm/sacct.json").read_text())[
        "jobs"]}
    sweeps = [j for j, t in truth["jobs"].items() if t["burst"]]
    details = truth["teams"][traits["contention"]]["details"]
    assert len(sweeps) == details["burst_tasks"] > 0 and details["bursts"] >= 1
    for job_id in sweeps:
        job = jobs[int(job_id)]
        assert (job["account"], job["partition"]) == (traits["contention"], details["partition"])
        assert "%" not in re.search(r"--array=(\S+)", (scripts / f"{job_id}.sh").read_text())[1]
    held = {j["account"] for j in jobs.values() if j["state"]["reason"] == "AssocGrpGRES"}
    assert held == {traits["gpu_limit"]}
    for kind, trait in (("idle_notebook", "idle_notebooks"),
                        ("input_pipeline_stall", "input_stalls")):
        planted = _findings(full_run, kind)
        assert planted and {f["entity"]["team"] for f in planted} == {traits[trait]}
        assert truth["teams"][traits[trait]]["details"]["planted"] == len(planted)


def test_without_incidents_the_same_month_keeps_its_pathologies_and_is_patched(
        tmp_path, full_run):
    healthy = run(tmp_path / "healthy", nodes=8, days=6.0, seed=1, telemetry_step=3600,
                  telemetry_days=3.0, incidents=False)
    truth = json.loads((healthy / "ground_truth.json").read_text())
    with_incidents = json.loads((full_run / "ground_truth.json").read_text())
    assert [f for f in truth["findings"] if f["category"] == "incident"] == []

    def pathologies(doc: dict) -> list[dict]:
        return [{k: v for k, v in f.items() if k != "id"} for f in doc["findings"]
                if f["category"] == "pathology"]

    assert pathologies(truth) == pathologies(with_incidents) != []
    for path in (healthy / "inventory").glob("*.json"):
        software = json.loads(path.read_text())["software"]
        assert (software["slurm"], software["munge"], software["pytorch"],
                software["nvidia_container_toolkit"]) == ("22.05.11", "0.5.18", "2.6.0", "1.17.8")
    probes = json.loads((healthy / "collector/services.json").read_text())["probes"]
    assert probes and all(p["auth_required"] for p in probes)
    assert (healthy / "slurm/sacct.json").read_bytes() == \
        (full_run / "slurm/sacct.json").read_bytes()


def _events(docs: dict[int, dict]) -> list[dict]:
    return [e for doc in docs.values() for e in doc["traceEvents"] if e.get("ph") == "X"]


@pytest.mark.parametrize("run", ["small_run", "full_run"])
def test_the_traces_have_a_gloo_run_and_both_nccl_kernel_namings(run, request):
    """Read from the files, not the ground truth: what the trace importer will meet."""
    root = request.getfixturevalue(run)
    seen = {"gloo": 0, "ncclDevKernel": 0, "ncclKernel": 0}
    for trace in _truth(root)["traces"]:
        docs = _ranks(root / trace["dir"])
        backend = {doc["distributedInfo"]["backend"] for doc in docs.values()}
        events = _events(docs)
        kernels = {e["name"].split("_", 1)[0] for e in events if e["cat"] == "kernel"
                   and e["name"].startswith("nccl")}
        if backend == {"gloo"}:
            assert any(e["name"] == "gloo:all_reduce" for e in events)
            assert not [e for e in events if e["cat"] == "kernel"]  # a CPU run
            threads = {e["args"]["name"] for doc in docs.values() for e in doc["traceEvents"]
                       if e.get("name") == "thread_name"}
            assert any("pt_gloo_runloop" in t for t in threads)
            seen["gloo"] += 1
        else:
            assert backend == {"nccl"}
            assert any(e["name"] == "nccl:all_reduce" and e["cat"] == "user_annotation"
                       for e in events)
            assert len(kernels) == 1, kernels  # one NCCL version per job
            seen[kernels.pop()] += 1
    assert all(seen.values()), seen
