"""Database size per job: the simulated month loaded into PostgreSQL, table by table.

The figures the scale model (docs/SCALING.md) multiplies out: rows and bytes per job of
every table the real import paths fill.

1. ``manage.py simulate`` (``manage.py demo``'s defaults: 16 nodes x 30 days; ``--quick``:
   4 nodes x 7 days) into a temporary folder.
2. ``migrate`` and ``load_demo`` into a fresh PostgreSQL database
   (``<BENCH_DB_PREFIX>_demo``), each its own process: the Slurm sync, GPU history, labels,
   the telemetry archive (summaries, node rows, diagnosis), traces.
3. ``pg_total_relation_size`` (heap + TOAST + indexes) of every table after
   ``VACUUM ANALYZE``, per job and per GPU-job.
No target: this measures what the scale model needs.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import (
    ChildRun,
    Result,
    cli,
    database_url,
    ensure_database,
    run_child,
    setup_django,
    table_sizes,
)
from bench.demo import demo_defaults

DB_URL = database_url("demo")
SHOWN = 12  # largest tables listed one by one; the rest are summed


def _manage(data_dir: Path, *args: str) -> ChildRun:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(BEACON_DATA_DIR=str(data_dir), LOG_LEVEL="warning", DATABASE_URL=DB_URL)
    return run_child([sys.executable, "manage.py", *args], env).check(f"manage.py {args[0]}")


def _load(cfg: dict[str, Any], tmp: Path) -> dict[str, ChildRun]:
    simulate = _manage(tmp / "data", "simulate", "--out", str(tmp / "sim"), "--nodes",
                       str(cfg["nodes"]), "--days", f"{cfg['days']:g}", "--seed",
                       str(cfg["seed"]), "--telemetry-step", str(cfg["telemetry_step"]))
    _manage(tmp / "data", "migrate", "--noinput", "-v0")
    return {"simulate": simulate, "load": _manage(tmp / "data", "load_demo", str(tmp / "sim"))}


def _measure() -> dict[str, Any]:
    from django.db import connection
    from django.db.models import Sum

    from apps.jobs.models import Job

    tables = connection.introspection.table_names()
    jobs = Job.objects.count()
    gpu_jobs = Job.objects.aggregate(n=Sum("gpus"))["n"] or 0
    started = Job.objects.filter(start_time__isnull=False).count()
    return {"sizes": table_sizes(tables), "jobs": jobs, "gpu_jobs": gpu_jobs,
            "started": started}


def main(quick: bool) -> Result:
    ensure_database(DB_URL, fresh=True)
    with tempfile.TemporaryDirectory() as tmp:
        setup_django(tmp, DB_URL)
        cfg = demo_defaults()
        if quick:
            cfg.update(nodes=4, days=7)
        runs = _load(cfg, Path(tmp))
        measured = _measure()
    return _result(quick, cfg, runs, measured)


def _result(quick: bool, cfg: dict[str, Any], runs: dict[str, ChildRun],
            m: dict[str, Any]) -> Result:
    jobs, gpu_jobs = max(m["jobs"], 1), max(m["gpu_jobs"], 1)
    ranked = sorted(m["sizes"].items(), key=lambda item: -item[1][1])
    total = sum(size for _, size in m["sizes"].values())
    rows = [[f"`{table}`", f"{count:,}", f"{count / jobs:.2f}", f"{size / 1e6:.2f} MB",
             f"{size / jobs:,.0f}"] for table, (count, size) in ranked[:SHOWN]]
    rest = ranked[SHOWN:]
    rows.append([f"{len(rest)} other tables", f"{sum(c for _, (c, _) in rest):,}", "",
                 f"{sum(s for _, (_, s) in rest) / 1e6:.2f} MB",
                 f"{sum(s for _, (_, s) in rest) / jobs:,.0f}"])
    rows.append(["**all tables**", "", "", f"**{total / 1e6:.1f} MB**",
                 f"**{total / jobs:,.0f}**"])
    return Result(
        name="db_size", title="Database size per job (the simulated month in PostgreSQL)",
        command=f"python -m bench db_size{' --quick' if quick else ''}",
        inputs={"cluster": f"{cfg['nodes']} nodes x 8 GPUs x {cfg['days']:g} days, "
                           f"--telemetry-step {cfg['telemetry_step']}",
                "jobs": f"{m['jobs']:,} ({m['started']:,} started; {m['gpu_jobs']:,} "
                        f"GPU-jobs, {m['gpu_jobs'] / jobs:.1f} GPUs per job on average)",
                "load": f"load_demo into PostgreSQL 15 in {runs['load'].seconds:.0f} s, peak "
                        f"RSS {runs['load'].peak_rss_mb:.0f} MB (one run)"},
        columns=["table", "rows", "rows per job", "size (heap + TOAST + indexes)",
                 "bytes per job"],
        rows=rows,
        notes=[f"Bytes per GPU-job, all tables: {total / gpu_jobs:,.0f}. Sizes depend on "
               "the data, not on the machine: one run is enough.",
               "Sessions, users, teams and rules are per site, not per job; they are in the "
               "total but do not grow with jobs."],
    )


if __name__ == "__main__":
    cli("db_size", main)
