"""``detect_scale`` over several telemetry stores, a floor size against a big one (issue 29).

The same cluster shape, window and planted incidents as ``bench/detect_scale.py``, but its
nodes' samples are sharded over ``SHARDS`` private Prometheus 2.42 servers (free ports, data
in ``var/bench-detect-stores/s<k>``), node ``n`` on store ``n % SHARDS``, and the cluster
reads them through ``TelemetryStore`` rows (host globs on the last two digits) with no
Prometheus URL of its own: the fan-out (``apps/clusters/stores.py``) and the merge
(``apps/security/telemetry_stores.py``) are on the measured path.

Timed per size: ``manage.py detect --json`` in a child (``run_child``: wall, user + system
CPU, peak RSS by ``wait4``); each store's own request counters give its answering time. The
CPU of a child that only starts Django and the command (``manage.py detect --help``) is
subtracted, so "CPU per GPU" is the detection's own, not the interpreter's start spread
over fewer GPUs at the floor. Floor and big size alternate, ``repeats`` times.

Targets: Beacon's CPU per GPU at the big size no worse than at the floor (ratio <= 1), peak
RSS < 2 GB, the findings exactly the planted incidents at both sizes. Sizes: 10,000 and
100,000 GPUs (the issue's), ``BENCH_DETECT_STORES_SIZES=floor,big`` to run others (a 2-core
machine backfills ~4,000 GPUs a minute); ``--quick``: 1,000 and 4,000.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import detect_scale as scale
from bench import detect_scale_data as data
from bench.common import (
    ROOT,
    BenchError,
    BenchPrometheus,
    Check,
    Result,
    cli,
    run_child,
    setup_django,
    stats,
)

SHARDS = 4
VERSION = "v1"  # of the datasets: a new one is backfilled when it changes
FULL, QUICK = (10_000, 100_000), (1_000, 4_000)
TARGET_MB = 2048.0


def sizes(quick: bool) -> tuple[int, int]:
    """(floor, big) GPUs: the issue's, ``--quick``'s, or ``BENCH_DETECT_STORES_SIZES``."""
    given = os.environ.get("BENCH_DETECT_STORES_SIZES", "")
    if not given:
        return QUICK if quick else FULL
    try:
        floor, big = (int(v) for v in given.split(","))
    except ValueError:
        raise BenchError(f"BENCH_DETECT_STORES_SIZES={given!r}: give two sizes, "
                         "e.g. 10000,40000") from None
    group = data.GROUP * data.GPUS_PER_NODE  # the planted incidents need two node groups
    if not 2 * group <= floor < big or floor % data.GPUS_PER_NODE or big % data.GPUS_PER_NODE:
        raise BenchError(f"BENCH_DETECT_STORES_SIZES={given!r}: {2 * group} <= floor < big, "
                         f"each a multiple of {data.GPUS_PER_NODE} GPUs (whole nodes)")
    return floor, big


def shard_globs(shard: int) -> list[str]:
    """Host globs claiming the nodes ``n`` with ``n % 4 == shard`` (``gpuNNNNN``): the last
    two digits decide, and ``10 * d1 + d0`` is ``2 * d1 + d0`` modulo 4."""
    globs = []
    for odd, tens in ((0, "02468"), (1, "13579")):
        units = "".join(str(d) for d in range(10) if (2 * odd + d) % SHARDS == shard)
        globs.append(f"gpu*[{tens}][{units}]")
    return globs


def marker(gpus: int, shard: int) -> str:
    return f'beacon_bench_dataset{{name="detect-stores-{gpus}-s{shard}of{SHARDS}-{VERSION}"}}'


def servers() -> list[BenchPrometheus]:
    if os.environ.get("BENCH_PROM_PORT"):
        raise BenchError("BENCH_PROM_PORT would give all four stores one port: unset it "
                         "(each store takes a free port)")
    return [BenchPrometheus(ROOT / "var" / "bench-detect-stores" / f"s{k}")
            for k in range(SHARDS)]


def load(proms: list[BenchPrometheus], gpus: int) -> float:
    """Backfill each store's share of size ``gpus`` once (seconds spent; 0 if there)."""
    start, _, until = scale.window(gpus)
    began = time.perf_counter()
    for k, prom in enumerate(proms):
        if prom.has(marker(gpus, k), until):
            continue
        with tempfile.TemporaryDirectory(dir=ROOT / "var") as tmp:
            path = Path(tmp) / f"stores{gpus}-s{k}.om"
            with path.open("w") as out:
                data.write(out, data.Layout(gpus), start, until, marker(gpus, k),
                           keep=lambda node, k=k: node % SHARDS == k)
            prom.backfill(path)
        if not prom.has(marker(gpus, k), until):
            raise BenchError(f"store {k}'s share of {gpus} GPUs is not queryable on {prom.url}")
    spent = time.perf_counter() - began
    return spent if spent > 5 else 0.0


def _setup_database(proms: list[BenchPrometheus], floor_big: tuple[int, int]) -> None:
    """A cluster per size with no Prometheus URL of its own: its four stores, its nodes
    (so coverage names them) and its running jobs."""
    from django.core.management import call_command

    from apps.clusters.models import Cluster, Node, TelemetryStore

    call_command("migrate", "--noinput", verbosity=0)
    for gpus in floor_big:
        layout = data.Layout(gpus)
        cluster = Cluster.objects.create(name=f"stores{gpus}", prometheus_url="",
                                         metric_labels={"scrape_interval": data.SCRAPE})
        for k, prom in enumerate(proms):
            TelemetryStore.objects.create(cluster=cluster, name=f"shard{k}", url=prom.url,
                                          hosts=shard_globs(k), order=k)
        Node.objects.bulk_create(Node(cluster=cluster, name=layout.host(n),
                                      gpu_count=data.GPUS_PER_NODE)
                                 for n in range(layout.nodes))
        scale.add_running_jobs(cluster, gpus)


def _child_env(data_dir: Path) -> dict[str, str]:
    # no site-wide Prometheus either: every node must be read through the stores
    drop = ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(BEACON_DATA_DIR=str(data_dir), LOG_LEVEL="warning")
    return env


def startup_cpu(data_dir: Path) -> float:
    """CPU seconds of a child that starts Django and the command and does nothing else."""
    cmd = [sys.executable, "manage.py", "detect", "--help"]
    return run_child(cmd, _child_env(data_dir)).check("manage.py detect --help").cpu_seconds


def detect_once(proms: list[BenchPrometheus], gpus: int, data_dir: Path) -> dict[str, Any]:
    """``manage.py detect`` over size ``gpus``'s window through the stores: its figures."""
    from apps.security.models import Finding

    Finding.objects.filter(cluster__name=f"stores{gpus}").delete()  # each run finds anew
    _, since, until = scale.window(gpus)
    cmd = [sys.executable, "manage.py", "detect", "--cluster", f"stores{gpus}", "--json",
           "--since", datetime.fromtimestamp(since, UTC).isoformat(),
           "--until", datetime.fromtimestamp(until, UTC).isoformat(), "--slice-hours", "0"]
    before = [scale.server_counters(p.url) for p in proms]
    child = run_child(cmd, _child_env(data_dir)).check(f"manage.py detect ({gpus} GPUs)")
    after = [scale.server_counters(p.url) for p in proms]
    answering = [a[1] - b[1] for a, b in zip(after, before, strict=True)]
    found = json.loads(child.stdout)
    return {"seconds": child.seconds, "rss_mb": child.peak_rss_mb, "cpu_s": child.cpu_seconds,
            "queries": round(sum(a[0] - b[0] for a, b in zip(after, before, strict=True))),
            "stores_sum_s": sum(answering), "stores_max_s": max(answering),
            "found": {(f["rule"], f["entity"]["node"], f["entity"]["gpu"]) for f in found}}


def main(quick: bool) -> Result:
    floor_big = sizes(quick)
    repeats = 1 if quick else int(os.environ.get("BENCH_DETECT_STORES_REPEATS") or 2)
    proms = servers()
    with tempfile.TemporaryDirectory(prefix="beacon-bench-stores-") as tmp, ExitStack() as stack:
        for prom in proms:
            stack.enter_context(prom.running())
        (ROOT / "var").mkdir(exist_ok=True)
        loaded = {gpus: load(proms, gpus) for gpus in floor_big}
        setup_django(tmp)
        _setup_database(proms, floor_big)
        for gpus in floor_big:
            for prom in proms:
                scale.warm(gpus, prom.url)
        base = stats([startup_cpu(Path(tmp)) for _ in range(3)]).median
        runs: dict[int, list[dict[str, Any]]] = {gpus: [] for gpus in floor_big}
        for _ in range(repeats):
            for gpus in floor_big:
                runs[gpus].append(detect_once(proms, gpus, Path(tmp)))
    return _result(quick, floor_big, repeats, loaded, base, runs)


def net_cpu_per_gpu(runs: list[dict[str, Any]], base: float, gpus: int) -> float:
    """Median CPU seconds of the runs less the start-up's, per GPU."""
    return (stats([r["cpu_s"] for r in runs]).median - base) / gpus


def _result(quick: bool, floor_big: tuple[int, int], repeats: int, loaded: dict[int, float],
            base: float, runs: dict[int, list[dict[str, Any]]]) -> Result:
    rows, ok_found = [], True
    for gpus in floor_big:
        cpu = stats([r["cpu_s"] for r in runs[gpus]])
        expected = data.Layout(gpus).expected()
        exact = all(r["found"] == expected for r in runs[gpus])
        ok_found &= exact
        last = runs[gpus][-1]
        rows.append([f"{gpus:,}", stats([r["seconds"] for r in runs[gpus]]).text(" s"),
                     cpu.text(" s"),
                     f"{net_cpu_per_gpu(runs[gpus], base, gpus) * 1e6:.0f} µs",
                     f"{max(r['rss_mb'] for r in runs[gpus]):.0f} MB",
                     stats([r["stores_sum_s"] for r in runs[gpus]]).text(" s"),
                     stats([r["stores_max_s"] for r in runs[gpus]]).text(" s"),
                     last["queries"],
                     f"{len(last['found'])} of {len(expected)} planted"
                     + ("" if exact else f" (**differs**: {sorted(last['found'])[:6]})")])
    floor, big = floor_big
    ratio = net_cpu_per_gpu(runs[big], base, big) / net_cpu_per_gpu(runs[floor], base, floor)
    rss_big = max(r["rss_mb"] for r in runs[big])
    checks = [Check("findings are exactly the planted incidents, at both sizes",
                    "yes" if ok_found else "no", ok_found),
              Check(f"Beacon's CPU per GPU, {big:,} vs {floor:,} GPUs: ratio <= 1",
                    f"{ratio:.2f}", ratio <= 1.0),
              Check(f"{big:,} GPUs over {SHARDS} stores: peak RSS < 2 GB",
                    f"{rss_big:.0f} MB", rss_big < TARGET_MB)]
    backfill = ", ".join(f"{g:,}: {s:.0f} s" for g, s in loaded.items() if s) or \
        "all already there"
    return Result(
        name="detect_stores",
        title=f"Live detection over {SHARDS} telemetry stores, {floor:,} vs {big:,} GPUs",
        command="python -m bench detect_stores" + (" --quick" if quick else "")
        + ("" if floor_big in (FULL, QUICK) else
           f" (BENCH_DETECT_STORES_SIZES={floor},{big})"),
        inputs={
            "cluster": "detect_scale's (8 GPUs a node, the same exporters, series and planted "
                       f"incidents), node n on store n % {SHARDS}",
            "stores": f"{SHARDS} Prometheus 2.42 on loopback (var/bench-detect-stores/s0..s"
                      f"{SHARDS - 1}), as TelemetryStore rows with host globs; the cluster "
                      f"has no Prometheus URL of its own; backfilled: {backfill}",
            "timeouts": f"the stores' query timeout {os.environ.get('PROM_QUERY_TIMEOUT', '30s')}"
                        f", Beacon's PROMETHEUS_TIMEOUT "
                        f"{os.environ.get('PROMETHEUS_TIMEOUT', '10')} s: the four stores share "
                        "this machine's cores, where a site gives each its own",
            "run": "`manage.py detect --json` in a child process, floor and big size "
                   f"alternating, {repeats} run(s) a size; start-up CPU "
                   f"(`manage.py detect --help`, median of 3): {base:.2f} s",
        },
        columns=["GPUs", "wall time", "command's CPU", "CPU per GPU (less start-up)",
                 "peak RSS", "stores answering (sum)", "slowest store", "queries",
                 "findings"],
        rows=rows, checks=checks,
        notes=["\"stores answering\" is each store's own time on the queries "
               "(prometheus_http_request_duration_seconds), summed over the four and the "
               "slowest one: the stores are asked in parallel, so the wall time holds about "
               "the slowest. \"command's CPU\" is the detect process's user + system "
               "seconds (wait4), the steadier figure of Beacon's own cost on a shared "
               "machine; the start-up's is subtracted before dividing by the GPUs."],
    )


if __name__ == "__main__":
    cli("detect_stores", main)
