"""Storing what the rules found, and the lifecycle of a finding.

``record_hits`` upserts rule hits on ``(cluster, dedup_key)``: the same condition updates
one finding. A sighting that continues the last one (within the rule's ``merge_gap``)
extends ``last_seen``; a later one is a new occurrence. Re-running a window changes
nothing, so runs over overlapping windows are safe. A resolved finding seen again after
its resolution reopens; suppressed and acknowledged ones keep their status.

``transition`` moves a finding through open -> acknowledged -> resolved, or suppressed
(reason and expiry), with an assignee and comments; every action is a ``FindingEvent`` and
an audit event (``/platform/audit/``, and its JSON line on the ``beacon.audit`` logger).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.accounts.models import Membership, Team
from apps.accounts.services import portal_users_by_slurm_name
from apps.analysis.security_rules import RULES
from apps.analysis.security_types import Hit, severity_rank
from apps.audit import services as audit
from apps.audit.models import AuditEvent
from apps.clusters.models import Cluster, Node, SlurmAccount
from apps.jobs.models import Job
from apps.security.models import Finding, FindingEvent, SecurityRule

MAX_SUPPRESS = timedelta(days=366)


@dataclass
class Recorded:
    """What ``record_hits`` did."""

    created: int = 0
    updated: int = 0
    reopened: int = 0
    unchanged: int = 0
    ids: list[int] = field(default_factory=list)
    notify_now: list[int] = field(default_factory=list)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def record_hits(cluster: Cluster, hits: Sequence[Hit]) -> Recorded:
    """Upsert ``hits`` as findings of ``cluster`` (one transaction; call inside one to
    keep other writes of the run with it). Critical findings that are new or reopened are
    returned in ``notify_now``; others are flagged for the next digest."""
    result = Recorded()
    if not hits:
        return result
    keys = {f"{h.rule}:{h.dedup}"[:300] for h in hits}
    entities = _Entities(cluster, hits)
    rules = {r.key: r for r in SecurityRule.objects.filter(key__in={h.rule for h in hits})}
    with transaction.atomic():
        existing = {f.dedup_key: f for f in Finding.objects.select_for_update()
                    .filter(cluster=cluster, dedup_key__in=keys)}
        for hit in sorted(hits, key=lambda h: (h.start, h.end)):
            key = f"{hit.rule}:{hit.dedup}"[:300]
            finding = existing.get(key)
            if finding is None:
                existing[key] = _create(cluster, hit, key, rules.get(hit.rule), entities, result)
            else:
                _update(finding, hit, entities, result)
    return result


def _create(cluster: Cluster, hit: Hit, key: str, rule: SecurityRule | None,
            entities: _Entities, result: Recorded) -> Finding:
    spec = RULES.get(hit.rule)
    finding = Finding(cluster=cluster, rule=rule, rule_key=hit.rule, dedup_key=key,
                      first_seen=_dt(hit.start), last_seen=_dt(hit.end),
                      attack=(rule.attack if rule else spec.attack if spec else ""))
    _apply(finding, hit, entities)
    now = _mark_for_notice(finding)
    finding.save()
    FindingEvent.objects.create(finding=finding, action=FindingEvent.Action.OPENED,
                                to_status=finding.status, reason=hit.title[:300])
    result.created += 1
    result.ids.append(finding.pk)
    if now:
        result.notify_now.append(finding.pk)
    return finding


def _apply(finding: Finding, hit: Hit, entities: _Entities) -> None:
    """Copy what the latest sighting says (title, severity, entity, evidence)."""
    finding.title = hit.title[:300]
    finding.severity = hit.severity
    finding.confidence = hit.confidence
    finding.evidence = dict(hit.evidence)
    finding.node_name = hit.node[:128]
    finding.node = entities.nodes.get(hit.node)
    finding.gpu_index = hit.gpu
    finding.gpu_uuid = hit.uuid[:64]
    finding.job_id_raw = hit.job_id
    finding.job = entities.jobs.get(hit.job_id) if hit.job_id is not None else None
    finding.user_name = hit.user[:64]
    finding.user_id = entities.users.get(hit.user) or (finding.job.user_id if finding.job else None)
    finding.team = entities.team(hit.team) or (finding.job.team if finding.job else None)


def _update(finding: Finding, hit: Hit, entities: _Entities, result: Recorded) -> None:
    first, last = finding.first_seen.timestamp(), finding.last_seen.timestamp()
    gap = hit.merge_gap
    new_occurrence = hit.start > last + gap or hit.end < first - gap
    if not new_occurrence and hit.end <= last and hit.start >= first:
        result.unchanged += 1  # already counted: a re-run of the same window
        result.ids.append(finding.pk)
        return
    before = finding.severity
    if hit.end >= last:
        _apply(finding, hit, entities)
    if severity_rank(before) > severity_rank(finding.severity):
        finding.severity = before  # a quieter sighting does not lower what was seen
    finding.first_seen = min(finding.first_seen, _dt(hit.start))
    finding.last_seen = max(finding.last_seen, _dt(hit.end))
    finding.occurrences += 1 if new_occurrence else 0
    reopened = _maybe_reopen(finding, hit)
    escalated = severity_rank(finding.severity) > severity_rank(before)
    if escalated:
        FindingEvent.objects.create(finding=finding, action=FindingEvent.Action.ESCALATED,
                                    from_status=finding.status, to_status=finding.status,
                                    reason=f"{before} -> {finding.severity}")
    now = (reopened or escalated or new_occurrence) and _mark_for_notice(finding)
    finding.save()
    result.updated += 1
    result.reopened += reopened
    result.ids.append(finding.pk)
    if now:
        result.notify_now.append(finding.pk)


def _maybe_reopen(finding: Finding, hit: Hit) -> bool:
    """A resolved finding seen after its resolution is open again."""
    resolved = finding.resolved_at
    if finding.status != Finding.Status.RESOLVED or resolved is None or \
            hit.end <= resolved.timestamp():
        return False
    FindingEvent.objects.create(finding=finding, action=FindingEvent.Action.REOPENED,
                                from_status=finding.status, to_status=Finding.Status.OPEN,
                                reason="seen again after it was resolved")
    finding.status = Finding.Status.OPEN
    finding.resolved_at = None
    return True


def _mark_for_notice(finding: Finding) -> bool:
    """Whether to notify at once (critical); others wait for the digest (deduplicated:
    one entry per finding, however often it was seen). Suppressed and resolved: never."""
    if finding.status in (Finding.Status.SUPPRESSED, Finding.Status.RESOLVED):
        return False
    if finding.severity == "critical":
        return True
    finding.notify_pending = True
    return False


class _Entities:
    """Nodes, jobs, users and teams the hits name, looked up in a few queries."""

    def __init__(self, cluster: Cluster, hits: Iterable[Hit]) -> None:
        hits = list(hits)
        self.nodes = {n.name: n for n in Node.objects.filter(
            cluster=cluster, name__in={h.node for h in hits if h.node})}
        self.jobs = {j.job_id: j for j in Job.objects.filter(
            cluster=cluster, job_id__in={h.job_id for h in hits if h.job_id is not None})
            .select_related("team")}
        self.users = portal_users_by_slurm_name({h.user for h in hits if h.user})
        names = {h.team for h in hits if h.team}
        self.teams = {t.slug: t for t in Team.objects.filter(slug__in=names)}
        for account in SlurmAccount.objects.filter(cluster=cluster, name__in=names) \
                .select_related("team"):
            self.teams.setdefault(account.name, account.team)

    def team(self, name: str) -> Team | None:
        return self.teams.get(name) if name else None


# --- Lifecycle -----------------------------------------------------------------------------------


class LifecycleError(ValueError):
    """A transition that is not allowed from here, or lacks its reason or expiry."""


# Who may take an action, beyond seeing the finding (issue 27 item 6):
VIEWER = "viewer"  # whoever sees it: the job's owner, the team's leads, admins
CLOSER = "closer"  # high and critical: admins or the site's SECURITY_CLOSE_ROLE; else viewers
ADMIN = "admin"  # platform admins, or holders of SECURITY_CLOSE_ROLE (suppressing only)
STAFF = "staff"  # platform admins only
SERIOUS = frozenset({"high", "critical"})
ALL_STATUSES = frozenset({"open", "acknowledged", "resolved", "suppressed"})

# action -> (statuses it may start from, status it leads to ("" keeps it), who may take it)
TRANSITIONS: dict[str, tuple[frozenset[str], str, str]] = {
    "comment": (ALL_STATUSES, "", VIEWER),
    "acknowledge": (frozenset({"open"}), "acknowledged", VIEWER),
    "resolve": (frozenset({"open", "acknowledged"}), "resolved", CLOSER),
    "suppress": (frozenset({"open", "acknowledged", "resolved"}), "suppressed", ADMIN),
    "reopen": (frozenset({"acknowledged", "resolved", "suppressed"}), "open", STAFF),
    "assign": (ALL_STATUSES, "", STAFF),
}
_EVENT = {"comment": "commented", "acknowledge": "acknowledged", "resolve": "resolved",
          "suppress": "suppressed", "reopen": "reopened", "assign": "assigned"}


def may(actor: Any, finding: Finding, action: str) -> bool:
    """Whether ``actor``, who sees ``finding``, may take ``action`` on it (any status).

    The subject of a finding (the owner of its job, or the user it names) never closes a
    high or critical one: a researcher resolving the miner finding about their own job was
    how such findings left the admins' list (issue 27). A site may let a team role close
    them besides admins (``SECURITY_CLOSE_ROLE``); that role never covers one's own job.
    """
    who = TRANSITIONS[action][2]
    if getattr(actor, "is_staff", False) or who == VIEWER:
        return True
    if who == CLOSER and finding.severity not in SERIOUS:
        return True
    return who in (CLOSER, ADMIN) and _holds_close_role(actor, finding)


def _holds_close_role(actor: Any, finding: Finding) -> bool:
    role = _close_role()
    if not role or actor.pk in _subjects(finding):
        return False
    teams = _ids(finding.team_id, finding.job.team_id if finding.job else None)
    return Membership.objects.filter(user=actor, role=role, team_id__in=teams).exists()


def _close_role() -> str:
    """The team role ``SECURITY_CLOSE_ROLE`` names, "" for none."""
    role = settings.SECURITY_CLOSE_ROLE
    return "" if role == "none" else role


def _subjects(finding: Finding) -> set[int]:
    """The users a finding is about: the one it names and the owner of its job."""
    return _ids(finding.user_id, finding.job.user_id if finding.job else None)


def _ids(*ids: int | None) -> set[int]:
    return {i for i in ids if i is not None}


def allowed_actions(finding: Finding, actor: Any) -> list[str]:
    """The actions the finding page offers ``actor``: allowed from its status, and theirs."""
    return [a for a, (sources, _, _) in TRANSITIONS.items()
            if finding.status in sources and may(actor, finding, a)]


def _refusal(action: str, finding: Finding) -> str:
    who = TRANSITIONS[action][2]
    if who == STAFF:
        return f"only platform admins may {action} a finding"
    role = _close_role()
    also = f" or a {role} of its team who is not its subject" if role else ""
    what = f"a {finding.severity} finding" if who == CLOSER else "a finding"
    return f"only platform admins{also} may {action} {what}"


def transition(finding: Finding, actor: Any, action: str, *, reason: str = "",
               until: datetime | None = None, assignee: Any = None) -> FindingEvent:
    """Apply ``action`` for ``actor`` (who can already see the finding).

    Whoever sees a finding may comment and acknowledge it, and resolve a medium, low or
    info one (with a reason: "token revoked"). Resolving a high or critical one, and
    suppressing any, take an admin or the site's close role (``may``); reopening and
    assigning take an admin (``PermissionDenied``: a 403). A suppression needs a reason and
    an expiry within a year; a comment its text. An assignee given with another action is
    an assignment too (admins). Every action is a ``FindingEvent`` and an audit event.
    """
    if action not in TRANSITIONS:
        raise LifecycleError(f"unknown action {action!r} (one of {', '.join(TRANSITIONS)})")
    sources, target, _ = TRANSITIONS[action]
    if not may(actor, finding, action):
        raise PermissionDenied(_refusal(action, finding))
    reassigns = assignee is not None and assignee.pk != finding.assignee_id
    if reassigns and not may(actor, finding, "assign"):
        raise PermissionDenied(_refusal("assign", finding))
    if finding.status not in sources:
        raise LifecycleError(f"cannot {action} a finding that is {finding.status}")
    reason = (reason or "").strip()[:2000]
    _check(action, reason, until, assignee)
    with transaction.atomic():
        return _apply_transition(finding, actor, action, target, reason, until, assignee)


def _check(action: str, reason: str, until: datetime | None, assignee: Any) -> None:
    if action in ("resolve", "suppress") and not reason:
        raise LifecycleError(f"{action}: a reason is required")
    if action == "comment" and not reason:
        raise LifecycleError("comment: write the comment in the reason field")
    if action == "suppress":
        now = timezone.now()
        if until is None or until <= now or until > now + MAX_SUPPRESS:
            raise LifecycleError("suppress: an expiry in the future, within a year, is required")
    if action == "assign" and assignee is None:
        raise LifecycleError("assign: the assignee must be an active platform admin")
    if assignee is not None and (not assignee.is_active or not assignee.is_staff):
        raise LifecycleError(f"{action}: the assignee must be an active platform admin")


def _apply_transition(finding: Finding, actor: Any, action: str, target: str, reason: str,
                      until: datetime | None, assignee: Any) -> FindingEvent:
    before = finding.status
    if assignee is not None:
        finding.assignee = assignee  # given with any action, it is kept (issue 26)
    if target:
        finding.status = target
        finding.status_reason = reason
        finding.suppressed_until = until if action == "suppress" else None
        finding.resolved_at = timezone.now() if action == "resolve" else None
    finding.save()
    event = FindingEvent.objects.create(
        finding=finding, actor=actor, action=_EVENT[action], from_status=before,
        to_status=finding.status, assignee=finding.assignee, reason=reason, until=until)
    audit.record(AuditEvent.Action.FINDING, audit.CURRENT_REQUEST.get(), actor,
                 target=f"finding {finding.pk}: {finding.title}"[:300],
                 details={"finding": finding.pk, "action": event.action,
                          "severity": finding.severity, "from": before, "to": finding.status,
                          "reason": reason, "until": until.isoformat() if until else None,
                          "assignee": getattr(finding.assignee, "username", None)})
    return event


def expire_suppressions(cluster: Cluster, now: datetime | None = None) -> int:
    """Suppressions past their expiry end: the findings are open again (an event each)."""
    now = now or timezone.now()
    expired = list(Finding.objects.filter(cluster=cluster, status=Finding.Status.SUPPRESSED,
                                          suppressed_until__lte=now))
    for finding in expired:
        with transaction.atomic():
            FindingEvent.objects.create(
                finding=finding, action=FindingEvent.Action.UNSUPPRESSED,
                from_status=finding.status, to_status=Finding.Status.OPEN,
                assignee=finding.assignee, reason="the suppression expired")
            finding.status = Finding.Status.OPEN
            finding.suppressed_until = None
            finding.save(update_fields=["status", "suppressed_until", "updated_at"])
    return len(expired)


def staff_users() -> Any:
    return get_user_model().objects.filter(is_staff=True, is_active=True).order_by("username")


def summary_by_cluster() -> dict[int, dict[str, int]]:
    """Active (open or acknowledged) findings per cluster and severity."""
    from django.db.models import Count

    rows = (Finding.objects.filter(Q(status=Finding.Status.OPEN)
                                   | Q(status=Finding.Status.ACKNOWLEDGED))
            .values("cluster_id", "severity").annotate(n=Count("id")))
    out: dict[int, dict[str, int]] = {}
    for row in rows:
        out.setdefault(row["cluster_id"], {})[row["severity"]] = row["n"]
    return out


def as_dict(finding: Finding, user: Any = None) -> dict[str, Any]:
    """A finding as the command line and the API's JSON show it (evidence as ``user`` may
    read it: all of it for admins and for the command line)."""
    evidence = finding.evidence if user is None else finding.evidence_for(user)
    return {
        "id": finding.pk, "cluster": finding.cluster.name, "rule": finding.rule_key,
        "title": finding.title, "severity": finding.severity, "confidence": finding.confidence,
        "attack": finding.attack, "status": finding.status,
        "entity": {"node": finding.node_name or None, "gpu": finding.gpu_index,
                   "uuid": finding.gpu_uuid or None, "job_id": finding.job_id_raw,
                   "user": finding.user_name or None,
                   "team": finding.team.slug if finding.team else None},
        "first_seen": finding.first_seen.isoformat(), "last_seen": finding.last_seen.isoformat(),
        "occurrences": finding.occurrences, "dedup_key": finding.dedup_key,
        "assignee": finding.assignee.username if finding.assignee else None,
        "evidence": evidence,
    }
