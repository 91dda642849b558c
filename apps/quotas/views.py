"""Quota pages: usage against each team's quota (members of the team and admins), and the
admins' edit flow: value and reason -> preview (the exact sacctmgr command, Slurm's dry run)
-> confirmation -> write. A conflict or a Slurm failure comes back to the form with the
reason; nothing is applied then."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.generic import TemplateView

from apps.accounts.models import Team
from apps.accounts.permissions import ADMIN, ActionRequiredMixin
from apps.chargeback import services as billing
from apps.clusters import services as cluster_services
from apps.clusters.models import SlurmAccount
from apps.clusters.services import Action
from apps.core.errors import AdapterError
from apps.jobs.views import HttpResponseSeeOther
from apps.quotas import services
from apps.quotas.forms import MonthForm, QuotaApplyForm, QuotaForm
from apps.quotas.models import QuotaAlert, QuotaChange


def visible_accounts(user: Any) -> QuerySet[SlurmAccount]:
    """Slurm accounts of the teams the user may see (all for admins)."""
    return (SlurmAccount.objects.filter(team__in=Team.objects.visible_to(user))
            .select_related("team", "cluster").order_by("team__name", "cluster__name", "name"))


class QuotaHomeView(ActionRequiredMixin, TemplateView):
    """Each visible account: quota in force, usage bar, forecast, drift; admins see changes."""

    template_name = "quotas/home.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        user = self.request.user
        accounts = visible_accounts(user)
        billing.request_refresh(billing.current_month())  # as the chargeback pages do
        ctx["rows"] = services.usage_for(accounts)
        ctx["changes"] = QuotaChange.objects.visible_to(user).select_related(
            "account__cluster", "actor")[:30]
        ctx["alerts"] = QuotaAlert.objects.filter(account__in=accounts).select_related(
            "account")[:20]
        return ctx


class QuotaEditView(ActionRequiredMixin, TemplateView):
    """Admins: set one account's quota for a month (GET: the form; POST: preview or apply)."""

    template_name = "quotas/edit.html"
    required_action = ADMIN

    def _account(self) -> SlurmAccount:
        return get_object_or_404(visible_accounts(self.request.user), pk=self.kwargs["pk"])

    def _context(self, account: SlurmAccount, **extra: Any) -> dict[str, Any]:
        return {"account": account, "usage": services.usage_for([account])[0],
                "changes": QuotaChange.objects.filter(account=account).select_related(
                    "actor")[:50], **_abilities(account), **extra}

    def _refused_month(self, account: SlurmAccount, error: str, typed: str,
                       **extra: Any) -> HttpResponse:
        """A month it cannot read ("2026-13") is a 400 that shows the form again with the
        error and what was typed, never a 404 page that loses the input (issue 26)."""
        ctx = self._context(account, month=billing.current_month(), month_text=typed[:40],
                            error=error, **extra)
        return render(self.request, self.template_name, ctx, status=400)

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        account, form = self._account(), MonthForm(request.GET)
        if (error := form.month_error()) is not None:
            return self._refused_month(account, error, request.GET.get("month", ""))
        ctx = self.get_context_data(**kwargs)
        ctx.update(self._context(account, month=form.cleaned_data["month"]))
        return self.render_to_response(ctx)

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        account, data = self._account(), request.POST
        step = data.get("step")
        if step == "outside_change":
            return self._outside_change(request, account)
        form = QuotaApplyForm(data) if step == "apply" else QuotaForm(data)
        typed = {"hours": data.get("hours", ""), "reason": data.get("reason", "")}
        if (error := form.month_error()) is not None:
            return self._refused_month(account, error, data.get("month", ""), **typed)
        month: date = form.cleaned_data["month"]
        ctx = self._context(account, month=month, **typed)
        if step == "apply":
            return self._apply(request, account, form, ctx)
        if not form.is_valid():
            ctx["error"] = form.first_error()
            return render(request, self.template_name, ctx)
        try:
            minutes = services.quota_minutes(account, month, form.cleaned_data["hours"])
            ctx["preview"] = services.preview(account, month, minutes)
        except (services.QuotaError, AdapterError) as exc:
            ctx["error"] = str(exc)
        return render(request, self.template_name, ctx)

    def _apply(self, request: HttpRequest, account: SlurmAccount, form: QuotaForm,
               ctx: dict[str, Any]) -> HttpResponse:
        if not form.is_valid():
            ctx["error"] = f"Not applied: {form.first_error()}"
            return render(request, self.template_name, ctx)
        typed, month = form.cleaned_data, ctx["month"]
        try:
            minutes = services.quota_minutes(account, month, typed["hours"])
            quota = services.apply(account, month, minutes, typed["seen_minutes"],
                                   typed["seen_version"], typed["reason"], request.user)
        except services.QuotaConflict as exc:
            ctx["error"] = f"Not applied: {exc}"
            return render(request, self.template_name, ctx, status=409)
        except (services.QuotaError, AdapterError, ValueError) as exc:
            ctx["error"] = f"Not applied: {exc}"
            return render(request, self.template_name, ctx)
        word = "scheduled" if quota.state == quota.State.SCHEDULED else "written to Slurm"
        messages.success(request, f"{account.name} {month:%Y-%m}: {quota.gpu_hours_text} "
                                  f"{word}.")
        return HttpResponseSeeOther(reverse("quotas-home"))

    def _outside_change(self, request: HttpRequest, account: SlurmAccount) -> HttpResponse:
        """Demo only: change the simulated Slurm limit as an admin with sacctmgr would, then
        run the periodic check, which finds the drift."""
        try:
            text = services.simulate_outside_change(account)
        except (services.QuotaError, AdapterError) as exc:
            messages.error(request, f"Nothing changed: {exc}")
        else:
            messages.warning(request, text)
        return HttpResponseSeeOther(reverse("quotas-edit", args=[account.pk]))


def _abilities(account: SlurmAccount) -> dict[str, Any]:
    """What the cluster's Slurm backend can do here, said before a button is pressed."""
    cluster = account.cluster
    return {"cannot_preview": cluster_services.cannot(cluster, Action.QUOTA_PREVIEW),
            "cannot_write": cluster_services.cannot(cluster, Action.QUOTA_WRITE),
            "simulated": cluster.is_simulated}

