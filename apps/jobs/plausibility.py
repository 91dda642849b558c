"""Implausible job records (issue 25): an admin accepting one, and the note pages show.

The importer stores each record's reasons (``apps/analysis/plausibility.py``) in
``Job.implausible``; ``Job.objects.countable()`` leaves the records no admin has accepted
out of chargeback, quotas and SLOs. Accepting is the only write here: one conditional
UPDATE (two admins clicking at once accept once) and one audit event.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from apps.accounts.models import Membership, Team
from apps.audit import services as audit
from apps.audit.models import AuditEvent
from apps.jobs.models import Job
from apps.jobs.models.jobs import PLAUSIBLE


def accept(job: Job, user: Any, note: str) -> bool:
    """Count a flagged record from now on (statements and scorecards include it from their
    next refresh), recording who, when and why in the audit log. False when there was
    nothing to accept: the record is plausible, or was accepted meanwhile."""
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
