"""The prolog's GPU history: the real prolog/epilog scripts write it, Beacon reads it back."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.clusters import sync
from apps.clusters.adapters.slurm.parse_gpus import GpuHeld, parse_gpu_map_log
from apps.jobs.models import JobGpu
from tests.conftest import make_job

ROOT = Path(__file__).resolve().parents[2]


UUID_A = "GPU-6f1c9e2a-0b7d-4c55-9a1e-3d2b8c7f4e10"
UUID_B = "GPU-0000000a-0000-0000-0000-00000000000b"


def _ts(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


@pytest.mark.parametrize(("lines", "held", "problems"), [
    (["100 start 7 gpu01 0,3\n", "160 end 7 gpu01 0,3\n"],
     [GpuHeld(7, "gpu01", 0, _ts(100), _ts(160)), GpuHeld(7, "gpu01", 3, _ts(100), _ts(160))], 0),
    (["100 start 7 gpu01 1\n"], [GpuHeld(7, "gpu01", 1, _ts(100), None)], 0),  # still held
    (["100 end 7 gpu01 1\n"], [], 1),                                          # end, no start
    (["garbage\n", "100 start x gpu01 1\n", "100 start 7 gpu01 1;rm\n", "\n"], [], 3),
    (["100 start 7 gpu01 1\n", "100 start 7 gpu01 1\n", "130 end 7 gpu01 1\n"],  # prolog retried
     [GpuHeld(7, "gpu01", 1, _ts(100), _ts(130))], 0),
    ([f"100 start 7 gpu01 0,3 {UUID_A},-\n", "130 end 7 gpu01 0,3\n"],  # nvidia-smi's UUIDs
     [GpuHeld(7, "gpu01", 0, _ts(100), _ts(130), UUID_A),
      GpuHeld(7, "gpu01", 3, _ts(100), _ts(130))], 0),
    ([f"100 start 7 gpu01 0,3 {UUID_A}\n", "100 start 7 gpu01 0 GPU-x;reboot\n"], [], 2),
])
def test_lines_pair_into_intervals(lines, held, problems):
    got, bad = parse_gpu_map_log(lines)
    assert sorted(got, key=repr) == sorted(held, key=repr)
    assert len(bad) == problems


def _run(script: str, tmp: Path, job: str, gpus: str) -> None:
    env = {**os.environ, "BEACON_JOBMAP_CONF": str(tmp / "jobmap.conf"), "SLURM_JOB_ID": job,
           "SLURM_JOB_GPUS": gpus, "SLURMD_NODENAME": "gpu07"}
    subprocess.run(["bash", str(ROOT / "deploy/slurm" / script)], env=env, check=True,
                   timeout=30)


def test_the_real_prolog_and_epilog_keep_the_history(tmp_path):
    (tmp_path / "jobmap.conf").write_text(
        f"JOBMAP_DIR={tmp_path}/map\nJOBMAP_LOG={tmp_path}/gpu-map.log\n")
    _run("prolog.sh", tmp_path, "42", "0,3")
    assert sorted(p.name for p in (tmp_path / "map").iterdir() if p.name.isdigit()) == ["0", "3"]
    _run("epilog.sh", tmp_path, "42", "0,3")
    assert not [p for p in (tmp_path / "map").iterdir() if p.name.isdigit()]
    held, problems = parse_gpu_map_log((tmp_path / "gpu-map.log").read_text().splitlines())
    assert problems == []
    assert sorted((h.job_id, h.node, h.gpu_index, h.end is not None) for h in held) == [
        (42, "gpu07", 0, True), (42, "gpu07", 3, True)]


def test_the_prolog_logs_the_uuids_nvidia_smi_gives_and_import_stores_them(tmp_path, world):
    smi = tmp_path / "nvidia-smi"  # a stand-in: the one query the prolog makes
    smi.write_text(f'#!/bin/sh\necho "0, {UUID_A}"\necho "3, {UUID_B}"\necho "4, not-a-uuid"\n')
    smi.chmod(0o755)
    (tmp_path / "jobmap.conf").write_text(
        f"JOBMAP_DIR={tmp_path}/map\nJOBMAP_LOG={tmp_path}/gpu-map.log\nNVIDIA_SMI={smi}\n")
    job = make_job(world.cluster, 43, world.users["bob"], world.team_a)
    _run("prolog.sh", tmp_path, "43", "0,3,4")
    _run("epilog.sh", tmp_path, "43", "0,3,4")
    log = (tmp_path / "gpu-map.log").read_text()
    assert f" start 43 gpu07 0,3,4 {UUID_A},{UUID_B},-\n" in log
    sync.import_gpu_map(world.cluster, log.splitlines())
    assert dict(JobGpu.objects.filter(job=job).values_list("gpu_index", "gpu_uuid")) == {
        0: UUID_A, 3: UUID_B, 4: ""}


def test_without_jobmap_log_the_prolog_writes_no_history(tmp_path):
    (tmp_path / "jobmap.conf").write_text(f"JOBMAP_DIR={tmp_path}/map\n")
    _run("prolog.sh", tmp_path, "42", "1")
    assert not (tmp_path / "gpu-map.log").exists()


@pytest.mark.django_db
def test_the_import_binds_known_jobs_and_is_idempotent(world, tmp_path):
    job = make_job(world.cluster, 7, world.users["bob"], world.team_a)
    log = tmp_path / "gpu-map.log"
    log.write_text("100 start 7 gpu01 0,1\n160 end 7 gpu01 0,1\n100 start 999 gpu01 2\n")
    stats = sync.import_gpu_map(world.cluster, log.read_text().splitlines())
    assert (stats["intervals"], stats["created"], stats["unknown_jobs"]) == (2, 2, 1)
    assert sorted(JobGpu.objects.filter(job=job).values_list("gpu_index", flat=True)) == [0, 1]
    call_command("import_gpu_map", str(log), "--cluster", world.cluster.name)
    assert JobGpu.objects.filter(job=job).count() == 2


# `scontrol -d show job` of a job holding two GPU models on gpu05, as 24.11.5 printed it
# (tests/fixtures/slurm/24.11/scontrol_show_job.txt), and Slurm's SLURM_JOB_GPUS for it: only
# the last model's indices (seen on 22.05.8, 24.11.5 and 26.05.5)
TWO_MODELS_DETAIL = """JobId=19 JobName=rec-two-models
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=gpu05
     Nodes=gpu05 CPU_IDs=0 Mem=2000 GRES=gpu:h100:1(IDX:0),gpu:h200:2(IDX:2-3)
"""
MULTI_NODE_DETAIL = """JobId=10 JobName=rec-multinode
     Nodes=gpu[01-02] CPU_IDs=0 Mem=2000 GRES=gpu:h100:4(IDX:4-7)
     Nodes=gpu07 CPU_IDs=0 Mem=2000 GRES=gpu:h100:4(IDX:2-5)
"""


def _scontrol(tmp: Path, detail: str) -> Path:
    """A stand-in scontrol: ``-d show job`` prints ``detail``; ``show hostnames`` expands."""
    script = tmp / "scontrol"
    (tmp / "detail.txt").write_text(detail)
    script.write_text(f"""#!/bin/bash
echo "$*" >> {tmp}/scontrol.log
case "$*" in
  "-d show job "*) cat {tmp}/detail.txt ;;
  "show hostnames gpu[01-02]") printf 'gpu01\ngpu02\n' ;;
  *) exit 1 ;;
esac
""")
    script.chmod(0o755)
    return script


def _gres_conf(tmp: Path, *types: str) -> Path:
    conf = tmp / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    (tmp / "gres.conf").write_text("".join(
        f"NodeName=gpu05 Name=gpu Type={t} File=/dev/nvidia[0-1]\n" for t in types))
    return conf


@pytest.mark.parametrize(("detail", "node", "types", "job_gpus", "expected"), [
    # two models on one node: the scheduler's indices, not Slurm's truncated SLURM_JOB_GPUS
    (TWO_MODELS_DETAIL, "gpu05", ("h100", "h200"), "2,3", ["0", "2", "3"]),
    # the node in a folded group of a multi-node job
    (MULTI_NODE_DETAIL, "gpu07", ("h100", "a100"), "2-5", ["2", "3", "4", "5"]),
    # one model per node: SLURM_JOB_GPUS is right, scontrol is not asked
    (TWO_MODELS_DETAIL, "gpu05", ("h100",), "0,1", ["0", "1"]),
])
def test_the_prolog_maps_every_gpu_model_a_job_holds(tmp_path, detail, node, types, job_gpus,
                                                      expected):
    scontrol = _scontrol(tmp_path, detail)
    (tmp_path / "jobmap.conf").write_text(f"JOBMAP_DIR={tmp_path}/map\nSCONTROL={scontrol}\n")
    env = {**os.environ, "BEACON_JOBMAP_CONF": str(tmp_path / "jobmap.conf"),
           "SLURM_JOB_ID": "19", "SLURM_JOB_GPUS": job_gpus, "SLURMD_NODENAME": node,
           "SLURM_CONF": str(_gres_conf(tmp_path, *types))}
    subprocess.run(["bash", str(ROOT / "deploy/slurm/prolog.sh")], env=env, check=True,
                   timeout=30)
    assert sorted(p.name for p in (tmp_path / "map").iterdir() if p.name.isdigit()) == expected
    asked = (tmp_path / "scontrol.log").read_text() if (tmp_path / "scontrol.log").exists() \
        else ""
    assert ("-d show job 19" in asked) == (len(types) > 1)


def test_a_scheduler_that_does_not_answer_falls_back_to_slurm_job_gpus(tmp_path):
    (tmp_path / "jobmap.conf").write_text(  # an scontrol that is not there
        f"JOBMAP_DIR={tmp_path}/map\nSCONTROL={tmp_path}/missing/scontrol\n")
    env = {**os.environ, "BEACON_JOBMAP_CONF": str(tmp_path / "jobmap.conf"),
           "SLURM_JOB_ID": "19", "SLURM_JOB_GPUS": "1,2", "SLURMD_NODENAME": "gpu05",
           "SLURM_CONF": str(_gres_conf(tmp_path, "h100", "h200"))}
    subprocess.run(["bash", str(ROOT / "deploy/slurm/prolog.sh")], env=env, check=True,
                   timeout=30)
    assert sorted(p.name for p in (tmp_path / "map").iterdir() if p.name.isdigit()) == ["1", "2"]
