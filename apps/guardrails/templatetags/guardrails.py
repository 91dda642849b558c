"""The job page's guardrails section (alerts raised, the policy's steps, right-sizing), and
the Platform page's list of alerts nobody received."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import template
from django.db.models import Count, Max
from django.utils import timezone
from django.utils.safestring import SafeString

from apps.core.facts import fact_within
from apps.guardrails import policy
from apps.guardrails.alerts import scancel_command
from apps.guardrails.models import Alert, Exemption, PolicyAction
from apps.guardrails.sizing import advice_for
from apps.jobs.models import Job

register = template.Library()


@register.inclusion_tag("guardrails/partials/job_panel.html", takes_context=True)
def guardrails_panel(context: dict[str, Any], job: Job) -> dict[str, Any]:
    """The page's view has already checked the job is visible to this user."""
    user = context["request"].user
    exempt = Exemption.objects.filter(kind=Exemption.Kind.JOB, value=str(job.job_id),
                                      cluster=job.cluster).first()
    return {"job": job, "alerts": list(Alert.objects.filter(job=job).order_by("raised_at")),
            "actions": list(PolicyAction.objects.filter(job=job).order_by("at", "pk")),
            "advice": advice_for(job), "policy_mode": policy.mode(),
            "policy_exemption": policy.exemption_for(job) if job.is_active else "",
            "job_exemption": exempt, "is_staff": user.is_staff,
            "scancel": scancel_command(job), "csrf_token": context.get("csrf_token")}


UNADDRESSED_DAYS = 30


@register.inclusion_tag("guardrails/partials/unaddressed.html")
def guardrails_unaddressed() -> dict[str, Any]:
    """Slurm users whose alerts of the last 30 days reached nobody, with the latest reason
    (admins' Platform page: the view requires the admin action)."""
    since = timezone.now() - timedelta(days=UNADDRESSED_DAYS)
    rows = list(Alert.objects.filter(status=Alert.Status.NO_ADDRESS, raised_at__gte=since)
                .values("job__user_name").annotate(alerts=Count("pk"), last=Max("raised_at"))
                .order_by("-alerts", "job__user_name"))
    latest = {name: (detail or {}).get("no_address", "") for name, detail in Alert.objects
              .filter(status=Alert.Status.NO_ADDRESS, raised_at__gte=since)
              .order_by("raised_at").values_list("job__user_name", "detail")}
    return {"unaddressed": [{"user": r["job__user_name"], "alerts": r["alerts"],
                             "last": r["last"], "reason": latest.get(r["job__user_name"], "")}
                            for r in rows], "days": UNADDRESSED_DAYS}


@register.simple_tag
def alert_text(alert: Alert) -> SafeString:
    """What the alert says, with the idleness reading's held share marked: the reading the
    alert was raised on, so dated by its raising (``apps/core/facts.py``)."""
    held = (alert.detail or {}).get("held")
    return fact_within(alert.text, "job-idle-share", alert.job, held, at=alert.raised_at,
                       after="memory held ")
