"""Beacon against the REAL Slurm dev clusters (22.05, 24.11, 26.05): real jobs, synced through
the cli and the rest backend, compared with sacct.

One wave of jobs per release (success, exit 3, signal 9, cancel while pending and while
running, timeout, array, multi-node, typed GPUs), submitted on every running release at once
when the module starts, so the releases' waits overlap; every test compares Beacon's rows with
text ``sacct -P``, an independent rendering of the same accounting records. Start the clusters
with ``sudo RELEASE=<r> SAMPLE_JOBS=no bash deploy/dev/slurm.sh up``.
"""

from __future__ import annotations

import io
import os
import re
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.clusters import labels, sync
from apps.clusters.adapters.slurm import SlurmJob
from apps.clusters.adapters.slurm.parse_gpus import parse_gpu_map_log
from apps.clusters.importer import import_sacct
from apps.clusters.models import Cluster, Node
from apps.jobs.models import Job, JobGpu
from tests.integration.slurm import RELEASES, SlurmDev, wait_for

# every test is a database test, even the two that only read Slurm: pytest-django runs the
# database-free tests after all the others, which would tear the wave down and build it twice
pytestmark = [pytest.mark.integration("slurm"), pytest.mark.slow, pytest.mark.django_db]

USER = "bob"  # account nlp: no GPU cap or quota on the dev cluster
FAST = ("--qos=high", "--time=5")


# torchrun is a shell function here (no PyTorch on the dev cluster): the script is stored
# in accounting at submission, which is all the labels need.
AI_SCRIPT = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
torchrun() { echo "torchrun $*"; }
srun torchrun --nnodes=2 --nproc_per_node=1 pretrain_gpt.py \\
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 \\
  --data-path /datasets/c4 --save /checkpoints/it
"""


@dataclass
class Wave:
    """The submitted jobs by role, and what each must end as."""

    ids: dict[str, int] = field(default_factory=dict)
    array_tasks: list[int] = field(default_factory=list)
    running_map: dict[str, list[str]] = field(default_factory=dict)  # prolog files seen
    bindings_while_running: list = field(default_factory=list)

    @property
    def all_ids(self) -> list[int]:
        return sorted({*self.ids.values(), *self.array_tasks})


def _submit_wave(slurm: SlurmDev) -> Wave:
    wave = Wave()
    sub = slurm.sbatch
    wave.ids["ok"] = sub(USER, *FAST, "--gres=gpu:1", "-J", "it-ok", "--wrap", "sleep 2")
    wave.ids["exit3"] = sub(USER, *FAST, "--gres=gpu:1", "-J", "it-exit3", "--wrap", "exit 3")
    wave.ids["sigkill"] = sub(USER, *FAST, "--gres=gpu:1", "-J", "it-kill",
                              "--wrap", "kill -9 $$")
    wave.ids["held"] = sub(USER, *FAST, "--hold", "--gres=gpu:1", "-J", "it-held",
                           "--wrap", "sleep 30")
    wave.ids["running"] = sub(USER, *FAST, "--gres=gpu:2", "-J", "it-cancel-running",
                              "--wrap", "sleep 300")
    wave.ids["timeout"] = sub(USER, "--qos=high", "--time=1", "--gres=gpu:1", "-J",
                              "it-timeout", "--wrap", "sleep 300")
    wave.ids["array"] = sub(USER, *FAST, "--array=0-3%2", "--gres=gpu:1", "-J", "it-array",
                            "--wrap", "sleep 2")
    wave.ids["multinode"] = sub(USER, *FAST, "-N2", "--ntasks-per-node=1", "--gres=gpu:2",
                                "-J", "it-multinode", "--wrap", "srun sleep 2")
    wave.ids["typed"] = sub(USER, *FAST, "--gres=gpu:a100:2", "-J", "it-typed",
                            "--wrap", "sleep 2")
    wave.ids["ai"] = sub(USER, *FAST, "-J", "it-megatron", script=AI_SCRIPT)
    return wave


def _snapshot_while_running(slurm: SlurmDev, wave: Wave, job: int, timeout: float = 60) -> None:
    """The scheduler's GPU bindings for ``job`` and the prolog's map files, read together.

    RUNNING is recorded when the allocation is made; the prolog (PrologFlags=Alloc) may still
    be writing the map files then, so read again until as many files name the job as it
    holds GPUs, or the time is up (and the test compares whatever was there)."""
    client = slurm.client("cli")
    end = time.monotonic() + timeout
    while True:
        wave.bindings_while_running = [b for b in client.gpu_bindings() if b.job_id == job]
        wave.running_map = _map_files(slurm)
        held = sum(len(b.gpu_indices) for b in wave.bindings_while_running)
        named = sum(str(job) in ids for ids in wave.running_map.values())
        if (held and named == held) or time.monotonic() > end:
            return
        time.sleep(0.5)


def _map_files(slurm: SlurmDev) -> dict[str, list[str]]:
    """The prolog's map files as they are now. Another wave job's epilog may remove its file
    between the listing and the read (CI: a 2-second job ended there): that GPU is no longer
    held, as if the file had not been listed."""
    found = {}
    for path in slurm.jobmap.glob("*/*"):
        if not path.name.isdigit():
            continue
        try:
            found[str(path.relative_to(slurm.jobmap))] = path.read_text().split()
        except FileNotFoundError:
            continue
    return found


def _cancel_pending_and_running(slurm: SlurmDev, wave: Wave) -> None:
    slurm.run("scancel", str(wave.ids["held"]))
    job = wave.ids["running"]
    slurm.wait_running(job)
    _snapshot_while_running(slurm, wave, job)
    slurm.run("scancel", str(job))


def _settle(slurm: SlurmDev, wave: Wave) -> Wave:
    wave.array_tasks = wait_for(
        lambda: len(tasks := slurm.array_task_ids(wave.ids["array"])) == 4 and tasks, 120,
        f"all four array tasks to start on {slurm}")
    wait_for(lambda: slurm.finished_in_accounting(wave.all_ids), 150,
             f"every job to end in accounting on {slurm}", every=2)
    return wave


_WAVES: dict[str, Wave] = {}


@pytest.fixture(scope="module")
def wave(slurm: SlurmDev) -> Wave:
    """This release's wave. The first release asked for submits on every release that is
    up, so that the others' jobs run (and time out) while the first one's tests run."""
    if slurm.release not in _WAVES:
        others = [SlurmDev.load(r) for r in RELEASES if r not in _WAVES and r != slurm.release]
        for dev in [slurm, *(o for o in others if o.is_up())]:
            _WAVES[dev.release] = _submit_wave(dev)
            _cancel_pending_and_running(dev, _WAVES[dev.release])
    return _settle(slurm, _WAVES[slurm.release])


@pytest.fixture
def cluster(db, slurm: SlurmDev, backend: str) -> Cluster:
    return slurm.new_cluster(backend)


def test_a_sync_matches_sacct_field_by_field(slurm, wave, cluster, backend):
    result = sync.sync_cluster(cluster)
    assert result.jobs.error_count == 0
    slurm.assert_matches_sacct(wave.all_ids, backend)
    jobs = {role: Job.objects.get(job_id=i) for role, i in wave.ids.items()}
    assert (jobs["ok"].state, jobs["ok"].exit_text, jobs["ok"].gpus) == ("COMPLETED", "0:0", 1)
    assert (jobs["exit3"].state, jobs["exit3"].exit_text) == ("FAILED", "3:0")
    assert (jobs["sigkill"].state, jobs["sigkill"].exit_text) == ("FAILED", "0:9")
    assert (jobs["held"].state, jobs["held"].gpus) == ("CANCELLED", 0)
    assert jobs["running"].state == "CANCELLED" and jobs["running"].gpus == 2
    assert jobs["timeout"].state == "TIMEOUT"
    assert (jobs["multinode"].gpus, jobs["multinode"].node_count) == (4, 2)
    assert jobs["typed"].gpu_types == {"a100": 2}
    tasks = Job.objects.filter(array_job_id=wave.ids["array"]).order_by("array_task_id")
    assert [t.display_id for t in tasks] == [f"{wave.ids['array']}_{i}" for i in range(4)]
    assert result.jobs.finished_pks
    if backend == "rest" and slurm.release == "22.05":
        return  # slurmrestd 22.05 has no batch scripts: no labels (docs/slurm.md)
    labels.label_jobs(cluster)
    ai = Job.objects.get(job_id=wave.ids["ai"]).labels
    assert (ai["launcher"], ai["framework"], ai["nodes"], ai["pipeline_parallel"]) == (
        "torchrun", "megatron-lm", 2, 2)
    assert ai["datasets"] == ["/datasets/c4"] and ai["checkpoints"] == ["/checkpoints/it"]
    # a stored script without #SBATCH --output: Slurm's default path applies (stdout "")
    assert Job.objects.get(job_id=wave.ids["ok"]).labels == {"rules": 2, "stdout": ""}


def test_a_second_sync_writes_nothing(wave, cluster):
    """Restricted to the wave: other jobs on the shared dev cluster may change meanwhile."""
    sync.sync_cluster(cluster)
    ours = Job.objects.filter(cluster=cluster, job_id__in=wave.all_ids)
    before = dict(ours.values_list("job_id", "updated_at"))
    assert sorted(before) == wave.all_ids
    cluster.sync_marker = ""  # force a full pass
    again = sync.sync_cluster(cluster)
    assert again.jobs.skipped >= len(wave.all_ids)  # every record read again...
    assert dict(ours.values_list("job_id", "updated_at")) == before  # ...and none rewritten


def test_import_sacct_on_real_output_reproduces_sacct(slurm, wave, db):
    cluster = slurm.new_cluster("cli")
    ids = ",".join(map(str, wave.all_ids))
    dump = slurm.run("sacct", "-a", "--json", "-j", ids).encode()
    codes = slurm.run("sacct", "-a", "-n", "-P", "-X", "-o", "JobIDRaw,ExitCode", "-j", ids)
    out = io.StringIO()
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"beacon-it-{os.getpid()}")
    with open(f"{path}.json", "wb") as f:
        f.write(dump)
    with open(f"{path}.txt", "w") as f:
        f.write(codes)
    call_command("import_sacct", f"{path}.json", cluster=slurm.cluster,
                 exit_codes=f"{path}.txt", stdout=out)
    os.unlink(f"{path}.json")
    os.unlink(f"{path}.txt")
    assert f"created {len(wave.all_ids)}, updated 0" in out.getvalue()
    slurm.assert_matches_sacct(wave.all_ids)
    again = import_sacct(cluster, io.BytesIO(dump))
    assert (again.created, again.updated, again.skipped) == (0, 0, len(wave.all_ids))


def test_the_prolog_mapped_the_gpus_the_scheduler_gave(slurm, wave):
    job = str(wave.ids["running"])
    mapped = sorted(path for path, ids in wave.running_map.items() if job in ids)
    held = sorted(f"{b.node}/{i}" for b in wave.bindings_while_running for i in b.gpu_indices)
    assert len(held) == 2 and mapped == held
    leftovers = [path for path, ids in _map_files(slurm).items() if job in ids]
    assert leftovers == []  # the epilog removed the job again
    # ...and both kept the history, which import_gpu_map reads back as closed intervals
    history, _unreadable = parse_gpu_map_log(slurm.jobmap_log.read_text().splitlines())
    ours = [h for h in history if str(h.job_id) == job and h.end is not None]
    assert sorted(f"{h.node}/{h.gpu_index}" for h in ours) == held
    # ...with each GPU's UUID, from the dev cluster's stand-in nvidia-smi (emulated GPUs)
    assert {(h.node, h.gpu_index): h.uuid for h in ours} == {
        (h.node, h.gpu_index): _emulated_uuid(slurm, h.node, h.gpu_index) for h in ours}


def _emulated_uuid(slurm: SlurmDev, node: str, index: int) -> str:
    out = slurm.run("env", f"SLURMD_NODENAME={node}", slurm.nvidia_smi,
                    "--query-gpu=index,uuid", "--format=csv,noheader")
    uuids = dict(line.split(", ") for line in out.splitlines())
    assert uuids[str(index)].startswith("GPU-")
    return uuids[str(index)]


def _mapped(slurm: SlurmDev, job_id: int) -> list[str]:
    return sorted(path for path, ids in _map_files(slurm).items() if str(job_id) in ids)


def test_the_queue_sync_records_gpu_intervals_of_a_running_job(slurm, wave, cluster):
    job_id = slurm.sbatch(USER, *FAST, "--gres=gpu:2", "-J", "it-gpus", "--wrap", "sleep 60")
    try:
        slurm.wait_running(job_id)
        sync.sync_cluster(cluster)
        sync.sync_queue(cluster)
        held = JobGpu.objects.filter(job__job_id=job_id, end__isnull=True)
        mapped = _mapped(slurm, job_id)
        assert sorted(f"{g.node.name}/{g.gpu_index}" for g in held) == mapped
        assert len(mapped) == 2
    finally:
        slurm.run("scancel", str(job_id), check=False)
    wait_for(lambda: slurm.finished_in_accounting([job_id]), 60, "the cancel")
    cluster.sync_marker = ""
    sync.sync_cluster(cluster)
    ended = JobGpu.objects.filter(job__job_id=job_id)
    assert ended.count() == 2 and all(g.end == g.job.end_time for g in ended)


def _scontrol_indices(slurm: SlurmDev, job_id: int) -> dict[str, list[int]]:
    """GPU indices per model of a one-node job, read from ``scontrol -d show job`` text:
    ``GRES=gpu:h100:1(IDX:0),gpu:h200:2(IDX:2-3)``."""
    out = slurm.run("scontrol", "-d", "show", "job", str(job_id))
    detail = next(line for line in out.splitlines() if "GRES=" in line and "IDX:" in line)
    indices: dict[str, list[int]] = {}
    for model, idx in re.findall(r"gpu:(\w+):\d+\(IDX:([0-9,-]+)\)", detail):
        for part in idx.split(","):
            lo, _, hi = part.partition("-")
            indices.setdefault(model, []).extend(range(int(lo), int(hi or lo) + 1))
    return indices


def test_a_job_on_two_gpu_models_is_bound_to_the_indices_of_both(slurm, wave, cluster):
    """gpu05 holds gpu:h100:2 (indices 0-1) and gpu:h200:4 (2-5); a job asking one of the
    first and two of the second holds three GPUs of two models on one node."""
    job_id = slurm.sbatch("grace", f"--partition={slurm.multi_partition}", "--time=5",
                          "--gres=gpu:h100:1,gpu:h200:2", "-J", "it-two-models",
                          "--wrap", "sleep 60")
    try:
        slurm.wait_running(job_id)
        expected = _scontrol_indices(slurm, job_id)
        assert sorted(expected) == ["h100", "h200"]
        assert len(expected["h100"]) == 1 and len(expected["h200"]) == 2
        wait_for(lambda: slurm.sacct_text([job_id]).get(job_id, {}).get("State") == "RUNNING",
                 60, "the running job in accounting")
        sync.sync_cluster(cluster)
        sync.sync_queue(cluster)
        sync.sync_nodes(cluster)
        job = Job.objects.get(cluster=cluster, job_id=job_id)
        assert (job.gpus, job.gpu_types) == (3, {"h100": 1, "h200": 2})
        held = JobGpu.objects.filter(job=job, end__isnull=True)
        assert sorted((g.node.name, g.gpu_index) for g in held) == sorted(
            (slurm.multi_node, i) for i in expected["h100"] + expected["h200"])
        node = Node.objects.get(cluster=cluster, name=slurm.multi_node)
        assert (node.gpu_count, node.gpu_types) == (6, {"h100": 2, "h200": 4})
        # ...and the prolog mapped all three (Slurm hands it only the last model's indices)
        mapped = wait_for(lambda: len(m := _mapped(slurm, job_id)) >= 3 and m, 30,
                          "the prolog's map files")
        assert mapped == sorted(f"{slurm.multi_node}/{i}"
                                for i in expected["h100"] + expected["h200"])
    finally:
        slurm.run("scancel", str(job_id), check=False)


def _served_versions(slurm: SlurmDev) -> list[str | None]:
    """22.05: both versions Beacon reads there; newer releases: the backend's own choice (None)
    and each version the release serves."""
    if slurm.rest_version:
        return ["v0.0.38", "v0.0.37"]
    return [None, *slurm.env["REST_VERSIONS"].split()]


def test_rest_returns_the_same_records_as_the_cli(slurm, wave):
    cli = slurm.client("cli")
    by_cli = {j.job_id: j for j in cli.jobs_by_id(wave.all_ids)}
    assert len(by_cli) == len(wave.all_ids)
    differing = {}
    for version in _served_versions(slurm):
        options = {"version": version} if version else {}
        rest = slurm.client("rest", **options)
        by_rest = {j.job_id: j for j in rest.jobs_by_id(wave.all_ids)}
        theirs, ours = by_rest, by_cli
        if version == "v0.0.37":
            theirs, ours = _no_start_unless_ran(by_rest), _no_start_unless_ran(by_cli)
        if theirs != ours:
            differing[version or "newest"] = sorted(
                i for i in {*theirs, *ours} if theirs.get(i) != ours.get(i))
    assert differing == {}


def _no_start_unless_ran(jobs: dict[int, SlurmJob]) -> dict[int, SlurmJob]:
    """dbv0.0.37 cannot say whether slurmdbd recorded a start for a job cancelled before it
    ran (its ``time.start`` is the eligible time, 0 for a held job): slurmdbd mostly records
    start = end and the adapter gives that, but sometimes it records none (sacct: None).
    docs/slurm.md states the limit; such a job has no nodes and no GPU-seconds either way."""
    return {i: replace(j, start_time=None) if j.state == "CANCELLED" and not j.nodes else j
            for i, j in jobs.items()}


def test_a_job_that_begins_in_an_hour_does_not_hide_the_next_short_job(slurm, cluster):
    """A pending ``--begin=now+3600`` job carries an eligible time an hour ahead; the
    watermark must not take it, or the next windows start in the future and a short job
    that comes and goes between two syncs is never read."""
    later = slurm.sbatch(USER, *FAST, "--begin=now+3600", "-J", "it-begin-later",
                         "--wrap", "true")
    try:
        wait_for(lambda: later in slurm.sacct_text([later]), 90,
                 "the pending job in accounting", every=2)
        sync.sync_cluster(cluster)
        sync.sync_queue(cluster)  # windows drop a job not yet eligible: the queue has it
        cluster.sync_marker = ""
        sync.sync_cluster(cluster)  # ...and each sync re-reads it by id, as an active job
        job = Job.objects.get(cluster=cluster, job_id=later)
        assert job.state == "PENDING"
        assert job.eligible_time > timezone.now() + timedelta(minutes=50)  # the trap is set
        cluster.refresh_from_db()
        assert cluster.sync_watermark <= timezone.now()
        short = slurm.sbatch(USER, *FAST, "-J", "it-short", "--wrap", "true")
        wait_for(lambda: slurm.finished_in_accounting([short]), 90, "the short job", every=2)
        cluster.sync_marker = ""
        sync.sync_cluster(cluster)
        # (sacct prints 0:0 for the pending one: not compared)
        slurm.assert_matches_sacct([short], cluster.slurm_backend)
        assert Job.objects.get(cluster=cluster, job_id=later).state == "PENDING"
    finally:
        slurm.run("scancel", str(later), check=False)
