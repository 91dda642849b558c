"""A collected run of many trace files read by several tasks, then analysed once (issue 29).

One task reading a 64-rank LLM job reads its files one after another on one core: Celery's
pool processes are daemonic and cannot start reader processes. So ``collect_traces``
splits a run of more than ``TRACE_GROUP_FILES`` files into groups, one task each, which
the workers' processes read side by side; each group stores its ranks' digests
(``rank_digest``: a few kB a rank, never the events), and the last one queues the analysis
of them all, the same ``traces.import_reading`` the one-task path ends in, so both store
the same ``TraceRun``.

Safe to run twice and to stop half-way (STYLE.md §2.7):

- the fan-out is unique on (job, fingerprint of the files): collecting the same files again
  finds it and queues only the groups not digested yet;
- a group is claimed before it is read (a conditional ``UPDATE``); a second task for it
  skips it while the claim is fresh (younger than the traces tasks' time limit, after
  which the worker has killed whatever held it), and its digests are written once;
- each group's digests commit before it looks at the others (no transaction around both):
  of two groups ending together, the later to commit sees every group digested; claiming
  ``analysing_since`` (another conditional ``UPDATE``) lets one of them queue the analysis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from itertools import pairwise
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.analysis.digest_json import (
    config_from_json,
    config_to_json,
    digest_from_json,
    digest_to_json,
)
from apps.analysis.rank_digest import digest
from apps.core.runs import tracked_run
from apps.jobs.adapters.kineto import TraceReading, read_trace_files, readable
from apps.jobs.models import Job, TraceDigestGroup, TraceFanOut, TraceRun
from apps.jobs.traces import (
    file_names,
    import_reading,
    named_reading,
    trace_config,
    trace_limits,
)

TASK = "apps.jobs.tasks.digest_trace_group"


def lease() -> timedelta:
    """How long a claim holds: the traces tasks' hard time limit (the worker kills a task
    past it, so an older claim belongs to nobody)."""
    limits = settings.CELERY_TASK_ANNOTATIONS.get(TASK, {})
    return timedelta(seconds=limits.get("time_limit", settings.CELERY_TASK_TIME_LIMIT))


def groups_of(files: Sequence[Path], size: int) -> list[list[Path]]:
    """``files`` in order, cut into runs of nearly equal length, at most ``size`` each."""
    count = math.ceil(len(files) / size)
    bounds = [round(i * len(files) / count) for i in range(count + 1)]
    return [list(files[a:b]) for a, b in pairwise(bounds)]


def plan(job: Job, run_dir: Path, files: Sequence[Path], fingerprint: str,
         label: str) -> TraceFanOut:
    """The fan-out of ``files`` (``run_dir``'s), made with its groups on first sight."""
    with transaction.atomic():
        fan_out, created = TraceFanOut.objects.get_or_create(
            job=job, fingerprint=fingerprint, defaults={
                "label": label[:255], "config": config_to_json(trace_config()),
                "names": file_names([run_dir])})
        if created:
            TraceDigestGroup.objects.bulk_create(
                TraceDigestGroup(fan_out=fan_out, index=i, files=[str(f) for f in group])
                for i, group in enumerate(groups_of(files, settings.TRACE_GROUP_FILES)))
    return fan_out


def start(fan_out: TraceFanOut, inline: bool = False) -> int:
    """Queue a task per group not digested yet (``inline``: read them here, one after the
    other: the command twin), or the analysis when every group is; the groups started."""
    from apps.jobs.tasks import digest_trace_group  # tasks import this module

    pending = list(fan_out.groups.filter(digested_at__isnull=True).order_by("index"))
    for group in pending:
        if inline:
            digest_group(group, inline=True)
        else:
            digest_trace_group.delay_on_commit(group.pk)
    if not pending:
        _analyse_when_complete(fan_out, inline)
    return len(pending)


def digest_group(group: TraceDigestGroup, inline: bool = False) -> None:
    """Read one group's files into digests and store them (a ``digest_traces`` run), then
    queue the analysis if no group is left."""
    fan_out = group.fan_out
    target = f"{fan_out.label} group {group.index + 1}/{fan_out.groups.count()}"
    with tracked_run("digest_traces", fan_out.job.cluster, target=target) as run:
        if not _claim(group):
            run.stats = {"skipped": "digested already, or being read by another task"}
            return
        try:
            reading = _read(group, fan_out)
        except BaseException:
            TraceDigestGroup.objects.filter(pk=group.pk).update(claimed_at=None)
            raise
        TraceDigestGroup.objects.filter(pk=group.pk, digested_at__isnull=True).update(
            digests=[digest_to_json(t) for t in reading.traces], problems=reading.problems,
            digested_at=timezone.now())
        run.stats = {"files": len(group.files), "digested": len(reading.traces),
                     "skipped": len(reading.problems)}
    _analyse_when_complete(fan_out, inline)


def _claim(group: TraceDigestGroup) -> bool:
    now = timezone.now()
    return TraceDigestGroup.objects.filter(pk=group.pk, digested_at__isnull=True).filter(
        Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - lease())).update(claimed_at=now) == 1


def _read(group: TraceDigestGroup, fan_out: TraceFanOut) -> TraceReading:
    """The group's files cut into steps as each is read, named as people see them."""
    reduce = partial(digest, config=config_from_json(fan_out.config))
    reading = read_trace_files([Path(f) for f in group.files], trace_limits(), 1, reduce)
    return named_reading(reading, fan_out.names)


def _analyse_when_complete(fan_out: TraceFanOut, inline: bool) -> None:
    from apps.jobs.tasks import analyse_trace_groups  # tasks import this module

    if fan_out.groups.filter(digested_at__isnull=True).exists():
        return
    now = timezone.now()
    claimed = TraceFanOut.objects.filter(pk=fan_out.pk, trace_run__isnull=True).filter(
        Q(analysing_since__isnull=True) | Q(analysing_since__lt=now - lease())
    ).update(analysing_since=now)
    if claimed and inline:
        analyse(TraceFanOut.objects.get(pk=fan_out.pk))
    elif claimed:
        analyse_trace_groups.delay_on_commit(fan_out.pk)


def analyse(fan_out: TraceFanOut) -> TraceRun | None:
    """Analyse the stored digests as one run and store it (an ``analyse_traces`` run);
    a failure frees the claim, so the next collection of the folder tries again."""
    job = fan_out.job
    with tracked_run("analyse_traces", job.cluster, target=fan_out.label) as run:
        if fan_out.trace_run_id is not None:
            run.stats = {"skipped": "analysed already"}
            return None
        try:
            stored = import_reading(job, _digests(fan_out), config_from_json(fan_out.config),
                                    fan_out.names)
        except BaseException:
            TraceFanOut.objects.filter(pk=fan_out.pk).update(analysing_since=None)
            raise
        TraceFanOut.objects.filter(pk=fan_out.pk).update(trace_run=stored)
        run.stats = {"trace_run": stored.pk, "ranks": stored.world_size,
                     "groups": fan_out.groups.count()}
    return stored


def _digests(fan_out: TraceFanOut) -> TraceReading:
    """Every group's digests and problems, in file order, as one reading of the run."""
    config = config_from_json(fan_out.config)
    groups = list(fan_out.groups.order_by("index"))
    if any(g.digested_at is None for g in groups):
        raise RuntimeError(f"{fan_out}: a group is not digested yet")
    return readable(TraceReading([digest_from_json(d, config) for g in groups for d in g.digests],
                                 [p for g in groups for p in g.problems]))
