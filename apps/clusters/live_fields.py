"""What the queue sync writes on the jobs it knows (``sync.sync_queue``): the pending reason,
Slurm's estimated start and, for a pending job, what it asks for; and the request's columns,
which the importer writes from accounting too (issue 26: a pending job's page shows its
request, since it holds nothing yet)."""

from __future__ import annotations

from typing import Any

from apps.clusters.adapters.slurm import QueueEntry, ResourceRequest
from apps.clusters.models import Cluster
from apps.jobs.models import Job

INT_MAX = 2**31 - 1  # an IntegerField's largest value in PostgreSQL
# What a job asked for (``requested_values``): written by the import and, for a pending job,
# by the queue sync
REQUESTED = ("req_gpus", "req_cpus", "req_memory_mb", "req_nodes", "tres_req")


def requested_values(request: ResourceRequest) -> dict[str, Any]:
    """A job's request as ``Job`` columns; a count no column holds (a corrupt record) is
    left unsaid rather than stored wrong."""
    def bounded(value: int | None, top: int = INT_MAX) -> int | None:
        return value if value is not None and 0 <= value <= top else None

    return {"req_gpus": bounded(request.gpus), "req_cpus": bounded(request.cpus),
            "req_memory_mb": bounded(request.memory_mb, 2**63 - 1),
            "req_nodes": bounded(request.nodes), "tres_req": request.tres}


_LIVE = ["reason", "estimated_start", "time_limit_min", *REQUESTED]


def apply_live_fields(cluster: Cluster, entries: list[QueueEntry], known: set[int]) -> int:
    """Write reason, estimated start and, for a pending job, its request where they changed
    (bulk, one UPDATE per batch): ``scontrol update`` may change what a pending job asks
    for and its time limit, and slurmctld is the one that knows."""
    live = {e.job_id: e for e in entries if e.job_id in known}
    rows = Job.objects.filter(cluster=cluster, job_id__in=list(live)).only(
        "pk", "job_id", *_LIVE)
    changed = []
    for row in rows:
        entry = live[row.job_id]
        pending = entry.state == "PENDING"
        values: dict[str, Any] = {"reason": entry.reason[:200] if pending else "",
                                  "estimated_start": entry.estimated_start}
        if pending and entry.requested.is_known:
            values.update(requested_values(entry.requested))
            if entry.requested.time_limit_min is not None:
                values["time_limit_min"] = entry.requested.time_limit_min
        if any(getattr(row, name) != value for name, value in values.items()):
            for name, value in values.items():
                setattr(row, name, value)
            changed.append(row)
    Job.objects.bulk_update(changed, _LIVE, batch_size=500)
    return len(changed)
