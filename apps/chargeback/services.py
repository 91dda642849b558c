"""Chargeback services: monthly statements per team, their life cycle, exports, usage views.

The maths is ``apps.analysis.chargeback``; GPU-hours come from ``usage.grouped_rows`` (one
GROUP BY per rate segment). Months are calendar months in ``settings.TIME_ZONE``; rate dates
start at midnight there.

Life cycle: ``refresh_statements`` (re)writes every team's **draft** for a month (idempotent:
usage lines are replaced, adjustment lines kept, final statements untouched); ``finalise``
refreshes once more and freezes one statement once its month is over; ``add_adjustment`` is
the only change a final statement takes. Each write is audited.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zoneinfo
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Min, Q, QuerySet
from django.utils import timezone

from apps.accounts.models import Team
from apps.analysis import chargeback as cb
from apps.audit import services as audit
from apps.audit.models import AuditEvent
from apps.chargeback.bulk import insert_lines, update_totals
from apps.chargeback.models import BillingPeriod, Rate, Statement, StatementLine
from apps.chargeback.usage import grouped_rows, wasteful_jobs
from apps.core.broker import publish_on_commit
from apps.core.runs import tracked_run
from apps.jobs.models import Job

_MONTH = re.compile(r"^(2\d{3})-(0[1-9]|1[0-2])$")  # 2000-01 .. 2999-12
MAX_ADJUSTMENT = Decimal("1e12")


class ChargebackError(Exception):
    """A request the statements refuse (a month still open, a final statement, bad input)."""


# --- Months, terms and rates --------------------------------------------------------------------


def parse_month(text: str) -> date:
    """``2026-11`` -> date(2026, 11, 1), or ``ChargebackError`` naming the value."""
    match = _MONTH.match(text)
    if not match:
        raise ChargebackError(f"month {text!r} is not YYYY-MM (e.g. 2026-11)")
    return date(int(match[1]), int(match[2]), 1)


def _zone() -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(settings.TIME_ZONE)


def month_period(month: date) -> cb.Period:
    return cb.Period.month(month.year, month.month, _zone())


def current_month(now: datetime | None = None) -> date:
    local = timezone.localtime(now or timezone.now(), _zone())
    return date(local.year, local.month, 1)


def period_row(month: date) -> BillingPeriod:
    row, _ = BillingPeriod.objects.get_or_create(month=month)
    return row


def terms_of(period: BillingPeriod) -> cb.Terms:
    return cb.Terms(cb.Policy(period.policy), period.waste_fee)


def terms_for(month: date) -> cb.Terms:
    """The month's terms, or the defaults (allocated hours) when admins set none (no write)."""
    return terms_of(BillingPeriod.objects.filter(month=month).first()
                    or BillingPeriod(month=month))


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, _zone())


def rate_card() -> list[cb.Rate]:
    """Every rate row as the pure maths takes it (all currencies are CHARGEBACK_CURRENCY)."""
    return [cb.Rate(r.price, _midnight(r.valid_from),
                    _midnight(r.valid_until) if r.valid_until else None, r.partition,
                    r.gpu_model, settings.CHARGEBACK_CURRENCY)
            for r in Rate.objects.all()]


def months_between(first: datetime, last: datetime) -> list[date]:
    """Every calendar month (in ``TIME_ZONE``) from ``first``'s to ``last``'s, in order."""
    month, end = current_month(first), current_month(last)
    months = []
    while month <= end:
        months.append(month)
        month = date(month.year + (month.month == 12), month.month % 12 + 1, 1)
    return months


def rates_in_force(month: date) -> list[Rate]:
    """The rate card's rows that price some part of ``month`` (what its statements used)."""
    nxt = date(month.year + (month.month == 12), month.month % 12 + 1, 1)
    return list(Rate.objects.filter(valid_from__lt=nxt)
                .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=month))
                .order_by("partition", "gpu_model", "valid_from"))


def compute_lines(month: date, jobs: QuerySet[Job] | None = None,
                  now: datetime | None = None) -> dict[str, list[cb.Line]]:
    """Priced lines of every team (``""``: jobs of unmapped accounts) for ``month``."""
    now = now or timezone.now()
    period, rates = month_period(month), rate_card()
    jobs = Job.objects.all() if jobs is None else jobs
    by_segment = {seg: cb.spread_models(grouped_rows(jobs, seg.start, seg.end, now))
                  for seg in cb.segments(rates, period)}
    return cb.statement_lines(by_segment, rates, terms_for(month))


# --- Drafts -------------------------------------------------------------------------------------


@dataclass
class RefreshResult:
    """One ``refresh_statements`` run."""

    month: str
    drafts: int = 0
    finals_kept: int = 0
    lines: int = 0
    unmapped_hours: Decimal = Decimal("0")
    teams: list[str] = field(default_factory=list)

    def stats(self) -> dict[str, Any]:
        return {"month": self.month, "drafts": self.drafts, "finals_kept": self.finals_kept,
                "lines": self.lines, "unmapped_hours": str(self.unmapped_hours)}


def refresh_statements(month: date, now: datetime | None = None) -> RefreshResult:
    """(Re)write the draft statement of every team with usage in ``month``.

    1. compute every team's lines (one GROUP BY per rate segment, outside the transaction);
    2. lock the month's ``BillingPeriod`` row (a concurrent refresh or finalise waits);
    3. create missing statements, replace the drafts' usage lines and totals in a few bulk
       statements (final statements are left alone). A team whose usage vanished (jobs
       re-mapped) keeps an empty draft.
    """
    now = now or timezone.now()
    result = RefreshResult(month=f"{month:%Y-%m}")
    with tracked_run("chargeback.refresh", target=result.month) as run:
        lines = compute_lines(month, now=now)
        unmapped = lines.pop("", [])
        result.unmapped_hours = cb.totals(unmapped).allocated
        with transaction.atomic():
            period = BillingPeriod.objects.select_for_update().get(pk=period_row(month).pk)
            _write_drafts(period, _statements_for(period, set(lines)), lines, now, result)
        run.stats = result.stats()
    return result


def _statements_for(period: BillingPeriod, slugs: set[str]) -> list[Statement]:
    """The period's statements, one created for every team in ``slugs`` that has none."""
    have = set(Statement.objects.filter(period=period).values_list("team__slug", flat=True))
    Statement.objects.bulk_create([Statement(team=team, period=period) for team in
                                   Team.objects.filter(slug__in=slugs - have)])
    return list(Statement.objects.filter(period=period).select_related("team")
                .order_by("team__slug"))


def _write_drafts(period: BillingPeriod, statements: list[Statement],
                  lines: dict[str, list[cb.Line]], now: datetime, result: RefreshResult) -> None:
    drafts = [s for s in statements if not s.is_final]
    result.finals_kept = len(statements) - len(drafts)
    StatementLine.objects.filter(statement__in=drafts, kind=StatementLine.Kind.USAGE).delete()
    rows = [_line_row(s, line) for s in drafts for line in lines.get(s.team.slug, [])]
    insert_lines(rows)
    for statement in drafts:
        _set_totals(statement, cb.totals(lines.get(statement.team.slug, [])), period, now)
    update_totals(drafts, TOTAL_FIELDS)
    result.drafts, result.lines = len(drafts), len(rows)
    result.teams = [s.team.slug for s in drafts]


def _line_row(statement: Statement, line: cb.Line) -> StatementLine:
    h = line.hours
    return StatementLine(
        statement=statement, kind=StatementLine.Kind.USAGE, user_name=line.user,
        partition=line.partition, gpu_model=line.gpu_model, start=line.start, end=line.end,
        allocated_hours=h.allocated, useful_hours=h.useful, waiting_hours=h.waiting,
        held_idle_hours=h.held_idle, no_process_hours=h.no_process,
        unmeasured_hours=h.unmeasured, charged_hours=line.charged_hours, price=line.price,
        amount=line.amount, useful_amount=line.useful_amount)


TOTAL_FIELDS = ["policy", "waste_fee", "currency", "computed_at", "allocated_hours",
                "useful_hours", "waiting_hours", "held_idle_hours", "no_process_hours",
                "unmeasured_hours", "charged_hours", "amount", "useful_amount", "updated_at"]


def _set_totals(statement: Statement, t: cb.Totals, period: BillingPeriod,
                now: datetime) -> None:
    statement.policy, statement.waste_fee = period.policy, period.waste_fee
    statement.currency, statement.computed_at = settings.CHARGEBACK_CURRENCY, now
    for name in ("allocated", "useful", "waiting", "held_idle", "no_process", "unmeasured"):
        setattr(statement, f"{name}_hours", getattr(t, name))
    statement.charged_hours, statement.amount = t.charged_hours, t.amount
    statement.useful_amount, statement.updated_at = t.useful_amount, now


# --- Finalising, adjustments, terms ---------------------------------------------------------------


def finalise(statement: Statement, user: Any, now: datetime | None = None) -> Statement:
    """Freeze a statement once its month is over: refreshed one last time, then final."""
    now = now or timezone.now()
    if statement.is_final:
        raise ChargebackError(f"statement {statement} is already final")
    if month_period(statement.period.month).end > now:
        raise ChargebackError(f"{statement.period.label} is still open: a statement is "
                              "finalised after its month ends")
    refresh_statements(statement.period.month, now=now)
    with transaction.atomic():
        BillingPeriod.objects.select_for_update().get(pk=statement.period_id)
        statement = Statement.objects.get(pk=statement.pk)
        if statement.is_final:
            raise ChargebackError(f"statement {statement} is already final")
        statement.status, statement.finalised_at = Statement.Status.FINAL, now
        statement.finalised_by = user
        statement.save()
        _audit(user, f"statement: {statement.team.slug} {statement.period.label}",
               change="finalised", amount=str(statement.amount))
    return statement


def add_adjustment(statement: Statement, user: Any, amount: Decimal,
                   description: str) -> StatementLine:
    """A correction as a new line (negative = credit), on a draft or a final statement."""
    value = _amount(amount)
    description = description.strip()
    if not description:
        raise ChargebackError("an adjustment needs a reason (description)")
    line = StatementLine.objects.create(
        statement=statement, kind=StatementLine.Kind.ADJUSTMENT, amount=value,
        description=description[:500], created_by=user)
    _audit(user, f"statement: {statement.team.slug} {statement.period.label}",
           change="adjustment", amount=str(value), description=description[:200])
    return line


def _amount(value: Decimal) -> Decimal:
    """The business rules of an amount already parsed (by a form or the API serializer)."""
    raw = str(value)
    if not value.is_finite() or value == 0 or abs(value) >= MAX_ADJUSTMENT:
        raise ChargebackError(f"amount {raw!r} must be a non-zero number below {MAX_ADJUSTMENT}")
    if value != value.quantize(cb.MONEY_QUANTUM):
        raise ChargebackError(f"amount {raw!r} has more than two decimals")
    return value


def set_terms(month: date, policy: cb.Policy, waste_fee: Decimal, user: Any) -> BillingPeriod:
    """Pick a month's policy and waste fee; refused once a statement of the month is final."""
    try:
        terms = cb.Terms(policy, waste_fee)
    except ValueError as exc:
        raise ChargebackError(f"policy {policy!r} / waste fee {waste_fee!r}: {exc}") from None
    with transaction.atomic():
        period = BillingPeriod.objects.select_for_update().get(pk=period_row(month).pk)
        if period.statements.filter(status=Statement.Status.FINAL).exists():
            raise ChargebackError(f"{period.label} has final statements: its terms are fixed")
        old = (period.policy, str(period.waste_fee))
        period.policy, period.waste_fee = terms.policy.value, terms.waste_fee
        period.save()
        _audit(user, f"period: {period.label}", change="terms", old=list(old),
               new=[period.policy, str(period.waste_fee)])
    return period


def _audit(user: Any, target: str, **details: Any) -> None:
    audit.record(AuditEvent.Action.CHARGEBACK, audit.CURRENT_REQUEST.get(), user,
                 target=target[:300], details=details)


# --- Exports ---------------------------------------------------------------------------------

CSV_COLUMNS = ("month", "team", "status", "kind", "user", "partition", "gpu_model", "start",
               "end", "allocated_hours", "useful_hours", "waiting_hours", "held_idle_hours",
               "no_process_hours", "unmeasured_hours", "charged_hours", "price", "currency",
               "amount", "useful_amount", "description")


def _line_dict(line: StatementLine) -> dict[str, Any]:
    return {
        "kind": line.kind, "user": line.user_name, "partition": line.partition,
        "gpu_model": line.gpu_model,
        "start": line.start.isoformat() if line.start else None,
        "end": line.end.isoformat() if line.end else None,
        **{f"{p}_hours": str(getattr(line, f"{p}_hours")) for p in
           ("allocated", "useful", "waiting", "held_idle", "no_process", "unmeasured",
            "charged")},
        "price": None if line.price is None else str(line.price),
        "amount": str(line.amount), "useful_amount": str(line.useful_amount),
        "description": line.description,
    }


def statement_dict(statement: Statement) -> dict[str, Any]:
    """A statement as the JSON export (and the API) shows it: amounts as exact strings."""
    hours = {f"{p}_hours": str(getattr(statement, f"{p}_hours")) for p in
             ("allocated", "useful", "waiting", "held_idle", "no_process", "unmeasured",
              "charged")}
    return {
        "id": statement.pk, "month": statement.period.label, "team": statement.team.slug,
        "status": statement.status, "policy": statement.policy,
        "waste_fee": str(statement.waste_fee), "currency": statement.currency,
        "computed_at": statement.computed_at.isoformat() if statement.computed_at else None,
        "finalised_at": statement.finalised_at.isoformat() if statement.finalised_at else None,
        **hours, "amount": str(statement.amount), "useful_amount": str(statement.useful_amount),
        "adjustments": str(statement.adjustments_total), "total_due": str(statement.total_due),
        "lines": [_line_dict(line) for line in statement.lines.all()],
    }


def export_json(statements: Iterable[Statement]) -> str:
    return json.dumps([statement_dict(s) for s in statements], indent=2) + "\n"


def export_csv(statements: Iterable[Statement]) -> str:
    """One row per line, the statement's month, team and status repeated on each."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for statement in statements:
        for line in statement.lines.all():
            row = {"month": statement.period.label, "team": statement.team.slug,
                   "status": statement.status, "currency": statement.currency,
                   **_line_dict(line)}
            writer.writerow([_csv_value(row.get(c)) for c in CSV_COLUMNS])
    return out.getvalue()


def _csv_value(value: Any) -> str:
    text = "" if value is None else str(value)
    # A cell starting with = + - @ is a formula to spreadsheets: quote it as text, but keep
    # negative amounts (digits after the minus) as numbers.
    if text[:1] in ("=", "+", "@") or (text[:1] == "-" and not _is_number(text)):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        Decimal(text)
    except InvalidOperation:
        return False
    return True


def statements_of(month: date, visible: QuerySet[Statement]) -> Sequence[Statement]:
    return list(visible.filter(period__month=month).select_related("team", "period")
                .prefetch_related("lines").order_by("team__slug"))


# --- A researcher's own usage ----------------------------------------------------------------


@dataclass(frozen=True)
class UserUsage:
    """One person's month: their lines, the totals, and the cost at useful hours only."""

    month: date
    terms: cb.Terms
    lines: list[cb.Line]
    totals: cb.Totals

    @property
    def saving(self) -> Decimal:
        """What charging useful hours only would have saved against the policy's amount."""
        return self.totals.amount - self.totals.useful_amount


def user_usage(user: Any, month: date, now: datetime | None = None) -> UserUsage:
    """The user's own jobs in ``month`` (whatever team they ran under), priced."""
    by_team = compute_lines(month, Job.objects.filter(user=user), now)
    lines = [line for team_lines in by_team.values() for line in team_lines]
    return UserUsage(month, terms_for(month), lines, cb.totals(lines))


def refresh_due(month: date, now: datetime | None = None) -> bool:
    """Whether ``month``'s drafts are older than ``CHARGEBACK_REFRESH_EVERY``, or missing
    while GPU jobs ran in it (a month whose statements are all final never is)."""
    now = now or timezone.now()
    period = month_period(month)
    if period.start > now:
        return False
    statements = Statement.objects.filter(period__month=month)
    drafts = statements.filter(status=Statement.Status.DRAFT)
    if drafts.exists():
        oldest = drafts.aggregate(oldest=Min("computed_at"))["oldest"]
        return oldest is None or (now - oldest).total_seconds() > \
            settings.CHARGEBACK_REFRESH_EVERY
    if statements.exists():
        return False  # all final
    return Job.objects.filter(gpu_equivalent__gt=0, start_time__lt=period.end).filter(
        Q(end_time__isnull=True) | Q(end_time__gt=period.start)).exists()


def request_refresh(month: date, now: datetime | None = None) -> bool:
    """Ask for ``month``'s drafts to be refreshed when they are due; True if this call asked.

    Pages call this, so drafts follow the month without a beat (the embedded default runs
    the task in-process, a worker otherwise). A conditional UPDATE of the month's
    ``refresh_requested_at`` claims the request: concurrent views ask once per period.
    """
    from apps.chargeback.tasks import refresh_month  # tasks import this module

    now = now or timezone.now()
    if not refresh_due(month, now):
        return False
    period = period_row(month)
    since = now - timedelta(seconds=settings.CHARGEBACK_REFRESH_EVERY)
    claimed = BillingPeriod.objects.filter(pk=period.pk).filter(
        Q(refresh_requested_at__isnull=True) | Q(refresh_requested_at__lt=since)
    ).update(refresh_requested_at=now)
    if claimed:  # a broker outage releases the claim: the next view asks again
        publish_on_commit(refresh_month, f"{month:%Y-%m}", on_failure=lambda exc: (
            BillingPeriod.objects.filter(pk=period.pk, refresh_requested_at=now)
            .update(refresh_requested_at=None)))
    return bool(claimed)


def save_rate(rate: Rate, user: Any, change: str) -> int:
    """Store a rate from the Rates page, audit it, and ask every month that has drafts to
    refresh them (final statements keep their copied prices); the number of months."""
    from apps.chargeback.tasks import refresh_month  # tasks import this module

    rate.save()
    _audit(user, f"rate: {rate}", change=change, price=str(rate.price))
    months = sorted(set(Statement.objects.filter(status=Statement.Status.DRAFT)
                        .values_list("period__month", flat=True)))
    for month in months:
        publish_on_commit(refresh_month, f"{month:%Y-%m}")
    return len(months)


def refresh_open_months(now: datetime | None = None) -> list[RefreshResult]:
    """The periodic refresh: this month, and last month while any of its statements is still
    a draft (admins finalise after the month ends)."""
    now = now or timezone.now()
    month = current_month(now)
    previous = date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)
    months = [month]
    if Statement.objects.filter(period__month=previous, status=Statement.Status.DRAFT).exists():
        months.insert(0, previous)
    return [refresh_statements(m, now=now) for m in months]


# --- Where the waste came from -------------------------------------------------------------

WASTE_WORDS = {"waiting": "busy but waiting (communication or input)",
               "held_idle": "idle with memory held", "no_process": "allocated, no process"}


@dataclass(frozen=True)
class WastefulJob:
    """A job that wasted at least half its measured GPU-hours in the month."""

    job: Job
    hours: cb.Hours
    whole: bool = False  # the job ran inside the month (so far): its hours are all of its own

    @property
    def kind(self) -> str:
        h = self.hours
        return max(("waiting", h.waiting), ("held_idle", h.held_idle),
                   ("no_process", h.no_process), key=lambda kv: kv[1])[0]

    @property
    def kind_words(self) -> str:
        return WASTE_WORDS[self.kind]

    @property
    def share(self) -> float:
        return self.hours.waste / self.hours.measured if self.hours.measured > 0 else 0.0


def wasteful_jobs_of(statement: Statement, now: datetime | None = None,
                     limit: int = 20) -> list[WastefulJob]:
    """The team's jobs that wasted most of their GPU-hours in the statement's month, most
    wasted GPU-hours first: where a statement's waste came from (live, not stored)."""
    period, now = month_period(statement.period.month), now or timezone.now()
    rows = wasteful_jobs(Job.objects.filter(team=statement.team), period.start, period.end,
                         now, limit=limit)
    return [WastefulJob(job, hours, _inside(job, period, now)) for job, hours in rows]


def _inside(job: Job, period: cb.Period, now: datetime) -> bool:
    """Whether the job's whole run so far lies in ``period`` (its month's hours are its own)."""
    end = job.end_time or now
    return job.start_time is not None and period.start <= job.start_time and end <= period.end
