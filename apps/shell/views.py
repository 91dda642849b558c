"""The site's shell: the researcher home, the platform overview, run records, health, /metrics."""

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
from apps.accounts.permissions import ADMIN, ActionRequiredMixin, signed_in
from apps.clusters.metrics import ClusterSyncCollector
from apps.clusters.models import Cluster
from apps.core import metrics
from apps.core.models import TaskRun
from apps.jobs import plausibility
from apps.jobs.models import Job


class HomeView(ActionRequiredMixin, TemplateView):
    """ "My jobs": what a researcher sees first."""

    template_name = "core/home.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        user = signed_in(self.request)
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
        ctx["clusters"] = Cluster.objects.annotate(
            node_total=Count("nodes", distinct=True),
            job_total=Count("jobs", distinct=True),
        )
        ctx["teams"] = Team.objects.annotate(member_total=Count("memberships"))
        ctx["runs"] = TaskRun.objects.select_related("cluster")[:20]
        ctx["held_back"] = plausibility.held_back_note(Job.objects.held_back(), self.request.user)
        return ctx


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
    return HttpResponse(body + generate_latest(database), content_type=CONTENT_TYPE_LATEST)
