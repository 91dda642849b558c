"""One live detection window read from a real Prometheus, at 1,000 to 10,000 GPUs (issue 17).

1. The bench's own loopback Prometheus 2.42 (``common.BenchPrometheus``, data in
   ``var/bench-detect-prometheus``, port ``BENCH_PROM_PORT`` or a free one). Each size is a
   dataset of its own (``detect_scale_data``: dcgm-exporter and node_exporter shapes, 8 GPUs
   a node, planted incidents) on a day of its own, backfilled once with promtool and found
   again by its marker series (its size and ``VERSION``).
2. A fresh SQLite database (migrated once, not timed) holds one cluster per size, pointed at
   that Prometheus, with the running jobs of its dataset.
3. Timed: ``manage.py detect --cluster scaleN --since --until --json`` over a 5-minute
   window (the scheduled run's look-back before it, as always), in a child process
   (``run_child``: wall time from process start to exit, peak RSS by ``wait4``). It is the
   command's own code path: the live Prometheus source, the frame, every rule, the findings
   stored. Prometheus's own request counters say how many queries it was sent and how long
   it spent answering them. Before the first run every sample of each window is read once
   (``warm``): a live site's recent data is in the server's memory, not on disk.
4. Correctness: the findings of every size are exactly the planted incidents (a busy GPU no
   job holds; InfiniBand traffic on a single-node job's node), so a faster path that loses
   or invents findings fails the check.
Targets: a 5-minute window of a 10,000-GPU cluster in under 30 s and under 1 GB peak RSS.
``--quick``: 1,000 and 2,000 GPUs only.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests

from bench import detect_scale_data as data
from bench.common import (
    ROOT,
    BenchError,
    BenchPrometheus,
    Check,
    ChildRun,
    Result,
    cli,
    run_child,
    setup_django,
    stats,
)

VERSION = "v1"
PROM = BenchPrometheus(ROOT / "var" / "bench-detect-prometheus")
DAY0 = 1_795_132_800  # 2026-11-20 00:00 UTC; size N sits on day N // 1000 after it
WINDOW_MIN, LOOKBACK_MIN, LEAD_MIN = 5, 30, 10
FULL, QUICK = (1_000, 5_000, 10_000), (1_000, 2_000)
TARGET_S, TARGET_MB, TARGET_GPUS = 30.0, 1024.0, 10_000


def window(gpus: int) -> tuple[int, int, int]:
    """(data start, since, until) of size ``gpus``'s dataset."""
    until = DAY0 + (gpus // 1000) * 86400 + 3600 + (LEAD_MIN + LOOKBACK_MIN + WINDOW_MIN) * 60
    since = until - WINDOW_MIN * 60
    return since - (LOOKBACK_MIN + LEAD_MIN) * 60, since, until


def marker(gpus: int) -> str:
    return f'beacon_bench_dataset{{name="detect-scale-{gpus}-{VERSION}"}}'


# --- The datasets ------------------------------------------------------------------------


def load(gpus: int) -> float:
    """Backfill size ``gpus`` once (seconds spent; 0 when it is already there)."""
    start, _, until = window(gpus)
    if PROM.has(marker(gpus), until):
        return 0.0
    began = time.perf_counter()
    (ROOT / "var").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "var") as tmp:
        path = Path(tmp) / f"scale{gpus}.om"
        with path.open("w") as out:
            data.write(out, data.Layout(gpus), start, until, marker(gpus))
        PROM.backfill(path)
    if not PROM.has(marker(gpus), until):
        raise BenchError(f"the backfilled {gpus}-GPU dataset is not queryable on {PROM.url}")
    return time.perf_counter() - began


def _setup_database(sizes: tuple[int, ...]) -> None:
    """Migrate the fresh SQLite database; a cluster per size with its running jobs."""
    from django.core.management import call_command

    from apps.clusters.models import Cluster

    call_command("migrate", "--noinput", verbosity=0)
    for gpus in sizes:
        cluster = Cluster.objects.create(name=f"scale{gpus}", prometheus_url=PROM.url,
                                         metric_labels={"scrape_interval": data.SCRAPE})
        add_running_jobs(cluster, gpus)


def add_running_jobs(cluster: Any, gpus: int) -> None:
    """Size ``gpus``'s jobs as Slurm rows of ``cluster``, running since an hour before its
    data starts (``detect_stores`` sets its clusters up the same way)."""
    from apps.jobs.models import Job

    start, _, _ = window(gpus)
    began = datetime.fromtimestamp(start - 3600, UTC)
    Job.objects.bulk_create(
        Job(cluster=cluster, job_id=j.job_id, display_id=str(j.job_id), name="train",
            user_name=f"user{j.job_id % 97}", account=f"team{j.job_id % 13}",
            state=Job.State.RUNNING, submit_time=began - timedelta(minutes=5),
            start_time=began, nodes=",".join(j.hosts), node_count=len(j.hosts),
            gpus=len(j.gpus) * len(j.hosts), gpu_equivalent=len(j.gpus) * len(j.hosts))
        for j in data.Layout(gpus).jobs())


# --- The measured run --------------------------------------------------------------------


def server_counters(url: str = PROM.url) -> tuple[float, float]:
    """Queries the Prometheus at ``url`` has answered so far and the seconds it spent on
    them (its own /metrics: the bench's servers scrape nothing, themselves included)."""
    count = seconds = 0.0
    text = requests.get(f"{url}/metrics", timeout=10).text
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if not name.startswith("prometheus_http_request_duration_seconds_") or \
                not ('handler="/api/v1/query"' in name or
                     'handler="/api/v1/query_range"' in name):
            continue
        if name.startswith("prometheus_http_request_duration_seconds_count"):
            count += float(value)
        elif name.startswith("prometheus_http_request_duration_seconds_sum"):
            seconds += float(value)
    return count, seconds


def warm(gpus: int, url: str = PROM.url) -> None:
    """Read every sample of size ``gpus``'s window once, untimed: a server just started on
    backfilled blocks reads them from disk at first, where a live site's recent data is
    in memory (the head block)."""
    start, _, until = window(gpus)
    names = requests.get(f"{url}/api/v1/label/__name__/values",
                         params={"start": start, "end": until}, timeout=60).json()["data"]
    for name in names:  # one by one: count_over_time drops the name
        query = f"count(count_over_time({name}[{until - start + 60}s]))"
        requests.post(f"{url}/api/v1/query", data={"query": query, "time": until},
                      timeout=120).raise_for_status()


def detect_once(gpus: int, data_dir: Path) -> dict[str, Any]:
    """``manage.py detect`` over size ``gpus``'s window, in a child: its figures."""
    from apps.security.models import Finding

    Finding.objects.filter(cluster__name=f"scale{gpus}").delete()  # each run finds anew
    _, since, until = window(gpus)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(BEACON_DATA_DIR=str(data_dir), LOG_LEVEL="warning")
    cmd = [sys.executable, "manage.py", "detect", "--cluster", f"scale{gpus}", "--json",
           "--since", datetime.fromtimestamp(since, UTC).isoformat(),
           "--until", datetime.fromtimestamp(until, UTC).isoformat(), "--slice-hours", "0"]
    count0, seconds0 = server_counters()
    child: ChildRun = run_child(cmd, env).check(f"manage.py detect ({gpus} GPUs)")
    count1, seconds1 = server_counters()
    found = json.loads(child.stdout)
    return {"seconds": child.seconds, "rss_mb": child.peak_rss_mb, "cpu_s": child.cpu_seconds,
            "queries": round(count1 - count0),
            "server_s": seconds1 - seconds0,
            "found": {(f["rule"], f["entity"]["node"], f["entity"]["gpu"]) for f in found}}


# --- The benchmark -----------------------------------------------------------------------


def main(quick: bool) -> Result:
    sizes = QUICK if quick else FULL
    repeats = 1 if quick else 2
    with tempfile.TemporaryDirectory(prefix="beacon-bench-detect-") as tmp, PROM.running():
        loaded = {gpus: load(gpus) for gpus in sizes}
        setup_django(tmp)
        _setup_database(sizes)
        runs: dict[int, list[dict[str, Any]]] = {gpus: [] for gpus in sizes}
        for gpus in sizes:
            warm(gpus)
        for _ in range(repeats):
            for gpus in sizes:
                runs[gpus].append(detect_once(gpus, Path(tmp)))
    return _result(quick, sizes, repeats, loaded, runs)


def _result(quick: bool, sizes: tuple[int, ...], repeats: int, loaded: dict[int, float],
            runs: dict[int, list[dict[str, Any]]]) -> Result:
    rows, ok_found = [], True
    for gpus in sizes:
        wall = stats([r["seconds"] for r in runs[gpus]])
        rss = max(r["rss_mb"] for r in runs[gpus])
        server = stats([r["server_s"] for r in runs[gpus]])
        cpu = stats([r["cpu_s"] for r in runs[gpus]])
        expected = data.Layout(gpus).expected()
        exact = all(r["found"] == expected for r in runs[gpus])
        ok_found &= exact
        last = runs[gpus][-1]
        rows.append([f"{gpus:,}", wall.text(" s"), f"{wall.median / gpus * 1000:.2f} ms",
                     f"{rss:.0f} MB", cpu.text(" s"), server.text(" s"), last["queries"],
                     f"{len(last['found'])} of {len(expected)} planted"
                     + ("" if exact else f" (**differs**: {sorted(last['found'])[:6]})")])
    big = max(sizes)
    wall_big = stats([r["seconds"] for r in runs[big]]).median
    rss_big = max(r["rss_mb"] for r in runs[big])
    checks = [Check("findings are exactly the planted incidents, at every size",
                    "yes" if ok_found else "no", ok_found)]
    if big >= TARGET_GPUS:
        checks += [Check(f"{TARGET_GPUS:,} GPUs, 5-minute window: < {TARGET_S:.0f} s",
                         f"{wall_big:.1f} s", wall_big < TARGET_S),
                   Check(f"{TARGET_GPUS:,} GPUs: peak RSS < 1 GB", f"{rss_big:.0f} MB",
                         rss_big < TARGET_MB)]
    backfill = ", ".join(f"{g:,}: {s:.0f} s" for g, s in loaded.items() if s) or \
        "all already there"
    return Result(
        name="detect_scale", title="Live detection of one window at 1,000 to 10,000 GPUs",
        command=f"python -m bench detect_scale{' --quick' if quick else ''}",
        inputs={
            "cluster": "8 GPUs a node; dcgm-exporter's 6 fields detection reads + GPU_TEMP, "
                       "node_exporter InfiniBand (2 devices x 2 ports, both directions), "
                       f"Ethernet/IPoIB/lo both ways, {data.CPUS} cores x 2 modes; 30 s scrapes",
            "window": f"{WINDOW_MIN} min, with the {LOOKBACK_MIN}-min look-back detection "
                      "reads before it (SECURITY_LOOKBACK_MINUTES)",
            "run": "`manage.py detect --json` in a child process (whole command: start, "
                   f"queries, frame, rules, findings stored in SQLite); {repeats} run(s) a size",
            "server": f"Prometheus 2.42 on loopback (var/bench-detect-prometheus); "
                      f"backfilled with promtool: {backfill}",
        },
        columns=["GPUs", "wall time", "per GPU", "peak RSS", "command's CPU",
                 "Prometheus answering", "queries", "findings"],
        rows=rows, checks=checks,
        notes=["\"Prometheus answering\" is the server's own time on the queries "
               "(prometheus_http_request_duration_seconds): the rest of the wall time is "
               "Beacon's (process start, decoding, the frame, the rules, the database). "
               "\"command's CPU\" is the detect process's own user + system seconds "
               "(wait4): on a machine other work shares, wall time is pessimistic and this "
               "is the steadier figure of Beacon's own cost."],
    )


if __name__ == "__main__":
    cli("detect_scale", main)
