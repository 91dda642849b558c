"""Ingest paths for what Prometheus and Slurm do not hold: sshd log lines, node
inventories, and service probe results (collector output).

Input is untrusted. Each path validates record by record and counts what it stored and
what it skipped (too long, malformed, not an event we use); nothing raises on bad input
except a document that is not the expected shape at all (``IngestError``, which names it).
Re-ingesting the same data changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.analysis.sshd_log import MAX_LINE, parse_line
from apps.clusters.models import Cluster
from apps.security.models import NodeInventory, ServiceProbe, SshLogEvent

BATCH = 5000
MAX_SOFTWARE = 200
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# A component, optionally ":" and where it comes from (a site module: "pytorch:ml/2024.1").
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+ -]{0,99}(?::[A-Za-z0-9._+/@ -]{1,100})?$")


class IngestError(ValueError):
    """The document is not what this path reads; the message says what was expected."""


@dataclass
class IngestResult:
    """Counts of one ingest, and the first few problems (each names its record)."""

    read: int = 0
    stored: int = 0
    duplicates: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, message: str) -> None:
        self.skipped += 1
        if len(self.problems) < 20:
            self.problems.append(message[:200])

    def as_dict(self) -> dict[str, Any]:
        return {"read": self.read, "stored": self.stored, "duplicates": self.duplicates,
                "skipped": self.skipped, "problems": self.problems}


# --- sshd lines ------------------------------------------------------------------------------


def ingest_sshd(cluster: Cluster, lines: Iterable[str | bytes],
                reference: datetime | None = None) -> IngestResult:
    """Store the sshd events in ``lines`` (a file, or lines posted to the API).

    ``reference`` (default now) dates classic syslog lines, which carry no year. Lines
    longer than ``MAX_LINE`` are skipped unread; other lines are ignored silently unless
    they look like sshd lines we could not read.
    """
    ref = (reference or timezone.now()).timestamp()
    result = IngestResult()
    batch: list[SshLogEvent] = []
    for raw in lines:
        result.read += 1
        event = _ssh_event(cluster, raw, ref, result)
        if event is not None:
            batch.append(event)
        if len(batch) >= BATCH:
            _store_ssh(batch, result)
            batch = []
    _store_ssh(batch, result)
    return result


def _ssh_event(cluster: Cluster, raw: str | bytes, ref: float,
               result: IngestResult) -> SshLogEvent | None:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not isinstance(raw, str):
        result.problem(f"line {result.read}: not text")
        return None
    if len(raw) > MAX_LINE:
        result.problem(f"line {result.read}: {len(raw)} characters, over {MAX_LINE}")
        return None
    record = parse_line(raw, ref)
    if record is None:
        if "sshd" in raw and ("Accepted" in raw or "pam_slurm_adopt" in raw):
            result.problem(f"line {result.read}: an sshd line that could not be read")
        return None
    digest = hashlib.sha256(raw.rstrip("\r\n").encode("utf-8", "replace")).hexdigest()[:32]
    return SshLogEvent(cluster=cluster, host=record.host[:128],
                       at=datetime.fromtimestamp(record.t, UTC), kind=record.kind,
                       user_name=record.user[:64], source=record.source or None,
                       method=record.method[:40], pid=min(record.pid, 2**31 - 1),
                       digest=digest)


def _store_ssh(batch: list[SshLogEvent], result: IngestResult) -> None:
    if not batch:
        return
    cluster = batch[0].cluster
    digests = {e.digest for e in batch}
    known = set(SshLogEvent.objects.filter(cluster=cluster, digest__in=digests)
                .values_list("digest", flat=True))
    fresh: dict[str, SshLogEvent] = {}
    for event in batch:
        if event.digest in known or event.digest in fresh:
            result.duplicates += 1
        else:
            fresh[event.digest] = event
    SshLogEvent.objects.bulk_create(fresh.values(), ignore_conflicts=True)
    result.stored += len(fresh)


def read_lines(stream: Iterable[bytes], limit: int = MAX_LINE) -> Iterator[str | bytes]:
    """Lines of a binary stream, cut at ``limit + 1`` bytes so a huge line is never held
    whole (it is then skipped as too long)."""
    for line in stream:
        yield line[:limit + 1] if len(line) > limit else line


# --- Node inventories ------------------------------------------------------------------------


def ingest_inventory(cluster: Cluster, documents: Iterable[Any]) -> IngestResult:
    """Store ``{"node", "collected_at", "software": {name: version}}`` documents; a newer
    inventory replaces an older one, an older one is ignored."""
    result = IngestResult()
    for doc in documents:
        result.read += 1
        parsed = _inventory(doc, result)
        if parsed is not None:
            _store_inventory(cluster, *parsed, result)
    return result


def _inventory(doc: Any, result: IngestResult) -> tuple[str, datetime, dict[str, str]] | None:
    if not isinstance(doc, Mapping):
        result.problem(f"inventory {result.read}: not an object")
        return None
    node, software = doc.get("node"), doc.get("software")
    if not isinstance(node, str) or not _NODE.match(node):
        result.problem(f"inventory {result.read}: node {str(node)[:40]!r} is not a node name")
        return None
    collected = _when(doc.get("collected_at"))
    if collected is None or not isinstance(software, Mapping):
        result.problem(f"inventory {node}: needs collected_at (a time) and software (an object)")
        return None
    clean: dict[str, str] = {}
    for name, version in list(software.items())[:MAX_SOFTWARE]:
        if isinstance(name, str) and _NAME.match(name) and isinstance(version, str | int | float) \
                and not isinstance(version, bool):
            clean[name] = str(version)[:200]
        else:
            result.problem(f"inventory {node}: entry {str(name)[:40]!r} skipped")
    return node, collected, clean


def _store_inventory(cluster: Cluster, node: str, collected: datetime, software: dict[str, str],
                     result: IngestResult) -> None:
    with transaction.atomic():
        row = NodeInventory.objects.select_for_update().filter(cluster=cluster, node=node).first()
        if row is not None and row.collected_at >= collected:
            result.duplicates += 1
            return
        NodeInventory.objects.update_or_create(cluster=cluster, node=node, defaults={
            "collected_at": collected, "software": software})
        result.stored += 1


def _when(value: Any) -> datetime | None:
    """A Unix time or an ISO 8601 string with a zone, as an aware datetime."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(float(value), UTC) if 0 < value < 2**33 else None
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and len(value) <= 64:
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:
            return None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    return None


# --- Service probes -----------------------------------------------------------------------------


def ingest_probes(cluster: Cluster, document: Any) -> IngestResult:
    """Store a collector's ``{"collected_at", "probes": [{node, port, status,
    auth_required, service, url, job_id, user, observed_at}]}``."""
    if not isinstance(document, Mapping) or not isinstance(document.get("probes"), list):
        raise IngestError("expected an object with a 'probes' list")
    collected = _when(document.get("collected_at"))
    result = IngestResult()
    rows = []
    for item in document["probes"]:
        result.read += 1
        row = _probe(cluster, item, collected, result)
        if row is not None:
            rows.append(row)
    before = ServiceProbe.objects.filter(cluster=cluster).count()
    ServiceProbe.objects.bulk_create(rows, ignore_conflicts=True)
    result.stored = ServiceProbe.objects.filter(cluster=cluster).count() - before
    result.duplicates = len(rows) - result.stored
    return result


def _probe(cluster: Cluster, item: Any, collected: datetime | None,
           result: IngestResult) -> ServiceProbe | None:
    where = f"probe {result.read}"
    if not isinstance(item, Mapping):
        result.problem(f"{where}: not an object")
        return None
    node, port = item.get("node"), item.get("port")
    observed = _when(item.get("observed_at")) or collected
    if not isinstance(node, str) or not _NODE.match(node) or not _int(port, 1, 65535) \
            or observed is None:
        result.problem(f"{where}: needs node, port (1-65535) and observed_at")
        return None
    status, auth, job = item.get("status"), item.get("auth_required"), item.get("job_id")
    return ServiceProbe(
        cluster=cluster, node=node, port=int(port), observed_at=observed,
        service=_text(item.get("service"), 64), url=_text(item.get("url"), 500),
        status=int(status) if _int(status, 100, 599) else None,
        auth_required=auth if isinstance(auth, bool) else None,
        job_id_raw=int(job) if _int(job, 1, 2**62) else None,
        user_name=_text(item.get("user"), 64))


def _int(value: Any, low: int, high: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


# --- Files (the command line and the demo) ------------------------------------------------------


def ingest_sshd_files(cluster: Cluster, paths: Iterable[Path],
                      reference: datetime | None = None) -> IngestResult:
    """sshd logs from files (``logs/sshd-<node>.log``), read line by line."""
    total = IngestResult()
    for path in paths:
        try:
            with path.open("rb") as stream:
                _add(total, ingest_sshd(cluster, read_lines(stream), reference))
        except OSError as exc:
            total.problem(f"{path}: cannot read ({exc})")
    return total


def ingest_inventory_files(cluster: Cluster, paths: Iterable[Path]) -> IngestResult:
    """Inventory documents from JSON files (one document, or a list of them, per file)."""
    total = IngestResult()
    for path in paths:
        try:
            doc = json.loads(path.read_text(errors="replace"))
        except (OSError, ValueError) as exc:
            total.problem(f"{path}: not a JSON inventory ({exc})")
            continue
        _add(total, ingest_inventory(cluster, doc if isinstance(doc, list) else [doc]))
    return total


def ingest_probe_file(cluster: Cluster, path: Path) -> IngestResult:
    """A collector's ``services.json``."""
    try:
        doc = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        raise IngestError(f"{path}: not a JSON probe document ({exc})") from exc
    return ingest_probes(cluster, doc)


def _add(total: IngestResult, part: IngestResult) -> None:
    total.read += part.read
    total.stored += part.stored
    total.duplicates += part.duplicates
    total.skipped += part.skipped
    total.problems.extend(part.problems[:20 - len(total.problems)])


def expand(paths: Iterable[str], suffix: str) -> list[Path]:
    """Files named on the command line; a folder stands for its ``*suffix`` files."""
    out: list[Path] = []
    for name in paths:
        path = Path(name)
        out.extend(sorted(path.glob(f"*{suffix}")) if path.is_dir() else [path])
    return out
