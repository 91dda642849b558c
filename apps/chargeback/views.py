"""Chargeback pages: statements (leads: their teams; admins: all), "my usage" for everyone,
exports, and the admin actions (terms, refresh, finalise, adjust, reconcile).

Every statement is looked up through ``Statement.objects.visible_to(user)`` (404 outside it);
admin actions need the ``admin`` action (403) and answer with a 303 back to the page, with
the outcome as a message.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django.views.generic import TemplateView

from apps.accounts.permissions import ADMIN, VIEW, ActionRequiredMixin
from apps.analysis.chargeback import Policy
from apps.chargeback import charts, reconciliation, services, usage
from apps.chargeback.forms import AdjustmentForm, MonthForm, RateForm, ReconcileForm, TermsForm
from apps.chargeback.models import BillingPeriod, Rate, Reconciliation, Statement
from apps.clusters import services as cluster_services
from apps.clusters.models import Cluster
from apps.clusters.services import Action
from apps.core.errors import AdapterError
from apps.jobs import plausibility
from apps.jobs.models import Job
from apps.jobs.views import HttpResponseSeeOther


def _month(request: HttpRequest) -> date:
    """``?month=YYYY-MM`` (this month when absent); a bad value is a 404, not a guess."""
    form = MonthForm({"month": request.GET.get("month") or request.POST.get("month")})
    if (error := form.month_error()) is not None:
        raise Http404(error)
    month: date = form.cleaned_data["month"]
    return month


def _nav(month: date) -> dict[str, str]:
    prev = date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)
    nxt = date(month.year + (month.month == 12), month.month % 12 + 1, 1)
    return {"month": f"{month:%Y-%m}", "prev_month": f"{prev:%Y-%m}",
            "next_month": f"{nxt:%Y-%m}"}


class MonthPageView(ActionRequiredMixin, TemplateView):
    """A page of one month (``?month=YYYY-MM``, this month when absent). A month it cannot
    read ("2026-13") is a 400 that shows the month form with the error and what was typed,
    rather than a 404 page that loses the input (issue 26)."""

    page_title = ""
    month: date

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        typed = request.GET.get("month", "")
        form = MonthForm({"month": typed})
        if (error := form.month_error()) is not None:
            return render(request, "chargeback/month_refused.html", status=400, context={
                "page_title": self.page_title, "month_error": error, "month_input": typed[:40],
                "this_month": f"{services.current_month():%Y-%m}"})
        self.month = form.cleaned_data["month"]
        return super().get(request, *args, **kwargs)


class ChargebackHomeView(MonthPageView):
    """A month's statements the user may see, the teams' waste split, and admin tools."""

    template_name = "chargeback/home.html"
    page_title = "Chargeback"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        month = self.month
        services.request_refresh(month)  # drafts follow the month without a beat (issue 19)
        statements = services.statements_of(month,
                                            Statement.objects.visible_to(self.request.user))
        ctx.update(_nav(month), statements=statements, policies=[p.value for p in Policy],
                   period=BillingPeriod.objects.filter(month=month).first(),
                   split_figure=_split_figure(statements),
                   rates=services.rates_in_force(month), currency=settings.CHARGEBACK_CURRENCY,
                   refresh_minutes=settings.CHARGEBACK_REFRESH_EVERY // 60)
        if self.request.user.is_staff:
            clusters = list(Cluster.objects.visible_to(self.request.user))
            # said before the button is pressed: a backend that cannot reconcile, and why
            checked = [(c, cluster_services.cannot(c, Action.RECONCILE)) for c in clusters]
            ctx["clusters"] = [c for c, why in checked if not why]
            ctx["cannot_reconcile"] = [(c, why) for c, why in checked if why]
            ctx["reconciliations"] = Reconciliation.objects.filter(month=month).select_related(
                "cluster")[:5]
        return ctx


def _split_figure(statements: Sequence[Statement]) -> dict[str, Any] | None:
    rows = [(s.team.slug, {p: float(getattr(s, f"{p}_hours")) for p in charts.PARTS})
            for s in statements if s.allocated_hours > 0]
    return charts.team_split(rows) if rows else None


class MyUsageView(MonthPageView):
    """A researcher's own month: hours by what they were spent on, and what they would cost
    charged at useful hours only."""

    template_name = "chargeback/my_usage.html"
    page_title = "My GPU usage"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        month = self.month
        ctx.update(_nav(month), usage=services.user_usage(self.request.user, month),
                   currency=settings.CHARGEBACK_CURRENCY)
        return ctx


class StatementDetailView(ActionRequiredMixin, TemplateView):
    """One statement with its lines and adjustments (leads of the team and admins)."""

    template_name = "chargeback/statement.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        statement = _visible_statement(self.request, kwargs["pk"])
        if not statement.is_final and services.request_refresh(statement.period.month):
            statement = _visible_statement(self.request, kwargs["pk"])  # as just refreshed
        lines = list(statement.lines.all())
        ctx.update(statement=statement, usage_lines=[ln for ln in lines if ln.kind == "usage"],
                   rates=services.rates_in_force(statement.period.month),
                   wasteful=services.wasteful_jobs_of(statement),
                   adjustments=[ln for ln in lines if ln.kind == "adjustment"],
                   month_over=services.month_period(statement.period.month).end
                   <= timezone.now(), held_back=_held_back(self.request, statement))
        return ctx


def _held_back(request: HttpRequest, statement: Statement) -> dict[str, Any] | None:
    """The team's implausible records of the month the statement leaves out (issue 25)."""
    period = services.month_period(statement.period.month)
    jobs = Job.objects.visible_to(request.user).filter(team=statement.team)
    return plausibility.held_back_note(usage.held_back(jobs, period.start, period.end),
                                       request.user, statement.team)


def _visible_statement(request: HttpRequest, pk: int) -> Statement:
    return get_object_or_404(Statement.objects.visible_to(request.user)
                             .select_related("team", "period", "finalised_by"), pk=pk)


def _export(statements: Sequence[Statement], fmt: str, name: str) -> HttpResponse:
    if fmt == "csv":
        response = HttpResponse(services.export_csv(statements),
                                content_type="text/csv; charset=utf-8")
    else:
        response = HttpResponse(services.export_json(statements),
                                content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
    return response


class StatementExportView(ActionRequiredMixin, View):
    def get(self, request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
        statement = _visible_statement(request, pk)
        name = f"chargeback-{statement.team.slug}-{statement.period.label}"
        return _export(services.statements_of(statement.period.month,
                                              Statement.objects.filter(pk=pk)), fmt, name)


class MonthExportView(ActionRequiredMixin, View):
    """Every statement of the month the user may see (all of them for admins)."""

    def get(self, request: HttpRequest, month: str, fmt: str) -> HttpResponse:
        try:
            day = services.parse_month(month)
        except services.ChargebackError as exc:
            # a typo in a download link: say so plainly (400), as the month pages do
            return HttpResponseBadRequest(f"{exc}\n", content_type="text/plain; charset=utf-8")
        statements = services.statements_of(day, Statement.objects.visible_to(request.user))
        return _export(list(statements), fmt, f"chargeback-{month}")


# --- Admin actions ------------------------------------------------------------------------------


class _AdminPost(ActionRequiredMixin, View):
    """A POST-only admin action that reports its outcome as a message and redirects (303)."""

    required_action = VIEW
    write_action = ADMIN
    http_method_names = ["post"]

    def done(self, request: HttpRequest, ok: str | None, error: Exception | None,
             where: str) -> HttpResponse:
        if error is not None:
            messages.error(request, str(error))
        elif ok:
            messages.success(request, ok)
        return HttpResponseSeeOther(where)


class TermsView(_AdminPost):
    def post(self, request: HttpRequest) -> HttpResponse:
        month = _month(request)
        where = reverse("chargeback-home") + f"?month={month:%Y-%m}"
        form = TermsForm(request.POST)
        if not form.is_valid():
            return self.done(request, None, ValueError(form.first_error()), where)
        try:
            period = services.set_terms(month, form.cleaned_data["policy"],
                                        form.cleaned_data["waste_fee"], request.user)
            services.refresh_statements(month)
        except services.ChargebackError as exc:
            return self.done(request, None, exc, where)
        return self.done(request, f"{period.label}: {period.policy}, waste fee "
                                  f"{period.waste_fee}; drafts refreshed", None, where)


class RefreshView(_AdminPost):
    def post(self, request: HttpRequest) -> HttpResponse:
        month = _month(request)
        result = services.refresh_statements(month)
        return self.done(request, f"{result.month}: {result.drafts} drafts refreshed, "
                                  f"{result.finals_kept} final kept", None,
                         reverse("chargeback-home") + f"?month={result.month}")


class FinaliseView(_AdminPost):
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        statement = _visible_statement(request, pk)
        where = reverse("chargeback-statement", args=[pk])
        try:
            services.finalise(statement, request.user)
        except services.ChargebackError as exc:
            return self.done(request, None, exc, where)
        return self.done(request, "Statement finalised: it can no longer change; corrections "
                                  "are adjustment lines.", None, where)


class AdjustView(_AdminPost):
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        statement = _visible_statement(request, pk)
        where = reverse("chargeback-statement", args=[pk])
        form = AdjustmentForm(request.POST)
        if not form.is_valid():
            return self.done(request, None, ValueError(form.first_error()), where)
        try:
            services.add_adjustment(statement, request.user, form.cleaned_data["amount"],
                                    form.cleaned_data["description"])
        except services.ChargebackError as exc:
            return self.done(request, None, exc, where)
        return self.done(request, "Adjustment added.", None, where)


class ReconcileView(_AdminPost):
    """Compare a cluster's month with Slurm's own report now (admins; a few seconds)."""

    def post(self, request: HttpRequest) -> HttpResponse:
        month = _month(request)
        where = reverse("chargeback-home") + f"?month={month:%Y-%m}#reconcile"
        form = ReconcileForm(request.POST)
        if not form.is_valid():
            return self.done(request, None, ValueError(form.errors["cluster"][0]), where)
        cluster: Cluster = form.cleaned_data["cluster"]
        if why := cluster_services.cannot(cluster, Action.RECONCILE):
            return self.done(request, None, ValueError(f"{cluster.name}: {why}"), where)
        try:
            row = reconciliation.reconcile_month(cluster, month)
        except (AdapterError, reconciliation.ReconcileError) as exc:
            return self.done(request, None, exc, where)
        verdict = "agrees with Slurm" if row.ok else "differs from Slurm (see below)"
        return self.done(request, f"{cluster.name} {month:%Y-%m}: Beacon {verdict}.", None,
                         where)


class ReconciliationDetailView(ActionRequiredMixin, TemplateView):
    """One reconciliation: accounts side by side, and the jobs that differ."""

    template_name = "chargeback/reconciliation.html"
    required_action = ADMIN

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        ctx["rec"] = get_object_or_404(Reconciliation.objects.select_related("cluster"),
                                       pk=kwargs["pk"])
        return ctx


# --- The rate card ------------------------------------------------------------------------------


class RatesView(ActionRequiredMixin, TemplateView):
    """The rate card (admins): every rate, and a form to add one. Drafts follow a change."""

    template_name = "chargeback/rates.html"
    required_action = ADMIN
    write_action = ADMIN

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        ctx.update(rates=Rate.objects.all(), form=kwargs.get("form") or RateForm(
            initial={"valid_from": services.current_month()}),
            currency=settings.CHARGEBACK_CURRENCY)
        return ctx

    def post(self, request: HttpRequest) -> HttpResponse:
        form = RateForm(request.POST)
        if not form.is_valid():
            return self.render_to_response(self.get_context_data(form=form), status=400)
        return _rate_saved(request, services.save_rate(form.save(commit=False), request.user,
                                                       "rate added"))


class RateEditView(ActionRequiredMixin, TemplateView):
    """One rate's form (admins); a final statement keeps the price it copied."""

    template_name = "chargeback/rate_edit.html"
    required_action = ADMIN
    write_action = ADMIN

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        rate = get_object_or_404(Rate, pk=kwargs["pk"])
        ctx.update(rate=rate, form=kwargs.get("form") or RateForm(instance=rate),
                   currency=settings.CHARGEBACK_CURRENCY)
        return ctx

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        form = RateForm(request.POST, instance=get_object_or_404(Rate, pk=pk))
        if not form.is_valid():
            return self.render_to_response(self.get_context_data(pk=pk, form=form), status=400)
        return _rate_saved(request, services.save_rate(form.save(commit=False), request.user,
                                                       "rate changed"))


def _rate_saved(request: HttpRequest, months: int) -> HttpResponse:
    messages.success(request, f"Rate card saved; the drafts of {months} open month"
                              f"{'' if months == 1 else 's'} follow it (final statements keep "
                              "the prices they copied).")
    return HttpResponseSeeOther(reverse("chargeback-rates"))
