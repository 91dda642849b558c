"""Helpers for integration tests against the real Slurm dev clusters (deploy/dev/slurm.sh).

Three releases can run at once: 22.05 (Debian 12's packages, on the host) and 24.11 and 26.05
(Debian trees under chroot). ``SlurmDev.load(release)`` reads ``RELEASE=<r> slurm.sh env``;
every command goes through the release's own binaries (``BIN_DIR``: the host's for 22.05,
wrappers that chroot into the tree otherwise). The ``slurm`` fixture (tests/integration/
conftest.py) gives one per release, with ids ``slurm-22.05``, ``slurm-24.11``, ``slurm-26.05``.

Jobs are submitted as the cluster's test users with ``runuser`` (tests run as root, as in CI);
ids always come from ``sbatch --parsable``, never assumed.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.integration.services import port_open, require

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy/dev/slurm.sh"
RELEASES = ("22.05", "24.11", "26.05")
# the REST version each release's tests configure: 22.05's newest; none for the others, so
# that the backend picks the newest the server offers
REST_VERSION = {"22.05": "v0.0.38"}
TEXT_FIELDS = "JobIDRaw,JobID,State,ExitCode,AllocTRES,Submit,Start,End,NNodes"
COMMANDS = frozenset(("sacct", "squeue", "sinfo", "scontrol", "sacctmgr", "sshare", "sreport",
                      "sdiag", "scancel", "sbatch", "srun"))
_ENV = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "%Y-%m-%dT%H:%M:%S"}


def wait_for(predicate, timeout: float, what: str, every: float = 1.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


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


@dataclass(frozen=True)
class SlurmDev:
    """One release's dev cluster, as ``slurm.sh env`` describes it (host paths)."""

    release: str
    env: dict[str, str]

    @classmethod
    def load(cls, release: str) -> SlurmDev:
        return _load(release)

    # --- facts ------------------------------------------------------------------------

    @property
    def cluster(self) -> str:
        return self.env["CLUSTER"]

    @property
    def bin_dir(self) -> str:
        return self.env["BIN_DIR"]

    @property
    def ctld_port(self) -> int:
        return int(self.env["SLURMCTLD_PORT"])

    @property
    def rest_url(self) -> str:
        return self.env["REST_URL"]

    @property
    def rest_version(self) -> str | None:
        return REST_VERSION.get(self.release)

    @property
    def db_name(self) -> str:
        return self.env["DB_NAME"]

    @property
    def jobmap(self) -> Path:
        return Path(self.env["JOBMAP"])

    @property
    def jobmap_log(self) -> Path:
        return Path(self.env["JOBMAP_LOG"])

    @property
    def nvidia_smi(self) -> str:
        return self.env["NVIDIA_SMI"]

    @property
    def multi_node(self) -> str:
        return self.env["MULTI_NODE"]

    @property
    def multi_partition(self) -> str:
        return self.env["MULTI_PARTITION"]

    def pidfile(self, daemon: str) -> Path:
        return Path(self.env["RUN"]) / f"{daemon}.pid"

    def __str__(self) -> str:
        return f"Slurm {self.release} ({self.cluster})"

    # --- is it up -----------------------------------------------------------------------

    def is_up(self) -> bool:
        if not (port_open("127.0.0.1", self.ctld_port) and Path(self.bin_dir, "scontrol").exists()):
            return False
        return "is UP" in self.run("scontrol", "ping", check=False)

    def require(self) -> None:
        require(self.is_up(), f"Slurm {self.release} (slurmctld on 127.0.0.1:{self.ctld_port})",
                f"sudo {self.env['START']}")
        if os.geteuid() != 0:
            pytest.skip("Slurm integration tests submit jobs as test users: run them as root")

    def start(self) -> None:
        """``slurm.sh up`` for this release (starts what is down; SAMPLE_JOBS=no)."""
        subprocess.run(["bash", str(SCRIPT), "up"], check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, "RELEASE": self.release, "SAMPLE_JOBS": "no"},
                       timeout=300)

    # --- commands -----------------------------------------------------------------------

    def argv(self, *argv: str) -> list[str]:
        """A Slurm command of this release (BIN_DIR), any other command as it is."""
        head = f"{self.bin_dir}/{argv[0]}" if argv[0] in COMMANDS else argv[0]
        return [head, *argv[1:]]

    def as_user(self, user: str, *argv: str) -> list[str]:
        """``argv`` run as ``user``: ``runuser``, in the release's tree for 24.11/26.05."""
        return [*self.env["AS_USER"].split(), user, "--", *argv]

    def run(self, *argv: str, check: bool = True, stdin: str | None = None,
            user: str | None = None) -> str:
        cmd = self.as_user(user, *argv) if user else self.argv(*argv)
        done = subprocess.run(cmd, capture_output=True, text=True, env=_ENV, check=False,
                              timeout=60, input=stdin)
        if check and done.returncode != 0:
            raise AssertionError(f"{self}: {' '.join(cmd)} failed: {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, user: str, *args: str, script: str | None = None) -> int:
        """Submit as ``user`` (``--wrap`` in args, or a batch script); the raw job id."""
        out = self.run("sbatch", "--parsable", f"--chdir=/home/{user}", "-o", "/dev/null",
                       *args, stdin=script, user=user)
        return int(out.strip().split(";")[0])

    def token(self, user: str = "slurm", lifespan: int = 300) -> str:
        out = self.run("scontrol", "token", f"username={user}", f"lifespan={lifespan}")
        return out.strip().removeprefix("SLURM_JWT=")

    # --- Beacon's backends on this cluster ----------------------------------------------

    def cli_settings(self, **extra: Any) -> dict[str, Any]:
        """``Cluster.slurm_settings`` of the cli backend (``bin_dir`` = this release's)."""
        return {"bin_dir": self.bin_dir, "timeout": 60, **extra}

    def rest_settings(self, **extra: Any) -> dict[str, Any]:
        """``Cluster.slurm_settings`` of the rest backend: a fresh JWT of SlurmUser."""
        settings = {"url": self.rest_url, "user": "slurm", "token": self.token(),
                    "cluster": self.cluster, "timeout": 60, **extra}
        if self.rest_version:
            settings["version"] = self.rest_version
        return settings

    def settings(self, backend: str, **extra: Any) -> dict[str, Any]:
        return self.cli_settings(**extra) if backend == "cli" else self.rest_settings(**extra)

    def client(self, backend: str = "cli", **extra: Any):
        from apps.clusters.adapters.slurm.registry import slurm_client

        return slurm_client(backend, {"cluster": self.cluster, **self.settings(backend, **extra)})

    def new_cluster(self, backend: str = "cli", **fields: Any):
        """A Beacon ``Cluster`` row for this dev cluster, read through ``backend``."""
        from apps.clusters.models import Cluster

        extra = fields.pop("slurm_settings", {})
        return Cluster.objects.create(name=self.cluster, slurm_backend=backend,
                                      slurm_settings=self.settings(backend, **extra), **fields)

    # --- what Slurm says ----------------------------------------------------------------

    def states(self, ids: Iterable[int]) -> dict[int, str]:
        """Live state of each job still known to slurmctld."""
        out = self.run("squeue", "-h", "-a", "-r", "-o", "%A|%T", "-j", ",".join(map(str, ids)),
                       check=False)
        return {int(a): b for a, b in (line.split("|") for line in out.split())}

    def wait_running(self, job_id: int, timeout: float = 90) -> None:
        wait_for(lambda: self.states([job_id]).get(job_id) == "RUNNING", timeout,
                 f"job {job_id} running on {self}")

    def reason(self, job_id: int) -> str:
        """slurmctld's pending reason for a job ("" once it is gone)."""
        return self.run("squeue", "-h", "-j", str(job_id), "-o", "%r", check=False).strip()

    def array_task_ids(self, array_id: int) -> list[int]:
        """Raw ids of the array's tasks that have started (the pending remainder left out)."""
        out = self.run("sacct", "-a", "-X", "-n", "-P", "-o", "JobIDRaw,JobID", "-j",
                       str(array_id))
        rows = (line.split("|") for line in out.split())
        return sorted(int(raw) for raw, shown in rows if "[" not in shown)

    def sacct_text(self, ids: Iterable[int]) -> dict[int, dict[str, str]]:
        """Text ``sacct -P`` rows per raw job id: the independent source for comparisons."""
        out = self.run("sacct", "-a", "-X", "-n", "-P", "-o", TEXT_FIELDS, "-j",
                       ",".join(map(str, ids)))
        rows = {}
        for line in out.splitlines():
            values = dict(zip(TEXT_FIELDS.split(","), line.split("|"), strict=True))
            rows[int(values["JobIDRaw"])] = values
        return rows

    def finished_in_accounting(self, ids: Iterable[int], settle: float = 2.0) -> bool:
        """Every job has a final state in slurmdbd (it lags slurmctld by a moment), and its
        record has settled: the same when read again ``settle`` seconds later. A record read
        while a busy slurmdbd (its midnight rollup, say) still writes it can differ from the
        one read a moment later, and a comparison with sacct must read the settled one."""
        ids = list(ids)
        rows = self.sacct_text(ids)
        active = ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED")
        finished = len(rows) == len(set(ids)) and all(
            r["State"].split()[0] not in active and r["End"] not in ("", "Unknown")
            for r in rows.values())
        if not finished:
            return False
        time.sleep(settle)
        return self.sacct_text(ids) == rows

    def ensure_account(self, account: str, user: str) -> None:
        """A Slurm account of the test's own (so quotas and usage touch no one else's), with
        ``user`` in it. ``add`` of an existing item only says "Nothing new added"."""
        self.run("sacctmgr", "-i", "add", "account", account, f"Cluster={self.cluster}",
                 "Description=beacon integration tests", "Organization=beacon", check=False)
        self.run("sacctmgr", "-i", "add", "user", user, f"Account={account}",
                 f"Cluster={self.cluster}", check=False)
        out = self.run("sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={account}",
                       f"cluster={self.cluster}", "format=user")
        assert user in out.split(), f"could not add {user} to Slurm account {account} on {self}"

    def ctld_exit_code(self, job_id: int) -> str:
        """slurmctld's exit code of a job still in its memory (``scontrol show job``)."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id), check=False)
        found = re.search(r"\bExitCode=(\d+:\d+)", out)
        return found.group(1) if found else ""

    def assert_matches_sacct(self, ids: list[int], backend: str = "cli") -> None:
        """Beacon's rows of these jobs equal text ``sacct -P``'s, field by field: none lost,
        none extra (finished jobs: sacct prints 0:0 as a pending job's exit code).

        The rest backend takes exit codes slurmctld still holds from slurmctld (docs/slurm.md
        §4), which says 0:15 (SIGTERM) for a TIMEOUT or a job cancelled while running where
        accounting says 0:0: for those, ``scontrol show job``'s value is the expected one."""
        from apps.jobs.models import Job

        text = self.sacct_text(ids)
        rows = {j.job_id: j for j in Job.objects.filter(job_id__in=ids)}
        assert sorted(rows) == sorted(text)  # none lost, none extra
        for job_id, expected in text.items():
            row = rows[job_id]
            exit_text = expected["ExitCode"]
            if backend == "rest" and row.exit_text != exit_text:
                exit_text = self.ctld_exit_code(job_id) or exit_text
            assert (row.display_id, row.state, row.exit_text) == (
                expected["JobID"], expected["State"].split()[0], exit_text), job_id
            assert row.gpus == text_gpus(expected["AllocTRES"]), job_id
            if row.nodes:  # NNodes is the request for a job that never got nodes
                assert row.node_count == int(expected["NNodes"]), job_id
            assert row.submit_time == text_time(expected["Submit"]), job_id
            assert row.start_time == text_time(expected["Start"]), job_id
            assert row.end_time == text_time(expected["End"]), job_id


@cache
def _load(release: str) -> SlurmDev:
    out = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True,
                         check=True, env={**os.environ, "RELEASE": release}, timeout=60).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return SlurmDev(release, env)
