"""Sending what guardrails have to say: e-mail, and Slack/Mattermost webhooks.

One ``Message`` per send. Alerts are sent per user, a user's pending alerts together in
one message, at most ``GUARDRAILS_MAX_MESSAGES_PER_DAY`` alert messages per user in 24 h
(the rest wait for the next allowed send, together; an alert whose job ended while it
waited is dropped as expired). Pending alerts are claimed with a conditional UPDATE, so two
workers never send the same alert. A straggler with a hardware cause is copied to the
hardware contact (``accounts.Contact``, area hardware: the cluster's, else the
platform-wide one), outside the user's rate limit.

Who hears is ``address_of``: the linked portal user's e-mail, else the e-mail domain rule
(``BEACON_EMAIL_DOMAIN``), else nobody, with the reason kept on the alert
(``detail["no_address"]``) and counted per Slurm user in the run's figures (issue 28).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Q
from django.urls import reverse

from apps.accounts.models import Contact
from apps.analysis.recipients import Recipient, recipient
from apps.core.errors import AdapterError
from apps.core.webhooks import post_json
from apps.guardrails.alerts import local_time, scancel_command
from apps.guardrails.models import Alert, AlertPreference, Message, TeamAlertSetting
from apps.jobs.models import Job

log = logging.getLogger(__name__)
DAY = timedelta(hours=24)


def job_url(job: Job) -> str:
    return settings.SITE_URL + reverse("jobs-detail", args=[job.cluster.name, job.job_id])


def preferences_url() -> str:
    return settings.SITE_URL + reverse("guardrails-preferences")


# --- Alerts --------------------------------------------------------------------------------


def address_of(job: Job) -> Recipient:
    """Where the owner of ``job`` hears from Beacon, or why nowhere (by e-mail)."""
    user = job.user
    return recipient(job.user_name, user.get_username() if user is not None else None,
                     user.email if user is not None else "", settings.EMAIL_DOMAIN)


def deliver_pending(now: datetime) -> dict[str, Any]:
    """Send every owner's pending alerts that the rate limit allows; copy hardware causes.

    Owners are portal users, or Slurm users no portal user matches (the domain rule may
    still reach them). ``no_address`` counts the alerts nobody could be told of, and
    ``no_address_users`` says for which Slurm users and why.
    """
    stats: dict[str, Any] = {"messages": 0, "alerts_sent": 0, "expired": 0, "rate_limited": 0,
                             "failed": 0, "no_address": 0, "no_address_users": {}}
    pending = (Alert.objects.filter(status=Alert.Status.PENDING)
               .select_related("job", "job__cluster", "job__user", "job__team")
               .order_by("job__user_id", "job__user_name", "raised_at", "pk"))
    by_owner: dict[tuple[int | None, str], list[Alert]] = {}
    for alert in pending:
        job = alert.job
        by_owner.setdefault((job.user_id, "" if job.user_id else job.user_name), []).append(alert)
    for (user_id, _name), alerts in by_owner.items():
        _deliver_user(user_id, alerts, now, stats)
    return stats


def _deliver_user(user_id: int | None, alerts: list[Alert], now: datetime,
                  stats: dict[str, Any]) -> None:
    address = address_of(alerts[0].job)
    if _sent_today(user_id, address.email, now) >= settings.GUARDRAILS_MAX_MESSAGES_PER_DAY:
        ended = [a.pk for a in alerts if not a.job.is_active]
        stats["expired"] += Alert.objects.filter(pk__in=ended, status=Alert.Status.PENDING) \
            .update(status=Alert.Status.EXPIRED)
        stats["rate_limited"] += len(alerts) - len(ended)
        return
    claimed = _claim(alerts)
    if not claimed:
        return
    message = send_alerts(claimed, now, address)
    if message is None:
        _no_address(claimed, alerts[0].job.user_name, address.reason, stats)
        return
    ok = bool(message.channels)
    Alert.objects.filter(pk__in=[a.pk for a in claimed]).update(
        status=Alert.Status.SENT if ok else Alert.Status.PENDING, message=message if ok else None)
    stats["messages" if ok else "failed"] += 1
    stats["alerts_sent"] += len(claimed) if ok else 0
    for alert in claimed:
        if ok and alert.hardware:
            copy_to_hardware(alert, now)


def _no_address(alerts: Sequence[Alert], slurm_user: str, reason: str,
                stats: dict[str, Any]) -> None:
    """Keep the alerts unsent with the reason, and count them for the run's figures."""
    for alert in alerts:
        alert.detail = {**alert.detail, "no_address": reason}
        alert.status = Alert.Status.NO_ADDRESS
        alert.save(update_fields=["detail", "status"])
    stats["no_address"] += len(alerts)
    stats["no_address_users"][slurm_user] = reason
    log.warning("guardrails: %d alert(s) for Slurm user %s not sent: %s", len(alerts),
                slurm_user, reason)


def _sent_today(user_id: int | None, email: str, now: datetime) -> int:
    """Alert messages that went out in the last 24 h: to the portal user, else (an owner no
    portal user matches) to the address the domain rule gives."""
    if user_id is None and not email:
        return 0
    sent = Message.objects.filter(kind=Message.Kind.ALERT, created_at__gt=now - DAY)
    sent = sent.filter(user_id=user_id) if user_id is not None else sent.filter(
        user__isnull=True, to=[email])
    return sent.exclude(channels=[]).count()


def _claim(alerts: Sequence[Alert]) -> list[Alert]:
    """Take the alerts from PENDING to SENDING; return those this worker got."""
    mine = []
    for alert in alerts:
        if Alert.objects.filter(pk=alert.pk, status=Alert.Status.PENDING).update(
                status=Alert.Status.SENDING):
            mine.append(alert)
    return mine


def send_alerts(alerts: Sequence[Alert], now: datetime,
                address: Recipient | None = None) -> Message | None:
    """One message carrying ``alerts`` (one owner's), by e-mail and webhooks.

    None when there is nowhere to send it (no address, no webhook). The message's
    ``channels`` lists what worked (empty: everything failed; the alerts are retried).
    """
    jobs = list({a.job_id: a.job for a in alerts}.values())
    user = jobs[0].user
    address = address or address_of(jobs[0])
    emails = [address.email] if address.email else []
    hooks = _webhooks(user, jobs)
    if not emails and not hooks:
        return None
    subject, body = alert_text(alerts)
    return _send(Message.Kind.ALERT, user, emails, subject, body, hooks, now)


def alert_text(alerts: Sequence[Alert]) -> tuple[str, str]:
    """The subject and the plain-words body of one alert message."""
    jobs = list({a.job_id: a.job for a in alerts}.values())
    first = jobs[0]
    what = ", ".join(dict.fromkeys(a.get_kind_display() for a in alerts))
    name = f" ({first.name[:40]})" if first.name else ""
    more = f" and {len(jobs) - 1} more" if len(jobs) > 1 else ""
    subject = f"[Beacon] Job {first.display_id}{name}{more}: {what}"
    parts = ["Beacon watches running jobs for GPUs that wait, so you hear about it while the "
             "job runs.", ""]
    for job in jobs:
        parts += _job_block(job, [a for a in alerts if a.job_id == job.pk])
    parts += [f"You get these because job alerts are on for you. Turn them off, or choose "
              f"which kinds you want: {preferences_url()}"]
    return subject[:200], "\n".join(parts)


def _job_block(job: Job, alerts: Sequence[Alert]) -> list[str]:
    started = local_time(job, job.start_time) if job.start_time else "not started"
    lines = [f"Job {job.display_id} \"{job.name}\" on {job.cluster.name} "
             f"(partition {job.partition or '-'}, {job.gpus} GPUs, started {started}):", ""]
    for alert in alerts:
        lines += [f"* {alert.get_kind_display()}: {alert.text}",
                  f"  What to check: {alert.advice}", ""]
    lines += [f"Job page (charts and evidence): {job_url(job)}",
              "If the job is no longer needed, cancel it:",
              f"    {scancel_command(job)}", ""]
    return lines


def copy_to_hardware(alert: Alert, now: datetime) -> Message | None:
    """The hardware contact's copy of a straggler with a hardware cause."""
    contact = hardware_contact(alert.job)
    if contact is None or not contact.email:
        return None
    job = alert.job
    subject = (f"[Beacon] Hardware: GPU {', '.join(alert.gpus)} slows job {job.display_id} "
               f"on {job.cluster.name}")
    body = "\n".join([
        f"{alert.text}", "", f"The job's owner ({job.user_name}) has been told too.",
        f"Evidence: {'; '.join(alert.detail.get('evidence', [])) or 'see the job page'}",
        f"Job page: {job_url(job)}"])
    return _send(Message.Kind.HARDWARE, None, [contact.email], subject, body, [], now)


def hardware_contact(job: Job) -> Contact | None:
    """The cluster's hardware contact, else the platform-wide one."""
    rows = list(Contact.objects.filter(area=Contact.Area.HARDWARE)
                .filter(Q(cluster_id=job.cluster_id) | Q(cluster__isnull=True))
                .order_by("cluster_id", "name"))
    own = [c for c in rows if c.cluster_id == job.cluster_id]
    return next(iter(own or rows), None)


# --- Channels --------------------------------------------------------------------------------


def _webhooks(user: Any, jobs: Iterable[Job]) -> list[tuple[str, str]]:
    """(url, format) of the user's own webhook and the webhooks of the jobs' teams."""
    hooks: list[tuple[str, str]] = []
    pref = AlertPreference.objects.filter(user=user).first() if user is not None else None
    if pref is not None and pref.webhook_url:
        hooks.append((pref.webhook_url, pref.webhook_format))
    teams = {j.team_id for j in jobs if j.team_id}
    for setting in TeamAlertSetting.objects.filter(team_id__in=teams).exclude(webhook_url=""):
        hooks.append((setting.webhook_url, setting.webhook_format))
    return list(dict.fromkeys(hooks))


def webhook_body(subject: str, body: str, fmt: str) -> dict[str, Any]:
    """Slack and Mattermost incoming webhooks both take ``text`` (Markdown-ish)."""
    payload: dict[str, Any] = {"text": f"*{subject}*\n{body}" if fmt == "slack"
                               else f"**{subject}**\n{body}"}
    if fmt == "mattermost":
        payload["username"] = "Beacon"
    return payload


def _send(kind: str, user: Any, emails: list[str], subject: str, body: str,
          hooks: list[tuple[str, str]], now: datetime) -> Message:
    """Send through every channel; record the message with what worked and what failed."""
    done, errors = [], []
    if emails:
        try:
            send_mail(subject, body, None, emails, fail_silently=False)
            done.append("email")
        except OSError as exc:  # smtplib errors are OSErrors
            errors.append(f"email: {exc}")
    for url, fmt in hooks:
        try:
            post_json(url, webhook_body(subject, body, fmt),
                      timeout=settings.GUARDRAILS_WEBHOOK_TIMEOUT)
            done.append(fmt)
        except AdapterError as exc:
            errors.append(f"{fmt}: {exc}")
    message = Message.objects.create(kind=kind, user=user, to=emails, subject=subject,
                                     body=body, channels=done, error="; ".join(errors)[:2000],
                                     created_at=now, sent_at=now if done else None)
    log.info("guardrails: %s message to %s via %s%s", kind, user or emails, done or "nothing",
             f"; failed: {errors}" if errors else "")
    return message


def send_notice(kind: str, user: Any, subject: str, body: str, now: datetime,
                jobs: Sequence[Job] = ()) -> Message | None:
    """A policy notice or a digest to one user (their address and webhooks); without an
    e-mail of their own, the domain rule's address for the jobs' Slurm user."""
    emails = [user.email] if user is not None and user.email else []
    if not emails and jobs:
        address = address_of(jobs[0])
        emails = [address.email] if address.email else []
    hooks = _webhooks(user, jobs)
    if not emails and not hooks:
        return None
    return _send(kind, user, emails, subject, body, hooks, now)


def record_simulated(kind: str, user: Any, subject: str, body: str, now: datetime,
                     jobs: Sequence[Job] = ()) -> Message:
    """``send_notice``'s twin for a simulated cluster (the demo): the message is stored,
    marked simulated, and sent nowhere; the My alerts page shows it."""
    return Message.objects.create(kind=kind, user=user, subject=subject[:200], body=body,
                                  created_at=now, simulated=True)


# send_notice or record_simulated
Deliver = Callable[[str, Any, str, str, datetime], "Message | None"]
