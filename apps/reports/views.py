"""The usage report page and its CSV: the jobs the user may see (``visible_to``), grouped as
the form asks. A form it cannot read is a 400 page showing the form, what was typed and why."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django.views import View

from apps.accounts.models import Team
from apps.accounts.permissions import ActionRequiredMixin
from apps.analysis.periods import Granularity
from apps.analysis.reports import DIMENSIONS, Row
from apps.core.csv_export import csv_response
from apps.core.filtering import filter_messages, page_filterset
from apps.jobs.models import Job
from apps.reports import charts, services
from apps.reports.filters import ReportFilterSet, params_of

CSV_HEADER = ["period", "gpu_hours", "useful_gpu_hours", "jobs_started",
              "wait_p50_s", "wait_p90_s", "wait_p95_s", "jobs_ended", "success_rate",
              "efficiency", "measured_gpu_hours"]


def _bound(request: HttpRequest) -> ReportFilterSet:
    return page_filterset(ReportFilterSet, request.GET, request=request,
                          queryset=Job.objects.none())


def _form_context(request: HttpRequest, filterset: ReportFilterSet) -> dict[str, Any]:
    return {"filterset": filterset, "dimensions": DIMENSIONS.items(),
            "chosen": request.GET.getlist("group") or ["team"],
            "teams": Team.objects.visible_to(request.user).order_by("slug"),
            "query": request.GET.urlencode(), "granularities": [g.value for g in Granularity]}


class ReportView(ActionRequiredMixin, View):
    """GPU-hours, waits, jobs, success and efficiency by the chosen groups and periods."""

    def get(self, request: HttpRequest) -> HttpResponse:
        filterset = _bound(request)
        ctx = _form_context(request, filterset)
        if not filterset.form.is_valid():
            ctx["errors"] = filter_messages(filterset)
            return render(request, "reports/usage.html", ctx, status=400)
        report = services.build(request.user, params_of(filterset.form.cleaned_data))
        ctx.update(report=report, scope=_scope_words(request.user),
                   hours_figure=charts.gpu_hours(report.rows, report.labels),
                   efficiency_figure=charts.efficiency(report.rows, report.labels),
                   labelled_rows=[(report.labels[r.period], r) for r in report.rows])
        return render(request, "reports/usage.html", ctx)


def _scope_words(user: Any) -> str:
    if user.is_staff:
        return "every job"
    if Team.objects.filter(memberships__user=user, memberships__role="lead").exists():
        return "your jobs and those of the teams you lead"
    return "your own jobs"


class ReportExportView(ActionRequiredMixin, View):
    """The same report as CSV (one line per group and period; plain numbers)."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        filterset = _bound(request)
        if not filterset.form.is_valid():
            return HttpResponse("\n".join(filter_messages(filterset)), status=400,
                                content_type="text/plain; charset=utf-8")
        report = services.build(request.user, params_of(filterset.form.cleaned_data))
        header = [d for d in report.params.group] + CSV_HEADER
        name = f"usage-{report.params.first}-{report.params.last}.csv"
        return csv_response(name, header, _csv_rows(report))


def _csv_rows(report: services.Report) -> Iterator[list[Any]]:
    for r in report.rows:
        yield [*r.group, report.labels[r.period], *csv_figures(r)]


def csv_figures(r: Row) -> list[Any]:
    """A row's figures as plain numbers (rounded as printed, no units)."""
    return [round(r.gpu_hours, 4), round(r.useful_hours, 4),
            r.started, _num(r.wait_p50), _num(r.wait_p90), _num(r.wait_p95), r.ended,
            _num(r.success_rate, 4), _num(r.efficiency_share, 4),
            round(r.efficiency.total / 3600, 4)]


def _num(value: float | None, digits: int = 0) -> Any:
    if value is None:
        return ""
    return round(value, digits) if digits else round(value)
