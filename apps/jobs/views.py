"""Job list and job page, always starting from ``Job.objects.visible_to(user)``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    QueryDict,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.http import urlencode
from django.views import View
from django.views.generic import DetailView, TemplateView

from apps.accounts.models import Team
from apps.accounts.permissions import ADMIN, VIEW, ActionRequiredMixin, signed_in
from apps.analysis.compare import label as run_label
from apps.analysis.phases import TraceAnalysisError
from apps.clusters.models import Cluster
from apps.core.context_processors import simulated_banner
from apps.core.csv_export import csv_response
from apps.core.errors import AdapterError
from apps.core.filtering import filter_messages, without_blanks
from apps.core.paging import keyset_page
from apps.jobs import charts, compare, listing, plausibility, presenters, services, traces
from apps.jobs.forms import AcceptImplausibleForm
from apps.jobs.models import Job, JobMetrics

PAGE_SIZE = 50
EXPORT_MAX_ROWS = 100_000  # a spreadsheet's worth; past it, narrow the filters


class JobListView(ActionRequiredMixin, TemplateView):
    """Self-service job list: "my jobs", "my team's jobs" (leads) and "all" (admins), sorted
    by any column; the same query exports as CSV (``JobExportView``)."""

    template_name = "jobs/list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        user = signed_in(self.request)
        listed = listing.listing(user, self.request.GET)
        choices, sort = listed.choices, listed.sort
        if sort.is_default:
            # each part of the scope (a led team, the user) is read on its own index
            page: Any = keyset_page(listed.rows, choices.after, PAGE_SIZE, "submit_time",
                                    listed.split)
        else:
            page = listing.numbered_page(listed.rows, sort, choices.page, PAGE_SIZE,
                                         listed.split)
        if getattr(page, "cursor_refused", False):
            messages.warning(self.request, "That page link was not one this list wrote "
                                           "(edited or cut short?): showing the first page.")
        query = _without(self.request.GET, "after", "page")
        ctx.update(
            scope=choices.scope, scopes=_scopes_for(user, listed.led), filter=listed.filterset,
            filter_errors=filter_messages(listed.filterset), page=page, sort=sort,
            query=query, sort_headers=listing.header_cells(
                sort, _without(self.request.GET, "after", "page", "sort"), efficiency=True),
            grouped=choices.grouped, may_pick_user=user.is_staff or bool(listed.led),
            teams=Team.objects.visible_to(user).order_by("slug"),
            arrays=presenters.array_summaries(page.rows) if choices.grouped else {},
            slurm_clusters=Cluster.objects.visible_to(user).fed_by_slurm(),
        )
        return ctx


class JobExportView(ActionRequiredMixin, View):
    """The job list as CSV: the same scope, filters and order as the page, every page of it
    (up to ``EXPORT_MAX_ROWS``; a last line says when the list was cut there)."""

    def get(self, request: HttpRequest) -> StreamingHttpResponse:
        listed = listing.listing(signed_in(request), request.GET)
        jobs = listed.rows.order_by(*listed.sort.order_by())
        return csv_response("jobs.csv", listing.CSV_HEADER,
                            listing.csv_rows(jobs, EXPORT_MAX_ROWS))


def _without(query: QueryDict, *names: str) -> str:
    """The query string less ``names`` (the cursor, the page, the sort), blanks dropped."""
    params = without_blanks(query)
    for name in names:
        params.pop(name, None)
    return params.urlencode()


def _scopes_for(user: Any, led: list[int]) -> list[tuple[str, str]]:
    scopes = [("mine", "My jobs")]
    if led:
        scopes.append(("team", "My team's jobs"))
    if user.is_staff:
        scopes.append(("all", "All jobs"))
    return scopes


class JobDetailView(ActionRequiredMixin, DetailView):
    """The job page. A job the user may not see is a 404, never a 403."""

    template_name = "jobs/detail.html"
    context_object_name = "job"

    def get_queryset(self) -> QuerySet[Job]:
        return Job.objects.visible_to(self.request.user).select_related("cluster", "team", "user")

    def get_object(self, queryset: QuerySet[Job] | None = None) -> Job:
        cluster, job_id = self.kwargs["cluster"], self.kwargs["job_id"]
        job = self.get_queryset().filter(cluster__name=cluster, job_id=job_id).first()
        if job is None:
            raise Http404(missing_job(cluster, job_id))
        return job

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        job = self.object
        ctx["leads"] = (job.team.memberships.filter(role="lead", user__is_active=True)
                        .select_related("user") if job.team else [])
        ctx["gpus_held"] = job.gpus_held.select_related("node")
        ctx["array_siblings"] = (
            Job.objects.visible_to(self.request.user)
            .filter(cluster=job.cluster, array_job_id=job.array_job_id)
            .exclude(pk=job.pk).order_by("array_task_id")[:50]
            if job.array_job_id else []
        )
        ctx.update(_metrics_card(job))
        ctx.update(presenters.ending_card(job))
        ctx["requested"] = presenters.requested(job)
        ctx.update(presenters.traces_panel(job))
        presenters.link_stragglers(ctx)
        ctx["upload_limit_mb"] = settings.TRACE_UPLOAD_MAX_MB
        ctx.update(simulated_banner(job.cluster))
        ctx["detection_problems"] = _detection_problems(job)
        ctx["implausible_refusal"] = plausibility.refusal(job) if job.is_held_back else ""
        previous = compare.previous_run(self.request.user, job)
        ctx["compare_previous_url"] = compare_url(previous, job) if previous else ""
        return ctx


def compare_url(*jobs: Job) -> str:
    """The comparison page of ``jobs`` (``?ids=<cluster>/<job id>`` each)."""
    return reverse("jobs-compare") + "?" + urlencode(
        [("ids", f"{j.cluster.name}/{j.job_id}") for j in jobs])


class JobCompareView(ActionRequiredMixin, TemplateView):
    """Two to six jobs side by side, ``?ids=<cluster>/<job id>`` each, with the differences
    named. A job the user may not see (or no such job) is a 404 naming it; a malformed id
    or more than six jobs is a 400 saying so; fewer than two asks for more."""

    template_name = "jobs/compare.html"

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            refs = compare.parse_refs(request.GET.getlist("ids"))
            if len(refs) < compare.MIN_JOBS:
                return self.render_to_response(self.get_context_data(picked=refs))
            compared = compare.compare_jobs(signed_in(request), refs)
        except compare.NotVisible as exc:
            raise Http404(str(exc)) from None
        except compare.CompareError as exc:
            return self.render_to_response(self.get_context_data(error=str(exc)),
                                           status=exc.status)
        return self.render_to_response(self.get_context_data(**_comparison(compared)))


def _comparison(compared: compare.Compared) -> dict[str, Any]:
    """The page's columns, figures and the runs each figure lacks."""
    names = [f"{run_label(i)} · {run.ref}" for i, run in enumerate(compared.runs)]
    timelines = [(name, r.telemetry.timeline_offset_s, r.telemetry.step_s, r.telemetry.timeline)
                 for name, r in zip(names, compared.runs, strict=True)
                 if r.telemetry is not None and r.telemetry.timeline]
    phases = [(name, r.trace.phases_ms) for name, r in zip(names, compared.runs, strict=True)
              if r.trace is not None]
    return {
        "compared": compared, "comparison": compared.comparison,
        "columns": [{"label": run_label(i), "job": job, "run": run}
                    for i, (job, run) in enumerate(zip(compared.jobs, compared.runs,
                                                       strict=True))],
        "timeline_figure": charts.busy_timelines(timelines) if timelines else None,
        "phase_figure": charts.phase_comparison(phases) if phases else None,
        "without_timeline": [n for n, r in zip(names, compared.runs, strict=True)
                             if r.telemetry is None or not r.telemetry.timeline],
        "without_trace": [n for n, r in zip(names, compared.runs, strict=True)
                          if r.trace is None],
        "simulated_clusters": sorted({j.cluster.name for j in compared.jobs
                                      if j.cluster.is_simulated}),
    }


def _detection_problems(job: Job) -> list[Any]:
    """The job's cluster's last detection run, when it did not read all its sources: the
    telemetry rules (miners, GPUs used without a job) may not have looked at this job."""
    from apps.security.services import detection_problem  # security reads jobs: no cycle

    problem = detection_problem(job.cluster)
    return [problem] if problem else []
UPLOAD_TAG = "trace-upload"  # messages shown at the upload form, not in the top banner


def missing_job(cluster: str, job_id: int) -> str:
    """Why a job page is a 404: the job belongs to another team, or Beacon has no such job.
    (Slurm shows every job id to every user, so naming the first case hides nothing.)"""
    if Job.objects.filter(cluster__name=cluster, job_id=job_id).exists():
        return (f"job {job_id} on {cluster} belongs to another team: its owner, the team's "
                "leads and platform admins can open it")
    return (f"Beacon has no job {job_id} on {cluster}: it may not be synced yet (new jobs "
            "appear within a minute or two), or the id or cluster is mistyped")


def _metrics_card(job: Job) -> dict[str, Any]:
    """The stored metrics at once; a worker is asked to refresh them when they are stale.

    The page never waits on Prometheus (with a worker); under the embedded default the
    task runs in-process and records, rather than raises, a failure. Without a Prometheus
    nothing is asked: the page says that live refresh needs one.
    """
    asked = services.refresh_if_stale(job, JobMetrics.objects.filter(job=job).first())
    card = presenters.metrics_card(job)
    card["refresh_unavailable"] = asked == services.Refresh.UNAVAILABLE
    card["no_live_source"] = asked == services.Refresh.NO_SOURCE
    return card


class JobMetricsPartialView(JobDetailView):
    """The metric-derived sections alone: what the page polls (htmx) while a refresh runs."""

    template_name = "jobs/partials/metrics.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {"job": self.object, **presenters.metrics_card(self.object),
                "trace_runs": list(self.object.trace_runs.all()[:1])}


class JobTraceUploadView(ActionRequiredMixin, View):
    """Upload a job's profiler traces from its page; the analysis is stored, the files not.

    Anyone who sees the job may upload (its owner, their lead, admins). A refused or
    corrupt upload comes back to the page as a message naming the file: the page stays up.
    """

    write_action = VIEW
    http_method_names = ["post"]

    def post(self, request: HttpRequest, cluster: str, job_id: int) -> HttpResponse:
        job = get_object_or_404(Job.objects.visible_to(request.user).select_related("cluster"),
                                cluster__name=cluster, job_id=job_id)
        try:
            # the body's size was checked before it was read (TraceUploadLimitMiddleware)
            run = traces.import_uploads(job, request.FILES.getlist("files"))
        except (traces.UploadRefused, AdapterError, TraceAnalysisError) as exc:
            # shown at the upload form (the page opens there), not in the page's top banner
            messages.error(request, f"Trace upload refused: {exc}", extra_tags=UPLOAD_TAG)
            return HttpResponseSeeOther(reverse("jobs-detail", args=[cluster, job_id]) +
                                        "#trace-upload")
        else:
            messages.success(request, f"Traces analysed: {run.world_size} ranks, {run.steps} "
                                      f"steps. {_straggler_words(run)}")
        return HttpResponseSeeOther(reverse("jobs-detail", args=[cluster, job_id]) + "#phases")


class AcceptImplausibleView(ActionRequiredMixin, View):
    """An admin accepts a record flagged implausible at import, with a note (audited):
    chargeback and SLOs count it from then on. Others are refused before any lookup."""

    required_action = ADMIN
    write_action = ADMIN
    http_method_names = ["post"]

    def post(self, request: HttpRequest, cluster: str, job_id: int) -> HttpResponse:
        job = get_object_or_404(Job.objects.visible_to(request.user).select_related("cluster"),
                                cluster__name=cluster, job_id=job_id)
        url = reverse("jobs-detail", args=[cluster, job_id]) + "#plausibility"
        form = AcceptImplausibleForm(request.POST)
        if not form.is_valid():
            messages.error(request, form.first_error())
            return HttpResponseSeeOther(url)
        try:
            accepted = plausibility.accept(job, signed_in(request), form.cleaned_data["note"])
        except plausibility.NotAcceptable as exc:
            messages.error(request, str(exc))
        else:
            words = ("Accepted: chargeback and SLOs count this record from their next refresh."
                     if accepted else "Nothing to accept: the record is plausible or was "
                     "accepted already.")
            messages.add_message(request, messages.SUCCESS if accepted else messages.INFO, words)
        return HttpResponseSeeOther(url)


def _straggler_words(run: Any) -> str:
    if run.straggler_rank is None:
        return "No straggler rank."
    return f"Straggler: rank {run.straggler_rank} ({run.straggler_phase})."


class HttpResponseSeeOther(HttpResponseRedirect):
    """303: after a POST, the browser GETs the page (no resubmission on reload)."""

    status_code = 303
