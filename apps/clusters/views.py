"""Cluster pages: every signed-in user may see clusters, nodes and partitions, and the live
view (issue 30), whose jobs are named only as far as ``Job.objects.visible_to`` allows."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count, QuerySet, Sum
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.views.generic import DetailView, ListView

from apps.accounts.permissions import ActionRequiredMixin
from apps.clusters import live_view
from apps.clusters import stores as cluster_stores
from apps.clusters.models import Cluster, Node
from apps.core.context_processors import simulated_banner

GPU = "gres/gpu"  # the TRES Slurm limits and counts GPUs by


class ClusterListView(ActionRequiredMixin, ListView):
    template_name = "clusters/list.html"
    context_object_name = "clusters"

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.visible_to(self.request.user).annotate(
            node_total=Count("nodes"), gpu_total=Sum("nodes__gpu_count"))


class _ClusterPage(ActionRequiredMixin, DetailView):
    """A page about one cluster the user may see, by its name in the URL (404 otherwise)."""

    slug_field = "name"
    slug_url_kwarg = "name"
    context_object_name = "cluster"

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.visible_to(self.request.user)


class ClusterDetailView(_ClusterPage):
    template_name = "clusters/detail.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        # several telemetry stores: which one reads each node (issue 29)
        ctx["stores"] = stores = cluster_stores.node_stores(self.object)
        ctx["nodes"] = [(n, stores.get(n.name))
                        for n in self.object.nodes.prefetch_related("partitions")]
        ctx["partitions"] = self.object.partitions.annotate(node_total=Count("nodes"))
        ctx["accounts"] = _account_rows(self.object)
        ctx.update(simulated_banner(self.object))
        return ctx


def _account_rows(cluster: Cluster) -> list[dict[str, Any]]:
    """Slurm's account associations for the page: shares, fairshare level, GPU limits and
    decayed GPU usage (users' rows stay off this page: it is open to everyone)."""
    rows = cluster.associations.filter(user_name="").exclude(account="root")
    return [{"account": a.account, "shares": a.shares, "norm_shares": a.norm_shares,
             "effective_usage": a.effective_usage, "level_fs": a.level_fs,
             "gpu_limit": a.grp_tres.get(GPU), "quota_hours": _hours(a.grp_tres_mins.get(GPU)),
             "used_hours": _hours(a.usage_tres_mins.get(GPU))} for a in rows]


def _hours(minutes: float | None) -> float | None:
    return None if minutes is None else minutes / 60



# --- The live view (issue 30) ----------------------------------------------------------


def poll_seconds() -> int:
    """How often the live view asks again: the queue sync's cadence (beat's
    ``slurm-queue``), since nothing it shows changes faster than the syncs write it."""
    entry: dict[str, Any] = settings.CELERY_BEAT_SCHEDULE.get("slurm-queue", {})
    return max(5, int(float(entry.get("schedule", 30))))


class ClusterLiveView(_ClusterPage):
    """GPUs by node coloured by state, partitions' free GPUs, reservations, QOS limits and
    the pending queue, from stored data (``live_view``); ``live.js`` polls the partial."""

    template_name = "clusters/live.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        ctx.update(live_view.cluster_view(self.object, self.request.user, timezone.now()))
        ctx["poll_every"] = 0 if self.object.is_simulated else poll_seconds()
        ctx.update(simulated_banner(self.object))
        return ctx


class ClusterLiveStateView(ClusterLiveView):
    """The part of the live view that changes, for ``static/js/live.js`` to swap in."""

    template_name = "clusters/partials/live_state.html"


class NodeDetailView(ActionRequiredMixin, DetailView):
    """One node: its GPUs as the grid shows them, its jobs (the viewer's visible ones named,
    others counted) and the stored telemetry of its recent jobs (``live_view.node_view``)."""

    template_name = "clusters/node.html"
    context_object_name = "node"

    def get_object(self, queryset: QuerySet[Node] | None = None) -> Node:
        cluster = get_object_or_404(Cluster.objects.visible_to(self.request.user),
                                    name=self.kwargs["name"])
        return get_object_or_404(cluster.nodes.select_related("cluster"),
                                 name=self.kwargs["node"])

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        ctx.update(live_view.node_view(self.object, self.request.user, timezone.now()))
        ctx["cluster"] = self.object.cluster
        ctx.update(simulated_banner(self.object.cluster))
        return ctx
