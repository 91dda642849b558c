"""Right-sizing: a finished job's requests against its stored archive, and the weekly digests.

The advice itself is pure (``apps/analysis/guardrails_sizing.py``); this module reads what
it needs from the stored rows (Slurm's request, the per-GPU split, the memory series, the
nodes' peak memory where the job held them whole) and sends the digests:

- each user, once a week, the jobs that ended last week whose advice would save at least
  ``GUARDRAILS_DIGEST_MIN_GPU_HOURS`` (or ask for a far shorter time limit), each with its
  evidence and ``#SBATCH`` line (a user may turn it off in their preferences);
- each team's leads, the same week's waste by kind in GPU-hours, and the users and jobs
  behind most of it.

Weeks run from Monday 00:00 UTC; the first run of a week sends the week before. A digest
row per recipient and week (unique) makes a second run send nothing. On a simulated cluster
(the demo) the digests are written, marked simulated, and never sent: the My alerts page
shows them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Prefetch

from apps.accounts.models import Membership, Team
from apps.analysis import compact
from apps.analysis.figures import gpu_hours_text
from apps.analysis.guardrails_sizing import (
    FinishedJob,
    GpuUse,
    Recommendation,
    recommend,
    waste_by_kind,
)
from apps.clusters.models import Cluster, Node
from apps.core.runs import tracked_run
from apps.guardrails.models import AlertPreference, Digest, Message, TeamAlertSetting
from apps.guardrails.notify import (
    Deliver,
    job_url,
    preferences_url,
    record_simulated,
    send_notice,
)
from apps.jobs.idleness import idle_rules
from apps.jobs.models import Job, JobMetrics, JobMetricSummary

log = logging.getLogger(__name__)
WHOLE_NODE = 0.9  # node memory is the job's own only where it held this share of the CPUs
KIND_WORDS = {"time": "time limit asked for and not used", "gpus": "GPUs held idle",
              "mig": "whole GPUs a MIG slice would have served", "mem": "CPU memory"}


@dataclass(frozen=True)
class JobAdvice:
    job: Job
    recommendations: tuple[Recommendation, ...]

    @property
    def waste(self) -> float:
        return sum(r.waste_gpu_hours for r in self.recommendations if r.kind != "time")


def finished_job(job: Job, metrics: JobMetrics | None,
                 summaries: Sequence[JobMetricSummary], node_cpus: dict[str, int]) -> FinishedJob:
    """What ``job`` asked for and what its archive says it used."""
    assert job.start_time is not None and job.end_time is not None
    elapsed = max((job.end_time - job.start_time).total_seconds(), 0.0)
    used = tuple(_gpu_use(s) for s in summaries) if metrics and metrics.has_data else ()
    types = list((job.gpu_types or {}).keys())
    return FinishedJob(state=job.state, elapsed_s=elapsed, time_limit_min=job.time_limit_min,
                       gpus=job.gpus, gpu_type=types[0] if len(types) == 1 else "",
                       used=used, mem_requested_mb=job.memory_mb,
                       nodes=max(1, job.node_count), mem_peaks_bytes=_mem_peaks(job, node_cpus))


def _gpu_use(s: JobMetricSummary) -> GpuUse:
    memory = [v for v in compact.decode(bytes(s.series)).get("fb_used", []) if v is not None]
    peak = max(memory) if memory else s.fb_used_mib
    activity = s.mean if s.measure == "sm_active" else None
    return GpuUse(f"{s.host}:{s.gpu_index}", s.useful + s.waiting, activity, peak)


def _mem_peaks(job: Job, node_cpus: dict[str, int]) -> tuple[float, ...]:
    """Each of the job's nodes' peak memory in use during the job (its archived node
    telemetry), when the job held its nodes whole (node memory is node-shared: on a shared
    node the other jobs' memory is in the figure); empty otherwise. The advice takes the
    busiest node's (``FinishedJob.mem_peak_bytes``), as ``--mem`` is per node."""
    nodes = list(job.node_metrics.all())
    total = sum(node_cpus.get(n.host, 0) for n in nodes)
    peaks = tuple(n.mem_used_bytes for n in nodes if n.mem_used_bytes is not None)
    if not nodes or not peaks or total <= 0 or job.cpus < WHOLE_NODE * total:
        return ()
    return peaks


def advice_for(job: Job) -> list[Recommendation]:
    """The job page's right-sizing advice (finished jobs; nothing for running ones)."""
    return list(_advise([job])[0].recommendations) if _finished(job) else []


def _finished(job: Job) -> bool:
    return not job.is_active and job.start_time is not None and job.end_time is not None


def _advise(jobs: Iterable[Job]) -> list[JobAdvice]:
    jobs = [j for j in jobs if _finished(j)]
    metrics = {m.job_id: m for m in JobMetrics.objects.filter(job__in=jobs)}
    cpus = {(c, n): v for c, n, v in Node.objects.filter(
        cluster_id__in={j.cluster_id for j in jobs}).values_list("cluster_id", "name", "cpus")}
    out, rules = [], idle_rules()
    for job in jobs:
        node_cpus = {n: v for (c, n), v in cpus.items() if c == job.cluster_id}
        summaries = list(job.metric_summaries.all())
        out.append(JobAdvice(job, tuple(recommend(
            finished_job(job, metrics.get(job.pk), summaries, node_cpus), rules))))
    return out


# --- Digests ---------------------------------------------------------------------------------


def last_week(now: datetime) -> tuple[date, datetime, datetime]:
    """The Monday that starts last week, and last week's bounds (UTC)."""
    this_monday = (now.astimezone(UTC) - timedelta(days=now.astimezone(UTC).weekday())).date()
    monday = this_monday - timedelta(days=7)
    start = datetime.combine(monday, time(), tzinfo=UTC)
    return monday, start, start + timedelta(days=7)


def week_jobs(start: datetime, end: datetime, cluster: Cluster | None = None) -> list[Job]:
    """GPU jobs that ended in ``[start, end)`` (on ``cluster``, when given), with their
    summaries and nodes."""
    jobs = Job.objects.filter(cluster=cluster) if cluster is not None else Job.objects.all()
    return list(jobs.filter(end_time__gte=start, end_time__lt=end,
                                   start_time__isnull=False, gpu_equivalent__gt=0)
                .exclude(state__in=Job.ACTIVE_STATES)
                .select_related("cluster", "user", "team")
                .prefetch_related(Prefetch("metric_summaries"), "node_metrics")
                .order_by("pk"))


def worth_telling(advice: JobAdvice) -> bool:
    return advice.waste >= settings.GUARDRAILS_DIGEST_MIN_GPU_HOURS or any(
        r.kind in ("time", "mem") for r in advice.recommendations)


def send_digests(now: datetime, simulated: Cluster | None = None) -> dict[str, Any]:
    """Last week's digests to users and leads (each once); the run's stats.

    ``simulated``: a simulated cluster (the demo, at its simulated "now"): only its jobs,
    and each digest is stored as a simulated message instead of being sent.
    """
    monday, start, end = last_week(now)
    deliver = record_simulated if simulated is not None else send_notice
    with tracked_run("guardrails_digest", target=str(monday)) as run:
        advice = [a for a in _advise(week_jobs(start, end, simulated)) if a.recommendations]
        stats: dict[str, Any] = {"week": str(monday), "jobs": len(advice),
                                 "user_digests": 0, "team_digests": 0, "no_address": 0}
        by_user: dict[int, list[JobAdvice]] = {}
        for a in advice:
            if a.job.user_id and worth_telling(a):
                by_user.setdefault(a.job.user_id, []).append(a)
        users = get_user_model().objects.in_bulk(list(by_user))
        for user_id, items in by_user.items():
            _count(stats, "user_digests",
                   _user_digest(users[user_id], items, monday, now, deliver))
        by_team: dict[int, list[JobAdvice]] = {}
        for a in advice:
            if a.job.team_id:
                by_team.setdefault(a.job.team_id, []).append(a)
        for team in Team.objects.filter(pk__in=list(by_team)):
            for sent in _team_digests(team, by_team[team.pk], monday, now, deliver):
                _count(stats, "team_digests", sent)
        run.stats = stats
    return stats


def _count(stats: dict[str, Any], key: str, sent: bool | None) -> None:
    """None: nothing to send (opted out, or sent before); False: no address to send to."""
    if sent is not None:
        stats[key if sent else "no_address"] += 1


def _claim(kind: str, user: Any, team: Team | None, monday: date, items: Sequence[JobAdvice]
           ) -> Digest | None:
    waste = waste_by_kind([r for a in items for r in a.recommendations if r.kind != "mem"])
    try:
        with transaction.atomic():
            return Digest.objects.create(kind=kind, user=user, team=team, week=monday,
                                         waste={k: round(v, 2) for k, v in waste.items()},
                                         jobs=len(items))
    except IntegrityError:
        return None  # sent by an earlier run


def _user_digest(user: Any, items: list[JobAdvice], monday: date, now: datetime,
                 deliver: Deliver = send_notice) -> bool | None:
    pref = AlertPreference.objects.filter(user=user).first()
    if pref is not None and not pref.digest:
        return None
    digest = _claim(Digest.Kind.USER, user, None, monday, items)
    if digest is None:
        return None
    subject, body = user_digest_text(items, monday)
    digest.message = deliver(Message.Kind.DIGEST, user, subject, body, now)
    digest.save(update_fields=["message"])
    return digest.message is not None


def user_digest_text(items: Sequence[JobAdvice], monday: date) -> tuple[str, str]:
    items = sorted(items, key=lambda a: -a.waste)
    total = sum(a.waste for a in items)
    lines = [f"Your GPU jobs that ended in the week of {monday:%Y-%m-%d} asked for more than "
             f"they used. Asking for what a job needs gets it started sooner (the scheduler "
             f"fits it in earlier) and leaves the rest to others. The advice below would have "
             f"saved {gpu_hours_text(total)}.", ""]
    for a in items[:20]:
        job = a.job
        lines.append(f"Job {job.display_id} \"{job.name}\" on {job.cluster.name} "
                     f"({job.state.lower()}): {job_url(job)}")
        for r in a.recommendations:
            lines.append(f"  - {r.evidence}. Instead of {r.asked}: {r.line}")
        lines.append("")
    if len(items) > 20:
        lines.append(f"... and {len(items) - 20} more jobs (their pages show the same advice).")
    lines.append(f"Turn this weekly digest off: {preferences_url()}")
    return f"[Beacon] Right-sizing your GPU jobs: week of {monday:%Y-%m-%d}", "\n".join(lines)


def _team_digests(team: Team, items: list[JobAdvice], monday: date, now: datetime,
                  deliver: Deliver = send_notice) -> Iterator[bool]:
    """Each lead's digest: True once sent, False when the lead has no address."""
    setting = TeamAlertSetting.objects.filter(team=team).first()
    if setting is not None and not setting.lead_digest:
        return
    subject, body = team_digest_text(team, items, monday)
    for m in Membership.objects.filter(team=team, role=Membership.Role.LEAD,
                                       user__is_active=True).select_related("user"):
        if _claim(Digest.Kind.TEAM, m.user, team, monday, items) is None:
            continue
        message = deliver(Message.Kind.TEAM_DIGEST, m.user, subject, body, now)
        Digest.objects.filter(kind=Digest.Kind.TEAM, user=m.user, team=team, week=monday) \
            .update(message=message)
        yield message is not None


def team_digest_text(team: Team, items: Sequence[JobAdvice], monday: date) -> tuple[str, str]:
    """The leads' digest: waste by kind in GPU-hours, then who and which jobs."""
    waste = waste_by_kind([r for a in items for r in a.recommendations])
    lines = [f"Team {team.name}, GPU jobs that ended in the week of {monday:%Y-%m-%d}: "
             f"{len(items)} asked for more than they used.", "", "Waste by kind:"]
    for kind in ("gpus", "mig", "time"):
        if kind in waste:
            lines.append(f"  {KIND_WORDS[kind]}: {gpu_hours_text(waste[kind])}"
                         + (" (not charged, but it keeps the scheduler from backfilling)"
                            if kind == "time" else ""))
    mem = [r for a in items for r in a.recommendations if r.kind == "mem"]
    if mem:
        lines.append(f"  CPU memory asked for and not used: {len(mem)} jobs, "
                     f"{sum(r.waste_gib for r in mem):.0f} GiB")
    by_user: dict[str, float] = {}
    for a in items:
        by_user[a.job.user_name] = by_user.get(a.job.user_name, 0.0) + a.waste
    lines += ["", "By user (held idle, or on whole GPUs a slice would serve):"]
    lines += [f"  {name}: {gpu_hours_text(hours)}" for name, hours in
              sorted(by_user.items(), key=lambda kv: -kv[1])[:10] if hours > 0] or ["  none"]
    lines += ["", "Largest jobs:"]
    lines += [f"  {a.job.display_id} ({a.job.user_name}) {gpu_hours_text(a.waste)}: "
              f"{job_url(a.job)}"
              for a in sorted(items, key=lambda a: -a.waste)[:10] if a.waste > 0]
    return f"[Beacon] Team {team.name}: right-sizing, week of {monday:%Y-%m-%d}", "\n".join(lines)
