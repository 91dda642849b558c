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
| ``scripts/<id>.sh`` | ``sacct -j <id> --batch-script`` as printed, or the bare script (optional) |
| ``scripts/<id>.env`` | ``sacct -j <id> --env-vars`` as printed, or the body only (optional) |
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from apps.clusters.adapters.slurm import parse
from apps.clusters.adapters.slurm import parse_cluster as cparse
from apps.clusters.adapters.slurm import types as st
from apps.core.errors import AdapterError

SERVICE = "slurm"


@functools.lru_cache(maxsize=4)
def _display_ids_of(folder: str, versions: tuple[tuple[str, int, int], ...]) -> dict[int, str]:
    out: dict[int, str] = {}
    for name, _, _ in versions:
        with (Path(folder) / name).open("rb") as stream:
            for item in parse.iter_sacct_json(stream):
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


class SlurmFiles:
    """Reads a folder written by ``sacct/squeue/sinfo/scontrol`` (option ``dir``)."""

    can_cancel = False  # saved output: there is no cluster to act on

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlurmFiles:
        folder = options.get("dir")
        if not folder:
            raise AdapterError('the files backend needs {"dir": "/path/to/dumps"}',
                               service=SERVICE)
        return cls(Path(str(folder)))

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
        try:
            with self._path(name).open("rb") as stream:
                yield from parse.iter_sacct_json(stream)
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
        return parse.bindings_from_squeue(self._json("squeue.json"))

    def nodes(self) -> list[st.SlurmNode]:
        return cparse.parse_sinfo_json(self._json("sinfo.json"))

    def partitions(self) -> list[st.SlurmPartition]:
        return cparse.parse_scontrol_partitions(self._text("scontrol_partitions.txt"))

    def associations(self) -> list[st.Association]:
        if not (self.folder / OPTIONAL[0]).is_file():
            return []
        return cparse.parse_sacctmgr_assoc(self._text(OPTIONAL[0]))

    def shares(self) -> list[st.ShareRow]:
        if not (self.folder / OPTIONAL[1]).is_file():
            return []
        return cparse.parse_sshare(self._text(OPTIONAL[1]))

    def job_scripts(self, job_ids: Iterable[int]) -> dict[str, str]:
        """Scripts saved as ``scripts/<raw job id>.sh``, keyed by display id like sacct's."""
        return self._saved(job_ids, ".sh")

    def job_environments(self, job_ids: Iterable[int]) -> dict[str, str]:
        """Environments saved as ``scripts/<raw job id>.env``, keyed by display id."""
        return self._saved(job_ids, ".env")

    def cancel_job(self, job_id: int) -> None:
        raise AdapterError("the files backend reads saved output: it cannot cancel jobs",
                           service="slurm")

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
