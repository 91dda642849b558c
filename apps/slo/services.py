"""SLO evaluation: every enabled objective's scorecards, monthly snapshots, then alerts.

1. ``compute_scorecards``: per objective, the SLI counts in SQL (``queries``) and the
   derived figures in pure Python (``apps.analysis.slo.assess``); then one upsert of every
   objective's scorecards in one transaction (a team without jobs gets a "no data"
   scorecard; subjects gone are removed).
2. ``record_snapshots``: the open month of each objective (refreshed every
   ``SLO_SNAPSHOT_MINUTES``) and the month before it, computed one last time and frozen.
3. ``notify.raise_alerts``: breaches and fast burns, once each.

Everything is idempotent: running it twice at the same ``now`` writes the same rows.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import pairwise
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.accounts.models import Team
from apps.analysis import slo as maths
from apps.core.runs import tracked_run
from apps.jobs.models import Job, JobMetrics
from apps.jobs.models.jobs import COUNTABLE
from apps.slo import queries
from apps.slo.models import EndingRule, Objective, Scorecard, Snapshot
from apps.slo.queries import SubjectCounts

log = logging.getLogger(__name__)
SCORECARD_FIELDS = ["team", "partition", "good", "total", "sli", "target", "budget_remaining",
                    "status", "details", "evaluated_at", "window_start", "window_end",
                    "burn_rates", "alerts", "exhaustion_at", "trend", "worst_jobs"]


def ending_rules() -> list[maths.EndingRule]:
    """The enabled rows of the ending classification, in order (the table admins edit)."""
    return [r.as_rule() for r in EndingRule.objects.filter(enabled=True)]


def window_of(objective: Objective, now: datetime) -> maths.Window:
    return maths.slo_window(objective.window, now, objective.tz)


def counts(objective: Objective, window: maths.Window, edges: Sequence[datetime],
           rules: Sequence[maths.EndingRule],
           jobs: QuerySet[Job] | None = None) -> dict[str, SubjectCounts]:
    """The objective's SLI per subject over ``window`` (and per day between ``edges``)."""
    if objective.sli == Objective.Sli.QUEUE_WAIT:
        return queries.queue_wait(objective, window, edges, jobs)
    if objective.sli == Objective.Sli.JOB_SUCCESS:
        return queries.job_success(objective, window, edges, rules, jobs)
    return queries.gpu_efficiency(objective, window, edges, jobs)


def worst_jobs(objective: Objective, window: maths.Window,
               rules: Sequence[maths.EndingRule]) -> dict[str, list[dict[str, Any]]]:
    if objective.sli == Objective.Sli.QUEUE_WAIT:
        return queries.worst_waits(objective, window)
    if objective.sli == Objective.Sli.JOB_SUCCESS:
        return queries.worst_endings(objective, window, rules)
    return queries.worst_efficiency(objective, window)


def expected_subjects(objective: Objective) -> dict[str, dict[str, Any]]:
    """Subjects that get a scorecard even without jobs: every team (or the one team) of a
    team-scope objective, the platform, the named partition."""
    if objective.scope == Objective.Scope.TEAM:
        teams = Team.objects.filter(pk=objective.team_id) if objective.team_id else \
            Team.objects.all()
        return {f"team:{pk}": {"team_id": pk} for pk in teams.values_list("pk", flat=True)}
    if objective.scope == Objective.Scope.PARTITION:
        return {f"partition:{objective.partition}": {"partition": objective.partition}} \
            if objective.partition else {}
    return {"platform": {}}


def _subject_fields(key: str) -> dict[str, Any]:
    kind, _, value = key.partition(":")
    if kind == "team":
        return {"team_id": int(value), "partition": ""}
    return {"team_id": None, "partition": value if kind == "partition" else ""}


def job_facts(jobs: QuerySet[Job]) -> list[maths.JobFacts]:
    """Jobs as the pure reference reads them (tests compare it with the SQL path): the
    countable ones, as ``queries.population`` keeps."""
    out = []
    for job in jobs.filter(COUNTABLE).select_related("team", "metrics").order_by("pk"):
        metrics: JobMetrics | None = getattr(job, "metrics", None)  # None: not archived
        measured = bool(metrics and metrics.measure and metrics.allocated_gpu_hours > 0
                        and metrics.status in JobMetrics.MEASURED)
        useful = metrics.useful_hours / metrics.allocated_gpu_hours if metrics and measured else 0.0
        out.append(maths.JobFacts(
            job.job_id, job.team.slug if job.team else "", job.submit_time, job.state,
            job.start_time, job.end_time, job.eligible_time, job.partition,
            job.gpu_equivalent, job.node_count > 0, job.wait_reason,
            bool(metrics and ((metrics.xid_gpus or 0) > 0 or (metrics.ecc_dbe or 0) > 0)),
            measured, useful,
            job.array_job_id))
    return out


# --- Scorecards ---------------------------------------------------------------------------------


def _trend_json(assessment: maths.Assessment) -> list[dict[str, Any]]:
    return [{"start": p.start.isoformat(), "end": p.end.isoformat(), "good": p.counts.good,
             "total": p.counts.total, "sli": p.sli, "remaining": p.remaining}
            for p in assessment.trend]


def _scorecard(objective: Objective, key: str, sc: SubjectCounts, window: maths.Window,
               edges: Sequence[datetime], worst: list[dict[str, Any]]) -> Scorecard:
    days = [(a, b, c) for (a, b), c in zip(pairwise(edges), sc.days, strict=True)]
    result = maths.assess(sc.window, objective.target, window, sc.burn, days)
    now = window.observed_end
    return Scorecard(
        objective=objective, subject=key, **_subject_fields(key), good=result.counts.good,
        total=result.counts.total, sli=result.sli, target=objective.target,
        budget_remaining=result.remaining, status=result.status.value, details=sc.details,
        evaluated_at=now, window_start=window.start, window_end=window.end,
        burn_rates={maths.window_label(s): r for s, r in result.burn_rates.items()},
        alerts=[a.name for a in result.alerts],
        exhaustion_at=(now + timedelta(seconds=result.exhaustion_s)
                       if result.exhaustion_s is not None else None),
        trend=_trend_json(result), worst_jobs=worst)


def evaluate_objective(objective: Objective, now: datetime,
                       rules: Sequence[maths.EndingRule]) -> list[Scorecard]:
    """The objective's scorecards at ``now``, computed, not stored (``store_scorecards``)."""
    window = window_of(objective, now)
    edges = maths.day_edges(window, objective.tz)
    parts = counts(objective, window, edges, rules)
    for key in expected_subjects(objective):
        parts.setdefault(key, SubjectCounts(days=[maths.Counts()] * (len(edges) - 1),
                                            burn={s: maths.Counts()
                                                  for s in maths.BURN_WINDOWS}))
    worst = worst_jobs(objective, window, rules)
    return [_scorecard(objective, key, sc, window, edges, worst.get(key, []))
            for key, sc in sorted(parts.items())]


def store_scorecards(cards: dict[Objective, list[Scorecard]]) -> None:
    """One transaction for every objective's scorecards: one upsert of all rows (one
    commit, not one per objective), then the subjects gone and the disabled objectives'
    scorecards removed. Readers see the whole evaluation or the one before it."""
    rows = [row for objective_rows in cards.values() for row in objective_rows]
    with transaction.atomic():
        Scorecard.objects.bulk_create(rows, update_conflicts=True,
                                      unique_fields=["objective", "subject"],
                                      update_fields=SCORECARD_FIELDS)
        for objective, objective_rows in cards.items():
            Scorecard.objects.filter(objective=objective).exclude(
                subject__in=[r.subject for r in objective_rows]).delete()
        Scorecard.objects.exclude(objective__enabled=True).delete()


def compute_scorecards(now: datetime | None = None,
                       objectives: Iterable[Objective] | None = None) -> int:
    """Every enabled objective's scorecards at ``now``; returns how many were written."""
    now = now or timezone.now()
    rules = ending_rules()
    todo = list(objectives) if objectives is not None else list(
        Objective.objects.filter(enabled=True).select_related("cluster", "team"))
    cards = {o: evaluate_objective(o, now, rules) for o in todo}
    store_scorecards(cards)
    return sum(len(rows) for rows in cards.values())


# --- Snapshots (history by month) ------------------------------------------------------------


def _month_of(moment: datetime, objective: Objective) -> date:
    local = moment.astimezone(objective.tz)
    return date(local.year, local.month, 1)


def _previous(month: date) -> date:
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def snapshot_month(objective: Objective, month: date, now: datetime,
                   rules: Sequence[maths.EndingRule]) -> list[Snapshot]:
    """One calendar month of the objective (observed up to ``now`` if still open)."""
    window = maths.month_window(month.year, month.month, objective.tz, now)
    final = window.observed_end >= window.end
    parts = counts(objective, window, [window.start, window.observed_end], rules) \
        if window.observed_end > window.start else {}
    for key in expected_subjects(objective):
        parts.setdefault(key, SubjectCounts())
    rows = []
    for key, sc in sorted(parts.items()):
        result = maths.assess(sc.window, objective.target, window)
        rows.append(Snapshot(
            objective=objective, subject=key, **_subject_fields(key), month=month,
            period_start=window.start, period_end=window.end, computed_at=now, final=final,
            good=result.counts.good, total=result.counts.total, sli=result.sli,
            target=objective.target, budget_remaining=result.remaining,
            status=result.status.value, details=sc.details))
    with transaction.atomic():
        Snapshot.objects.bulk_create(rows, update_conflicts=True,
                                     unique_fields=["objective", "subject", "month"],
                                     update_fields=["team", "partition", "good", "total", "sli",
                                                    "target", "budget_remaining", "status",
                                                    "details", "period_start", "period_end",
                                                    "computed_at", "final"])
    return rows


def record_snapshots(now: datetime | None = None, *, force: bool = False,
                     objectives: Iterable[Objective] | None = None) -> int:
    """The open month (when its snapshot is older than ``SLO_SNAPSHOT_MINUTES``, or
    ``force``) and the month before, until that one is final."""
    now = now or timezone.now()
    rules = ending_rules()
    fresh = now - timedelta(minutes=settings.SLO_SNAPSHOT_MINUTES)
    written = 0
    todo = list(objectives) if objectives is not None else list(
        Objective.objects.filter(enabled=True).select_related("cluster", "team"))
    for objective in todo:
        month = _month_of(now, objective)
        done = Snapshot.objects.filter(objective=objective)
        if not done.filter(month=_previous(month), final=True).exists():
            written += len(snapshot_month(objective, _previous(month), now, rules))
        if force or not done.filter(month=month, computed_at__gt=fresh).exists():
            written += len(snapshot_month(objective, month, now, rules))
    return written


def backfill_snapshots(months: int, now: datetime | None = None) -> int:
    """Final snapshots of the ``months`` months before this one (``evaluate_slos
    --backfill-months``): history for a site that starts keeping SLOs."""
    now = now or timezone.now()
    rules, written = ending_rules(), 0
    for objective in Objective.objects.filter(enabled=True).select_related("cluster", "team"):
        month = _month_of(now, objective)
        for _ in range(months):
            month = _previous(month)
            written += len(snapshot_month(objective, month, now, rules))
    return written


# --- The periodic run ---------------------------------------------------------------------------


@dataclass
class Evaluation:
    scorecards: int = 0
    snapshots: int = 0
    alerts: dict[str, int] | None = None

    def stats(self) -> dict[str, Any]:
        return {"scorecards": self.scorecards, "snapshots": self.snapshots,
                **(self.alerts or {})}


def run_evaluation(now: datetime | None = None, *, notify: bool = True,
                   force_snapshots: bool = False) -> Evaluation:
    """The beat task's work (twin: ``manage.py evaluate_slos``), recorded as a TaskRun."""
    from apps.slo import notify as notifications

    now = now or timezone.now()
    with tracked_run("slo.evaluate", target=f"{now:%Y-%m-%d %H:%M}") as run:
        result = Evaluation(compute_scorecards(now), record_snapshots(now, force=force_snapshots))
        if notify:
            result.alerts = notifications.raise_alerts(now)
        run.stats = result.stats()
    log.info("slo: %s", result.stats())
    return result


# --- Export ----------------------------------------------------------------------------------

CSV_COLUMNS = ["team", "slo", "sli", "target", "window", "window_start", "window_end",
               "evaluated_at", "status", "sli_value", "good", "total", "budget_remaining",
               "burn_1h", "burn_6h", "burn_1d", "burn_3d", "exhaustion_at", "detail"]


def export_csv(scorecards: Iterable[Scorecard]) -> str:
    """One line per scorecard, then the breakdown lines (queue wait per partition and GPU
    bucket; success per ending rule; the worst jobs)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for card in scorecards:
        o = card.objective
        base = [card.subject_label, o.name, o.sli, o.target_text, o.window,
                card.window_start.isoformat(), card.window_end.isoformat(),
                card.evaluated_at.isoformat()]
        rates = card.burn_rates or {}
        writer.writerow([*base, card.status, _num(card.sli), _num(card.good),
                         _num(card.total), _num(card.budget_remaining),
                         *(_num(rates.get(w)) for w in ("1h", "6h", "1d", "3d")),
                         card.exhaustion_at.isoformat() if card.exhaustion_at else "", "summary"])
        for line in detail_lines(card):
            writer.writerow([*base, "", "", "", "", "", "", "", "", "", "", line])
    return out.getvalue()


def detail_lines(card: Scorecard) -> list[str]:
    d: dict[str, Any] = card.details or {}
    lines = [f"partition {b['partition']} gpus {b['bucket']}: {b['good']}/{b['total']} on time, "
             f"p50 {_minutes(b['p50'])} p90 {_minutes(b['p90'])}; own-limit waits "
             f"{b['own_jobs']}" for b in d.get("breakdown", [])]
    lines += [f"ending {key}: {n}" for key, n in sorted(d.get("endings", {}).items())]
    lines += [f"worst job {w['cluster']}:{w['display_id']} ({w['user_name']}): "
              f"{_num(w['value'])}" for w in card.worst_jobs or []]
    return lines


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.0f} min"
