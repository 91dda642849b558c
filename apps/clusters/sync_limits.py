"""Keep Beacon's copy of a cluster's reservations and QOS limits (issue 30's live view).

``sync_limits`` reads both through the cluster's Slurm backend and replaces the stored rows
in one transaction: upserts on (cluster, name), then deletes what Slurm no longer lists, so
running it twice stores the same rows. A part the backend cannot read (the files backend
without the saved file, pyslurm) keeps its stored rows untouched and says why in
``Cluster.limits_notes``, which the page shows instead of "none"; a transient failure
(slurmctld or slurmdbd down) fails the run, to be retried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import transaction
from django.utils import timezone

from apps.analysis import hostlist
from apps.clusters import services
from apps.clusters.adapters.slurm import Qos, SlurmClient
from apps.clusters.adapters.slurm import Reservation as SlurmReservation
from apps.clusters.models import Cluster, QosLimit, Reservation
from apps.core.errors import AdapterError, TransientAdapterError
from apps.core.runs import tracked_run

T = TypeVar("T")
_RESERVATION_FIELDS = ["start", "end", "nodes", "node_names", "node_count", "partition",
                       "flags", "users", "accounts", "tres", "updated_at"]
_QOS_FIELDS = ["description", "priority", "flags", "grp_tres", "grp_jobs", "max_tres_per_job",
               "max_tres_per_node", "max_tres_per_user", "max_tres_per_account",
               "max_jobs_per_user", "max_submit_per_user", "max_wall_min", "preempt",
               "updated_at"]


def sync_limits(cluster: Cluster, client: SlurmClient | None = None) -> dict[str, Any]:
    """Read reservations and QOS limits and store them (idempotent, one transaction).

    1. read both (a transient failure raises: the task retries; a permanent one is noted);
    2. upsert what was read and delete the rows Slurm no longer lists, per part read;
    3. stamp ``limits_synced_at`` and the notes.
    """
    client = client or services.client_for(cluster)
    with tracked_run("slurm.sync_limits", cluster=cluster, target=cluster.name) as run:
        notes: dict[str, str] = {}
        reservations = _read(client.reservations, "reservations", notes)
        qos = _read(client.qos, "qos", notes)
        with transaction.atomic():
            if reservations is not None:
                _store_reservations(cluster, reservations)
            if qos is not None:
                _store_qos(cluster, qos)
            now = timezone.now()
            Cluster.objects.filter(pk=cluster.pk).update(limits_synced_at=now,
                                                         limits_notes=notes)
        cluster.limits_synced_at, cluster.limits_notes = now, notes
        run.stats = {"reservations": _count(reservations), "qos": _count(qos), "notes": notes}
    return run.stats


def _read(read: Callable[[], list[T]], part: str, notes: dict[str, str]) -> list[T] | None:
    try:
        return read()
    except TransientAdapterError:
        raise
    except AdapterError as exc:  # this backend cannot read it: keep what is stored, say why
        notes[part] = str(exc)[:500]
        return None


def _count(rows: Sequence[Any] | None) -> int | None:
    return None if rows is None else len(rows)


def _node_names(nodes: str) -> list[str]:
    """The reservation's hosts; a list Beacon cannot expand is kept as written."""
    try:
        return hostlist.expand(nodes) if nodes else []
    except ValueError:
        return [nodes]


def _store_reservations(cluster: Cluster, rows: list[SlurmReservation]) -> None:
    objs = [Reservation(
        cluster=cluster, name=r.name[:200], start=r.start, end=r.end, nodes=r.nodes,
        node_names=_node_names(r.nodes), node_count=r.node_count, partition=r.partition[:128],
        flags=list(r.flags), users=list(r.users), accounts=list(r.accounts), tres=dict(r.tres),
    ) for r in rows]
    Reservation.objects.bulk_create(objs, update_conflicts=True,
                                    unique_fields=["cluster", "name"],
                                    update_fields=_RESERVATION_FIELDS)
    Reservation.objects.filter(cluster=cluster).exclude(
        name__in=[o.name for o in objs]).delete()


def _store_qos(cluster: Cluster, rows: list[Qos]) -> None:
    objs = [QosLimit(
        cluster=cluster, name=q.name[:64], description=q.description[:500],
        priority=q.priority, flags=list(q.flags), grp_tres=dict(q.grp_tres),
        grp_jobs=q.grp_jobs, max_tres_per_job=dict(q.max_tres_per_job),
        max_tres_per_node=dict(q.max_tres_per_node),
        max_tres_per_user=dict(q.max_tres_per_user),
        max_tres_per_account=dict(q.max_tres_per_account),
        max_jobs_per_user=q.max_jobs_per_user, max_submit_per_user=q.max_submit_per_user,
        max_wall_min=q.max_wall_min, preempt=list(q.preempt),
    ) for q in rows]
    QosLimit.objects.bulk_create(objs, update_conflicts=True, unique_fields=["cluster", "name"],
                                 update_fields=_QOS_FIELDS)
    QosLimit.objects.filter(cluster=cluster).exclude(name__in=[o.name for o in objs]).delete()
