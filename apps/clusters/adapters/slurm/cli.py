"""The ``cli`` Slurm backend: sacct/squeue/scontrol ``--json`` and parsable text, by subprocess.

Commands run without a shell, each with a timeout; optionally through ``ssh`` to a login node
(the remote command line is quoted with ``shlex.join``, so job names or ids can never become
shell syntax there). Works with Slurm >= 21.08 (``--json``); tested against real 22.05,
24.11 and 26.05.

The release is asked once per client (``sacct --version``). From 23.02 the JSON commands are
pinned to the data parser Beacon reads for that release (``--json=v0.0.42``; a release newer
than Beacon knows is asked for the newest one Beacon reads, which Slurm serves for a few
releases more): sacct prints ``meta`` after the jobs there, so the version must be known
before the first record. Nodes come from ``scontrol --json show nodes`` (one record per node;
23.02+'s ``sinfo --json`` groups nodes), from ``sinfo --json`` on 22.05.

Options (``Cluster.slurm_settings``): ``ssh`` ("user@login01", optional), ``ssh_options``
(list of extra ssh arguments), ``bin_dir`` (where the Slurm commands live, optional),
``timeout`` (seconds per command, default 30), ``cluster`` (the Slurm ClusterName, passed to
sacct as ``-M`` so a shared slurmdbd returns only this cluster's jobs).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
import threading
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from apps.clusters.adapters.slurm import parse, parse_gpus, parse_live, values, versions
from apps.clusters.adapters.slurm import parse_cluster as cparse
from apps.clusters.adapters.slurm import types as st
from apps.clusters.adapters.slurm.versions import DataParser
from apps.core.errors import AdapterError, TransientAdapterError

# Messages Slurm prints when a daemon is down or slow: a retry can fix these.
_TRANSIENT_MARKERS = (
    "unable to contact slurm controller", "connection refused", "timed out",
    "socket timed out", "problem talking to the database", "persistent connection",
    "zero bytes were transmitted", "communication connection failure",
    "slurmdbd", "unable to connect", "temporarily unavailable", "try again",
)
_ID_CHUNK = 200  # job ids per `sacct -j` call: keeps the command line short
# Every state sacct accounts. With -S/-E alone sacct drops jobs that never became eligible
# (held, then cancelled); naming the states switches it to "in any of these states during
# the window", which includes them. (CG, CF, SE, RS, RV: "not supported / accounted".)
WINDOW_STATES = "PD,R,S,CD,CA,F,TO,NF,PR,BF,DL,OOM,RQ"
# Text times in UTC, in one format: sreport and sacct read and print local time otherwise.
UTC_ENV = ("TZ=UTC", f"SLURM_TIME_FORMAT={cparse._TEXT_TIME}")
# sacctmgr parses "where name=..." itself: an account name is one plain word, or refused.
_ACCOUNT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_TRES_NAME = re.compile(r"^[a-z]+(/[a-z0-9_]+)?(:[A-Za-z0-9_.-]+)?$")
_RELEASE = re.compile(r"\b(\d+)\.(\d+)(?:\.(\d+))?")


def _is_transient(stderr: str, returncode: int, via_ssh: bool) -> bool:
    if via_ssh and returncode == 255:  # ssh itself failed (network, login node down)
        return True
    text = stderr.lower()
    return any(marker in text for marker in _TRANSIENT_MARKERS)


def _chunks(ids: Iterable[int], size: int = _ID_CHUNK) -> Iterator[list[int]]:
    batch: list[int] = []
    for job_id in ids:
        batch.append(int(job_id))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


@dataclass
class SlurmCli:
    """Talks to Slurm through its command-line tools (see the module docstring)."""

    cluster: str = ""
    ssh: str = ""
    ssh_options: Sequence[str] = field(default_factory=tuple)
    bin_dir: str = ""
    timeout: float = 30.0
    _dialect: DataParser | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlurmCli:
        return cls(cluster=str(options.get("cluster", "")), ssh=str(options.get("ssh", "")),
                   ssh_options=tuple(str(o) for o in options.get("ssh_options", ())),
                   bin_dir=str(options.get("bin_dir", "")),
                   timeout=float(options.get("timeout", 30)))

    # --- running commands ------------------------------------------------------------

    def _argv(self, cmd: Sequence[str], env: Sequence[str] = ()) -> list[str]:
        program = f"{self.bin_dir.rstrip('/')}/{cmd[0]}" if self.bin_dir else cmd[0]
        # env(1) sets variables for the command alike locally and on the ssh side
        local = [*(["env", *env] if env else []), program, *cmd[1:]]
        if not self.ssh:
            return local
        return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(self.timeout)}",
                *self.ssh_options, self.ssh, "--", shlex.join(local)]

    def _run(self, cmd: Sequence[str], env: Sequence[str] = (), stdin: str | None = None) -> str:
        """Run one command to completion and return its stdout (text)."""
        argv = self._argv(cmd, env)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  check=False, errors="replace", input=stdin)
        except subprocess.TimeoutExpired as exc:
            raise TransientAdapterError(f"{cmd[0]} timed out after {self.timeout:g} s",
                                        service="slurm") from exc
        except OSError as exc:
            raise AdapterError(f"cannot run {argv[0]}: {exc}", service="slurm") from exc
        # sacctmgr prints its refusals ("Nothing modified") on stdout
        self._check(cmd[0], done.returncode, done.stderr or done.stdout)
        return done.stdout

    def _check(self, name: str, returncode: int, stderr: str) -> None:
        if returncode == 0:
            return
        message = f"{name} failed (exit {returncode}): {stderr.strip()[:300] or 'no message'}"
        error = (TransientAdapterError if _is_transient(stderr, returncode, bool(self.ssh))
                 else AdapterError)
        raise error(message, service="slurm", detail=stderr)

    def _json(self, cmd: Sequence[str]) -> dict[str, Any]:
        out = self._run(cmd)
        try:
            data = json.loads(out)
        except ValueError as exc:
            raise AdapterError(f"{cmd[0]} printed invalid JSON: {exc}", service="slurm",
                               detail=out[:2000]) from exc
        if not isinstance(data, dict):
            raise AdapterError(f"{cmd[0]} printed JSON that is not an object", service="slurm")
        return data

    # --- which Slurm, which JSON ------------------------------------------------------

    def dialect(self) -> DataParser:
        """The data parser this Slurm's JSON commands are asked for (see the module
        docstring); ``sacct --version`` is run once per client."""
        if self._dialect is None:
            self._dialect = dialect_of(self._run(["sacct", "--version"]))
        return self._dialect

    def _json_flag(self) -> str:
        parser = self.dialect()
        # 22.05's --json takes no argument (and prints its own v0.0.38)
        return "--json" if parser.number <= (0, 0, 38) else f"--json={parser.name}"

    def _stream_sacct(self, args: Sequence[str]) -> Iterator[st.SlurmJob | st.RecordError]:
        """Run ``sacct --json`` and parse its stdout while it is produced (bounded memory).

        A watchdog kills sacct after ``timeout``. A broken-JSON error at the end of the
        stream is held back until sacct's exit status is known: when sacct failed, that
        failure (often transient) is what the caller sees.
        """
        flag = self._json_flag()
        cmd = ["sacct", "-a", flag, *(["-M", self.cluster] if self.cluster else []), *args]
        argv = self._argv(cmd)
        members: dict[str, Any] = {}
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
            except OSError as exc:
                raise AdapterError(f"cannot run {argv[0]}: {exc}", service="slurm") from exc
            timed_out = threading.Event()

            def _expire() -> None:
                timed_out.set()
                proc.kill()

            watchdog = threading.Timer(self.timeout, _expire)
            watchdog.start()
            try:
                held = yield from self._parse_stream(proc.stdout, members, self.dialect())
                returncode = proc.wait()
            finally:
                watchdog.cancel()
                if proc.poll() is None:  # the caller stopped early
                    proc.kill()
                    proc.wait()
            if timed_out.is_set():
                raise TransientAdapterError(f"sacct timed out after {self.timeout:g} s",
                                            service="slurm")
            err.seek(0)
            self._check("sacct", returncode, err.read().decode(errors="replace"))
        if held is not None:
            yield held
            return
        if errors := values.failures(members.get("errors")):  # sacct can exit 0 with them
            text = json.dumps(errors)[:2000]
            raise TransientAdapterError(f"sacct reported errors: {text[:200]}",
                                        service="slurm", detail=text)
        if "jobs" not in members:
            raise AdapterError("sacct --json printed no job list", service="slurm")

    @staticmethod
    def _parse_stream(
        stdout: IO[bytes] | None, members: dict[str, Any], parser: DataParser,
    ) -> Generator[st.SlurmJob | st.RecordError, None, st.RecordError | None]:
        held: st.RecordError | None = None
        if stdout is None:
            raise AdapterError("sacct: no output pipe", service="slurm")
        for item in parse.iter_sacct_json(stdout, members, parser=parser):
            if isinstance(item, st.RecordError) and item.job_id is None:
                held = item  # broken JSON: the stream ends here
                continue
            yield item
        return held

    # --- the SlurmClient interface ---------------------------------------------------

    def change_marker(self) -> str:
        try:
            return cparse.sdiag_marker(self._run(["sdiag"]))
        except ValueError as exc:
            raise AdapterError(f"sdiag: {exc}", service="slurm") from exc

    def jobs_since(self, since: datetime | None) -> Iterator[st.SlurmJob | st.RecordError]:
        # A relative start (now-N seconds) is read on sacct's own clock and in no time zone.
        if since is None:
            start = "2000-01-01T00:00:00"  # slurmrestd cannot parse 1970
        else:
            seconds = max(0, int((datetime.now(tz=UTC) - since).total_seconds()))
            start = f"now-{seconds}seconds"
        return self._stream_sacct(["-S", start, "-E", "now", "-s", WINDOW_STATES])

    def jobs_by_id(self, job_ids: Iterable[int]) -> Iterator[st.SlurmJob | st.RecordError]:
        for chunk in _chunks(job_ids):
            yield from self._stream_sacct(["-j", ",".join(map(str, chunk))])

    def exit_codes(self, job_ids: Iterable[int]) -> dict[int, st.ExitStatus]:
        out: dict[int, st.ExitStatus] = {}
        for chunk in _chunks(job_ids):
            cluster = ["-M", self.cluster] if self.cluster else []
            text = self._run(["sacct", "-a", "-n", "-P", "-X", *cluster, "-o",
                              "JobIDRaw,ExitCode", "-j", ",".join(map(str, chunk))])
            out.update(parse.parse_exit_codes(text))
        return out

    def queue(self) -> list[st.QueueEntry]:
        entries = parse.parse_squeue_json(self._json(["squeue", self._json_flag()]))
        return [e for e in entries if e.state in st.ACTIVE_STATES]

    def gpu_bindings(self) -> list[st.GpuBinding]:
        return parse_gpus.parse_scontrol_bindings(self._run(["scontrol", "-d", "show", "job"]))

    def nodes(self) -> list[st.SlurmNode]:
        if self.dialect().number <= (0, 0, 38):
            return cparse.parse_sinfo_json(self._json(["sinfo", "--json"]))
        return cparse.parse_sinfo_json(self._json(["scontrol", self._json_flag(), "show",
                                                   "nodes"]))

    def partitions(self) -> list[st.SlurmPartition]:
        return cparse.parse_scontrol_partitions(self._run(["scontrol", "show", "partition", "-o"]))

    def reservations(self) -> list[st.Reservation]:
        """``scontrol --json show reservation`` from 23.02; 22.05's scontrol has no
        ``--json``: its text, in UTC."""
        if self.dialect().number <= (0, 0, 38):
            text = self._run(["scontrol", "show", "reservation", "-o"], env=UTC_ENV)
            try:
                return parse_live.parse_reservations_text(text)
            except ValueError as exc:
                raise AdapterError(f"scontrol show reservation: {exc}", service="slurm") from exc
        data = self._json(["scontrol", self._json_flag(), "show", "reservation"])
        self._raise_failures("scontrol show reservation", data)
        return parse_live.parse_reservations_json(data)

    def qos(self) -> list[st.Qos]:
        """``sacctmgr --json show qos`` from 23.02; 22.05's sacctmgr has no ``--json``:
        its ``-P`` text with the columns the view reads."""
        if self.dialect().number <= (0, 0, 38):
            return parse_live.parse_qos_text(self._run(
                ["sacctmgr", "-P", "show", "qos", f"format={parse_live.QOS_FORMAT}"]))
        data = self._json(["sacctmgr", self._json_flag(), "show", "qos"])
        self._raise_failures("sacctmgr show qos", data)
        return parse_live.parse_qos_json(data)

    @staticmethod
    def _raise_failures(what: str, data: dict[str, Any]) -> None:
        """Slurm's JSON commands can exit 0 with ``errors``: a failed read, never none."""
        if errors := values.failures(data.get("errors")):
            text = json.dumps(errors)[:2000]
            raise TransientAdapterError(f"{what} reported errors: {text[:200]}",
                                        service="slurm", detail=text)

    def associations(self) -> list[st.Association]:
        where = ["where", f"cluster={self.cluster}"] if self.cluster else []
        text = self._run(["sacctmgr", "-P", "show", "assoc", *where,
                          f"format={cparse.ASSOC_FORMAT}"])
        return cparse.parse_sacctmgr_assoc(text)

    def shares(self) -> list[st.ShareRow]:
        cluster = ["-M", self.cluster] if self.cluster else []
        return cparse.parse_sshare(self._run(["sshare", "-a", "-P", *cluster,
                                             "-o", cparse.SSHARE_FORMAT]))

    def job_scripts(self, job_ids: Iterable[int]) -> dict[str, str]:
        out: dict[str, str] = {}
        for chunk in _chunks(job_ids, 50):  # scripts can be long: smaller chunks
            cluster = ["-M", self.cluster] if self.cluster else []
            text = self._run(["sacct", "--batch-script", *cluster, "-j",
                              ",".join(map(str, chunk))])
            out.update(parse.parse_batch_scripts(text))
        return out

    def job_environments(self, job_ids: Iterable[int]) -> dict[str, str]:
        """``sacct --env-vars -j ...`` (Slurm 21.08 and later, 22.05 included; an older sacct
        refuses the option and that is an ``AdapterError`` like any failed command)."""
        out: dict[str, str] = {}
        for chunk in _chunks(job_ids, 50):
            cluster = ["-M", self.cluster] if self.cluster else []
            text = self._run(["sacct", "--env-vars", *cluster, "-j",
                              ",".join(map(str, chunk))])
            out.update(parse.parse_job_environments(text))
        return out

    # --- chargeback and quotas -------------------------------------------------------

    def usage_report(self, start: datetime, end: datetime, tres: str) -> list[st.UsageRow]:
        cluster = [f"cluster={self.cluster}"] if self.cluster else []
        text = self._run(["sreport", "-P", "-T", _checked_tres(tres), "-t", "minutes",
                          "cluster", "AccountUtilizationByUser", *cluster,
                          f"start={_utc_text(start)}", f"end={_utc_text(end)}"], env=UTC_ENV)
        return cparse.parse_sreport_usage(text)

    def job_allocations(self, start: datetime, end: datetime) -> list[st.JobAllocation]:
        cluster = ["-M", self.cluster] if self.cluster else []
        text = self._run(["sacct", "-a", "-X", "-P", "-n", "-T", *cluster,
                          "-S", _utc_text(start), "-E", _utc_text(end),
                          "-o", cparse.ALLOC_FORMAT], env=UTC_ENV)
        try:
            return cparse.parse_sacct_allocations(text)
        except ValueError as exc:
            raise AdapterError(f"sacct: {exc}", service="slurm") from exc

    def account_limits(self, account: str) -> st.Association | None:
        where = ["where", f"account={_checked_account(account)}",
                 *([f"cluster={self.cluster}"] if self.cluster else [])]
        text = self._run(["sacctmgr", "-P", "show", "assoc", *where,
                          f"format={cparse.ASSOC_FORMAT}"])
        rows = [a for a in cparse.parse_sacctmgr_assoc(text)
                if a.account == account and not a.user]
        return rows[0] if rows else None

    def limit_command(self, account: str, tres: str, minutes: int | None) -> list[str]:
        """The exact ``sacctmgr -i modify account ...`` argv (what the preview shows)."""
        return limit_argv(self.cluster, account, tres, minutes)

    def cannot(self, action: st.Action) -> str:
        return ""  # sacctmgr, sreport and sacct do all of it

    def accounted_until(self) -> datetime | None:
        return None

    def set_account_limit(self, account: str, tres: str, minutes: int | None,
                          dry_run: bool = False) -> st.LimitChange:
        cmd = self.limit_command(account, tres, minutes)
        shown = shlex.join(cmd)
        # without -i sacctmgr asks whether to commit: answering "n" discards the change
        rehearse = [c for c in cmd if c != "-i"]
        out = self._run(rehearse, stdin="n\n") if dry_run else self._run(cmd)
        if not cparse.sacctmgr_changed(out):
            raise AdapterError(f"Slurm changed nothing: {out.strip()[:300] or 'no output'}",
                               service="slurm", detail=out)
        return st.LimitChange(command=shown, output=out.strip(), applied=not dry_run)

    def cancel_job(self, job_id: int) -> None:
        # scancel of a job that already ended says so on stderr and exits 0 (or 1 with
        # "Job has already finished"/"Invalid job id" after MinJobAge): both are done.
        try:
            self._run(["scancel", *(["-M", self.cluster] if self.cluster else []),
                       str(int(job_id))])
        except AdapterError as exc:
            if "already" in exc.detail or "Invalid job id" in exc.detail:
                return
            raise


def dialect_of(version_text: str) -> DataParser:
    """The data parser to ask a Slurm for, from what ``sacct --version`` printed
    (``slurm-wlm 24.11.5``, ``slurm 25.11.0``): its release's own, or for a release newer
    than Beacon knows, the newest one Beacon reads."""
    match = _RELEASE.search(version_text)
    if not match:
        raise AdapterError(f"sacct --version printed no release: {version_text.strip()[:100]!r}",
                           service="slurm")
    series = f"{int(match[1]):02d}.{int(match[2]):02d}"
    if series in versions.RELEASE_DEFAULT:
        return versions.get(versions.RELEASE_DEFAULT[series])
    known = sorted(versions.RELEASE_DEFAULT)
    if series < known[0]:
        raise AdapterError(f"Slurm {match[0]} is older than Beacon reads ({known[0]}+)",
                           service="slurm")
    return versions.get(versions.RELEASE_DEFAULT[known[-1]])


def limit_argv(cluster: str, account: str, tres: str, minutes: int | None) -> list[str]:
    """``sacctmgr -i modify account where name=A [cluster=C] set GrpTRESMins=T=N`` as argv
    (N = -1 removes the limit); names are checked, a negative limit refused."""
    if minutes is not None and minutes < 0:
        raise AdapterError(f"a limit cannot be negative ({minutes})", service="slurm")
    where = ["where", f"name={_checked_account(account)}",
             *([f"cluster={cluster}"] if cluster else [])]
    value = -1 if minutes is None else minutes  # -1 removes the limit
    return ["sacctmgr", "-i", "modify", "account", *where, "set",
            f"GrpTRESMins={_checked_tres(tres)}={value}"]


def _utc_text(when: datetime) -> str:
    return when.astimezone(UTC).strftime(cparse._TEXT_TIME)


def _checked_account(name: str) -> str:
    if not _ACCOUNT_NAME.match(name):
        raise AdapterError(f"{name!r} is not a Slurm account name", service="slurm")
    return name


def _checked_tres(name: str) -> str:
    if not _TRES_NAME.match(name):
        raise AdapterError(f"{name!r} is not a TRES name (e.g. gres/gpu)", service="slurm")
    return name
