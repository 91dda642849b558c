"""Implausible job records (issue 25): an admin accepting one, and the note pages show.

The importer stores each record's reasons (``apps/analysis/plausibility.py``) in
``Job.implausible``; ``Job.objects.countable()`` leaves the records no admin has accepted
out of chargeback, quotas and SLOs. Accepting is one conditional UPDATE (two admins clicking
at once accept once) and one audit event; a record that cannot be right (10^12 GPUs, a
negative count) is refused: it would put its claim on a statement. ``check_stored`` checks
the records stored before the importer checked them (``manage.py check_plausibility``).
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from apps.accounts.models import Membership, Team
from apps.analysis.plausibility import Claim, cannot_be_right, reasons
from apps.audit import services as audit
from apps.audit.models import AuditEvent
from apps.clusters.models import Cluster
from apps.core.runs import tracked_run
from apps.jobs.models import Job
from apps.jobs.models.jobs import PLAUSIBLE


class NotAcceptable(Exception):
    """A record no admin may accept as it stands, with what to do instead."""


def refusal(job: Job) -> str:
    """Why ``job``'s record may not be accepted, in words for its page ("": it may)."""
    why = cannot_be_right(job, job.cluster.shards_per_gpu())
    if not why:
        return ""
    return (f"It cannot be accepted: {why}. Correct the record where it comes from (Slurm's "
            "accounting, or the saved dump) and import it again: a changed record is checked "
            "again.")


def accept(job: Job, user: Any, note: str) -> bool:
    """Count a flagged record from now on (statements and scorecards include it from their
    next refresh), recording who, when and why in the audit log. False when there was
    nothing to accept: the record is plausible, or was accepted meanwhile;
    ``NotAcceptable`` when it cannot be right."""
    if job.implausible and (why := refusal(job)):
        raise NotAcceptable(why)
    now = timezone.now()
    accepted = (Job.objects.filter(pk=job.pk, implausible_accepted_at__isnull=True)
                .exclude(PLAUSIBLE)
                .update(implausible_accepted_at=now, implausible_accepted_by=user))
    if not accepted:
        return False
    job.implausible_accepted_at, job.implausible_accepted_by = now, user
    audit.record(AuditEvent.Action.ADMIN, audit.CURRENT_REQUEST.get(), user,
                 target=f"job {job.cluster.name}:{job.display_id}"[:300],
                 details={"action": "implausible record accepted",
                          "reasons": job.implausible, "note": note})
    return True


def held_back_note(jobs: QuerySet[Job], user: Any, team: Team | None = None,
                   ) -> dict[str, Any] | None:
    """``{"count", "url"}`` for a page that left these held-back records out (None: none):
    the job list filtered to them, in the scope the user may list them in."""
    count = jobs.count()
    if not count:
        return None
    query = {"implausible": "1", "scope": _scope(user, team)}
    if team is not None:
        query["team"] = team.slug
    return {"count": count, "url": f"{reverse('jobs-list')}?{urlencode(query)}"}


def _scope(user: Any, team: Team | None) -> str:
    if user.is_staff:
        return "all"
    leads = Membership.objects.filter(user=user, role=Membership.Role.LEAD)
    if team is not None:
        leads = leads.filter(team=team)
    return "team" if leads.exists() else "mine"


def check_stored(cluster: Cluster, now: datetime | None = None) -> dict[str, int]:
    """Check ``cluster``'s stored records again, as a TaskRun: after an upgrade (records
    imported before the check existed), or once the cluster's nodes are synced.

    A record not flagged is flagged when it is implausible; a flagged one is cleared when
    it is plausible now (the nodes it needed are synced). A flagged record that still is
    keeps its reasons as the importer wrote them, and its acceptance.
    """
    now = now or timezone.now()
    capacity = cluster.capacity()
    claimed = [f.name for f in fields(Claim)]
    changed: list[Job] = []
    checked = 0
    with tracked_run("jobs.check_plausibility", cluster=cluster, target=cluster.name) as run:
        rows = Job.objects.filter(cluster=cluster).only("pk", "implausible", *claimed)
        for job in rows.iterator(chunk_size=5000):
            checked += 1
            found = reasons(job, capacity, now)
            if bool(found) != bool(job.implausible):
                job.implausible = found
                changed.append(job)
        for job in changed:
            job.implausible_accepted_at, job.implausible_accepted_by = None, None
        Job.objects.bulk_update(changed, ["implausible", "implausible_accepted_at",
                                          "implausible_accepted_by"], batch_size=1000)
        flagged = sum(1 for job in changed if job.implausible)
        run.stats = {"checked": checked, "flagged": flagged, "cleared": len(changed) - flagged}
    return run.stats
