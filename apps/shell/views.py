"""The site's shell: each persona's home, the platform overview, run records, health, /metrics."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connection
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.generic import ListView, TemplateView
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from apps.accounts.models import Team
from apps.accounts.permissions import ADMIN, ActionRequiredMixin, lead_team_ids, signed_in
from apps.analysis.quotas import WARNING_LEVELS
from apps.chargeback.services import current_month, month_period
from apps.clusters.metrics import ClusterSyncCollector
from apps.clusters.models import Cluster, SlurmAccount
from apps.core import metrics, replica
from apps.core.models import TaskRun
from apps.jobs import plausibility
from apps.jobs.models import Job
from apps.quotas import services as quota_services
from apps.quotas.services import AccountUsage

AT_RISK_LEVEL = min(WARNING_LEVELS)  # the first warning (80%)


class HomeView(ActionRequiredMixin, TemplateView):
    """What each persona came for (issue 26): a researcher their jobs, a lead their jobs and
    the teams they lead, an admin the platform (clusters, syncs, runs, open findings and the
    budgets at risk) rather than "You have no jobs yet" on a cluster of thousands."""

    def get_template_names(self) -> list[str]:
        return ["core/home_admin.html" if self.request.user.is_staff else "core/home.html"]

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        user = signed_in(self.request)
        if user.is_staff:
            ctx.update(platform_overview(), quotas_at_risk=quotas_at_risk(user),
                       own_jobs=Job.objects.filter(user=user).exists(),
                       slurm_clusters=Cluster.objects.visible_to(user).fed_by_slurm())
            return ctx
        ctx["led_teams"] = Team.objects.filter(pk__in=lead_team_ids(user)).order_by("name")
        mine = Job.objects.visible_to(user).filter(user=user)
        since = timezone.now() - timedelta(days=30)
        ctx["counts"] = mine.aggregate(
            running=Count("pk", filter=Q(state=Job.State.RUNNING)),
            pending=Count("pk", filter=Q(state=Job.State.PENDING)),
            failed_30d=Count("pk", filter=Q(state__in=["FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                                                       "TIMEOUT"], submit_time__gte=since)),
            total_30d=Count("pk", filter=Q(submit_time__gte=since)),
        )
        ctx["recent"] = mine.select_related("cluster").order_by("-submit_time", "-pk")[:15]
        ctx["slurm_clusters"] = Cluster.objects.visible_to(self.request.user).fed_by_slurm()
        return ctx


class PlatformView(ActionRequiredMixin, TemplateView):
    """ "Platform": the admins' overview of clusters, syncs and runs."""

    template_name = "core/platform.html"
    required_action = ADMIN

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        ctx.update(platform_overview())
        ctx["teams"] = Team.objects.annotate(member_total=Count("memberships"))
        ctx["held_back"] = plausibility.held_back_note(Job.objects.held_back(), self.request.user)
        return ctx


def platform_overview() -> dict[str, Any]:
    """The clusters with their syncs, and the latest background runs (admins' pages)."""
    clusters = Cluster.objects.annotate(node_total=Count("nodes", distinct=True),
                                        job_total=Count("jobs", distinct=True))
    return {"clusters": clusters, "runs": TaskRun.objects.select_related("cluster")[:20],
            "replica": replica.state()}


def quotas_at_risk(user: Any) -> list[AccountUsage]:
    """The GPU-hour quotas at 80% or more, or on course to run out this month."""
    accounts = SlurmAccount.objects.filter(team__in=Team.objects.visible_to(user)) \
        .select_related("team", "cluster").order_by("team__name", "name")
    month_end = month_period(current_month(timezone.now())).end
    return [u for u in quota_services.usage_for(accounts) if u.status is not None and (
        u.status.level >= AT_RISK_LEVEL or (u.status.exhausted_at is not None
                                            and u.status.exhausted_at < month_end))]


class TaskRunListView(ActionRequiredMixin, ListView):
    template_name = "core/runs.html"
    required_action = ADMIN
    paginate_by = 50

    def get_queryset(self) -> Any:
        return TaskRun.objects.visible_to(self.request.user).select_related("cluster")


def health(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: 200 when the database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return JsonResponse({"status": "error", "database": str(exc)[:200]}, status=503)
    return JsonResponse({"status": "ok"})


def database_unavailable(request: HttpRequest, error: BaseException) -> HttpResponse:
    """503 while PostgreSQL is down: JSON for the API, a plain page for people.

    Rendered without a request context (the context processors would query the database).
    The error is logged by Django's request logger; only its class reaches the client.
    """
    retry = {"Retry-After": "30"}
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "The database is unavailable; try again shortly."},
                            status=503, headers=retry)
    html = render_to_string("core/database_unavailable.html", {"error": type(error).__name__})
    return HttpResponse(html, status=503, headers=retry)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format: this process's (or all processes') metrics plus sync lag."""
    if not metrics.metrics_allowed(request):
        return HttpResponse("metrics: not allowed from here (see docs/SECURITY.md)\n",
                            status=403, content_type="text/plain")
    body = generate_latest(metrics.process_registry())
    database = CollectorRegistry()
    database.register(ClusterSyncCollector())
    database.register(replica.ReplicaCollector())
    return HttpResponse(body + generate_latest(database), content_type=CONTENT_TYPE_LATEST)
