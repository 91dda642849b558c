"""Record a background run as a TaskRun row: running, then succeeded or failed."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from django.db.models import Model
from django.utils import timezone

from apps.core.models import TaskRun


@contextmanager
def tracked_run(kind: str, cluster: Model | None = None, target: str = "") -> Iterator[TaskRun]:
    """Create a running TaskRun, yield it, then finish it.

    The body may fill ``run.stats``; it is saved with the final status. A body that read
    only part of what it was asked to calls :func:`mark_partial` (the run ends
    ``partial`` with the reason, not ``succeeded``). An exception marks the run failed
    with its traceback and is re-raised, so Celery's retry logic still sees it. The row is
    written outside any transaction of the body, so a rolled-back sync still leaves its
    failed run behind.
    """
    # by id: apps/core does not know the clusters app's model (the floor of the layers)
    run = TaskRun.objects.create(
        kind=kind, cluster_id=None if cluster is None else cluster.pk, target=target[:200],
        status=TaskRun.Status.RUNNING, started_at=timezone.now(),
    )
    try:
        yield run
    except BaseException as exc:
        run.status = TaskRun.Status.FAILED
        run.error = f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}"[:20000]
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "error", "finished_at", "stats"])
        raise
    if run.status != TaskRun.Status.PARTIAL:
        run.status = TaskRun.Status.SUCCEEDED
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "error", "finished_at", "stats"])


def mark_partial(run: TaskRun, problems: list[str]) -> None:
    """End ``run`` as partial (when its body returns) with ``problems`` as its error."""
    if problems:
        run.status = TaskRun.Status.PARTIAL
        run.error = "\n".join(problems)[:20000]
