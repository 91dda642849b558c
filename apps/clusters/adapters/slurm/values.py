"""Field readers shared by every Slurm JSON parser, each accepting every shape a field has
had from data_parser v0.0.37 (Slurm 21.08) to v0.0.45 (26.05) (``versions`` lists them).

- numbers: ``5`` (v0.0.38) or ``{"set": true, "infinite": false, "number": 5}`` (v0.0.39+);
- states and flags: ``"RUNNING"`` plus ``state_flags``, or one list ``["IDLE", "DRAIN"]``;
- slurmdbd's exit code: ``{"status": "FAILED", "return_code": 3, "signal": {"signal_id": 9}}``
  (v0.0.38) or ``{"status": ["ERROR"], "return_code": {...}, "signal": {"id": {...},
  "name": "KILL"}}`` (v0.0.40+); slurmctld's: the raw wait status ``768``, or that object;
- GRES: ``gres:gpu:8`` (22.05's ``tres_per_node``), ``gres/gpu:8``, ``gpu:h100:8(S:0-1)``,
  several models ``gpu:h100:2,gpu:h200:4``, indices held ``gpu:h100:1(IDX:0)``.

Pure: no I/O, no Django. Bad values raise ``ValueError`` (the record parsers turn that
into a per-record error).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apps.clusters.adapters.slurm.types import ExitStatus

# --- Scalars ----------------------------------------------------------------------------


def num(value: Any) -> int | None:
    """An integer field: plain, or ``{"set", "infinite", "number"}`` (None when unset or
    infinite)."""
    if type(value) is int:  # the common case first: this runs ~20 times per record
        return value
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return int(value)


# Slurm's "no value" and "infinite" sentinels, as a record prints them where a time is unset
# (24.11's sacct gives a job cancelled before its begin time ``time.start`` 4294967294)
_UNSET_TIMES = {0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF}


def epoch(value: Any) -> datetime | None:
    """Unix epoch seconds to an aware UTC datetime; 0, null, unset and Slurm's NO_VAL and
    INFINITE sentinels mean "not yet".

    A value outside what a datetime holds (a corrupt record: year 10^9) is a ``ValueError``
    naming it, so the record is reported, not the whole stream stopped.
    """
    seconds = num(value)
    if not seconds or seconds < 0 or seconds in _UNSET_TIMES:
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError(f"time {seconds} is not a date") from exc


def text(value: Any) -> str:
    """A string field: null becomes "", NUL bytes go (PostgreSQL refuses them)."""
    if type(value) is str and "\x00" not in value:
        return value
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value.replace("\x00", "")


def flags(value: Any) -> list[str]:
    """A state or flag field as a list of upper-case words: ``"RUNNING"``, ``["IDLE",
    "DRAIN"]``, ``"MIXED+DRAIN"`` (text), ``"CANCELLED by 0"`` (text sacct)."""
    if value is None:
        return []
    items = value if isinstance(value, list) else text(value).split("+")
    out = []
    for item in items:
        word = text(item).split(" ")[0].strip().upper()
        if word:
            out.append(word)
    return out


def state(value: Any) -> str:
    """The base state: the first word (the rest of a list are flags)."""
    words = flags(value)
    return words[0] if words else "UNKNOWN"


# Job state flags that Slurm's own text (sacct, squeue) shows instead of the base state,
# in its order (src/common/slurm_protocol_defs.c job_state_string): v0.0.39+ lists them
# after the base, e.g. ``["PENDING", "REQUEUED"]`` for the instance a requeue ended.
_SHOWN_FLAGS = (("COMPLETING", "COMPLETING"), ("REQUEUED", "REQUEUED"),
                ("REQUEUE_HOLD", "REQUEUED"), ("REQUEUE_FED", "REQUEUED"))


def job_state(value: Any) -> str:
    """A job's state as sacct/squeue text print it: a shown flag, else the base state."""
    words = flags(value)
    for flag, shown in _SHOWN_FLAGS:
        if flag in words[1:]:
            return shown
    return words[0] if words else "UNKNOWN"


# --- Slurm's own errors -------------------------------------------------------------------


def failures(errors: Any) -> list[Any]:
    """The entries of a document's ``errors`` list that mean a failed read. 22.05 reports
    an empty answer as one (``sacct --json -j <unknown id>``: error 9003 "Nothing found"),
    which is an answer, not a failure."""
    return [e for e in errors or [] if not (
        isinstance(e, Mapping) and (e.get("error_number") == 9003
                                    or "Nothing found" in str(e.get("description", ""))))]


# --- Exit codes -------------------------------------------------------------------------

_SIGNALLED = {"SIGNALED", "CORE_DUMPED"}


@dataclass(frozen=True)
class Exit:
    """What an ``exit_code`` said: the status (None when it said nothing definite) and
    whether it is 22.05's doubtful ``SUCCESS``."""

    status: ExitStatus | None
    doubtful: bool = False


def exit_code(value: Any) -> Exit:
    """Any ``exit_code`` shape: a raw wait status (slurmctld, v0.0.37/38: ``768`` = exit 3),
    or slurmdbd's object, its ``status`` a word (v0.0.38: SUCCESS, FAILED, SIGNALED) or a
    list (v0.0.40+: SUCCESS, ERROR, SIGNALED, CORE_DUMPED, PENDING, INVALID), its signal
    ``signal.signal_id`` (v0.0.38) or ``signal.id`` (v0.0.40+).

    ``doubtful`` marks a plain SUCCESS/0 of the object form: 22.05 prints that for jobs that
    failed, so the record parser believes it only where the data parser is trusted.
    """
    if value is None:
        return Exit(None)
    if not isinstance(value, Mapping) or "number" in value:
        raw = num(value)
        return Exit(None if raw is None else ExitStatus.from_wait_status(raw))
    words = set(flags(value.get("status")))
    signal_field = value.get("signal") or {}
    signal = num(signal_field.get("id", signal_field.get("signal_id"))) \
        if isinstance(signal_field, Mapping) else None
    code = num(value.get("return_code"))
    if words & _SIGNALLED and signal is not None:
        return Exit(ExitStatus(code or 0, signal))
    if words & {"ERROR", "FAILED"} and code:
        return Exit(ExitStatus(code, signal or 0))
    if words <= {"SUCCESS"} and not code:
        return Exit(ExitStatus(0, signal or 0), doubtful=True)
    return Exit(None)  # PENDING, INVALID, or a status that contradicts its numbers


# --- TRES and GRES ----------------------------------------------------------------------

_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


def parse_tres_string(spec: str) -> dict[str, int]:
    """``"cpu=16,mem=64G,gres/gpu=8"`` to ``{"cpu": 16, "mem": 65536, "gres/gpu": 8}``.

    Memory becomes MB. ``N/A``, empty and unparsable values are left out.
    """
    out: dict[str, int] = {}
    for item in spec.split(","):
        key, sep, raw = item.strip().partition("=")
        if not sep or not key:
            continue
        unit = raw[-1:].upper()
        try:
            if unit in _MEM_UNITS:
                out[key] = round(float(raw[:-1]) * _MEM_UNITS[unit])
            else:
                out[key] = int(float(raw))
        except ValueError:
            continue
    return out


def tres_text(tres: Mapping[str, int]) -> str:
    """A TRES dict printed the way Slurm prints ``AllocTRES``/``ReqTRES`` (mem in M)."""
    return ",".join(f"{k}={v}M" if k == "mem" else f"{k}={v}" for k, v in tres.items())


def tres_list(items: Any) -> dict[str, int]:
    """``[{"type": "gres", "name": "gpu:h100", "count": 8}]`` to ``{"gres/gpu:h100": 8}``."""
    out: dict[str, int] = {}
    for item in items or []:
        kind, name, count = item.get("type"), item.get("name"), item.get("count")
        if type(count) is not int:  # the common case is a plain int: skip the calls
            count = num(count)
        if type(kind) is not str or "\x00" in kind:
            kind = text(kind)
        if type(name) is not str or "\x00" in name:
            name = text(name)
        if kind and count is not None:
            out[f"{kind}/{name}" if name else kind] = count
    return out


def gpu_counts(tres: Mapping[str, int]) -> tuple[int, int, dict[str, int]]:
    """(GPU devices, shards, devices per type) from ``gres/...`` TRES names, as Slurm counts
    them.

    ``gres/gpu`` is the total; ``gres/gpu:<type>`` the per-type split. When a site only
    accounts typed GPUs the total is their sum. ``gres/shard`` counts shards. A MIG slice is
    one device here (``gres/gpu:a100_1g.5gb=1``), as in Slurm's accounting and limits; the
    importer turns it into its fraction of the parent GPU with the cluster's table
    (``apps.analysis.chargeback.gpu_allocation``).
    """
    types: dict[str, int] = {}
    typed_shards = 0
    for key, value in tres.items():
        if key.startswith("gres/gpu:"):
            if value:
                types[key[len("gres/gpu:"):]] = value
        elif key.startswith("gres/shard:"):
            typed_shards += value
    gpus = tres["gres/gpu"] if "gres/gpu" in tres else sum(types.values())
    shards = tres.get("gres/shard", typed_shards)
    return gpus, shards, types


@dataclass(frozen=True)
class Gres:
    """One item of a GRES string: ``gpu:h100:2(S:0-1)``, ``gres/gpu:4``, ``gpu:h100:1(IDX:0)``.

    ``indices`` is the text after ``IDX:`` (GPU indices held), "" when absent.
    """

    name: str
    type: str
    count: int
    indices: str = ""


_GRES_ITEM = re.compile(
    r"^(?:gres[/:])?(?P<name>[A-Za-z][\w.-]*)"  # gpu, shard, mps (gres/ or 22.05's gres:)
    r"(?::(?P<type>\(null\)|[^:()=]+))??"  # a model or MIG profile: h100, 1g.10gb, (null)
    r"(?::(?P<count>\d+))?"  # the count (1 when absent, as Slurm reads --gres=gpu:h100)
    r"(?:=(?P<tres_count>\d+))?"  # tres_per_* in TRES form: gres/gpu=4
    r"(?:\((?P<detail>[^)]*)\))?$")  # (S:0-1) sockets, (IDX:0-3) indices held


def split_items(spec: str) -> list[str]:
    """Split a GRES list on the commas between items, not those inside ``(IDX:0,2)``."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(spec):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            items.append(spec[start:i])
            start = i + 1
    items.append(spec[start:])
    return [item.strip() for item in items if item.strip()]


def gres_items(spec: str) -> list[Gres]:
    """Every item of a GRES string Slurm prints for nodes (``gres``, ``gres_used``) and jobs
    (``gres_detail``, ``tres_per_job``/``_node``/``_task``). Items that do not parse (a
    site's own GRES with odd names) are left out, never guessed."""
    out: list[Gres] = []
    for item in split_items(spec):
        match = _GRES_ITEM.match(item)
        if not match:
            continue
        kind = match["type"] or ""
        count_text = match["count"] or match["tres_count"]
        if kind.isdigit() and not count_text:  # gpu:8 is a count, not a model
            kind, count_text = "", kind
        detail = match["detail"] or ""
        indices = detail[4:] if detail.startswith("IDX:") else ""
        out.append(Gres(name=match["name"], type="" if kind == "(null)" else kind,
                        count=int(count_text) if count_text else 1,
                        indices="" if indices == "N/A" else indices))
    return out


def gpus_by_type(items: Iterable[Gres]) -> dict[str, int]:
    """GPU counts per model ("" for untyped GPUs) of the ``gpu`` items."""
    out: dict[str, int] = {}
    for item in items:
        if item.name == "gpu":
            out[item.type] = out.get(item.type, 0) + item.count
    return out
