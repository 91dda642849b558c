"""Job scripts and environments saved to a folder, for ``detect --scripts DIR``.

Sites save them the way Slurm prints them, so a folder may hold:

- ``<job id>.sh`` / ``<job id>.env``: one job's script or environment, either bare or
  exactly as ``sacct --batch-script -j ID > ID.sh`` (``sacct --env-vars``) prints it: the
  "Batch Script for ID" ("Environment used for ID (must be batch to display)") line and
  80 dashes above it. The header is removed, so line numbers are the script's own.
  ``<display id>.sh`` (``4_0.sh``, ``19+1.sh``) works too.
- any other file that starts with such a header: ``sacct --batch-script -j 1,2,3 >
  batch.txt``, several jobs' sections, each keyed by its display id.

A section of ``NONE`` (no stored script) counts as no script. The parser is the ``cli``
backend's (``slurm.parse``: ``parse_batch_scripts``, ``saved_section``, which the ``files``
backend uses too), so all read the same bytes the same way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from apps.analysis.secret_shapes import MAX_TEXT
from apps.clusters.adapters.slurm.parse import (
    parse_batch_scripts,
    parse_job_environments,
    saved_section,
)
from apps.core.errors import AdapterError

SOURCES = ((".sh", "batch script"), (".env", "environment"))
_PER_JOB = re.compile(r"^[0-9][0-9_+]{0,40}\.(?:sh|env)$")
_HEADERS = (b"Batch Script for ", b"Environment used for ")
MAX_FILE = 64 * 1024 * 1024  # a multi-job sacct dump; larger is refused, not half-read


@dataclass
class SavedScripts:
    """The texts of one folder: per-job files read on demand, multi-job files up front."""

    folder: Path
    scripts: dict[str, str] = field(default_factory=dict)  # display id -> from multi-job files
    envs: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def texts(self, job_id: int, display_id: str) -> list[tuple[str, str]]:
        """``[(source, text)]`` of one job: its own files first, then multi-job files."""
        found = []
        for suffix, source in SOURCES:
            text = self._own_file(job_id, display_id, suffix, source)
            if text is None:
                pool = self.scripts if suffix == ".sh" else self.envs
                text = pool.get(display_id) or pool.get(str(job_id))
            if text:
                found.append((source, text[:MAX_TEXT]))
        return found

    def _own_file(self, job_id: int, display_id: str, suffix: str, source: str) -> str | None:
        for name in dict.fromkeys((str(job_id), display_id)):
            try:
                with (self.folder / f"{name}{suffix}").open(errors="replace") as f:
                    text = f.read(MAX_TEXT + 4096)
            except OSError:
                continue
            mine, others = saved_section(text, (display_id, str(job_id)), suffix == ".env")
            if others:
                self.problem(f"{name}{suffix} also holds the {source} of job(s) "
                             f"{', '.join(others[:5])}: read only job {display_id}'s")
            return mine
        return None

    def problem(self, message: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(message)


def read_folder(folder: Path) -> SavedScripts:
    """Index ``folder``: multi-job sacct files are parsed now (once per run), per-job files
    are opened when a job asks for them. A folder that cannot be listed is an
    ``AdapterError`` (a source asked for that failed: no job is marked as scanned)."""
    saved = SavedScripts(folder)
    try:
        entries = list(os.scandir(folder))
    except OSError as exc:
        raise AdapterError(f"scripts folder {folder}: cannot list ({exc.strerror or exc})",
                           service="scripts") from exc
    for entry in sorted(entries, key=lambda e: e.name):
        if _PER_JOB.match(entry.name) or not entry.is_file():
            continue
        _read_multi(saved, Path(entry.path))
    return saved


def _read_multi(saved: SavedScripts, path: Path) -> None:
    try:
        with path.open("rb") as f:
            head = f.read(64)
            if not head.startswith(_HEADERS):
                return
            if path.stat().st_size > MAX_FILE:
                saved.problem(f"{path.name}: over {MAX_FILE // 2**20} MiB, not read")
                return
            text = (head + f.read()).decode("utf-8", "replace")
    except OSError as exc:
        saved.problem(f"{path.name}: cannot read ({exc})")
        return
    saved.scripts.update(parse_batch_scripts(text))
    saved.envs.update(parse_job_environments(text))
