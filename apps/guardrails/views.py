"""Guardrail pages: "My alerts" (what each user was sent), preferences (a user's own, and
the teams they lead), and the admins' per-job opt-out from the idle-job policy.

Alerts are read through ``Alert.objects.visible_to(user)`` (own jobs; a lead's team's; all
for admins); a job is found through ``Job.objects.visible_to`` (404 when not visible).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views import View
from django.views.generic import TemplateView

from apps.accounts.models import Membership, Team
from apps.accounts.permissions import ADMIN, VIEW, ActionRequiredMixin, lead_team_ids, signed_in
from apps.audit import services as audit
from apps.audit.models import AuditEvent
from apps.core import webhooks
from apps.guardrails import policy
from apps.guardrails.forms import AlertScopeForm, ExemptJobForm, PreferenceForm, TeamSettingForm
from apps.guardrails.models import Alert, AlertPreference, Exemption, Message, TeamAlertSetting
from apps.jobs.models import Job
from apps.jobs.views import HttpResponseSeeOther

PAGE = 200


class AlertListView(ActionRequiredMixin, TemplateView):
    """The alerts raised on the user's jobs and the messages they were sent; leads may
    switch to their teams' alerts (``?scope=team``), admins to every alert."""

    template_name = "guardrails/alerts.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        user = signed_in(self.request)
        leads = lead_team_ids(user)
        scope = AlertScopeForm(self.request.GET).scope_for(bool(leads) or user.is_staff)
        alerts: QuerySet[Alert] = Alert.objects.visible_to(user).select_related(
            "job", "job__cluster", "message")
        if scope == "mine":
            alerts = alerts.filter(job__user=user)
        elif not user.is_staff:
            alerts = alerts.filter(job__team_id__in=leads)
        mine = Message.objects.visible_to(user).filter(user=user)
        ctx.update(scope=scope, alerts=alerts[:PAGE], can_team=bool(leads),
                   sent=mine[:50], digests=latest_digests(mine), policy_mode=policy.mode(),
                   simulated=any(a.status == Alert.Status.SIMULATED for a in alerts[:PAGE]))
        return ctx


def latest_digests(messages: QuerySet[Message]) -> list[Message]:
    """The user's latest right-sizing digest and latest team digest (a lead's), if any."""
    kinds = (Message.Kind.DIGEST, Message.Kind.TEAM_DIGEST)
    latest = (messages.filter(kind=kind).order_by("-created_at", "-id").first() for kind in kinds)
    return [m for m in latest if m is not None]


class PreferenceView(ActionRequiredMixin, TemplateView):
    """A user's own alert choices, and the defaults of the teams they lead."""

    template_name = "guardrails/preferences.html"
    write_action = VIEW  # everyone edits their own choices; team forms check the lead role

    def _forms(self, data: Any = None) -> tuple[PreferenceForm, list[tuple[Team, Any]]]:
        user = signed_in(self.request)
        pref, _ = AlertPreference.objects.get_or_create(user=user)
        own = PreferenceForm(data, instance=pref, prefix="me")
        teams = Team.objects.filter(pk__in=lead_team_ids(user))  # admins: the admin site
        team_forms = []
        for team in teams:
            setting = TeamAlertSetting.objects.filter(team=team).first() or \
                TeamAlertSetting(team=team)
            team_forms.append((team, TeamSettingForm(data, instance=setting,
                                                     prefix=f"team-{team.pk}")))
        return own, team_forms

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        own, team_forms = kwargs.get("forms") or self._forms()
        memberships = Membership.objects.filter(user=signed_in(self.request)).select_related("team")
        ctx.update(form=own, team_forms=team_forms, memberships=memberships)
        return ctx

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        own, team_forms = self._forms(request.POST)
        which = request.POST.get("form", "me")
        if which == "me":
            if not own.is_valid():
                return self.render_to_response(self.get_context_data(forms=(own, team_forms)))
            own.save()
            _audit_internal_webhook(request, own, "own alert preferences")
        else:
            form = next((f for t, f in team_forms if f"team-{t.pk}" == which), None)
            if form is None:  # not a team this user leads
                return HttpResponse(status=403)
            if not form.is_valid():
                return self.render_to_response(self.get_context_data(forms=(own, team_forms)))
            form.save()
            _audit_internal_webhook(request, form, f"team {form.instance.team}")
        messages.success(request, "Saved.")
        return HttpResponseSeeOther(reverse("guardrails-preferences"))


def _audit_internal_webhook(request: HttpRequest, form: Any, whose: str) -> None:
    """A webhook saved to an internal address the admins allow-listed is audited (issue 27)."""
    url = form.cleaned_data.get("webhook_url") or ""
    where = webhooks.allow_listed(url) if "webhook_url" in form.changed_data and url else {}
    if where:
        audit.record(AuditEvent.Action.WEBHOOK, request=request, user=request.user,
                     target=whose, details=where)


class ExemptJobView(ActionRequiredMixin, View):
    """An admin grants one job an opt-out from the idle-job policy (or withdraws it)."""

    required_action = ADMIN
    write_action = ADMIN

    def post(self, request: HttpRequest, cluster: str, job_id: int) -> HttpResponse:
        job = get_object_or_404(Job.objects.visible_to(request.user).select_related("cluster"),
                                cluster__name=cluster, job_id=job_id)
        url = reverse("jobs-detail", args=[cluster, job_id]) + "#guardrails"
        if request.POST.get("withdraw"):
            Exemption.objects.filter(kind=Exemption.Kind.JOB, value=str(job.job_id),
                                     cluster=job.cluster).delete()
            self._audit(request, job, "exemption withdrawn", "")
            return HttpResponseSeeOther(url)
        form = ExemptJobForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Say why the job is exempt.")
            return HttpResponseSeeOther(url)
        Exemption.objects.update_or_create(
            kind=Exemption.Kind.JOB, value=str(job.job_id), cluster=job.cluster,
            defaults={"reason": form.cleaned_data["reason"], "granted_by": signed_in(request)})
        self._audit(request, job, "exemption granted", form.cleaned_data["reason"])
        return HttpResponseSeeOther(url)

    @staticmethod
    def _audit(request: HttpRequest, job: Job, what: str, reason: str) -> None:
        audit.record(AuditEvent.Action.GUARDRAIL, request=request, user=request.user,
                     target=f"job {job.cluster.name}:{job.display_id}",
                     details={"action": what, "reason": reason})
