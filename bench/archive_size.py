"""How big is the job archive? Bytes per GPU-job in PostgreSQL for 10,000 finished jobs (issue 5).

1. A fresh PostgreSQL database (``<BENCH_DB_PREFIX>_archive``), migrated.
2. A sample of finished 8-GPU jobs (500; ``--quick``: 100) is archived through the real
   service, ``archive.archive_job(job, source)``: summaries, health, straggler verdict,
   compact ~300-point series per GPU and per node, diagnosis. The source stands where
   Prometheus would: it returns what ``PrometheusSource.fetch`` returns for a 5-hour job
   (every GPU measure the archive reads and the node series, on the job's plan of 300
   windows), from 20 noisy templates, so compression is not flattered (PostgreSQL
   compresses each value on its own; identical blobs in two rows are stored twice).
   The service's throughput (jobs/s, CPU per job) is measured here.
3. The sample's archive rows are copied in SQL to new jobs until there are 10,000
   (``--quick``: 1,000): archiving them all one by one would take half an hour, and the
   copies are what archiving the same templates again would write.
4. ``pg_total_relation_size`` (heap + TOAST + indexes) of the archive tables, per GPU-job.
Target: the archive of 10,000 jobs fits in the size docs/metrics.md states, 8 KB per
GPU-job (10,000 8-GPU jobs in 640 MB). For scale: the same points as raw float64 values.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import (
    Check,
    Result,
    cli,
    database_url,
    ensure_database,
    setup_django,
    table_sizes,
)

DB_URL = database_url("archive")
GPUS, HOURS, TEMPLATES = 8, 5, 20
BUDGET_PER_GPU_JOB = 8_000  # bytes, as docs/metrics.md states it
TABLES = ["jobs_jobmetricsummary", "jobs_jobnodemetrics", "jobs_jobmetrics",
          "jobs_jobfinding"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# --- What Prometheus would return -------------------------------------------------------


def _wave(rng: random.Random, n: int, low: float, high: float) -> list[float]:
    base, phase = rng.uniform(0.2, 0.8), rng.uniform(0, 6)
    return [low + (high - low) * min(1.0, max(0.0, base + 0.2 * math.sin(i / 9 + phase)
                                              + rng.gauss(0, 0.05))) for i in range(n)]


def _gpu_values(rng: random.Random, measure: str, unit: str, n: int) -> list[float]:
    """Plausible values by unit; codes (throttle reasons, XIDs, ECC) are mostly zero."""
    if unit in ("bitmask", "code", "count"):
        return [0.0 if rng.random() > 0.02 else 4.0 for _ in range(n)]
    low, high = {"ratio": (0.0, 1.0), "MiB": (50_000, 70_000), "W": (200, 650),
                 "°C": (45, 80), "MHz": (1700, 1980), "B/s": (1e8, 3e10)}.get(unit, (0, 1))
    return _wave(rng, n, low, high)


def _template(rng: random.Random, window: Any) -> Any:
    """One job's telemetry as the Prometheus source returns it (8 GPUs on one node)."""
    from apps.analysis.timeseries import GpuKey, Series
    from apps.clusters.adapters.catalogue import JOB_MEASURES, Catalogue
    from apps.clusters.adapters.telemetry import JobTelemetry, plan

    catalogue = Catalogue()
    p = plan(window, catalogue.scrape_interval)
    times = p.times()
    telemetry = JobTelemetry(p, "label")
    for gpu in range(GPUS):
        key = GpuKey("gpu001", gpu)
        telemetry.uuids[key] = f"GPU-{rng.getrandbits(64):016x}"
        telemetry.gpus[key] = {}
        for measure in JOB_MEASURES:
            unit = catalogue.metric(measure).unit
            values = _gpu_values(rng, measure, unit, p.n)
            telemetry.gpus[key][measure] = Series(measure, {}, tuple(zip(times, values,
                                                                         strict=True)))
    telemetry.nodes["gpu001"] = {
        name: Series(name, {}, tuple(zip(times, _wave(rng, p.n, 0, 1e10), strict=True)))
        for name in catalogue.node_queries()}
    return telemetry


class TemplateSource:
    """Stands where Prometheus would: each job gets one of the noisy templates."""

    name = "prometheus"

    def __init__(self, window: Any, count: int) -> None:
        rng = random.Random(1)
        self.templates = [_template(rng, window) for _ in range(count)]
        self.calls = 0

    def fetch(self, job_id: str, window: Any, intervals: Any) -> Any:
        self.calls += 1
        return self.templates[int(job_id) % len(self.templates)]


# --- The benchmark ----------------------------------------------------------------------


def _jobs(n_jobs: int) -> list[Any]:
    from apps.clusters.models import Cluster
    from apps.jobs.models import Job

    cluster, _ = Cluster.objects.get_or_create(name="bench-archive")
    return Job.objects.bulk_create([
        Job(cluster=cluster, job_id=i, display_id=str(i), user_name="u",
            submit_time=T0, start_time=T0, end_time=T0 + timedelta(hours=HOURS),
            state="COMPLETED", gpus=GPUS, gpu_equivalent=GPUS, node_count=1, nodes="gpu001")
        for i in range(n_jobs)], batch_size=1000)


def _archive(sample: int, n_jobs: int) -> dict[str, Any]:
    from django.core.management import call_command

    from apps.analysis.timeseries import Window
    from apps.jobs.archive import archive_job

    call_command("migrate", verbosity=0)
    start = T0.timestamp()
    source = TemplateSource(Window(start, start + HOURS * 3600), TEMPLATES)
    jobs = _jobs(sample)
    now = T0 + timedelta(days=1)
    cpu, started = sum(os.times()[:2]), time.perf_counter()
    statuses = {archive_job(job, source, now=now).status for job in jobs}
    seconds, cpu = time.perf_counter() - started, sum(os.times()[:2]) - cpu
    _replicate(sample, n_jobs)
    return {"seconds": seconds, "cpu": cpu, "statuses": sorted(statuses),
            "sizes": table_sizes(TABLES), "points": source.templates[0].plan.n}


def _replicate(sample: int, n_jobs: int) -> None:
    """Copy the sample's archive rows to new jobs ``sample .. n_jobs - 1`` (Slurm ids)."""
    from django.db import connection, transaction

    from apps.jobs.models import Job

    cluster = Job.objects.get(job_id=0).cluster
    with transaction.atomic():
        Job.objects.bulk_create([
            Job(cluster=cluster, job_id=i, display_id=str(i), user_name="u", submit_time=T0,
                start_time=T0, end_time=T0 + timedelta(hours=HOURS), state="COMPLETED",
                gpus=GPUS, gpu_equivalent=GPUS, node_count=1, nodes="gpu001")
            for i in range(sample, n_jobs)], batch_size=1000)
        with connection.cursor() as cur:
            for table in TABLES:
                cur.execute(_copy_sql(table), [sample, sample])


def _copy_sql(table: str) -> str:
    """INSERT ... SELECT of ``table``'s rows for the jobs whose Slurm id is a copy's id."""
    from django.apps import apps
    from django.db import connection

    model = next(m for m in apps.get_models() if m._meta.db_table == table)
    q = connection.ops.quote_name
    cols = [f.column for f in model._meta.concrete_fields
            if not f.primary_key and f.column != "job_id"]
    listed = ", ".join(q(c) for c in cols)
    picked = ", ".join(f"r.{q(c)}" for c in cols)
    return (f"INSERT INTO {q(table)} (job_id, {listed}) "  # noqa: S608 (names from models)
            f"SELECT copy.id, {picked} FROM {q(table)} r "
            "JOIN jobs_job src ON src.id = r.job_id "
            "JOIN jobs_job copy ON copy.job_id >= %s "
            "AND copy.job_id %% %s = src.job_id AND copy.cluster_id = src.cluster_id")


def main(quick: bool) -> Result:
    sample, n_jobs = (100, 1_000) if quick else (500, 10_000)
    ensure_database(DB_URL, fresh=True)
    with tempfile.TemporaryDirectory() as data_dir:
        setup_django(data_dir, DB_URL)
        run = _archive(sample, n_jobs)
    return _result(quick, sample, n_jobs, run)


def _result(quick: bool, sample: int, n_jobs: int, run: dict[str, Any]) -> Result:
    from apps.jobs.archive_rows import GPU_CHANNELS, NODE_CHANNELS

    gpu_jobs = n_jobs * GPUS
    sizes = run["sizes"]
    total = sum(size for _, size in sizes.values())
    per_gpu_job = total / gpu_jobs
    raw = (len(GPU_CHANNELS) + 1 + len(NODE_CHANNELS) / GPUS) * run["points"] * 8
    rows = [[table, f"{rows:,}", f"{size / 1e6:.1f} MB", f"{size / gpu_jobs:,.0f}"]
            for table, (rows, size) in sizes.items()]
    rows.append(["**total**", "", f"{total / 1e6:.1f} MB", f"**{per_gpu_job:,.0f}**"])
    return Result(
        name="archive_size", title="Job archive size in PostgreSQL",
        command=f"python -m bench archive_size{' --quick' if quick else ''}",
        inputs={"jobs": f"{n_jobs:,} finished jobs x {GPUS} GPUs (one node) x {HOURS} h = "
                        f"{gpu_jobs:,} GPU-jobs",
                "path": "apps.jobs.archive.archive_job (summaries, health, straggler verdict, "
                        "compact series, diagnosis) into PostgreSQL 15",
                "series": f"{run['points']} points per channel; {len(GPU_CHANNELS) + 1} GPU "
                          f"channels, {len(NODE_CHANNELS)} node channels",
                "archive_job throughput": f"{sample:,} jobs in {run['seconds']:.0f} s = "
                    f"{sample / run['seconds']:.1f} jobs/s; {run['cpu'] / sample * 1000:.0f} ms "
                    f"of CPU per 8-GPU job in this process (status "
                    f"{', '.join(run['statuses'])}); then copied in SQL to {n_jobs:,} jobs"},
        columns=["table", "rows", "size (heap + TOAST + indexes)", "bytes per GPU-job"],
        rows=rows,
        checks=[Check(f"<= {BUDGET_PER_GPU_JOB:,} bytes per GPU-job (10,000 8-GPU jobs in "
                      f"{BUDGET_PER_GPU_JOB * 80_000 / 1e6:.0f} MB)",
                      f"{per_gpu_job:,.0f} bytes; 10,000 x 8 GPUs = "
                      f"{per_gpu_job * 80_000 / 1e6:.0f} MB", per_gpu_job <= BUDGET_PER_GPU_JOB)],
        notes=[f"The same points as raw float64 would take {raw:,.0f} bytes per GPU-job: the "
               f"archive stores {per_gpu_job / raw:.2f} of that, indexes and summaries included.",
               "Sizes are deterministic (seeded data), so one run is enough; the time varies."],
    )


if __name__ == "__main__":
    cli("archive_size", main)
