"""Slurm as a folder of saved command outputs: the ``files`` backend.

For air-gapped sites that copy dumps across, for backfills, and for the demo (the simulator
writes this folder). Each file holds exactly what the named command prints, so the same
parsers as the ``cli`` backend read it, and the same sync stores it:

| file | command |
|---|---|
| ``sacct.json`` | ``sacct -a --json -S <start> -E now`` |
| ``sacct_by_id.json`` | ``sacct -a --json -j <ids>`` of queued jobs no window lists (optional) |
| ``sacct_exitcodes.txt`` | ``sacct -a -P -o JobIDRaw,ExitCode`` (22.05 JSON exit codes are wrong) |
| ``squeue.json`` | ``squeue --json`` |
| ``sinfo.json`` | ``sinfo --json`` |
| ``scontrol_partitions.txt`` | ``scontrol show partition -o`` |
| ``sacctmgr_assoc.txt`` | ``sacctmgr -P show assoc format=...`` (optional) |
| ``sshare.txt`` | ``sshare -a -P -o ...`` (optional) |
| ``scontrol_reservations.txt`` | ``scontrol show reservation -o`` (TZ=UTC, optional) |
| ``sacctmgr_qos.txt`` | ``sacctmgr -P show qos format=<parse_live.QOS_FORMAT>`` (optional) |
| ``scripts/<id>.sh`` | ``sacct -j <id> --batch-script`` (optional) |
| ``scripts/<id>.env`` | ``sacct -j <id> --env-vars``, the body only (optional) |
| ``sreport_<start>_<end>.txt`` | ``sreport -P -T gres/gpu -t minutes cluster`` |
| | ``AccountUtilizationByUser start=<start> end=<end>`` (TZ=UTC, optional) |
| ``sacct_alloc_<start>_<end>.txt`` | ``sacct -a -X -P -n -T -S <start> -E <end> -o`` |
| | ``JobIDRaw,Account,User,AllocTRES,Start,End,ElapsedRaw,State`` (optional) |

Window times in file names are UTC, ``YYYYmmddTHHMMSS``. A reconciliation asks for the
window of the latest saved report (``accounted_until``); any other window is an
``AdapterError`` naming the windows that were saved.

**Quota writes are simulated.** The files backend never reaches a Slurm. With the option
``"simulated": true`` (the demo's cluster) a limit change is kept in a simulated accounting
state, ``simulated/accounting.json`` beside the saved files: the saved ``sacctmgr_assoc.txt``
with the changes on top, read back by ``associations`` and ``account_limits`` exactly as
``sacctmgr show assoc`` would be after a real write. Every line of its output says it is
simulated. The state belongs to one version of the saved file: a new dump (or a new demo)
starts again from the saved limits. Without the option, writes are refused with the reason
(``cannot``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shlex
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apps.clusters.adapters.slurm import dumps, parse, parse_gpus, parse_live
from apps.clusters.adapters.slurm import parse_cluster as cparse
from apps.clusters.adapters.slurm import types as st
from apps.clusters.adapters.slurm.cli import limit_argv
from apps.core.errors import AdapterError

SERVICE = "slurm"


@functools.lru_cache(maxsize=4)
def _display_ids_of(folder: str, versions: tuple[tuple[str, int, int], ...]) -> dict[int, str]:
    out: dict[int, str] = {}
    for name, _, _ in versions:
        with (Path(folder) / name).open("rb") as stream:
            for item in parse.iter_sacct_json(stream, parser=dumps.inspect(stream).parser):
                if isinstance(item, st.SlurmJob):
                    out.setdefault(item.job_id, item.display_id)
    return out


def _display_ids(files: SlurmFiles, folder: str,
                 versions: tuple[tuple[str, int, int], ...]) -> dict[int, str]:
    try:
        return _display_ids_of(folder, versions)
    except OSError as exc:
        raise AdapterError(f"{files.folder}: {exc}", service=SERVICE) from exc
OPTIONAL = ("sacctmgr_assoc.txt", "sshare.txt", "sacct_by_id.json")
STATE = Path("simulated") / "accounting.json"
WINDOW_TIME = "%Y%m%dT%H%M%S"
_WINDOW_FILE = re.compile(r"^(sreport|sacct_alloc)_(\d{8}T\d{6})_(\d{8}T\d{6})\.txt$")
SIMULATED = "[simulated] "  # every line a simulated write prints starts with it


def window_name(kind: str, start: datetime, end: datetime) -> str:
    """``sreport_20261201T000000_20261203T130000.txt``: the saved report of ``[start, end)``."""
    return (f"{kind}_{start.astimezone(UTC).strftime(WINDOW_TIME)}_"
            f"{end.astimezone(UTC).strftime(WINDOW_TIME)}.txt")


def _window_of(name: str) -> tuple[str, datetime, datetime] | None:
    match = _WINDOW_FILE.match(name)
    if not match:
        return None
    kind, lo, hi = match.groups()
    return (kind, datetime.strptime(lo, WINDOW_TIME).replace(tzinfo=UTC),
            datetime.strptime(hi, WINDOW_TIME).replace(tzinfo=UTC))


class SlurmFiles:
    """Reads a folder written by ``sacct/squeue/sinfo/scontrol`` (option ``dir``)."""

    def __init__(self, folder: Path, cluster: str = "", simulated: bool = False) -> None:
        self.folder = folder
        self.cluster = cluster
        self.simulated = simulated

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlurmFiles:
        folder = options.get("dir")
        if not folder:
            raise AdapterError('the files backend needs {"dir": "/path/to/dumps"}',
                               service=SERVICE)
        return cls(Path(str(folder)), cluster=str(options.get("cluster") or ""),
                   simulated=options.get("simulated") is True)

    # --- reading -------------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        path = self.folder / name
        if not path.is_file():
            raise AdapterError(f"{path}: missing (the files backend reads saved Slurm output)",
                               service=SERVICE)
        return path

    def _text(self, name: str) -> str:
        try:
            return self._path(name).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise AdapterError(f"{self.folder / name}: {exc}", service=SERVICE) from exc

    def _json(self, name: str) -> dict[str, Any]:
        try:
            data = json.loads(self._text(name))
        except json.JSONDecodeError as exc:
            raise AdapterError(f"{self.folder / name}: not JSON ({exc})", service=SERVICE) from exc
        if not isinstance(data, dict):
            raise AdapterError(f"{self.folder / name}: expected a JSON object", service=SERVICE)
        return data

    def _stream(self, name: str = "sacct.json") -> Iterator[st.SlurmJob | st.RecordError]:
        """A saved dump, checked as ``import_sacct`` checks one (``dumps.inspect``: Slurm's
        errors, no job list or an unknown version refuse it) and read in its version."""
        try:
            with self._path(name).open("rb") as stream:
                dump = dumps.inspect(stream)
                yield from parse.iter_sacct_json(stream, parser=dump.parser)
        except OSError as exc:
            raise AdapterError(f"{self.folder / name}: {exc}", service=SERVICE) from exc

    # --- the SlurmClient interface ---------------------------------------------------------

    def change_marker(self) -> str:
        """Changes when any file is replaced: name, size and modification time of each."""
        digest = hashlib.sha256()
        for path in sorted(self.folder.glob("*")):
            if path.is_file():
                stat = path.stat()
                digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
        return digest.hexdigest()[:16]

    def jobs_since(self, since: datetime | None) -> Iterator[st.SlurmJob | st.RecordError]:
        for item in self._stream():
            if since is None or isinstance(item, st.RecordError) or item.last_change >= since \
                    or not item.is_finished:
                yield item

    def jobs_by_id(self, job_ids: Iterable[int]) -> Iterator[st.SlurmJob | st.RecordError]:
        """Records of these ids (all tasks of an array id): first from ``sacct_by_id.json``,
        what ``sacct -j`` saw of queued jobs no window lists (held, waiting on a
        dependency), then from the window for the ids it did not have."""
        wanted, found, whole = set(job_ids), set(), set()
        if (self.folder / "sacct_by_id.json").is_file():
            for item in self._stream("sacct_by_id.json"):
                if isinstance(item, st.RecordError) or item.job_id in wanted \
                        or item.array_job_id in wanted:
                    found.add(getattr(item, "job_id", None))
                    if isinstance(item, st.SlurmJob) and not item.array_job_id:
                        whole.add(item.job_id)  # not an array: nothing more to find
                    yield item
        if wanted <= whole:
            return
        for item in self._stream():
            if isinstance(item, st.RecordError) or (item.job_id not in found and (
                    item.job_id in wanted or item.array_job_id in wanted)):
                yield item

    def exit_codes(self, job_ids: Iterable[int]) -> dict[int, st.ExitStatus]:
        if not (self.folder / "sacct_exitcodes.txt").is_file():
            return {}
        wanted = set(job_ids)
        codes = parse.parse_exit_codes(self._text("sacct_exitcodes.txt"))
        return {k: v for k, v in codes.items() if k in wanted}

    def queue(self) -> list[st.QueueEntry]:
        entries = parse.parse_squeue_json(self._json("squeue.json"))
        return [e for e in entries if e.state in st.ACTIVE_STATES]

    def gpu_bindings(self) -> list[st.GpuBinding]:
        return parse_gpus.bindings_from_squeue(self._json("squeue.json"))

    def nodes(self) -> list[st.SlurmNode]:
        return cparse.parse_sinfo_json(self._json("sinfo.json"))

    def partitions(self) -> list[st.SlurmPartition]:
        return cparse.parse_scontrol_partitions(self._text("scontrol_partitions.txt"))

    def associations(self) -> list[st.Association]:
        if not (self.folder / OPTIONAL[0]).is_file():
            return []
        rows = cparse.parse_sacctmgr_assoc(self._text(OPTIONAL[0]))
        changed = self._state().get("limits", {})
        return [_with_limits(row, changed[row.account]) if not row.user
                and row.account in changed else row for row in rows]

    def shares(self) -> list[st.ShareRow]:
        if not (self.folder / OPTIONAL[1]).is_file():
            return []
        return cparse.parse_sshare(self._text(OPTIONAL[1]))

    def reservations(self) -> list[st.Reservation]:
        """``scontrol_reservations.txt``; a folder without it is an ``AdapterError`` (not
        "no reservations": nobody said there were none)."""
        try:
            return parse_live.parse_reservations_text(self._text("scontrol_reservations.txt"))
        except ValueError as exc:
            raise AdapterError(f"{self.folder}/scontrol_reservations.txt: {exc}",
                               service=SERVICE) from exc

    def qos(self) -> list[st.Qos]:
        """``sacctmgr_qos.txt``; missing is an ``AdapterError``, as for reservations."""
        return parse_live.parse_qos_text(self._text("sacctmgr_qos.txt"))

    def job_scripts(self, job_ids: Iterable[int]) -> dict[str, str]:
        """Scripts saved as ``scripts/<raw job id>.sh``, keyed by display id like sacct's."""
        return self._saved(job_ids, ".sh")

    def job_environments(self, job_ids: Iterable[int]) -> dict[str, str]:
        """Environments saved as ``scripts/<raw job id>.env``, keyed by display id."""
        return self._saved(job_ids, ".env")

    def cancel_job(self, job_id: int) -> None:
        raise AdapterError(self.cannot(st.Action.CANCEL), service="slurm")

    def _display_ids(self) -> dict[int, str]:
        """Raw id -> display id (``4_5``) of every record, read once per version of the
        files (labelling and detection ask in batches; re-reading sacct.json each time
        made them quadratic in the number of jobs)."""
        versions = tuple((name, p.stat().st_mtime_ns, p.stat().st_size) for name in
                         ("sacct.json", "sacct_by_id.json")
                         if (p := self.folder / name).is_file())
        return _display_ids(self, str(self.folder.resolve()), versions)

    def _saved(self, job_ids: Iterable[int], suffix: str) -> dict[str, str]:
        scripts = self.folder / "scripts"
        wanted = {int(j) for j in job_ids}
        if not wanted or not scripts.is_dir():
            return {}
        display = self._display_ids()
        out: dict[str, str] = {}
        for job_id in sorted(wanted):
            path = scripts / f"{job_id}{suffix}"
            if path.is_file():
                shown = display.get(job_id, str(job_id))
                text, _ = parse.saved_section(path.read_text(encoding="utf-8", errors="replace"),
                                              (shown, str(job_id)), suffix == ".env")
                if text:
                    out[shown] = text
        return out

    # --- quotas: the saved limits, and simulated writes on top of them --------------------

    def cannot(self, action: st.Action) -> str:
        if action == st.Action.CANCEL:
            return ("the files backend reads saved Slurm output: it cannot cancel jobs "
                    "(use the cli or rest backend)")
        if action == st.Action.RECONCILE:
            if not self._windows("sreport"):
                return (f"no saved sreport output in {self.folder.name}/: the files backend "
                        "reconciles only windows whose report was saved")
            return ""
        if not (self.folder / OPTIONAL[0]).is_file():
            return (f"no saved sacctmgr_assoc.txt in {self.folder.name}/: the files backend "
                    "reads Slurm's limits from saved output")
        if action == st.Action.QUOTA_WRITE and not self.simulated:
            return ("the files backend reads saved Slurm output and cannot write to Slurm: "
                    "set quotas with the cli backend")
        return ""

    def account_limits(self, account: str) -> st.Association | None:
        if not (self.folder / OPTIONAL[0]).is_file():
            raise AdapterError(self.cannot(st.Action.QUOTA_PREVIEW), service=SERVICE)
        rows = [a for a in self.associations() if a.account == account and not a.user]
        return rows[0] if rows else None

    def set_account_limit(self, account: str, tres: str, minutes: int | None,
                          dry_run: bool = False) -> st.LimitChange:
        """What ``sacctmgr`` would do, printed as it prints it, each line marked simulated:
        a dry run changes nothing; a write (``simulated`` folders only) updates the
        simulated accounting state that ``associations`` reads back."""
        command = shlex.join(limit_argv(self.cluster, account, tres, minutes))
        why = self.cannot(st.Action.QUOTA_PREVIEW if dry_run else st.Action.QUOTA_WRITE)
        if why:
            raise AdapterError(why, service=SERVICE)
        row = self.account_limits(account)
        if row is None:
            raise AdapterError(f"Slurm changed nothing: {SIMULATED}Nothing modified "
                               f"(no account {account} in the saved associations)",
                               service=SERVICE, detail=f"{SIMULATED} Nothing modified")
        said = [" Modified account associations...",
                f"  C = {row.cluster or self.cluster:<10} A = {account} of {row.parent or 'root'}"]
        if dry_run:
            said += ["Would you like to commit changes? (You have 30 seconds to decide)",
                     "(N/y): n", " Changes Discarded"]
        else:
            self._write_limit(account, tres, minutes)
        output = "\n".join(SIMULATED + line for line in said)
        return st.LimitChange(command=command, output=output, applied=not dry_run)

    def _state(self) -> dict[str, Any]:
        """The simulated accounting state, if it was made from the saved file as it is now."""
        path = self.folder / STATE
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        fresh = isinstance(state, dict) and state.get("base") == self._base()
        return state if fresh else {}

    def _base(self) -> str:
        stat = (self.folder / OPTIONAL[0]).stat()
        return f"{stat.st_size}:{stat.st_mtime_ns}"

    def _write_limit(self, account: str, tres: str, minutes: int | None) -> None:
        state = self._state() or {"base": self._base(), "limits": {}, "log": []}
        if account in state["limits"]:
            limits = dict(state["limits"][account])
        else:
            row = self.account_limits(account)
            limits = dict(row.grp_tres_mins) if row else {}
        if minutes is None:
            limits.pop(tres, None)
        else:
            limits[tres] = minutes
        state["limits"][account] = limits
        state["log"] = [*state.get("log", [])[-199:], {
            "at": datetime.now(UTC).isoformat(timespec="seconds"), "account": account,
            "tres": tres, "minutes": minutes}]
        _write_atomically(self.folder / STATE, json.dumps(state, indent=1, sort_keys=True))

    # --- reconciliation: saved sreport and sacct -T output ---------------------------------

    def _windows(self, kind: str) -> dict[tuple[datetime, datetime], Path]:
        out = {}
        for path in self.folder.glob(f"{kind}_*.txt"):
            found = _window_of(path.name)
            if found and found[0] == kind:
                out[(found[1], found[2])] = path
        return out

    def _saved_window(self, kind: str, start: datetime, end: datetime) -> str:
        windows = self._windows(kind)
        path = windows.get((start.astimezone(UTC), end.astimezone(UTC)))
        if path is None:
            saved = ", ".join(f"{lo:%Y-%m-%d %H:%M}-{hi:%Y-%m-%d %H:%M}"
                              for lo, hi in sorted(windows)) or "none"
            raise AdapterError(f"no saved {kind} output for {start:%Y-%m-%d %H:%M}-"
                               f"{end:%Y-%m-%d %H:%M} UTC in {self.folder.name}/ (saved "
                               f"windows: {saved})", service=SERVICE)
        return self._text(path.name)

    def usage_report(self, start: datetime, end: datetime, tres: str) -> list[st.UsageRow]:
        rows = cparse.parse_sreport_usage(self._saved_window("sreport", start, end))
        return [r for r in rows if r.tres == tres]

    def job_allocations(self, start: datetime, end: datetime) -> list[st.JobAllocation]:
        try:
            return cparse.parse_sacct_allocations(self._saved_window("sacct_alloc", start, end))
        except ValueError as exc:
            raise AdapterError(f"sacct: {exc}", service=SERVICE) from exc

    def accounted_until(self) -> datetime | None:
        ends = [hi for _, hi in self._windows("sreport")]
        return max(ends) if ends else None


def _with_limits(row: st.Association, limits: Mapping[str, int]) -> st.Association:
    return dataclasses.replace(row, grp_tres_mins=dict(limits))


def _write_atomically(path: Path, text: str) -> None:
    """Readers see the old state or the new one, never half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".state-")
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise AdapterError(f"the simulated accounting state cannot be written: {exc}",
                           service=SERVICE) from exc
