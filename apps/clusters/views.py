"""Cluster pages: every signed-in user may see clusters, nodes and partitions."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet, Sum
from django.views.generic import DetailView, ListView

from apps.accounts.permissions import ActionRequiredMixin
from apps.clusters.models import Cluster
from apps.core.context_processors import simulated_banner

GPU = "gres/gpu"  # the TRES Slurm limits and counts GPUs by


class ClusterListView(ActionRequiredMixin, ListView):
    template_name = "clusters/list.html"
    context_object_name = "clusters"

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.visible_to(self.request.user).annotate(
            node_total=Count("nodes"), gpu_total=Sum("nodes__gpu_count"))


class ClusterDetailView(ActionRequiredMixin, DetailView):
    template_name = "clusters/detail.html"
    slug_field = "name"
    slug_url_kwarg = "name"
    context_object_name = "cluster"

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.visible_to(self.request.user)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        ctx["nodes"] = self.object.nodes.prefetch_related("partitions")
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

