"""Pure parsers for cluster-level Slurm output: nodes, partitions, associations, fairshare,
and the ``sdiag`` change marker. Job records are in ``parse``; same rules (no I/O, no
Django).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from apps.clusters.adapters.slurm import values
from apps.clusters.adapters.slurm.parse import (
    _gpu_counts,
    _num,
    _text,
    _tres_list,
    parse_tres_string,
)
from apps.clusters.adapters.slurm.types import (
    Association,
    JobAllocation,
    ShareRow,
    SlurmNode,
    SlurmPartition,
    UsageRow,
)

Record = Mapping[str, Any]

# --- sinfo --json / slurm REST nodes; partitions --------------------------------------

def node_gpus(gres: str) -> tuple[str, int, dict[str, int]]:
    """A node's ``gres`` (``gpu:h100:8(S:0-1)``; several models ``gpu:h100:2,gpu:h200:4``;
    MIG profiles ``gpu:1g.10gb:7``) to (models joined by "+", GPUs in all, GPUs per model).
    Untyped GPUs (``gpu:8``) count, with no model."""
    per_type = values.gpus_by_type(values.gres_items(gres))
    typed = {k: v for k, v in per_type.items() if k}
    return "+".join(sorted(typed)), sum(per_type.values()), typed


def _gres_total(gres: str) -> tuple[str, int]:
    """``gpu:h100:8`` to ("h100", 8) (the pyslurm backend's reading)."""
    gpu_type, count, _ = node_gpus(gres)
    return gpu_type, count


def _gres_used(gres_used: str) -> int:
    """``gpu:h100:1(IDX:0),gpu:h200:2(IDX:2-3)`` to 3."""
    return sum(values.gpus_by_type(values.gres_items(gres_used)).values())


def _node(name: str, state: Any, partitions: list[str], cpus: Any, memory: Any,
          gres: str, gres_used: str, reason: Any) -> SlurmNode:
    gpu_type, gpu_count, gpu_types = node_gpus(gres)
    words = values.flags(state)
    return SlurmNode(
        name=name, state="+".join(w.lower() for w in words) or "unknown",
        partitions=tuple(partitions), cpus=_num(cpus) or 0, memory_mb=_num(memory) or 0,
        gpu_type=gpu_type, gpu_count=gpu_count, gpus_used=_gres_used(gres_used),
        reason=_text(reason), gpu_types=gpu_types)


def parse_sinfo_json(data: Record) -> list[SlurmNode]:
    """Nodes from ``/slurm/<v>/nodes``, ``scontrol --json show nodes`` or 22.05's ``sinfo
    --json`` (a ``nodes`` list: one record per node; ``state`` a word plus ``state_flags``
    in v0.0.38, a list of words since), or from 23.02+'s ``sinfo --json`` (a ``sinfo`` list:
    one entry per node group and partition, merged here by node). ``state`` joins base and
    flags: ``idle+drain``."""
    if "sinfo" in data and "nodes" not in data:
        return _from_sinfo_entries(data.get("sinfo") or [])
    nodes: list[SlurmNode] = []
    for rec in data.get("nodes") or []:
        state = [*values.flags(rec.get("state")), *values.flags(rec.get("state_flags"))]
        nodes.append(_node(
            _text(rec["name"]), state, [_text(p) for p in rec.get("partitions") or []],
            rec.get("cpus"), rec.get("real_memory"), _text(rec.get("gres")),
            _text(rec.get("gres_used")), rec.get("reason")))
    return nodes


def _from_sinfo_entries(entries: list[Any]) -> list[SlurmNode]:
    """sinfo's grouped entries, one node each where sinfo did not group (a group's GRES in
    use cannot be split between its nodes: a node of a group of several reports none)."""
    by_name: dict[str, SlurmNode] = {}
    for entry in entries:
        names = [_text(n) for n in (entry.get("nodes") or {}).get("nodes") or []]
        partition = _text((entry.get("partition") or {}).get("name"))
        gres = entry.get("gres") or {}
        alone = len(names) == 1
        for name in names:
            node = by_name.get(name) or _node(
                name, (entry.get("node") or {}).get("state"), [],
                (entry.get("cpus") or {}).get("maximum"),
                (entry.get("memory") or {}).get("maximum"), _text(gres.get("total")),
                _text(gres.get("used")) if alone else "",
                (entry.get("reason") or {}).get("description"))
            if partition and partition not in node.partitions:
                node = dataclasses.replace(node, partitions=(*node.partitions, partition))
            by_name[name] = node
    return list(by_name.values())


def _minutes(value: str) -> int | None:
    """Slurm durations to minutes (seconds round up), as ``sbatch --time`` reads them:
    ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``; ``UNLIMITED`` is None."""
    if value in ("", "UNLIMITED", "INFINITE", "NONE"):
        return None
    days, dash, rest = value.partition("-") if "-" in value else ("0", "", value)
    parts = [int(p) for p in rest.split(":")]
    if dash:  # D-H[:M[:S]]
        h, m, s = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        h, m, s = parts
    else:  # M or M:S
        h, m, s = 0, parts[0], (parts[1] if len(parts) > 1 else 0)
    return int(days) * 1440 + h * 60 + m + (1 if s else 0)


def _key_values(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def parse_scontrol_partitions(text: str) -> list[SlurmPartition]:
    """``scontrol show partition -o``: one ``Key=Value`` line per partition."""
    out: list[SlurmPartition] = []
    for line in text.splitlines():
        fields = _key_values(line)
        if "PartitionName" not in fields:
            continue
        out.append(SlurmPartition(
            name=fields["PartitionName"], state=fields.get("State", "").lower(),
            is_default=fields.get("Default") == "YES",
            max_time_min=_minutes(fields.get("MaxTime", "")), nodes=fields.get("Nodes", ""),
        ))
    return out


def parse_rest_partitions(data: Record) -> list[SlurmPartition]:
    """``/slurm/<v>/partitions``: v0.0.37/38 ``flags``, ``state``, ``max_time_limit`` and
    ``nodes`` as a string; v0.0.40+ ``partition.state`` (a list), ``maximums.time`` (wrapped)
    and ``nodes.configured``. Limits are minutes; huge or infinite values are unlimited."""
    out: list[SlurmPartition] = []
    for rec in data.get("partitions") or []:
        inner = rec.get("partition") if isinstance(rec.get("partition"), Mapping) else {}
        flags = values.flags(rec.get("flags")) + values.flags(inner.get("flags"))
        state = inner.get("state", rec.get("state"))
        limit = (rec.get("maximums") or {}).get("time") if "maximums" in rec \
            else rec.get("maximum_time", rec.get("max_time_limit"))
        minutes = _num(limit)
        nodes = rec.get("nodes")
        if isinstance(nodes, Mapping):
            nodes = nodes.get("configured")
        out.append(SlurmPartition(
            name=_text(rec["name"]), state=values.state(state).lower(),
            is_default="DEFAULT" in flags,
            max_time_min=minutes if minutes is not None and 0 <= minutes < 0xFFFFFFFE else None,
            nodes=_text(nodes),
        ))
    return out


# --- sacctmgr -P show assoc / sshare -a -P --------------------------------------------


def _pipe_table(text: str) -> list[dict[str, str]]:
    """A ``-P`` table with its header line to dicts (sreport's 4 banner lines skipped)."""
    lines = [ln for ln in text.splitlines() if "|" in ln]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split("|")]
    return [dict(zip(header, (v.strip() for v in ln.split("|")), strict=False))
            for ln in lines[1:]]


def _int_or_none(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _float_or_none(value: str) -> float | None:
    """A float, or None when empty, unparsable or not finite (``inf`` cannot go into JSON)."""
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _minutes_or_none(value: str) -> int | None:
    try:
        return _minutes(value)
    except ValueError:
        return None


ASSOC_FORMAT = ("Cluster,Account,User,ParentName,Share,GrpTRES,GrpTRESMins,GrpTRESRunMins,"
                "GrpJobs,MaxTRES,MaxWall,QOS,DefaultQOS")
SSHARE_FORMAT = ("Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare,LevelFS,"
                 "GrpTRESMins,TRESRunMins,GrpTRESRaw")


def parse_sacctmgr_assoc(text: str) -> list[Association]:
    """``sacctmgr -P show assoc format=<ASSOC_FORMAT>``; account rows have an empty User."""
    return [
        Association(
            cluster=row.get("Cluster", ""), account=row.get("Account", ""),
            user=row.get("User", ""), parent=row.get("Par Name", row.get("ParentName", "")),
            shares=row.get("Share", ""),
            grp_tres=parse_tres_string(row.get("GrpTRES", "")),
            grp_tres_mins=parse_tres_string(row.get("GrpTRESMins", "")),
            grp_tres_run_mins=parse_tres_string(row.get("GrpTRESRunMins", "")),
            max_tres=parse_tres_string(row.get("MaxTRES", "")),
            grp_jobs=_int_or_none(row.get("GrpJobs", "")),
            max_wall_min=_minutes_or_none(row.get("MaxWall", "")),
            qos=tuple(q for q in row.get("QOS", "").split(",") if q),
            default_qos=row.get("Def QOS", row.get("DefaultQOS", "")),
        )
        for row in _pipe_table(text) if row.get("Account")
    ]


def parse_rest_associations(data: Record) -> list[Association]:
    """``/slurmdb/v0.0.38/associations``: the same rows as ``sacctmgr show assoc``.

    GrpTRES is ``max.tres.total``, GrpTRESMins ``max.tres.group.minutes``, GrpTRESRunMins
    ``max.tres.group.active``, MaxTRES ``max.tres.per.job``.
    """
    out: list[Association] = []
    for rec in data.get("associations") or []:
        limits = (rec.get("max") or {}).get("tres") or {}
        group = limits.get("group") or {}
        out.append(Association(
            cluster=_text(rec.get("cluster")), account=_text(rec.get("account")),
            user=_text(rec.get("user")), parent=_text(rec.get("parent_account")),
            shares=str(_num(rec.get("shares_raw")) or ""),
            grp_tres=_tres_list(limits.get("total")),
            grp_tres_mins=_tres_list(group.get("minutes")),
            grp_tres_run_mins=_tres_list(group.get("active")),
            max_tres=_tres_list((limits.get("per") or {}).get("job")),
            grp_jobs=_num(((rec.get("max") or {}).get("jobs") or {}).get("active")),
            qos=tuple(_text(q) for q in rec.get("qos") or []),
            default_qos=_text((rec.get("default") or {}).get("qos")),
        ))
    return out


def _float_tres(spec: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in spec.split(","):
        key, sep, raw = item.partition("=")
        value = _float_or_none(raw) if sep else None
        if key and value is not None:
            out[key] = value
    return out


def parse_sshare(text: str) -> list[ShareRow]:
    """``sshare -a -P -o <SSHARE_FORMAT>`` (no --json in 22.05). The root row is skipped."""
    rows: list[ShareRow] = []
    for row in _pipe_table(text):
        account = row.get("Account", "").strip()
        if not account or (account == "root" and not row.get("User")):
            continue
        rows.append(ShareRow(
            account=account, user=row.get("User", ""),
            raw_shares=_int_or_none(row.get("RawShares", "")),
            norm_shares=_float_or_none(row.get("NormShares", "")),
            raw_usage=_int_or_none(row.get("RawUsage", "")) or 0,
            effective_usage=_float_or_none(row.get("EffectvUsage", "")),
            fairshare=_float_or_none(row.get("FairShare", "")),
            level_fs=_float_or_none(row.get("LevelFS", "")),
            grp_tres_mins=parse_tres_string(row.get("GrpTRESMins", "")),
            tres_run_mins=parse_tres_string(row.get("TRESRunMins", "")),
            grp_tres_raw=_float_tres(row.get("GrpTRESRaw", "")),
        ))
    return rows


def _finite(value: Any) -> float | None:
    """A float field, plain or wrapped; unset, infinite and Slurm's 2^64 "inf" are None."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and abs(number) < 1e18 else None


def _named_values(items: Any, scale: float = 1.0) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items or []:
        number = _finite(item.get("value"))
        if number is not None and item.get("name"):
            out[_text(item["name"])] = number * scale
    return out


def parse_rest_shares(data: Record) -> list[ShareRow]:
    """``/slurm/<v>/shares`` (Slurm 24.05+): the rows of ``sshare -a``. An ``ASSOCIATION``
    row is an account, a ``USER`` row a user in its parent account; the root account's
    own row is skipped, as for sshare. TRES run seconds become minutes, as sshare prints."""
    shares = data.get("shares") or {}
    rows: list[ShareRow] = []
    for rec in shares.get("shares") or [] if isinstance(shares, Mapping) else []:
        user_row = "USER" in values.flags(rec.get("type"))
        name, parent = _text(rec.get("name")), _text(rec.get("parent"))
        if not user_row and (not name or (name == "root" and not parent)):
            continue
        tres = rec.get("tres") or {}
        fairshare = rec.get("fairshare") or {}
        raw = _named_values(tres.get("usage"))
        rows.append(ShareRow(
            account=parent if user_row else name, user=name if user_row else "",
            raw_shares=_num(rec.get("shares")), norm_shares=_finite(rec.get("shares_normalized")),
            raw_usage=_num(rec.get("usage")) or 0,
            effective_usage=_finite(rec.get("effective_usage")),
            fairshare=_finite(fairshare.get("factor")) if user_row else None,
            level_fs=_finite(fairshare.get("level")),
            grp_tres_mins={k: round(v) for k, v in
                           _named_values(tres.get("group_minutes")).items()},
            tres_run_mins={k: round(v) for k, v in
                           _named_values(tres.get("run_seconds"), 1 / 60).items()},
            grp_tres_raw=raw,
        ))
    return rows


# --- sdiag: the cheap change marker ---------------------------------------------------

_SDIAG_LINE = re.compile(
    r"^(Data since|Jobs (?:submitted|started|completed|canceled|failed|running|pending))"
    r":?\s+(.*?)\s*$")


def sdiag_marker(text: str) -> str:
    """A string that changes whenever a job is submitted, starts, ends or is cancelled.

    Built from ``sdiag``'s job counters; they reset daily and "Data since" is part of it.
    """
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _SDIAG_LINE.match(line)
        if match:
            values.setdefault(match[1], match[2])
    if len(values) < 3:
        raise ValueError("sdiag printed no job counters")
    return ";".join(f"{k}={v}" for k, v in sorted(values.items()))


def diag_marker(data: Record) -> str:
    """The same marker from ``/slurm/v0.0.38/diag`` (``statistics``)."""
    stats = data.get("statistics") or {}
    keys = ("req_time_start", "jobs_submitted", "jobs_started", "jobs_completed",
            "jobs_canceled", "jobs_failed", "jobs_running", "jobs_pending")
    if not stats:
        raise ValueError("diag has no statistics")
    return ";".join(f"{k}={_num(stats.get(k))}" for k in keys)


# --- sreport / sacct -X -T / sacctmgr modify: chargeback and quotas ---------------------

ALLOC_FORMAT = "JobIDRaw,Account,User,AllocTRES,Start,End,ElapsedRaw,State"
_TEXT_TIME = "%Y-%m-%dT%H:%M:%S"  # SLURM_TIME_FORMAT the CLI backend sets, read as UTC


def parse_sreport_usage(text: str) -> list[UsageRow]:
    """``sreport -P -t minutes cluster AccountUtilizationByUser``: the 4 banner lines are
    skipped by ``_pipe_table``; account rows have an empty Login."""
    rows: list[UsageRow] = []
    for row in _pipe_table(text):
        used = _float_or_none(row.get("Used", ""))
        if not row.get("Account") or used is None:
            continue
        rows.append(UsageRow(account=row["Account"], user=row.get("Login", ""),
                             tres=row.get("TRES Name", ""), minutes=used))
    return rows


def _utc(value: str) -> datetime | None:
    try:
        return datetime.strptime(value, _TEXT_TIME).replace(tzinfo=UTC)
    except ValueError:  # Unknown, None, empty
        return None


def parse_sacct_allocations(text: str) -> list[JobAllocation]:
    """``sacct -X -P -n -T -o <ALLOC_FORMAT>`` lines; lines that do not parse are skipped
    only when they hold no job id (sacct's own warnings), otherwise they are an error."""
    out: list[JobAllocation] = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != 8 or not fields[0].strip().isdigit():
            if line.strip() and fields[0].strip().isdigit():
                raise ValueError(f"sacct line with {len(fields)} fields: {line[:200]!r}")
            continue
        job_id, account, user, tres, start, end, elapsed, state = fields
        gpus, shards, _ = _gpu_counts(parse_tres_string(tres))
        out.append(JobAllocation(
            job_id=int(job_id), account=account, user=user, gpus=gpus, gpu_shards=shards,
            elapsed_s=_int_or_none(elapsed) or 0, start=_utc(start), end=_utc(end),
            state=values.job_state(state)))
    return out


def sacctmgr_changed(output: str) -> bool:
    """True when sacctmgr says it modified (or, in a dry run, would modify) something."""
    return "Modified" in output and "Nothing modified" not in output
