"""In-memory adapters for unit tests only (STYLE §5): the SlurmClient protocol over lists.

Loaded from the recorded fixtures, so the records are real Slurm output; tests edit them to
stage a situation. Every call is logged in ``calls`` so tests can count scheduler calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apps.clusters.adapters.slurm import (
    Action,
    Association,
    ExitStatus,
    GpuBinding,
    JobAllocation,
    LimitChange,
    Qos,
    QueueEntry,
    RecordError,
    Reservation,
    ShareRow,
    SlurmJob,
    SlurmNode,
    SlurmPartition,
    UsageRow,
    parse_gpus,
)
from apps.clusters.adapters.slurm import parse as slurm_parse
from apps.clusters.adapters.slurm import parse_cluster as slurm_parse_cluster
from apps.core.errors import AdapterError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"


def fixture_jobs(name: str = "sacct_window.json") -> list[SlurmJob]:
    with open(FIXTURES / name, "rb") as f:
        return [j for j in slurm_parse.iter_sacct_json(f) if isinstance(j, SlurmJob)]


@dataclass
class FakeSlurm:
    """A Slurm cluster in memory. ``jobs`` is accounting; ``window`` (default: all of
    ``jobs``) is what a window query returns, to mimic sacct dropping held jobs."""

    jobs: list[SlurmJob] = field(default_factory=list)
    window: list[SlurmJob | RecordError] | None = None
    exits: dict[int, ExitStatus] = field(default_factory=dict)
    live: list[QueueEntry] = field(default_factory=list)
    bindings: list[GpuBinding] | AdapterError = field(default_factory=list)
    node_list: list[SlurmNode] = field(default_factory=list)
    partition_list: list[SlurmPartition] = field(default_factory=list)
    assocs: list[Association] = field(default_factory=list)
    share_rows: list[ShareRow] | AdapterError = field(default_factory=list)
    scripts: dict[str, str] = field(default_factory=dict)
    environments: dict[str, str] | AdapterError = field(default_factory=dict)
    report: list[UsageRow] = field(default_factory=list)
    reservation_list: list[Reservation] | AdapterError = field(default_factory=list)
    qos_list: list[Qos] | AdapterError = field(default_factory=list)
    allocations: list[JobAllocation] = field(default_factory=list)
    limit_fail: Exception | None = None  # what the next limit write raises, if anything
    # what the first read after a limit write raises (Slurm took the write, then went away)
    read_fail_after_write: Exception | None = None
    after_write: Callable[[FakeSlurm], None] | None = None  # e.g. another writer races
    cancel_fail: Exception | None = None  # what cancel_job raises, if anything
    marker: str = "m1"
    unable: dict[Action, str] = field(default_factory=dict)  # what ``cannot`` answers
    until: datetime | None = None  # ``accounted_until``: None, as a live Slurm
    windowed: bool = False  # jobs_since returns only jobs active at or after since, as sacct
    fail: Exception | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)
    _fail_next_read: Exception | None = None  # armed by a write (read_fail_after_write)

    @classmethod
    def recorded(cls) -> FakeSlurm:
        """The recorded dev cluster: window, exit codes, queue, bindings, nodes, accounts."""
        squeue = json.loads((FIXTURES / "squeue.json").read_text())
        by_id = fixture_jobs("sacct_by_id.json")
        window = fixture_jobs()
        extra = [j for j in by_id if j.job_id not in {w.job_id for w in window}]
        return cls(
            jobs=window + extra, window=list(window),
            exits=slurm_parse.parse_exit_codes((FIXTURES / "sacct_exitcodes.txt").read_text()),
            live=[e for e in slurm_parse.parse_squeue_json(squeue)
                  if e.state in ("PENDING", "RUNNING")],
            bindings=parse_gpus.bindings_from_squeue(squeue),
            node_list=slurm_parse_cluster.parse_sinfo_json(
                json.loads((FIXTURES / "sinfo.json").read_text())),
            partition_list=slurm_parse_cluster.parse_scontrol_partitions(
                (FIXTURES / "scontrol_partitions.txt").read_text()),
            assocs=slurm_parse_cluster.parse_sacctmgr_assoc(
                (FIXTURES / "sacctmgr_assoc.txt").read_text()),
            share_rows=slurm_parse_cluster.parse_sshare((FIXTURES / "sshare.txt").read_text()),
            scripts=slurm_parse.parse_batch_scripts(
                (FIXTURES / "sacct_batch_script.txt").read_text()),
        )

    def set_job(self, job_id: int, **changes: Any) -> SlurmJob:
        """Change one job in accounting (and in the window, if it is there)."""
        for source in (self.jobs, self.window or []):
            for i, job in enumerate(source):
                if isinstance(job, SlurmJob) and job.job_id == job_id:
                    source[i] = replace(job, **changes)
        return next(j for j in self.jobs if j.job_id == job_id)

    def _call(self, name: str, arg: Any = None) -> None:
        self.calls.append((name, arg))
        if self.fail is not None:
            raise self.fail

    def call_names(self) -> list[str]:
        return [name for name, _ in self.calls]

    # --- SlurmClient -------------------------------------------------------------------

    def change_marker(self) -> str:
        self._call("change_marker")
        return self.marker

    def jobs_since(self, since: datetime | None) -> Iterator[SlurmJob | RecordError]:
        self._call("jobs_since", since)
        jobs = list(self.jobs if self.window is None else self.window)
        if self.windowed and since is not None:
            # sacct -S since -E now: submitted by now, and not ended before since
            now = datetime.now(tz=UTC)
            jobs = [j for j in jobs if isinstance(j, RecordError) or (
                j.submit_time <= now and (j.end_time is None or j.end_time >= since))]
        return iter(jobs)

    def jobs_by_id(self, job_ids: Iterable[int]) -> Iterator[SlurmJob | RecordError]:
        wanted = set(job_ids)
        self._call("jobs_by_id", sorted(wanted))
        return iter([j for j in self.jobs if j.job_id in wanted or j.array_job_id in wanted])

    def exit_codes(self, job_ids: Iterable[int]) -> dict[int, ExitStatus]:
        ids = list(job_ids)
        self._call("exit_codes", ids)
        return {i: self.exits[i] for i in ids if i in self.exits}

    def queue(self) -> list[QueueEntry]:
        self._call("queue")
        return list(self.live)

    def gpu_bindings(self) -> list[GpuBinding]:
        self._call("gpu_bindings")
        if isinstance(self.bindings, AdapterError):
            raise self.bindings
        return list(self.bindings)

    def nodes(self) -> list[SlurmNode]:
        self._call("nodes")
        return list(self.node_list)

    def partitions(self) -> list[SlurmPartition]:
        self._call("partitions")
        return list(self.partition_list)

    def associations(self) -> list[Association]:
        self._call("associations")
        return list(self.assocs)

    def job_scripts(self, job_ids: Iterable[int]) -> dict[str, str]:
        ids = list(job_ids)
        self._call("job_scripts", ids)
        shown = {j.job_id: j.display_id for j in self.jobs}
        return {shown[i]: self.scripts[shown[i]] for i in ids
                if i in shown and shown[i] in self.scripts}

    def job_environments(self, job_ids: Iterable[int]) -> dict[str, str]:
        ids = list(job_ids)
        self._call("job_environments", ids)
        if isinstance(self.environments, AdapterError):
            raise self.environments
        shown = {j.job_id: j.display_id for j in self.jobs}
        return {shown[i]: self.environments[shown[i]] for i in ids
                if i in shown and shown[i] in self.environments}

    def shares(self) -> list[ShareRow]:
        self._call("shares")
        if isinstance(self.share_rows, AdapterError):
            raise self.share_rows
        return list(self.share_rows)

    def reservations(self) -> list[Reservation]:
        self._call("reservations")
        if isinstance(self.reservation_list, AdapterError):
            raise self.reservation_list
        return list(self.reservation_list)

    def qos(self) -> list[Qos]:
        self._call("qos")
        if isinstance(self.qos_list, AdapterError):
            raise self.qos_list
        return list(self.qos_list)

    def usage_report(self, start: datetime, end: datetime, tres: str) -> list[UsageRow]:
        self._call("usage_report", (start, end, tres))
        return list(self.report)

    def job_allocations(self, start: datetime, end: datetime) -> list[JobAllocation]:
        self._call("job_allocations", (start, end))
        return list(self.allocations)

    def account_limits(self, account: str) -> Association | None:
        self._call("account_limits", account)
        if self._fail_next_read is not None:
            failure, self._fail_next_read = self._fail_next_read, None
            raise failure
        return next((a for a in self.assocs if a.account == account and not a.user), None)

    def cancel_job(self, job_id: int) -> None:
        """Records the call; the job's accounting row turns CANCELLED (as scancel)."""
        self._call("cancel_job", job_id)
        if self.cancel_fail is not None:
            raise self.cancel_fail
        for job in list(self.jobs):
            if job.job_id == job_id:
                self.set_job(job_id, state="CANCELLED")

    def set_account_limit(self, account: str, tres: str, minutes: int | None,
                          dry_run: bool = False) -> LimitChange:
        """Changes the account row in ``assocs`` like sacctmgr would (unless dry run)."""
        self._call("set_account_limit", (account, tres, minutes, dry_run))
        if self.limit_fail is not None:
            raise self.limit_fail
        row = self.account_limits(account)
        if row is None:
            raise AdapterError("Slurm changed nothing:  Nothing modified", service="slurm")
        command = f"sacctmgr -i modify account where name={account} set " \
                  f"GrpTRESMins={tres}={-1 if minutes is None else minutes}"
        if not dry_run:
            limits = {k: v for k, v in row.grp_tres_mins.items() if k != tres}
            if minutes is not None:
                limits[tres] = minutes
            self.assocs[self.assocs.index(row)] = replace(row, grp_tres_mins=limits)
            self._fail_next_read, self.read_fail_after_write = self.read_fail_after_write, None
            if self.after_write is not None:
                hook, self.after_write = self.after_write, None
                hook(self)
        return LimitChange(command, " Modified account associations...", not dry_run)

    def cannot(self, action: Action) -> str:
        return self.unable.get(action, "")

    def accounted_until(self) -> datetime | None:
        return self.until


# --- Stand-in Slurm commands for the CLI backend -------------------------------------------

RECORDED_COMMANDS = {
    "sacct": "sacct_window.json", "squeue": "squeue.json", "sinfo": "sinfo.json",
    "sdiag": "sdiag.txt", "sshare": "sshare.txt", "sacctmgr": "sacctmgr_assoc.txt",
}


def write_command(bin_dir: Path, name: str, body: str) -> None:
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def recorded_slurm_bin(bin_dir: Path, release: str = "22.05") -> Path:
    """Scripts named like the Slurm commands that print the recorded output of ``release``
    (22.05 at the top of tests/fixtures/slurm, 24.11 and 26.05 in their folders) and append
    their arguments to ``argv.log``. ``sacct -o JobIDRaw,ExitCode`` prints the exit codes,
    ``--version`` the release, ``scontrol --json show nodes`` the REST nodes record of the
    same data parser."""
    log = bin_dir / "argv.log"
    here = FIXTURES if release == "22.05" else FIXTURES / release
    version = (here / "version.txt").read_text().split()[-1] if release != "22.05" else "22.05.8"
    for name, fixture in RECORDED_COMMANDS.items():
        write_command(bin_dir, name, f'echo "{name} $*" >> {log}\ncase "$*" in '
                      f'--version) echo "slurm-wlm {version}";; *) cat {here / fixture};; esac')
    batch = here / ("sacct_batch_script.txt" if release == "22.05"
                    else "sacct_batch_script_one.txt")
    write_command(bin_dir, "sacct", f'echo "sacct $*" >> {log}\ncase "$*" in '
                  f'--version) echo "slurm-wlm {version}";; '
                  f'*ExitCode*) cat {here / "sacct_exitcodes.txt"};; '
                  f'*batch-script*) cat {batch};; '
                  f'*env-vars*) cat {FIXTURES / "sacct_env_vars.txt"};; '
                  f'*) cat {here / "sacct_window.json"};; esac')
    nodes = (FIXTURES / "rest" / "v0.0.38_nodes.json") if release == "22.05" else \
        sorted((here / "rest").glob("v0.0.*_nodes.json"))[-1]
    # reservations and QOS (tests/fixtures/slurm/live/): 22.05's text, JSON from 23.02 (24.11
    # has no recording there yet: 26.05's JSON stands in)
    live = FIXTURES / "live" / (release if (FIXTURES / "live" / release).is_dir() else "26.05")
    ext = "txt" if release == "22.05" else "json"
    write_command(bin_dir, "scontrol", f'echo "scontrol $*" >> {log}\ncase "$*" in '
                  f'*partition*) cat {here / "scontrol_partitions.txt"};; '
                  f'*nodes*) cat {nodes};; '
                  f'*reservation*) cat {live / f"scontrol_reservations.{ext}"};; '
                  f'*) cat {here / "scontrol_show_job.txt"};; esac')
    write_command(bin_dir, "sacctmgr", f'echo "sacctmgr $*" >> {log}\ncase "$*" in '
                  f'*qos*) cat {live / f"sacctmgr_qos.{ext}"};; '
                  f'*) cat {here / "sacctmgr_assoc.txt"};; esac')
    return bin_dir


class StreamedRange:
    """A fake Prometheus client's ``stream_range`` from its ``query_range``: the series
    handed to ``each`` one at a time and none returned, as the real client does."""

    def query_range(self, expr: str, start: float, end: float, step: float) -> Any:
        raise NotImplementedError

    def stream_range(self, expr: str, start: float, end: float, step: float,
                     each: Callable[[Any], None]) -> Any:
        from apps.clusters.adapters.prometheus import QueryResult

        result = self.query_range(expr, start, end, step)
        for series in result.series:
            each(series)
        return QueryResult(result.result_type, [], result.warnings)
