"""What a job asked for: GPUs, CPUs, memory, nodes and time, from Slurm's request fields.

A pending job holds nothing, so its allocation says "GPUs 0, CPUs 0"; its request says what
it waits for (issue 26). Each data parser version prints the request its own way:

- ``sacct --json`` and slurmdbd (``/slurmdb/vX/job``), v0.0.37 to v0.0.45: ``tres.requested``,
  a TRES list (``cpu``, ``mem`` in MB for the whole job, ``node``, ``gres/gpu`` when the site
  accounts GPUs); ``required``: v0.0.37/38 ``{"CPUs": 16, "memory": 65536}`` (one number,
  per CPU when its top bit, Slurm's ``MEM_PER_CPU``, is set), v0.0.39+ ``memory_per_cpu`` and
  ``memory_per_node`` as number objects; ``time.limit`` in minutes; the command line
  (``submit_line``) for GPUs a site does not account;
- ``squeue --json`` and slurmctld (``/slurm/vX/jobs``): ``tres_req_str``
  (``cpu=4,mem=8000M,node=4,billing=261,gres/gpu=32``), ``cpus``, ``node_count``,
  ``memory_per_node``/``memory_per_cpu``, ``time_limit``, and the GPU request as
  ``tres_per_job``/``tres_per_node``/``tres_per_task`` (``gpu_requests.gpus_asked``).

The TRES totals come first (they are what the scheduler counts); the other fields fill what
they lack. Pure: no I/O, no Django; a malformed value raises ``ValueError`` (the record's
error, as for every field).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apps.clusters.adapters.slurm import gpu_requests, values
from apps.clusters.adapters.slurm.types import ResourceRequest

MEM_PER_CPU = 1 << 63  # v0.0.37/38 ``required.memory``: the value is per CPU when set


def from_sacct(rec: Mapping[str, Any]) -> ResourceRequest:
    """The request of one accounting record (``sacct --json`` ``jobs[]``), any version."""
    tres = values.tres_list((rec.get("tres") or {}).get("requested"))
    required = rec.get("required") or {}
    nodes = tres.get("node")
    cpus = tres["cpu"] if "cpu" in tres else values.num(required.get("CPUs"))
    memory = tres["mem"] if "mem" in tres else _memory(required, cpus, nodes)
    gpus = _gpus_accounted(tres)
    if gpus is None and tres:  # the site accounts no GPUs: read the command line
        gpus = gpu_requests.gpus_from_submit_line(values.text(rec.get("submit_line")),
                                                  nodes or 0)[0]
    return ResourceRequest(gpus=gpus, cpus=cpus, memory_mb=memory, nodes=nodes,
                           time_limit_min=values.num((rec.get("time") or {}).get("limit")),
                           tres=values.tres_text(tres))


def from_slurmctld(rec: Mapping[str, Any]) -> ResourceRequest:
    """The request of one of slurmctld's records (``squeue --json``, ``/slurm/vX/jobs``)."""
    said = values.text(rec.get("tres_req_str"))
    tres = values.parse_tres_string(said)
    nodes = tres["node"] if "node" in tres else values.num(rec.get("node_count"))
    cpus = tres["cpu"] if "cpu" in tres else values.num(rec.get("cpus"))
    memory = tres["mem"] if "mem" in tres else _memory(rec, cpus, nodes)
    gpus = _gpus_accounted(tres)
    if gpus is None:
        gpus = gpu_requests.gpus_asked(rec, nodes or 0, values.num(rec.get("tasks")) or 0)[0]
    return ResourceRequest(gpus=gpus, cpus=cpus, memory_mb=memory, nodes=nodes,
                           time_limit_min=values.num(rec.get("time_limit")), tres=said)


def from_tres(tres: Mapping[str, int], time_limit_min: int | None,
              submit_line: str = "") -> ResourceRequest:
    """The request from TRES already read into Slurm's flat names (pyslurm 25.11's
    ``requested_tres`` of ``db.Job`` and ``Job``, through the backend's ``_tres_dict``): the
    same reading as :func:`from_sacct`, where ``mem`` is already the whole job's (MiB)."""
    nodes = tres.get("node")
    gpus = _gpus_accounted(tres)
    if gpus is None and tres and submit_line:  # the site accounts no GPUs
        gpus = gpu_requests.gpus_from_submit_line(submit_line, nodes or 0)[0]
    return ResourceRequest(gpus=gpus, cpus=tres.get("cpu"), memory_mb=tres.get("mem"),
                           nodes=nodes, time_limit_min=time_limit_min,
                           tres=values.tres_text(tres))


def _gpus_accounted(tres: Mapping[str, int]) -> int | None:
    """GPUs in a TRES request (``gres/gpu``, or its typed items); None when it names none."""
    if not any(k == "gres/gpu" or k.startswith("gres/gpu:") for k in tres):
        return None
    return values.gpu_counts(tres)[0]


def _memory(fields: Mapping[str, Any], cpus: int | None, nodes: int | None) -> int | None:
    """The whole job's memory (MB) from a per-node or per-CPU request, None when unsaid."""
    per_node = values.num(fields.get("memory_per_node"))
    per_cpu = values.num(fields.get("memory_per_cpu"))
    raw = values.num(fields.get("memory"))  # v0.0.37/38 ``required.memory``
    if raw is not None:
        per_cpu, per_node = (raw & ~MEM_PER_CPU, None) if raw & MEM_PER_CPU else (None, raw)
    if per_node:
        return per_node * (nodes or 1)
    if per_cpu and cpus:
        return per_cpu * cpus
    return None
