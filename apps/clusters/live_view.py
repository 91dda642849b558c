"""What the live cluster view shows (issue 30), from stored data only: the syncs write
nodes, reservations, QOS limits, the queue and GPU bindings; the archive writes telemetry.
The page and its polled partial read the same ``cluster_view``.

Visibility: the grid colours every GPU (as ``sinfo`` shows every node's allocation), but
names a job only when ``Job.objects.visible_to(user)`` holds it; the pending queue lists the
jobs the user may see and only counts the others (what ``squeue`` shows under
``PrivateData=jobs``). Who a reservation is for is shown to admins; others see whether it
names them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import F, Sum
from django.urls import reverse

from apps.accounts.services import slurm_name_of
from apps.analysis import cluster_view as cv
from apps.analysis.idleness import IdleRules
from apps.clusters.models import Cluster, Node, Reservation
from apps.jobs.idleness import idle_rules
from apps.jobs.models import Job, JobGpu, JobMetricSummary

QUEUE_ROWS = 200  # pending jobs listed; the rest are counted


@dataclass
class Cell:
    """One GPU of the grid."""

    index: int
    state: cv.GpuState
    job_id: str = ""  # the display id, when the viewer may see the job
    job_url: str = ""
    held_by_other: bool = False

    @property
    def label(self) -> str:
        return cv.LABELS[self.state]


@dataclass
class NodeRow:
    node: Node
    cells: list[Cell] = field(default_factory=list)
    unavailable: bool = False
    reserved_by: list[str] = field(default_factory=list)


def _held(cluster: Cluster) -> dict[tuple[int, int], Job]:
    """(node pk, GPU index) -> the job holding it now (open ``JobGpu`` intervals)."""
    rows = JobGpu.objects.filter(node__cluster=cluster, end__isnull=True).select_related("job")
    return {(g.node_id, g.gpu_index): g.job for g in rows}


def _readings(jobs: Iterable[Job]) -> dict[tuple[int, str, int], cv.Reading]:
    """(job pk, host, GPU index) -> the archive's activity and memory for running jobs."""
    rows = JobMetricSummary.objects.filter(job__in=[j.pk for j in jobs]).values_list(
        "job_id", "host", "gpu_index", "mean", "fb_used_mib")
    return {(j, h, i): cv.Reading(mean, mem) for j, h, i, mean, mem in rows}


def _in_force(reservations: list[Reservation], now: datetime) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for res in reservations:
        if res.in_force(now):
            for name in res.node_names:
                out[name].append(res.name)
    return out


def _cell(node: Node, index: int, job: Job | None, visible: set[int], unavailable: bool,
          reserved: bool, readings: dict[tuple[int, str, int], cv.Reading],
          rules: IdleRules) -> Cell:
    reading = readings.get((job.pk, node.name, index)) if job else None
    state = cv.gpu_state(unavailable=unavailable, reserved=reserved, held=job is not None,
                         reading=reading, rules=rules)
    if job is None or job.pk not in visible:
        return Cell(index, state, held_by_other=job is not None)
    url = reverse("jobs-detail", args=[node.cluster.name, job.job_id])
    return Cell(index, state, job_id=job.display_id, job_url=url)


def grid(cluster: Cluster, user: Any, now: datetime) -> list[NodeRow]:
    """Every node's GPUs, coloured by state. GPUs Slurm counts as used whose indices no
    binding gives are shown allocated, without a job (``gpus_used`` beyond the bindings)."""
    held = _held(cluster)
    jobs = {j.pk: j for j in held.values()}
    visible = set(Job.objects.visible_to(user).filter(pk__in=jobs).values_list("pk", flat=True))
    readings, rules = _readings(jobs.values()), idle_rules()
    reserved = _in_force(list(cluster.reservations.all()), now)
    rows = []
    for node in cluster.nodes.prefetch_related("partitions").order_by("name"):
        row = NodeRow(node, unavailable=cv.node_unavailable(node.state),
                      reserved_by=reserved.get(node.name, []))
        unbound = max(0, node.gpus_used - sum(1 for (n, _) in held if n == node.pk))
        for index in range(node.gpu_count):
            job = held.get((node.pk, index))
            cell = _cell(node, index, job, visible, row.unavailable, bool(row.reserved_by),
                         readings, rules)
            if job is None and unbound and cell.state in (cv.GpuState.FREE,
                                                          cv.GpuState.RESERVED):
                cell, unbound = Cell(index, cv.GpuState.ALLOCATED, held_by_other=True), \
                    unbound - 1
            row.cells.append(cell)
        rows.append(row)
    return rows


def legend(rows: list[NodeRow]) -> list[dict[str, Any]]:
    """Every state with its count of GPUs, in the legend's order."""
    counts: dict[cv.GpuState, int] = defaultdict(int)
    for row in rows:
        for cell in row.cells:
            counts[cell.state] += 1
    return [{"state": s.value, "label": cv.LABELS[s], "count": counts[s]} for s in cv.GpuState]


def partitions(cluster: Cluster, rows: list[NodeRow]) -> list[dict[str, Any]]:
    """Each partition with its free GPUs per model and the most free on one node."""
    frees = {r.node.pk: cv.node_free(
        r.node.name, r.node.gpu_types or {}, r.node.gpu_type, r.node.gpu_count,
        r.node.gpu_count - sum(1 for c in r.cells if c.state == cv.GpuState.FREE),
        usable=not r.unavailable and not r.reserved_by) for r in rows}
    out = []
    for part in cluster.partitions.prefetch_related("nodes").order_by("name"):
        members = [frees[n.pk] for n in part.nodes.all() if n.pk in frees]
        free = cv.partition_free(members)
        out.append({"partition": part, "nodes": len(members), "free": free,
                    "gpus": sum(n.gpu_count for n in part.nodes.all())})
    return out


def reservations(cluster: Cluster, user: Any, now: datetime) -> list[dict[str, Any]]:
    """Reservations in force or to come (ended ones are left out), with who may use them
    for admins, and whether they name the viewer for others."""
    me = slurm_name_of(user)
    out = []
    for res in cluster.reservations.all():
        if res.end is not None and res.end <= now:
            continue
        out.append({"reservation": res, "in_force": res.in_force(now),
                    "for_you": bool(me) and me in (res.users or []),
                    "who": (", ".join([*res.users, *res.accounts]) if user.is_staff else "")})
    return out


def queue(cluster: Cluster, user: Any) -> dict[str, Any]:
    """Pending jobs by Slurm's estimated start (unknown last), the viewer's visible ones
    listed, the others counted with the GPUs they ask for."""
    pending = Job.objects.filter(cluster=cluster, state=Job.State.PENDING)
    mine = pending.filter(pk__in=Job.objects.visible_to(user).values("pk")).order_by(
        F("estimated_start").asc(nulls_last=True), "submit_time")
    others = pending.exclude(pk__in=mine.values("pk"))
    counted = others.aggregate(gpus=Sum("req_gpus"))
    return {"jobs": list(mine[:QUEUE_ROWS]), "more": max(0, mine.count() - QUEUE_ROWS),
            "others": others.count(), "others_gpus": counted["gpus"] or 0}


def cluster_view(cluster: Cluster, user: Any, now: datetime) -> dict[str, Any]:
    """Everything the page and its partial show, read once."""
    rows = grid(cluster, user, now)
    return {"rows": rows, "legend": legend(rows), "partitions": partitions(cluster, rows),
            "reservations": reservations(cluster, user, now),
            "qos": list(cluster.qos_limits.all()), "queue": queue(cluster, user),
            "notes": cluster.limits_notes or {}, "now": now}


# --- One node ------------------------------------------------------------------------------

RECENT_JOBS = 20


def node_view(node: Node, user: Any, now: datetime) -> dict[str, Any]:
    """A node's GPUs (the grid's row), the jobs holding them now and those that held them
    lately (visible ones named, the others counted), and the archive's per-GPU telemetry
    of those jobs on this node. Without a Prometheus the telemetry is "not configured"
    unless an archive was imported from files (the demo): then it says where it came from."""
    cluster = node.cluster
    row = next((r for r in grid(cluster, user, now) if r.node.pk == node.pk), NodeRow(node))
    intervals = JobGpu.objects.filter(node=node).select_related("job").order_by("-start")
    running = {g.job for g in intervals if g.end is None}
    recent = [g.job for g in intervals[:200] if g.end is not None]
    visible = set(Job.objects.visible_to(user).filter(
        pk__in=[j.pk for j in (*running, *recent)]).values_list("pk", flat=True))
    shown_recent = list({j.pk: j for j in recent if j.pk in visible}.values())[:RECENT_JOBS]
    telemetry = JobMetricSummary.objects.filter(
        host=node.name, job__cluster=cluster,
        job__in=[j.pk for j in (*running, *shown_recent) if j.pk in visible],
    ).select_related("job").order_by("-job__start_time", "gpu_index")
    return {"row": row, "running": [j for j in running if j.pk in visible],
            "running_others": sum(1 for j in running if j.pk not in visible),
            "recent": shown_recent, "telemetry": list(telemetry),
            "prometheus": cluster.has_telemetry}
