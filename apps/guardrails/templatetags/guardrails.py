"""The job page's guardrails section: alerts raised, the policy's steps, right-sizing."""

from __future__ import annotations

from typing import Any

from django import template
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


@register.simple_tag
def alert_text(alert: Alert) -> SafeString:
    """What the alert says, with the idleness reading's held share marked: the reading the
    alert was raised on, so dated by its raising (``apps/core/facts.py``)."""
    held = (alert.detail or {}).get("held")
    return fact_within(alert.text, "job-idle-share", alert.job, held, at=alert.raised_at,
                       after="memory held ")
