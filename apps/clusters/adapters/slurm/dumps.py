"""A saved ``sacct --json`` dump, checked before a record of it is imported.

A dump is refused, with the reason, when Slurm said it failed (its ``errors`` list is not
empty), when it has no ``jobs`` list, or when its data parser is unknown (``versions``):
``import_sacct`` then writes nothing and exits non-zero. sacct prints ``meta`` and
``errors`` before the jobs; slurmrestd (``/slurmdb/<v>/jobs`` saved with curl) after them,
so for those the end of the file is read too (a seek, not a second pass). A stream that
cannot seek (``import_sacct -``) is spooled to a temporary file first.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any

from apps.clusters.adapters.slurm import values, versions
from apps.clusters.adapters.slurm.versions import DataParser, UnknownDataParser
from apps.core.errors import AdapterError
from apps.jobs.adapters import jsonstream

TAIL_BYTES = 4 << 20  # where slurmrestd's meta and errors are looked for, after the jobs
_TOP_KEY = re.compile(rb'"(meta|errors|warnings)"\s*:\s*')


class DumpRefused(AdapterError):
    """A dump that must not be imported, and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, service="slurm")


@dataclass(frozen=True)
class Dump:
    """What a dump says about itself."""

    parser: DataParser
    release: str = ""
    warnings: list[Any] = field(default_factory=list)


def seekable(stream: IO[bytes]) -> IO[bytes]:
    """``stream`` itself when it can seek, else a temporary copy of it (read to the end)."""
    try:
        if stream.seekable():
            return stream
    except (AttributeError, OSError, ValueError):
        pass
    copy = tempfile.TemporaryFile(prefix="beacon-sacct-")  # noqa: SIM115 - handed back open
    shutil.copyfileobj(stream, copy, 1 << 20)
    copy.seek(0)
    return copy


def inspect(stream: IO[bytes], data_parser: str | None = None) -> Dump:
    """Check a seekable dump and leave it at its start. ``data_parser`` ("v0.0.42") is the
    version to read a dump as when its ``meta`` names none; when both are given they must
    agree. Raises ``DumpRefused`` or ``UnknownDataParser`` (both ``AdapterError``)."""
    start = stream.tell()
    members = _head(stream)
    if "meta" not in members or "errors" not in members:
        for key, value in _tail(stream).items():
            members.setdefault(key, value)
    stream.seek(start)
    errors = values.failures(members.get("errors"))
    if errors:
        raise DumpRefused(f"Slurm reported errors in this dump, so it may be incomplete: "
                          f"{_short(errors)}. Nothing was imported; dump again once "
                          "sacct (or slurmdbd) answers without errors")
    if "jobs" not in members:
        raise DumpRefused("this JSON has no 'jobs' list: it is not sacct --json output "
                          f"(its top-level members: {', '.join(sorted(members)) or 'none'})")
    given = versions.get(data_parser) if data_parser else None
    if "meta" not in members and given is None:
        raise UnknownDataParser(
            "this dump has no 'meta', so its data_parser version is unknown (sacct --json "
            "always prints one): give it with --data-parser (e.g. v0.0.42)")
    parser = versions.detect(members["meta"]) if "meta" in members else given
    assert parser is not None
    if given is not None and parser.name != given.name:
        raise UnknownDataParser(f"--data-parser {given.name} given, but the dump says it is "
                                f"{parser.name}")
    return Dump(parser=parser, release=versions.release_of(members.get("meta")),
                warnings=list(members.get("warnings") or []))


def _head(stream: IO[bytes]) -> dict[str, Any]:
    """The top-level members before the first job (all of them, if there is none); a
    ``jobs`` key when the list was reached."""
    members: dict[str, Any] = {}
    try:
        for _ in jsonstream.stream(jsonstream.read_chunks(stream), "jobs", members,
                                   batches=False):
            members.setdefault("jobs", "reached")
            break
    except jsonstream.JsonStreamError as exc:
        raise DumpRefused(f"not sacct --json output: {str(exc).splitlines()[0]}") from exc
    return members


def _tail(stream: IO[bytes]) -> dict[str, Any]:
    """``meta``, ``errors`` and ``warnings`` when they come after the jobs: each is the
    last such key in the file's last ``TAIL_BYTES``, decoded from there (a key inside a
    string would have its quotes escaped, so it cannot be matched by mistake)."""
    stream.seek(0, 2)
    size = stream.tell()
    stream.seek(max(0, size - TAIL_BYTES))
    tail = stream.read()
    found: dict[str, Any] = {}
    decoder = json.JSONDecoder()
    for match in reversed(list(_TOP_KEY.finditer(tail))):
        key = match.group(1).decode()
        if key in found or (match.start() > 0 and tail[match.start() - 1:match.start()] == b"\\"):
            continue
        try:
            found[key], _ = decoder.raw_decode(tail[match.end():].decode("utf-8", "replace"))
        except ValueError:
            continue
    return found


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 300 else text[:300] + "…"
