"""Telling people about findings: critical ones at once, the rest in a digest.

Both go by e-mail (``SECURITY_NOTIFY_EMAILS``) and to a webhook (``SECURITY_WEBHOOK_URL``)
when configured. Messages carry the finding's title, severity, place and link, never its
evidence. A digest lists each pending finding once however often it was seen, and every
detection run since the previous digest that read only part of its sources (a failed
telemetry query, Prometheus down, Slurm scripts unreadable): with the reason, so admins
learn that the rules did not run (issue 17).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from apps.analysis.security_types import severity_rank
from apps.core.models import TaskRun
from apps.core.webhooks import post_json
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


def _send(findings: list[Finding], kind: str, subject: str,
          problems: list[str] | None = None) -> list[str]:
    """E-mail and webhook; returns the channels used. Webhook errors propagate (retried)."""
    used = []
    recipients = list(settings.SECURITY_NOTIFY_EMAILS)
    if recipients:
        body = "\n".join(_line(f) for f in findings)
        if problems:
            body = ("Detection runs that did not read all their sources (the rules that "
                    "need them did not run):\n" + "\n".join(problems) +
                    (f"\n\n{body}" if body else ""))
        send_mail(subject, body, None, recipients, fail_silently=False)
        used.append("email")
    if settings.SECURITY_WEBHOOK_URL:
        payload = _payload(findings, kind)
        if problems:
            payload["detection_problems"] = problems
        post_json(settings.SECURITY_WEBHOOK_URL, payload,
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
    """Send every finding waiting for the digest, and the detection runs that failed or
    read only part of their sources since the last digest, in one message; clear the
    flags. Returns the number of findings sent."""
    problems = detection_problems_since(_last_digest())
    with transaction.atomic():
        pending = sorted(Finding.objects.select_for_update().filter(notify_pending=True)
                         .select_related("cluster").order_by("-last_seen"),
                         key=lambda f: -severity_rank(f.severity))
        if not pending and not problems:
            return 0
        subject = f"[Beacon security] digest: {len(pending)} finding(s)"
        if problems:
            subject += f", {len(problems)} detection run(s) incomplete"
        channels = _send(pending, "digest", subject, problems)
        _mark(pending, channels)
    return len(pending)


def _last_digest() -> datetime | None:
    """When the previous digest that went out started (runs after it are reported now)."""
    return TaskRun.objects.filter(kind="security.digest", status=TaskRun.Status.SUCCEEDED) \
        .order_by("-started_at").values_list("started_at", flat=True).first()


def detection_problems_since(since: datetime | None) -> list[str]:
    """One line per failure of each detection run that ended partial or failed after
    ``since``: cluster, window, status and the reason (with the query: admins read it)."""
    runs = TaskRun.objects.filter(kind="security.detect", status__in=[
        TaskRun.Status.PARTIAL, TaskRun.Status.FAILED]).select_related("cluster")
    if since is not None:
        runs = runs.filter(finished_at__gt=since)
    lines = []
    for run in runs.order_by("finished_at", "pk")[:50]:
        reasons = [str(f) for f in (run.stats or {}).get("failures") or []] or \
            [(run.error or "unknown error").splitlines()[0]]
        where = f"{run.cluster.name if run.cluster else '-'} {run.target}"
        lines += [f"[detection {run.status}] {where}: {r[:600]}" for r in reasons[:5]]
    return lines


def _mark(findings: list[Finding], channels: list[str]) -> None:
    now = timezone.now()
    Finding.objects.filter(pk__in=[f.pk for f in findings]).update(notified_at=now,
                                                                   notify_pending=False)
    FindingEvent.objects.bulk_create([
        FindingEvent(finding=f, at=now, action=FindingEvent.Action.NOTIFIED,
                     from_status=f.status, to_status=f.status, assignee_id=f.assignee_id,
                     reason=", ".join(channels) or "no channel configured") for f in findings])
    log.info("security: notified %d finding(s) via %s", len(findings), channels or "nothing")
