"""Raising alerts on running jobs: once per job and kind, in plain words.

``raise_alerts`` turns what the pure rules say about a live view into ``Alert`` rows. The
unique constraint (job, kind) is the dedup: a kind already raised for the job is never
raised again, however often the beat looks. Whether the owner wants it is settled here
(``wants``): an opted-out user's alert is kept for the page, marked as not sent.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import IntegrityError, transaction

from apps.analysis.guardrails import CHECKS, AlertConfig, LiveJob, Raised, describe, evaluate
from apps.guardrails.models import Alert, AlertPreference, TeamAlertSetting
from apps.jobs.models import Job

log = logging.getLogger(__name__)


def raise_alerts(job: Job, view: LiveJob, now: datetime, config: AlertConfig,
                 status: str | None = None) -> list[Alert]:
    """Store the alerts ``view`` calls for that ``job`` does not have yet; return the new ones.

    ``status`` overrides whether they are sent: ``Alert.Status.SIMULATED`` (a simulated
    cluster's live pass, make demo-full) keeps them for the pages and sends nothing."""
    raised = evaluate(view, config)
    if not raised:
        return []
    have = set(Alert.objects.filter(job=job).values_list("kind", flat=True))
    new = []
    for r in raised:
        if r.kind in have:
            continue
        alert = _alert(job, r, now, status)
        try:
            with transaction.atomic():
                alert.save()
        except IntegrityError:  # a concurrent check raised it first
            continue
        new.append(alert)
        log.info("guardrails: job %s: %s on %s", job, r.kind, ", ".join(r.gpus))
    return new


def store_replayed(job: Job, raised: list[tuple[float, Raised]]) -> int:
    """Keep what the replay of a simulated month raised on ``job`` (never sent): the demo's
    My alerts and job pages show them. Once per job and kind, like the beat's."""
    have = set(Alert.objects.filter(job=job).values_list("kind", flat=True))
    rows = [_alert(job, r, datetime.fromtimestamp(t, tz=UTC), Alert.Status.SIMULATED)
            for t, r in raised if r.kind not in have]
    Alert.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def _alert(job: Job, r: Raised, now: datetime, status: str | None = None) -> Alert:
    since = datetime.fromtimestamp(r.since, tz=UTC)
    started = job.start_time or since
    status = status or (Alert.Status.PENDING if wants(job, r.kind) else Alert.Status.OPTED_OUT)
    return Alert(job=job, kind=r.kind, status=status, gpus=list(r.gpus), since=since,
                 raised_at=now, hardware=r.hardware,
                 text=describe(r, local_time(job, started), local_time(job, since)),
                 advice=CHECKS[r.kind], detail=dict(r.detail))


def local_time(job: Job, when: datetime) -> str:
    """A time as the cluster's users read it (its time zone, named)."""
    zone = ZoneInfo(job.cluster.timezone or "UTC")
    return when.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z")


def wants(job: Job, kind: str) -> bool:
    """Does the job's owner want alerts of ``kind``? Their own choice, else the team's
    default, else ``GUARDRAILS_ALERTS_DEFAULT``; a job with no portal user: the team's."""
    pref = AlertPreference.objects.filter(user_id=job.user_id).first() if job.user_id else None
    if pref is not None and kind in (pref.kinds_off or []):
        return False
    if pref is not None and pref.alerts is not None:
        return pref.alerts
    team = TeamAlertSetting.objects.filter(team_id=job.team_id).first() if job.team_id else None
    if team is not None:
        return team.alerts_default
    return bool(settings.GUARDRAILS_ALERTS_DEFAULT)


def scancel_command(job: Job) -> str:
    """The exact command that ends the job (an array task by its ``id_task``)."""
    return f"scancel {job.display_id or job.job_id}"
