"""Quota services: preview and apply a team's GPU-hour quota in Slurm, scheduled quotas,
drift detection, usage against the quota and its warnings.

A quota is ``GrpTRESMins=gres/gpu=N`` on the team's Slurm account (N in GPU-minutes), written
with ``sacctmgr`` through the Slurm adapter. Slurm enforces it against the account's *decayed*
usage (``sshare`` GrpTRESRaw, ``PriorityDecayHalfLife``); for a hard monthly budget a site sets
``PriorityUsageResetPeriod=MONTHLY`` (docs/chargeback.md). Guarantees:

- **nothing is recorded as applied unless Slurm holds it**: the write is checked by reading
  the account back; a refusal or an unreachable Slurm leaves the quota untouched and records a
  ``failed`` change with Slurm's words;
- **last write wins only if it saw the current value**: an edit names the quota version and
  the Slurm value it was shown; either having moved is a ``QuotaConflict`` (recorded too);
- every change (set, scheduled, applied, failed, conflict, drift) is a ``QuotaChange`` row and
  an audit event.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from apps.accounts.models import Membership
from apps.analysis import quotas as qmath
from apps.audit import services as audit
from apps.audit.models import AuditEvent
from apps.chargeback.services import current_month, month_period
from apps.chargeback.usage import gpu_seconds, overlapping
from apps.clusters import services as cluster_services
from apps.clusters import sync
from apps.clusters.adapters.slurm import Association, LimitChange, SlurmClient
from apps.clusters.models import Cluster, Node, SlurmAccount, SlurmAssociation
from apps.core.errors import AdapterError
from apps.core.runs import tracked_run
from apps.core.webhooks import post_json
from apps.jobs.models import Job
from apps.quotas.models import Quota, QuotaAlert, QuotaChange

log = logging.getLogger(__name__)
TRES = "gres/gpu"
BURN_DAYS = 7  # the "current burn" is the mean GPU-hours per day over this many days
FALLBACK_CEILING = Decimal("10000000")  # GPU-hours, when the cluster's GPUs are not known


class QuotaError(Exception):
    """A quota change the portal refuses, with a message for the admin."""


class QuotaConflict(QuotaError):
    """The quota or Slurm's value changed since the admin looked: nothing was written."""


def _fmt(minutes: int | None) -> str:
    return "no limit" if minutes is None else f"{minutes / 60:g} GPU-hours"


def ceiling(cluster: Cluster, month: date) -> Decimal:
    """The largest quota accepted: 10 x what the cluster's GPUs deliver in the month."""
    gpus = Node.objects.filter(cluster=cluster).aggregate(n=Sum("gpu_count"))["n"] or 0
    if not gpus:
        return FALLBACK_CEILING
    period = month_period(month)
    return qmath.ceiling_hours(gpus, (period.end - period.start).total_seconds() / 3600)


def quota_minutes(account: SlurmAccount, month: date, hours: Decimal | None) -> int | None:
    """GPU-hours (parsed by the page's form) -> GPU-minutes; None means "no limit"."""
    if hours is None:
        return None
    try:
        return qmath.quota_minutes(hours, ceiling(account.cluster, month))
    except qmath.QuotaValueError as exc:
        raise QuotaError(str(exc)) from None


def check_minutes(account: SlurmAccount, month: date, minutes: int | None) -> int | None:
    """GPU-minutes as the API sends them: refused when negative or absurd."""
    if minutes is None:
        return None
    try:
        return qmath.checked_minutes(minutes, ceiling(account.cluster, month))
    except qmath.QuotaValueError as exc:
        raise QuotaError(str(exc)) from None


def _check_month(month: date, now: datetime) -> bool:
    """True when ``month`` is in the future (the quota is scheduled); a past month is refused."""
    this = current_month(now)
    if month < this:
        raise QuotaError(f"{month:%Y-%m} is over: quotas are set for this month or later")
    return month > this


def _live(client: SlurmClient, account: SlurmAccount) -> Association:
    row = client.account_limits(account.name)
    if row is None:
        raise QuotaError(f"Slurm has no account {account.name} on {account.cluster.name}")
    return row


# --- Preview -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preview:
    """What an apply would do: Slurm's current value, the new one, the exact command and
    Slurm's answer to a dry run of it, and the version the confirmation must carry."""

    account: SlurmAccount
    month: date
    old_minutes: int | None
    new_minutes: int | None
    command: str
    slurm_output: str
    version: int
    scheduled: bool
    # What the new value does (issue 26): the usage the page shows now, the status the new
    # limit gives it (``qmath.quota_status``: the figures the page shows after Confirm),
    # and who would wait
    usage: AccountUsage | None = None
    after: qmath.QuotaStatus | None = None
    users: tuple[str, ...] = ()
    pending_jobs: int = 0

    @property
    def old_text(self) -> str:
        return _fmt(self.old_minutes)

    @property
    def new_text(self) -> str:
        return _fmt(self.new_minutes)

    @property
    def blocks(self) -> bool:
        """The new limit is already used up: new jobs of the account wait at once."""
        return self.after is not None and self.after.level >= 100


def preview(account: SlurmAccount, month: date, minutes: int | None,
            client: SlurmClient | None = None, now: datetime | None = None) -> Preview:
    """Check a new value (GPU-minutes, None: no limit) and rehearse it in Slurm (``sacctmgr``
    without ``-i``, answered "n"): nothing changes, but a refusal shows up now, before the
    confirmation."""
    now = now or timezone.now()
    scheduled = _check_month(month, now)
    minutes = check_minutes(account, month, minutes)
    client = client or cluster_services.client_for(account.cluster)
    live = _live(client, account)
    rehearsal = client.set_account_limit(account.name, TRES, minutes, dry_run=True)
    quota = Quota.objects.filter(account=account, month=month).first()
    usage = account_usage(account, effective_quotas([account], now).get(account.pk), now)
    after = None if minutes is None else qmath.quota_status(
        minutes / 60, usage.used_hours, usage.burn_hours_per_day, now)
    return Preview(account, month, live.grp_tres_mins.get(TRES), minutes, rehearsal.command,
                   rehearsal.output, quota.version if quota else 0, scheduled, usage, after,
                   *_who_would_wait(account))


def _who_would_wait(account: SlurmAccount) -> tuple[tuple[str, ...], int]:
    """The account's users (Slurm's user associations, else who ran jobs in it) and its
    pending jobs: who a used-up quota stops."""
    users = set(SlurmAssociation.objects.filter(cluster=account.cluster, account=account.name)
                .exclude(user_name="").values_list("user_name", flat=True))
    jobs = Job.objects.filter(cluster=account.cluster, account=account.name)
    if not users:
        users = set(jobs.exclude(user_name="").values_list("user_name", flat=True).distinct())
    return tuple(sorted(users)), jobs.filter(state=Job.State.PENDING).count()


# --- Apply -------------------------------------------------------------------------------------


def apply(account: SlurmAccount, month: date, minutes: int | None, seen_minutes: int | None,
          seen_version: int, reason: str, user: Any, client: SlurmClient | None = None,
          now: datetime | None = None) -> Quota:
    """Write the quota to Slurm (this month) or schedule it (a later month).

    1. check the value, the month and the reason;
    2. in one transaction: claim the quota row at ``seen_version`` (compare-and-swap on
       ``version``), re-read Slurm's value and compare it with ``seen_minutes``, write with
       sacctmgr, read it back, store the quota and a ``set`` change;
    3. on a conflict or a Slurm failure the transaction rolls back (no quota is recorded as
       applied) and a ``conflict`` / ``failed`` change records the attempt; a failure after
       Slurm took the write puts Slurm's previous value back (``_write_limit``), so Slurm and the
       portal agree again, and the change says whether that worked.
    """
    now = now or timezone.now()
    reason = reason.strip()
    if not reason:
        raise QuotaError("say why the quota changes (the reason is kept in the audit trail)")
    scheduled = _check_month(month, now)
    minutes = check_minutes(account, month, minutes)
    attempt = {"account": account, "month": month, "actor": user, "reason": reason[:2000],
               "old_minutes": seen_minutes, "new_minutes": minutes}
    try:
        with transaction.atomic():
            quota = _claim(account, month, seen_version)
            if scheduled:
                return _schedule(quota, minutes, user, attempt, now)
            return _write(quota, minutes, seen_minutes, user, attempt,
                          client or cluster_services.client_for(account.cluster), now)
    except QuotaConflict as exc:
        _record(QuotaChange.Kind.CONFLICT, attempt, error=str(exc))
        raise
    except (AdapterError, QuotaError) as exc:
        _record(QuotaChange.Kind.FAILED, attempt, error=str(exc),
                output=getattr(exc, "detail", ""))
        raise


def _claim(account: SlurmAccount, month: date, seen_version: int) -> Quota:
    """The quota row at the version the admin saw, its version bumped (a CAS), or a conflict."""
    quota = Quota.objects.select_for_update().filter(account=account, month=month).first()
    if quota is None:
        if seen_version != 0:
            raise QuotaConflict("this quota changed meanwhile: look again")
        try:
            with transaction.atomic():
                return Quota.objects.create(account=account, month=month, version=1)
        except IntegrityError:
            raise QuotaConflict("another admin set this quota meanwhile: look again") from None
    taken = Quota.objects.filter(pk=quota.pk, version=seen_version).update(
        version=seen_version + 1)
    if not taken:
        who = quota.set_by.username if quota.set_by else "someone"
        raise QuotaConflict(f"{who} changed this quota to {quota.gpu_hours_text} at "
                            f"{quota.updated_at:%Y-%m-%d %H:%M} after you looked: look again")
    quota.version = seen_version + 1
    return quota


def _schedule(quota: Quota, minutes: int | None, user: Any, attempt: dict[str, Any],
              now: datetime) -> Quota:
    quota.gpu_minutes, quota.state, quota.set_by = minutes, Quota.State.SCHEDULED, user
    quota.save()
    _record(QuotaChange.Kind.SCHEDULED, attempt)
    return quota


def _write(quota: Quota, minutes: int | None, seen_minutes: int | None, user: Any,
           attempt: dict[str, Any], client: SlurmClient, now: datetime) -> Quota:
    account = quota.account
    held = _live(client, account).grp_tres_mins.get(TRES)
    if held != seen_minutes:
        raise QuotaConflict(f"Slurm holds {_fmt(held)} now, not the {_fmt(seen_minutes)} you "
                            "were shown (changed outside the portal?): look again")
    change = _write_limit(client, account, minutes, held)
    try:
        quota.gpu_minutes, quota.state, quota.set_by = minutes, Quota.State.APPLIED, user
        quota.applied_at, quota.slurm_minutes, quota.slurm_read_at = now, minutes, now
        quota.drift = False
        quota.save()
        _store_limit(account, minutes)
        _record(QuotaChange.Kind.SET, attempt, command=change.command, output=change.output)
    except DatabaseError as exc:
        raise _restored(client, account, held, AdapterError(
            f"the portal could not record the quota ({exc})", service="portal")) from exc
    return quota


def _write_limit(client: SlurmClient, account: SlurmAccount, minutes: int | None,
          held: int | None) -> LimitChange:
    """Write the limit and read it back. When the read-back fails or differs, Slurm may hold
    the new value while the portal records nothing as applied: put ``held`` (the value read
    just before) back, and raise an error that says whether that worked."""
    change = client.set_account_limit(account.name, TRES, minutes)
    try:
        after = _live(client, account).grp_tres_mins.get(TRES)
    except (AdapterError, QuotaError) as exc:
        raise _restored(client, account, held, _as_adapter_error(exc, change)) from exc
    if after != minutes:
        raise _restored(client, account, held, AdapterError(
            f"Slurm reports {_fmt(after)} after writing {_fmt(minutes)}", service="slurm",
            detail=change.output))
    return change


def _as_adapter_error(exc: Exception, change: LimitChange) -> AdapterError:
    if isinstance(exc, AdapterError):
        return exc
    return AdapterError(str(exc), service="slurm", detail=change.output)


def _restored(client: SlurmClient, account: SlurmAccount, held: int | None,
              exc: AdapterError) -> AdapterError:
    """Put Slurm's previous limit back after a write the portal does not record; the error
    (same type) says whether that worked. If it did not, Slurm may keep the new value: the
    next ``check_quotas`` reads it and shows it as drift where a quota is in force."""
    try:
        client.set_account_limit(account.name, TRES, held)
        back = _live(client, account).grp_tres_mins.get(TRES)
    except (AdapterError, QuotaError) as again:
        note = (f"; putting back {_fmt(held)} failed too ({again}): Slurm may hold the new "
                "value, the next check shows it as drift")
    else:
        note = (f"; Slurm's previous value {_fmt(held)} was put back" if back == held else
                f"; putting back {_fmt(held)} left {_fmt(back)} in Slurm: the next check "
                "shows it as drift")
    return type(exc)(f"{exc}{note}", service=exc.service, detail=exc.detail)


def _store_limit(account: SlurmAccount, minutes: int | None) -> None:
    """Keep the synced copy in step, so pages and drift checks do not read a stale value."""
    row = SlurmAssociation.objects.filter(cluster=account.cluster, account=account.name,
                                          user_name="").first()
    if row is not None:
        limits = {k: v for k, v in row.grp_tres_mins.items() if k != TRES}
        row.grp_tres_mins = limits if minutes is None else {**limits, TRES: minutes}
        row.save(update_fields=["grp_tres_mins", "updated_at"])


def _record(kind: str, attempt: dict[str, Any], **fields: Any) -> QuotaChange:
    change = QuotaChange.objects.create(kind=kind, **attempt, **fields)
    account = attempt["account"]
    audit.record(AuditEvent.Action.QUOTA, audit.CURRENT_REQUEST.get(), attempt.get("actor"),
                 username="" if attempt.get("actor") else "slurm",
                 target=f"quota: {account.cluster.name}:{account.name} "
                        f"{attempt['month']:%Y-%m}",
                 details={"kind": kind, "old": attempt.get("old_minutes"),
                          "new": attempt.get("new_minutes"),
                          "reason": attempt.get("reason", "")[:200],
                          "error": fields.get("error", "")[:300]})
    return change


# --- Scheduled quotas and drift --------------------------------------------------------


def apply_due(cluster: Cluster, client: SlurmClient, now: datetime) -> int:
    """Write scheduled quotas whose month has begun, as ``apply`` writes: read Slurm's value,
    write, read it back, and only then mark the quota applied (one transaction). A failure
    keeps the quota scheduled for the next pass and, if Slurm took the write, puts its
    previous value back."""
    done = 0
    due = Quota.objects.filter(account__cluster=cluster, state=Quota.State.SCHEDULED,
                               month__lte=current_month(now)).select_related("account")
    for quota in due:
        attempt = {"account": quota.account, "month": quota.month, "actor": quota.set_by,
                   "reason": "scheduled quota: its month began", "old_minutes": None,
                   "new_minutes": quota.gpu_minutes}
        try:
            _apply_scheduled(quota, client, attempt, now)
        except (AdapterError, QuotaError) as exc:
            _record(QuotaChange.Kind.FAILED, attempt, error=str(exc),
                    output=getattr(exc, "detail", ""))
            continue
        done += 1
    return done


def _apply_scheduled(quota: Quota, client: SlurmClient, attempt: dict[str, Any],
                     now: datetime) -> None:
    """One scheduled quota, with its row locked the way ``apply`` claims it (an admin editing
    it meanwhile waits, or has already changed it and this pass leaves it alone)."""
    account = quota.account
    with transaction.atomic():
        locked = (Quota.objects.select_for_update()
                  .filter(pk=quota.pk, version=quota.version, state=Quota.State.SCHEDULED)
                  .first())
        if locked is None:
            raise QuotaConflict("the scheduled quota changed before it was written")
        held = _live(client, account).grp_tres_mins.get(TRES)
        attempt["old_minutes"] = held
        change = _write_limit(client, account, quota.gpu_minutes, held)
        try:
            with transaction.atomic():
                Quota.objects.filter(pk=quota.pk).update(
                    state=Quota.State.APPLIED, applied_at=now, slurm_minutes=quota.gpu_minutes,
                    slurm_read_at=now, drift=False, version=quota.version + 1)
                _store_limit(account, quota.gpu_minutes)
                _record(QuotaChange.Kind.APPLIED, attempt, command=change.command,
                        output=change.output)
        except DatabaseError as exc:
            raise _restored(client, account, held, AdapterError(
                f"the portal could not record the quota ({exc})", service="portal")) from exc


def effective_quotas(accounts: Iterable[SlurmAccount], now: datetime) -> dict[int, Quota]:
    """Per account pk, the applied quota in force: the latest month up to this one."""
    out: dict[int, Quota] = {}
    rows = (Quota.objects.filter(account__in=list(accounts), state=Quota.State.APPLIED,
                                 month__lte=current_month(now))
            .select_related("account__cluster", "account__team", "set_by")
            .order_by("account_id", "-month"))
    for quota in rows:
        out.setdefault(quota.account_id, quota)
    return out


def detect_drift(cluster: Cluster, now: datetime) -> int:
    """Compare each quota in force with the account's limit in the (just synced) copy of
    Slurm's associations; a new difference is recorded once as ``drift`` and audited."""
    limits = {a.account: a.grp_tres_mins.get(TRES) for a in
              SlurmAssociation.objects.filter(cluster=cluster, user_name="")}
    found = 0
    for quota in effective_quotas(SlurmAccount.objects.filter(cluster=cluster), now).values():
        if quota.account.name not in limits:
            continue
        held = limits[quota.account.name]
        if held == quota.gpu_minutes:
            Quota.objects.filter(pk=quota.pk).update(drift=False, slurm_minutes=held,
                                                     slurm_read_at=now)
            continue
        if not quota.drift or quota.slurm_minutes != held:
            _record(QuotaChange.Kind.DRIFT, {
                "account": quota.account, "month": quota.month, "actor": None,
                "reason": "changed in Slurm outside the portal",
                "old_minutes": quota.gpu_minutes, "new_minutes": held})
            found += 1
        Quota.objects.filter(pk=quota.pk).update(drift=True, slurm_minutes=held,
                                                 slurm_read_at=now)
    return found


def simulate_outside_change(account: SlurmAccount, client: SlurmClient | None = None,
                            now: datetime | None = None) -> str:
    """On a simulated cluster only: move the account's limit in the simulated Slurm by 10
    GPU-hours (as an admin typing ``sacctmgr`` by hand would, nothing recorded), then run the
    periodic check, which reads it back and records the drift. Says what happened."""
    if not account.cluster.is_simulated:
        raise QuotaError("outside changes are simulated on simulated clusters only")
    now = now or timezone.now()
    client = client or cluster_services.client_for(account.cluster)
    held = _live(client, account).grp_tres_mins.get(TRES)
    moved = (held or 0) + 600
    client.set_account_limit(account.name, TRES, moved)
    stats = check_cluster(account.cluster, client, now)
    return (f"Simulated: {account.name}'s limit was changed in the simulated Slurm from "
            f"{_fmt(held)} to {_fmt(moved)} outside the portal; the check found "
            f"{stats['drift']} new drift{'s' if stats['drift'] != 1 else ''}.")


# --- Usage, forecast, warnings ---------------------------------------------------------


@dataclass(frozen=True)
class AccountUsage:
    """One account on the quota page: the quota in force, Slurm's limit and usage, the burn."""

    account: SlurmAccount
    quota: Quota | None
    slurm_minutes: int | None
    used_hours: float
    month_hours: float
    status: qmath.QuotaStatus | None
    # When each figure was taken (issue 26): the decayed usage is Slurm's sshare as last
    # synced; the month's GPU-hours are counted live from the job records.
    used_as_of: datetime | None = None
    month_as_of: datetime | None = None
    burn_hours_per_day: float = 0.0

    @property
    def limit_minutes(self) -> int | None:
        return self.quota.gpu_minutes if self.quota else self.slurm_minutes


def _hours(jobs: Any, lo: datetime, hi: datetime, now: datetime) -> float:
    """``gres/gpu`` device-hours, as Slurm counts them against ``GrpTRESMins``: a MIG slice
    is one device there (its fraction is for chargeback), a shard is none."""
    seconds = overlapping(jobs, lo, hi).aggregate(s=Sum(gpu_seconds(lo, hi, now,
                                                                    gpus="gpus")))["s"]
    return (seconds or 0.0) / 3600


def account_usage(account: SlurmAccount, quota: Quota | None, now: datetime) -> AccountUsage:
    """Usage as Slurm enforces it (sshare GrpTRESRaw, decayed GPU-minutes) against the limit,
    the burn over the last ``BURN_DAYS`` days from Beacon's job records, and the forecast."""
    assoc = SlurmAssociation.objects.filter(cluster=account.cluster, account=account.name,
                                            user_name="").first()
    slurm_minutes = assoc.grp_tres_mins.get(TRES) if assoc else None
    used = float((assoc.usage_tres_mins or {}).get(TRES, 0.0)) / 60 if assoc else 0.0
    jobs = Job.objects.filter(cluster=account.cluster, account=account.name)
    burn = _hours(jobs, now - timedelta(days=BURN_DAYS), now, now) / BURN_DAYS
    period = month_period(current_month(now))
    month_hours = _hours(jobs, period.start, period.end, now)
    limit = quota.gpu_minutes if quota else slurm_minutes
    status = None if limit is None else qmath.quota_status(limit / 60, used, burn, now)
    return AccountUsage(account, quota, slurm_minutes, used, month_hours, status,
                        assoc.updated_at if assoc else None, now, burn)


def usage_for(accounts: Iterable[SlurmAccount], now: datetime | None = None) -> list[AccountUsage]:
    now = now or timezone.now()
    accounts = list(accounts)
    quotas = effective_quotas(accounts, now)
    return [account_usage(a, quotas.get(a.pk), now) for a in accounts]


def raise_alerts(cluster: Cluster, now: datetime) -> int:
    """One alert per level reached per quota value (the unique row is the deduplication);
    alerts not sent yet (a failed channel) are tried again."""
    sent = 0
    accounts = SlurmAccount.objects.filter(cluster=cluster).select_related("team", "cluster")
    for usage in usage_for(accounts, now):
        if usage.quota is None or usage.status is None or usage.quota.gpu_minutes is None:
            continue
        for level in (lvl for lvl in qmath.WARNING_LEVELS if lvl <= usage.status.level):
            alert, _ = QuotaAlert.objects.get_or_create(
                account=usage.account, month=usage.quota.month, level=level,
                limit_minutes=usage.quota.gpu_minutes,
                defaults={"used_hours": usage.used_hours})
            if alert.sent_at is None:
                sent += _send(alert, usage, now)
    return sent


def _send(alert: QuotaAlert, usage: AccountUsage, now: datetime) -> int:
    """E-mail the team's leads and post to the webhook; record what went out."""
    status = usage.status
    assert status is not None
    team = usage.account.team
    text = (f"Team {team.name}: {status.percent:g}% of its GPU-hour quota used on "
            f"{usage.account.cluster.name} ({status.used_hours:.1f} of "
            f"{status.limit_hours:g} GPU-hours).")
    if status.exhausted_at and alert.level < 100:
        text += f" At the current burn it runs out on {status.exhausted_at:%Y-%m-%d}."
    if alert.level >= 100:
        text += " New jobs of the team wait (AssocGrpGRESMinutes) until the quota is raised."
    channels, errors = _deliver(team, text, alert, usage)
    alert.channels, alert.error = channels, "; ".join(errors)[:2000]
    alert.sent_at = now if channels and not errors else None
    alert.save(update_fields=["channels", "error", "sent_at"])
    return int(alert.sent_at is not None)


def _deliver(team: Any, text: str, alert: QuotaAlert,
             usage: AccountUsage) -> tuple[list[str], list[str]]:
    channels, errors = [], []
    leads = list(Membership.objects.filter(team=team, role=Membership.Role.LEAD,
                                           user__is_active=True)
                 .exclude(Q(user__email="")).values_list("user__email", flat=True))
    if settings.QUOTA_ALERT_EMAIL and leads:
        try:
            send_mail(f"[Beacon] {team.name}: GPU-hour quota at {alert.level}%", text,
                      None, leads)
            channels.append("email")
        except OSError as exc:  # smtplib errors are OSErrors
            errors.append(f"email: {exc}")
    if settings.QUOTA_WEBHOOK_URL:
        try:
            post_json(settings.QUOTA_WEBHOOK_URL, {
                "text": text, "team": team.slug, "account": usage.account.name,
                "cluster": usage.account.cluster.name, "level": alert.level,
                "used_hours": round(usage.used_hours, 2),
                "limit_hours": alert.limit_minutes / 60}, timeout=settings.QUOTA_WEBHOOK_TIMEOUT)
            channels.append("webhook")
        except AdapterError as exc:
            errors.append(f"webhook: {exc}")
    return channels, errors


# --- The periodic check ----------------------------------------------------------------


def check_cluster(cluster: Cluster, client: SlurmClient | None = None,
                  now: datetime | None = None) -> dict[str, int]:
    """The periodic pass: write due scheduled quotas, refresh Slurm's associations and usage
    (``sync_shares``), record drift, raise warnings. Safe to run twice."""
    now = now or timezone.now()
    client = client or cluster_services.client_for(cluster)
    with tracked_run("quotas.check", cluster=cluster, target=cluster.name) as run:
        applied = apply_due(cluster, client, now)
        sync.sync_shares(cluster, client)
        stats = {"applied": applied, "drift": detect_drift(cluster, now),
                 "alerts_sent": raise_alerts(cluster, now)}
        run.stats = stats
    return stats
