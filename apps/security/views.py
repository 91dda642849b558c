"""Findings pages: the list with filters, one finding with its evidence and lifecycle.

Every queryset starts from ``Finding.objects.visible_to(user)``: a finding outside it is a
404. Lifecycle actions go through ``findings.transition``, which refuses (403) what the
role may not do.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views import View
from django.views.generic import DetailView, ListView

from apps.accounts.permissions import VIEW, ActionRequiredMixin
from apps.analysis.security_types import SEVERITIES
from apps.clusters.models import Cluster
from apps.core.filtering import filter_messages, page_filterset
from apps.security import findings, services
from apps.security.filters import FindingFilterSet
from apps.security.forms import FindingActionForm
from apps.security.models import Finding


def by_severity() -> Case:
    """Critical first, then high, medium, low, info: the rank as a number to sort on."""
    return Case(*(When(severity=s, then=Value(rank)) for rank, s in enumerate(SEVERITIES)),
                default=Value(0), output_field=IntegerField())


class FindingListView(ActionRequiredMixin, ListView):
    """Findings the user may see, most severe first and the latest seen first within a
    severity (issue 26: a critical finding sank mid-list when sorted by last seen alone);
    active ones unless asked otherwise."""

    template_name = "security/list.html"
    context_object_name = "findings"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[Finding]:
        base = Finding.objects.visible_to(self.request.user) \
            .select_related("cluster", "team", "assignee")
        params = self.request.GET.copy()
        if not params:
            params["active"] = "true"
        self.filterset = page_filterset(FindingFilterSet, params, queryset=base)
        if not self.filterset.is_valid():
            return base.none()
        return self.filterset.qs.order_by(by_severity().desc(), "-last_seen", "-id")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        query = self.request.GET.copy()
        query.pop("page", None)
        ctx.update(filter=self.filterset, query=query.urlencode(),
                   filter_errors=filter_messages(self.filterset),
                   detection_problems=services.detection_problems(
                       Cluster.objects.visible_to(self.request.user).order_by("name")))
        return ctx



class FindingDetailView(ActionRequiredMixin, DetailView):
    """One finding: what, where, evidence (redacted for non-admins), timeline, actions."""

    template_name = "security/detail.html"
    context_object_name = "finding"

    def get_queryset(self) -> QuerySet[Finding]:
        return Finding.objects.visible_to(self.request.user) \
            .select_related("cluster", "team", "assignee", "job", "rule")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        finding: Finding = self.object
        user = self.request.user
        ctx["evidence"] = finding.evidence_for(user)
        ctx["events"] = finding.events.select_related("actor", "assignee")
        ctx["actions"] = findings.allowed_actions(finding, user)
        ctx["admins"] = findings.staff_users() if "assign" in ctx["actions"] else []
        ctx["job_visible"] = finding.job is not None and \
            type(finding.job).objects.visible_to(user).filter(pk=finding.job.pk).exists()
        ctx["spec"] = finding.rule.spec if finding.rule else None
        return ctx


class FindingTransitionView(ActionRequiredMixin, View):
    """POST a lifecycle action from the finding page; back to the page with a message."""

    write_action = VIEW
    http_method_names = ["post"]

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        finding = get_object_or_404(Finding.objects.visible_to(request.user), pk=pk)
        form = FindingActionForm(request.POST)
        if not form.is_valid():
            messages.error(request, form.first_error())
            return SeeOther(reverse("security-detail", args=[pk]))
        typed = form.cleaned_data
        try:
            findings.transition(finding, request.user, typed["action"], reason=typed["reason"],
                                until=typed["until"], assignee=typed["assignee"])
        except findings.LifecycleError as exc:
            messages.error(request, str(exc))
        else:
            done = "Comment added." if typed["action"] == "comment" else \
                f"Finding {finding.status}."
            messages.success(request, done)
        return SeeOther(reverse("security-detail", args=[pk]))


class SeeOther(HttpResponseRedirect):
    status_code = 303
