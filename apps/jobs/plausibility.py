"""Implausible job records (issue 25): an admin accepting one, and the note pages show.

The importer stores each record's reasons (``apps/analysis/plausibility.py``) in
``Job.implausible``; ``Job.objects.countable()`` leaves the records no admin has accepted
out of chargeback, quotas and SLOs. Accepting is the only write here: one conditional
UPDATE (two admins clicking at once accept once) and one audit event. A record that cannot
be right (10^12 GPUs, a negative count) is refused: it would put its claim on a statement.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from apps.accounts.models import Membership, Team
from apps.analysis.plausibility import cannot_be_right
from apps.audit import services as audit
from apps.audit.models import AuditEvent
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
