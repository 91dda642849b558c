"""Helpers for integration tests against the real Slurm dev cluster (deploy/dev/slurm.sh).

Jobs are submitted as the cluster's test users with ``runuser`` (tests run as root, as in CI);
ids always come from ``sbatch --parsable``, never assumed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.services import port_open, require

ROOT = Path(__file__).resolve().parents[2]
START_WITH = "sudo bash deploy/dev/slurm.sh up"
CLUSTER = "devcluster"
JOBMAP = Path("/run/slurm-dev/dcgm-job-map")
JOBMAP_LOG = Path("/var/log/slurm-dev/beacon-gpu-map.log")  # the prolog's GPU history
TEXT_FIELDS = "JobIDRaw,JobID,State,ExitCode,AllocTRES,Submit,Start,End,NNodes"
_ENV = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "%Y-%m-%dT%H:%M:%S"}


def slurm_up() -> bool:
    if shutil.which("sbatch") is None or not port_open("127.0.0.1", 6817):
        return False
    return subprocess.run(["scontrol", "ping"], capture_output=True, text=True,
                          check=False).stdout.count("is UP") > 0


def require_slurm() -> None:
    require(slurm_up(), "Slurm (slurmctld on 127.0.0.1:6817)", START_WITH)
    if os.geteuid() != 0:
        pytest.skip("Slurm integration tests submit jobs as test users: run them as root")


def run(*argv: str, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, env=_ENV, check=False,
                          timeout=60, input=stdin)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def sbatch(user: str, *args: str, script: str | None = None) -> int:
    """Submit as ``user`` (``--wrap`` in args, or a batch script) and return the raw job id."""
    out = run("runuser", "-u", user, "--", "sbatch", "--parsable", f"--chdir=/home/{user}",
              "-o", "/dev/null", *args, stdin=script)
    return int(out.strip().split(";")[0])


def states(ids: Iterable[int]) -> dict[int, str]:
    """Live state of each job still known to slurmctld (``squeue`` lists finished ones too)."""
    out = run("squeue", "-h", "-a", "-r", "-o", "%A|%T", "-j", ",".join(map(str, ids)),
              check=False)
    return {int(a): b for a, b in (line.split("|") for line in out.split())}


def wait_for(predicate, timeout: float, what: str, every: float = 1.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_running(job_id: int, timeout: float = 90) -> None:
    wait_for(lambda: states([job_id]).get(job_id) == "RUNNING", timeout, f"job {job_id} running")


def array_task_ids(array_id: int) -> list[int]:
    """Raw ids of the array's tasks that have started (the pending remainder left out)."""
    out = run("sacct", "-a", "-X", "-n", "-P", "-o", "JobIDRaw,JobID", "-j", str(array_id))
    rows = (line.split("|") for line in out.split())
    return sorted(int(raw) for raw, shown in rows if "[" not in shown)


def sacct_text(ids: Iterable[int]) -> dict[int, dict[str, str]]:
    """Text ``sacct -P`` rows per raw job id: the independent source for comparisons."""
    out = run("sacct", "-a", "-X", "-n", "-P", "-o", TEXT_FIELDS, "-j",
              ",".join(map(str, ids)))
    rows = {}
    for line in out.splitlines():
        values = dict(zip(TEXT_FIELDS.split(","), line.split("|"), strict=True))
        rows[int(values["JobIDRaw"])] = values
    return rows


def text_time(value: str) -> datetime | None:
    if value in ("", "Unknown", "None"):
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def text_gpus(alloc_tres: str) -> int:
    for item in alloc_tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            return int(value)
    return 0


def finished_in_accounting(ids: Iterable[int], settle: float = 2.0) -> bool:
    """Every job has a final state in slurmdbd (it lags slurmctld by a moment), and its
    record has settled: the same when read again ``settle`` seconds later. A record read
    while a busy slurmdbd (its midnight rollup, say) still writes it can differ from the
    one read a moment later, and a comparison with sacct must read the settled one."""
    ids = list(ids)
    rows = sacct_text(ids)
    active = ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED")
    finished = len(rows) == len(set(ids)) and all(
        r["State"].split()[0] not in active and r["End"] not in ("", "Unknown")
        for r in rows.values())
    if not finished:
        return False
    time.sleep(settle)
    return sacct_text(ids) == rows


def ensure_account(account: str, user: str) -> None:
    """A Slurm account of the test's own (so quotas and usage touch no one else's), with
    ``user`` in it. ``add`` of an existing item only says "Nothing new added"."""
    run("sacctmgr", "-i", "add", "account", account, f"Cluster={CLUSTER}",
        "Description=beacon integration tests", "Organization=beacon", check=False)
    run("sacctmgr", "-i", "add", "user", user, f"Account={account}", f"Cluster={CLUSTER}",
        check=False)
    out = run("sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={account}",
              f"cluster={CLUSTER}", "format=user")
    assert user in out.split(), f"could not add {user} to Slurm account {account}"


def reason(job_id: int) -> str:
    """slurmctld's pending reason for a job ("" once it is gone)."""
    return run("squeue", "-h", "-j", str(job_id), "-o", "%r", check=False).strip()


def assert_matches_sacct(ids: list[int]) -> None:
    """Beacon's rows of these jobs equal text ``sacct -P``'s, field by field: none lost,
    none extra (finished jobs: sacct prints 0:0 as a pending job's exit code)."""
    from apps.jobs.models import Job

    text = sacct_text(ids)
    rows = {j.job_id: j for j in Job.objects.filter(job_id__in=ids)}
    assert sorted(rows) == sorted(text)  # none lost, none extra
    for job_id, expected in text.items():
        row = rows[job_id]
        assert (row.display_id, row.state, row.exit_text) == (
            expected["JobID"], expected["State"].split()[0], expected["ExitCode"]), job_id
        assert row.gpus == text_gpus(expected["AllocTRES"]), job_id
        if row.nodes:  # NNodes is the request for a job that never got nodes
            assert row.node_count == int(expected["NNodes"]), job_id
        assert row.submit_time == text_time(expected["Submit"]), job_id
        assert row.start_time == text_time(expected["Start"]), job_id
        assert row.end_time == text_time(expected["End"]), job_id
