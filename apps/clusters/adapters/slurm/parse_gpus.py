"""Pure parsers of which GPU indices jobs hold: squeue / slurm REST ``gres_detail``,
``scontrol -d show job`` (running jobs) and the history the Slurm prolog keeps (``JOBMAP_LOG``).
Same rules as ``parse``: no I/O, no Django.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from apps.analysis.hostlist import HostlistError
from apps.clusters.adapters.slurm import values
from apps.clusters.adapters.slurm.parse import (
    Record,
    _text,
    expand_hostlist,
    expand_ranges,
)
from apps.clusters.adapters.slurm.types import GpuBinding


def gres_indices(detail: str) -> list[tuple[str, tuple[int, ...]]]:
    """``gpu:h100:1(IDX:0),gpu:h200:2(IDX:2-3)`` to ``[("h100", (0,)), ("h200", (2, 3))]``:
    every GPU model one node gave a job, with its indices (a node may hold several models,
    all in one string). Items without indices (``IDX:N/A``, shards) are left out."""
    out = []
    for item in values.gres_items(detail):
        if item.name == "gpu" and item.indices:
            out.append((item.type, tuple(expand_ranges(item.indices))))
    return out


def allocated_node_names(rec: Record) -> list[str]:
    """A job's nodes in ``gres_detail`` order, from any version's ``job_resources``:
    v0.0.41+ ``nodes.allocation[].name``; v0.0.38/40 ``allocated_nodes[].nodename``; v0.0.37
    a dict keyed by position. Else its host list (``job_resources.nodes`` as a string,
    ``nodes.list``, or the job's ``nodes``), expanded in Slurm's order."""
    resources = rec.get("job_resources") or {}
    nodes = resources.get("nodes")
    if isinstance(nodes, Mapping):
        names = [_text(n.get("name")) for n in nodes.get("allocation") or []
                 if isinstance(n, Mapping)]
        if names and all(names):
            return names
    allocated = resources.get("allocated_nodes")
    if isinstance(allocated, list) and allocated \
            and all(isinstance(n, Mapping) for n in allocated):
        names = [_text(n.get("nodename")) for n in allocated]
        if all(names):
            return names
    if isinstance(nodes, Mapping):
        nodes = nodes.get("list")
    return _hosts(_text(nodes or rec.get("nodes")))


def _hosts(spec: str) -> list[str]:
    """A job's host list; a malformed one (Slurm never writes one) loses that job's bindings,
    not every job's: a list of bindings has no place for one record's error."""
    try:
        return expand_hostlist(spec)
    except HostlistError:
        return []


def bindings_from_squeue(data: Record) -> list[GpuBinding]:
    """GPU indices per node from squeue/slurm REST ``gres_detail`` (running jobs), one
    binding per node and GPU model.

    ``gres_detail[i]`` belongs to the i-th allocated node.
    """
    out: list[GpuBinding] = []
    for rec in data.get("jobs") or []:
        if values.job_state(rec.get("job_state")) != "RUNNING":
            continue
        nodes = allocated_node_names(rec)
        for node, detail in zip(nodes, rec.get("gres_detail") or [], strict=False):
            for gpu_type, indices in gres_indices(_text(detail)):
                out.append(GpuBinding(int(rec["job_id"]), node, indices, gpu_type))
    return out


# --- scontrol -d show job -------------------------------------------------------------

_JOB_ID = re.compile(r"^JobId=(\d+)")
_STATE = re.compile(r"\bJobState=(\S+)")
_DETAIL = re.compile(r"^\s*Nodes=(\S+)\s.*\bGRES=(\S*)")


def parse_scontrol_bindings(text: str) -> list[GpuBinding]:
    """GPU indices of running jobs from ``scontrol -d show job`` (no --json in 22.05).

    The detail lines fold identical nodes: ``Nodes=gpu[01-02] ... GRES=gpu:h100:8(IDX:0-7)``
    means each of gpu01 and gpu02 has indices 0-7.
    """
    out: list[GpuBinding] = []
    job_id: int | None = None
    running = False
    for line in text.splitlines():
        if match := _JOB_ID.match(line):
            job_id, running = int(match[1]), False
        elif match := _STATE.search(line):
            running = match[1] == "RUNNING"
        elif (match := _DETAIL.match(line)) and job_id is not None and running:
            for gpu_type, indices in gres_indices(match[2]):
                out.extend(GpuBinding(job_id, node, indices, gpu_type)
                           for node in _hosts(match[1]))
    return out


# --- The prolog's GPU history (deploy/slurm, JOBMAP_LOG) ------------------------------------


_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class GpuHeld:
    """One job holding one GPU of one node, from ``start`` to ``end`` (None: still held)."""

    job_id: int
    node: str
    gpu_index: int
    start: datetime
    end: datetime | None
    uuid: str = ""  # from the prolog's start line, when nvidia-smi gave it


def parse_gpu_map_log(lines: Iterable[str]) -> tuple[list[GpuHeld], list[str]]:
    """Pair the prolog's ``start`` and the epilog's ``end`` lines into intervals.

    Each line is ``<epoch> start|end <job id> <node> <gpu>[,<gpu>...] [<uuid>[,<uuid>...]]``
    (the UUIDs in the order of the indices, ``-`` where unknown). Returns the intervals and
    one message per line that could not be read (the rest still count). A start without an
    end is still held; an end without a start is reported.
    """
    open_: dict[tuple[int, str, int], tuple[datetime, str]] = {}
    held: list[GpuHeld] = []
    problems: list[str] = []
    for number, line in enumerate(lines, start=1):
        parsed = _gpu_map_line(line)
        if parsed is None:
            if line.strip():
                problems.append(f"line {number}: not '<epoch> start|end <job> <node> <gpus>'")
            continue
        when, what, job_id, node, gpus, uuids = parsed
        for gpu, uuid in zip(gpus, uuids, strict=True):
            key = (job_id, node, gpu)
            if what == "start":
                open_.setdefault(key, (when, uuid))
            elif key in open_:
                start, known = open_.pop(key)
                held.append(GpuHeld(job_id, node, gpu, start, when, known))
            else:
                problems.append(f"line {number}: end of job {job_id} on {node}:{gpu} "
                                "without a start")
    held += [GpuHeld(j, n, g, start, None, uuid) for (j, n, g), (start, uuid) in open_.items()]
    return held, problems


_GPU_UUID = re.compile(r"GPU-[0-9A-Fa-f-]{8,60}")


def _gpu_map_line(line: str) -> tuple[datetime, str, int, str, list[int], list[str]] | None:
    parts = line.split()
    if len(parts) not in (5, 6) or parts[1] not in ("start", "end"):
        return None
    epoch, what, job, node, gpus = parts[:5]
    if not (epoch.isdigit() and job.isdigit() and _NODE_NAME.fullmatch(node)):
        return None
    indices = gpus.split(",")
    if not all(i.isdigit() and len(i) < 4 for i in indices):
        return None
    uuids = parts[5].split(",") if len(parts) == 6 else ["-"] * len(indices)
    if len(uuids) != len(indices) or not all(u == "-" or _GPU_UUID.fullmatch(u) for u in uuids):
        return None
    return (datetime.fromtimestamp(int(epoch), tz=UTC), what, int(job), node,
            [int(i) for i in indices], ["" if u == "-" else u for u in uuids])
