"""The body of a slurmrestd association write that changes one ``GrpTRESMins`` entry.

``POST /slurmdb/<v>/associations`` (v0.0.40+) replaces an association's whole ``max.tres``
with what the request names: on Slurm 26.05.5, posting only ``max.tres.group.minutes``
cleared the account's ``GrpTRES`` (while ``MaxWall``, ``GrpJobs``, fairshare and QOS, held
elsewhere in the record, stayed). So the record as slurmdbd holds it is posted back with
its ``max.tres`` whole and one entry of ``group.minutes`` set, or left out to remove it
(``count: -1`` removes it too; leaving it out is what ``sacctmgr ... =-1`` reads back as).
Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from apps.core.errors import AdapterError


def tres_key(tres: str) -> tuple[str, str]:
    """``gres/gpu`` -> ("gres", "gpu"), ``cpu`` -> ("cpu", ""), as slurmrestd names TRES."""
    kind, _, name = tres.partition("/")
    if not kind:
        raise AdapterError(f"{tres!r} is not a TRES name (e.g. gres/gpu)", service="slurm")
    return kind, name


def limit_body(record: Mapping[str, Any], tres: str,
               minutes: int | None) -> tuple[dict[str, Any], str]:
    """(the POST body, what it does in words) setting ``tres``'s GrpTRESMins of the
    association ``record`` (from ``GET /slurmdb/<v>/associations``) to ``minutes``
    (``None``: removed), every other TRES limit posted back as it is."""
    if minutes is not None and minutes < 0:
        raise AdapterError(f"a limit cannot be negative ({minutes})", service="slurm")
    kind, name = tres_key(tres)
    limits = copy.deepcopy(dict((record.get("max") or {}).get("tres") or {}))
    group = dict(limits.get("group") or {})
    entries = [e for e in group.get("minutes") or []
               if (e.get("type"), e.get("name") or "") != (kind, name)]
    before = [e.get("count") for e in group.get("minutes") or []
              if (e.get("type"), e.get("name") or "") == (kind, name)]
    if minutes is not None:
        entries.append({"type": kind, "name": name, "count": int(minutes)})
    group["minutes"] = entries
    limits["group"] = group
    target = {key: record[key] for key in ("account", "cluster", "partition", "user")
              if key in record}
    target["user"] = target.get("user") or ""
    body = {"associations": [{**target, "max": {"tres": limits}}]}
    was = f"{before[0]}" if before else "no limit"
    now = "no limit" if minutes is None else f"{minutes}"
    said = (f"GrpTRESMins {tres} of account {record.get('account')} on "
            f"{record.get('cluster') or 'its cluster'}: {was} -> {now} minutes")
    return body, said
