"""Telling people about findings: critical ones at once, the rest in a digest.

Both go by e-mail (``SECURITY_NOTIFY_EMAILS``) and to a webhook (``SECURITY_WEBHOOK_URL``)
when configured. Messages carry the finding's title, severity, place and link, never its
evidence. A digest lists each pending finding once however often it was seen.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from apps.analysis.security_types import severity_rank
from apps.security.adapters.webhook import post_json
from apps.security.models import Finding, FindingEvent

log = logging.getLogger(__name__)


def _link(finding: Finding) -> str:
    return settings.SITE_URL + reverse("security-detail", args=[finding.pk])


def _line(finding: Finding) -> str:
    where = finding.node_name or (f"job {finding.job_id_raw}" if finding.job_id_raw else "")
    place = f"{finding.cluster.name}{'/' + where if where else ''}"
    return f"[{finding.severity}] {finding.title} ({place}) {_link(finding)}"


def _payload(findings: Iterable[Finding], kind: str) -> dict[str, Any]:
    return {"kind": kind, "findings": [{
        "id": f.pk, "rule": f.rule_key, "severity": f.severity, "title": f.title,
        "cluster": f.cluster.name, "node": f.node_name, "job_id": f.job_id_raw,
        "user": f.user_name, "status": f.status, "occurrences": f.occurrences,
        "first_seen": f.first_seen.isoformat(), "last_seen": f.last_seen.isoformat(),
        "url": _link(f)} for f in findings]}


def _send(findings: list[Finding], kind: str, subject: str) -> list[str]:
    """E-mail and webhook; returns the channels used. Webhook errors propagate (retried)."""
    used = []
    recipients = list(settings.SECURITY_NOTIFY_EMAILS)
    if recipients:
        body = "\n".join(_line(f) for f in findings)
        send_mail(subject, body, None, recipients, fail_silently=False)
        used.append("email")
    if settings.SECURITY_WEBHOOK_URL:
        post_json(settings.SECURITY_WEBHOOK_URL, _payload(findings, kind),
                  timeout=settings.SECURITY_WEBHOOK_TIMEOUT)
        used.append("webhook")
    return used


def notify_now(finding_ids: Iterable[int]) -> int:
    """Send critical findings at once; each is marked notified with an event."""
    findings = list(Finding.objects.filter(pk__in=list(finding_ids))
                    .exclude(status=Finding.Status.SUPPRESSED).select_related("cluster"))
    if not findings:
        return 0
    subject = f"[Beacon security] {len(findings)} critical finding(s): {findings[0].title}"
    channels = _send(findings, "critical", subject[:200])
    _mark(findings, channels)
    return len(findings)


def send_digest() -> int:
    """Send every finding waiting for the digest in one message; clear the flags."""
    with transaction.atomic():
        pending = sorted(Finding.objects.select_for_update().filter(notify_pending=True)
                         .select_related("cluster").order_by("-last_seen"),
                         key=lambda f: -severity_rank(f.severity))
        if not pending:
            return 0
        channels = _send(pending, "digest",
                         f"[Beacon security] digest: {len(pending)} finding(s)")
        _mark(pending, channels)
    return len(pending)


def _mark(findings: list[Finding], channels: list[str]) -> None:
    now = timezone.now()
    Finding.objects.filter(pk__in=[f.pk for f in findings]).update(notified_at=now,
                                                                   notify_pending=False)
    FindingEvent.objects.bulk_create([
        FindingEvent(finding=f, at=now, action=FindingEvent.Action.NOTIFIED,
                     from_status=f.status, to_status=f.status, assignee_id=f.assignee_id,
                     reason=", ".join(channels) or "no channel configured") for f in findings])
    log.info("security: notified %d finding(s) via %s", len(findings), channels or "nothing")
