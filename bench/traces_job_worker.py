"""The Celery app of ``bench/traces_job.py``'s worker: Beacon's own, with every task of the
jobs app routed to the bench's private queue, so the groups and the analysis that
``collect_traces`` queues reach this worker and no other (``celery -A bench.traces_job_worker``)."""

from __future__ import annotations

from portal.celery import app

QUEUE = "bench_traces_job"  # private: a shared Redis may have other workers on "analysis"

app.conf.task_routes = {"apps.jobs.tasks.*": {"queue": QUEUE}}

__all__ = ["QUEUE", "app"]
