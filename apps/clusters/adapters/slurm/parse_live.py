"""Pure parsers for what the live cluster view reads besides nodes and jobs (issue 30):
reservations and QOS limits, in every shape the releases print them.

| source | 22.05 (v0.0.37/38) | 23.02+ (v0.0.39 to v0.0.45) |
|---|---|---|
| ``scontrol show reservation -o`` | text (no ``--json`` in 22.05) | text; ``--json`` too |
| ``/slurm/<v>/reservations`` | times plain ints | times ``{"set", "infinite", "number"}`` |
| ``sacctmgr -P show qos format=...`` | text (no ``--json`` in 22.05) | text; ``--json`` too |
| ``/slurmdb/<v>/qos`` | list under ``"QOS"``, numbers plain or null | under ``"qos"``, wrapped |

Each field is read through ``values`` (every shape a field has had), so one JSON reader
serves slurmrestd at every version and the CLI's ``--json`` from 23.02. Recordings of the
real daemons: ``tests/fixtures/slurm/live/<release>/``. No I/O, no Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from apps.clusters.adapters.slurm import values
from apps.clusters.adapters.slurm.parse_cluster import (
    _int_or_none,
    _key_values,
    _minutes_or_none,
    _pipe_table,
)
from apps.clusters.adapters.slurm.types import Qos, Reservation

Record = Mapping[str, Any]
# the columns the cli backend asks sacctmgr for (the text parser reads them by header)
QOS_FORMAT = ("Name,Priority,Flags,GrpTRES,GrpJobs,MaxTRES,MaxTRESPerNode,MaxTRESPU,MaxTRESPA,"
              "MaxJobsPU,MaxSubmitPU,MaxWall,Preempt,Description")
_TEXT_TIME = "%Y-%m-%dT%H:%M:%S"  # SLURM_TIME_FORMAT the cli backend sets, read as UTC
_NULL = ("", "(null)", "N/A", "n/a")


def _names(value: Any) -> tuple[str, ...]:
    """``"bob,carol"`` (or ``(null)``, or a JSON list) to ``("bob", "carol")``."""
    if isinstance(value, list):
        return tuple(values.text(v) for v in value if values.text(v))
    text = values.text(value)
    return () if text in _NULL else tuple(v for v in text.split(",") if v)


def _text_time(value: str) -> datetime | None:
    try:
        return datetime.strptime(value, _TEXT_TIME).replace(tzinfo=UTC)
    except ValueError:  # Unknown, (null), a time printed in another format
        return None


# --- Reservations ------------------------------------------------------------------------


def parse_reservations_text(text: str) -> list[Reservation]:
    """``scontrol show reservation -o`` (``TZ=UTC SLURM_TIME_FORMAT=%Y-%m-%dT%H:%M:%S``):
    one ``Key=Value`` line per reservation; "No reservations in the system" is none.
    A line whose times do not read is a ``ValueError``: the sync must not store a
    reservation without its window as if it were always in force."""
    out: list[Reservation] = []
    for line in text.splitlines():
        fields = _key_values(line)
        if "ReservationName" not in fields:
            continue
        start, end = _text_time(fields.get("StartTime", "")), _text_time(fields.get("EndTime", ""))
        if start is None or end is None:
            raise ValueError(f"reservation {fields['ReservationName']}: times not in "
                             f"{_TEXT_TIME} (StartTime={fields.get('StartTime', '')!r})")
        nodes = fields.get("Nodes", "")
        out.append(Reservation(
            name=fields["ReservationName"], start=start, end=end,
            nodes="" if nodes in _NULL else nodes,
            node_count=_int_or_none(fields.get("NodeCnt", "")) or 0,
            partition="" if fields.get("PartitionName", "") in _NULL
            else fields["PartitionName"],
            flags=_names(fields.get("Flags", "")), users=_names(fields.get("Users", "")),
            accounts=_names(fields.get("Accounts", "")),
            tres=values.parse_tres_string(fields.get("TRES", ""))))
    return out


def parse_reservations_json(data: Record) -> list[Reservation]:
    """``/slurm/<v>/reservations`` (every version) or ``scontrol --json show reservation``
    (23.02+): ``start_time``/``end_time`` plain (v0.0.37/38) or wrapped (v0.0.39+)."""
    out: list[Reservation] = []
    for rec in data.get("reservations") or []:
        out.append(Reservation(
            name=values.text(rec.get("name")), start=values.epoch(rec.get("start_time")),
            end=values.epoch(rec.get("end_time")), nodes=values.text(rec.get("node_list")),
            node_count=values.num(rec.get("node_count")) or 0,
            partition=values.text(rec.get("partition")),
            flags=tuple(values.flags(rec.get("flags"))), users=_names(rec.get("users")),
            accounts=_names(rec.get("accounts")),
            tres=values.parse_tres_string(values.text(rec.get("tres")))))
    return out


# --- QOS ----------------------------------------------------------------------------------


def parse_qos_text(text: str) -> list[Qos]:
    """``sacctmgr -P show qos format=<QOS_FORMAT>`` (the header says ``Descr``)."""
    out: list[Qos] = []
    for row in _pipe_table(text):
        if not row.get("Name"):
            continue
        out.append(Qos(
            name=row["Name"], description=row.get("Descr", row.get("Description", "")),
            priority=_int_or_none(row.get("Priority", "")),
            flags=_names(row.get("Flags", "")),
            grp_tres=values.parse_tres_string(row.get("GrpTRES", "")),
            grp_jobs=_int_or_none(row.get("GrpJobs", "")),
            max_tres_per_job=values.parse_tres_string(row.get("MaxTRES", "")),
            max_tres_per_node=values.parse_tres_string(row.get("MaxTRESPerNode", "")),
            max_tres_per_user=values.parse_tres_string(row.get("MaxTRESPU", "")),
            max_tres_per_account=values.parse_tres_string(row.get("MaxTRESPA", "")),
            max_jobs_per_user=_int_or_none(row.get("MaxJobsPU", "")),
            max_submit_per_user=_int_or_none(row.get("MaxSubmitPU", "")),
            max_wall_min=_minutes_or_none(row.get("MaxWall", "")),
            preempt=_names(row.get("Preempt", ""))))
    return out


def _at(rec: Any, *path: str) -> Any:
    for key in path:
        rec = rec.get(key) if isinstance(rec, Mapping) else None
    return rec


# JSON flag words (``DENY_LIMIT``) as sacctmgr's text prints them (``DenyOnLimit``), so a
# QOS reads the same whichever way it came
_FLAG_WORDS = {"DENY_LIMIT": "DenyOnLimit", "NO_RESERVE": "NoReserve",
               "PARTITION_MAXIMUM_NODE": "PartitionMaxNodes",
               "PARTITION_MINIMUM_NODE": "PartitionMinNodes",
               "PARTITION_TIME_LIMIT": "PartitionTimeLimit", "OVERRIDE_PARTITION_QOS":
               "OverPartQOS", "NO_DECAY": "NoDecay", "USAGE_FACTOR_SAFE": "UsageFactorSafe",
               "RELATIVE": "Relative", "REQUIRED_RESERVATION": "RequiresReservation"}


def parse_qos_json(data: Record) -> list[Qos]:
    """``/slurmdb/<v>/qos`` (``"QOS"`` in v0.0.37/38, ``"qos"`` since) or ``sacctmgr
    --json show qos`` (23.02+). GrpTRES is ``limits.max.tres.total``, GrpJobs
    ``limits.max.active_jobs.count``, MaxTRES[PerNode|PU|PA] ``limits.max.tres.per.{job,
    node,user,account}``, MaxJobsPU ``limits.max.jobs.active_jobs.per.user``, MaxSubmitPU
    ``limits.max.jobs.per.user``, MaxWall ``limits.max.wall_clock.per.job`` (minutes)."""
    out: list[Qos] = []
    for rec in data.get("qos", data.get("QOS")) or []:
        limits = _at(rec, "limits", "max")
        per = _at(limits, "tres", "per") or {}
        out.append(Qos(
            name=values.text(rec.get("name")), description=values.text(rec.get("description")),
            priority=values.num(rec.get("priority")),
            flags=tuple(_FLAG_WORDS.get(f, f) for f in values.flags(rec.get("flags"))),
            grp_tres=values.tres_list(_at(limits, "tres", "total")),
            grp_jobs=values.num(_at(limits, "active_jobs", "count")),
            max_tres_per_job=values.tres_list(per.get("job")),
            max_tres_per_node=values.tres_list(per.get("node")),
            max_tres_per_user=values.tres_list(per.get("user")),
            max_tres_per_account=values.tres_list(per.get("account")),
            max_jobs_per_user=values.num(_at(limits, "jobs", "active_jobs", "per", "user")),
            max_submit_per_user=values.num(_at(limits, "jobs", "per", "user")),
            max_wall_min=values.num(_at(limits, "wall_clock", "per", "job")),
            preempt=_names(_at(rec, "preempt", "list"))))
    return out
