"""Job-page metrics against the floor, on a real Prometheus 2.42 (issue 5).

1. The bench runs its own loopback Prometheus (``common.BenchPrometheus``:
   ``deploy/dev/prometheus.sh`` with ``PROM_PORT=$BENCH_PROM_PORT`` (default: a free port)
   and ``PROM_DIR=var/bench-prometheus``):
   loading data with promtool restarts the server, which the shared instance on 9091 must
   not suffer while tests use it. It is started if it is not up, and stopped at the end if
   this run started it. Its data is kept, so the dataset is backfilled only once.
2. The dataset (a marker series names its version): a 64-GPU job (8 nodes) over 24 h at
   30 s with every dcgm field the archive reads and the node_exporter counters of its nodes
   (~3.8 M samples); and an 8-GPU job over 7 days of SM active, for the max-samples check.
3. The exact requests the page path sends (``PrometheusSource.fetch``: one range query per
   GPU measure by ``hpc_job`` label, then the node queries) are recorded once; then, in
   alternation: the floor, those requests POSTed with a bare ``requests.Session`` and decoded
   with ``.json()``; the page path, ``PrometheusSource.fetch`` (queries, parsing into Series,
   grouping per GPU) followed by the summary the page shows (``summarise_job`` and
   ``archive.analyse``: efficiency split, health, straggler verdict).
4. Max samples: Prometheus's own ``peakSamples`` (``stats=all``) for the 7-day job, scaled to
   512 GPUs (it is linear in series: same window, same plan), against the default
   ``--query.max-samples`` (50 M) and the adapter's bound (``telemetry.peak_samples``).
Targets: the metrics come back (the adapter) in <= 1.3 x the floor, in the same run (the
page's summary is shown beside it); a 512-GPU 7-day job stays under 50 M samples.
"""

from __future__ import annotations

import gc
import json
import math
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import requests

from bench.common import (
    ROOT,
    BenchError,
    BenchPrometheus,
    Check,
    Result,
    cli,
    setup_django,
    stats,
)

PROM = BenchPrometheus(ROOT / "var" / "bench-prometheus")
PROM_DIR, URL = PROM.data_dir, PROM.url
STEP = 30
T0 = 1_791_590_400  # 2026-10-10 00:00 UTC, inside the server's 400-day retention
HOURS, NODES, JOB = 24, 8, "7001"
WEEK_JOB, WEEK_GPUS, WEEK_DAYS = "7002", 8, 7
WEEK_T0 = T0 - 10 * 86400
MARKER = 'beacon_bench_dataset{name="job64x24-all-fields-v3"}'
DEFAULT_MAX_SAMPLES = 50_000_000


# --- The bench's own Prometheus ---------------------------------------------------------


def _has_dataset() -> bool:
    return PROM.has(MARKER, T0 + 1)


def _load_dataset() -> float:
    """Backfill the dataset once (seconds spent; 0 when it is already there)."""
    if _has_dataset():
        return 0.0
    started = time.perf_counter()
    (ROOT / "var").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "var") as tmp:
        day, week = Path(tmp) / "day.om", Path(tmp) / "week.om"
        with day.open("w") as out:
            _write_day(out)
        with week.open("w") as out:
            _write_week(out)
        PROM.backfill(day, week)
    if not _has_dataset():
        raise BenchError(f"the backfilled dataset is not queryable on {URL}")
    return time.perf_counter() - started


# --- The dataset ------------------------------------------------------------------------

# Values by the catalogue's unit: a wave between bounds, so that summaries have work to do.
UNIT_VALUES = {"ratio": (0.1, 0.9), "MiB": (50_000, 70_000), "W": (200, 650),
               "°C": (45, 80), "MHz": (1700, 1980), "B/s": (1e8, 3e10)}
NODE_FAMILIES = (  # (family, type, extra labels, low, high): counters grow by low..high a step
    ("node_cpu_seconds", "counter", 'cpu="0",mode="idle"', 5, 25),
    ("node_memory_MemTotal_bytes", "gauge", "", 2.0e12, 2.0e12),
    ("node_memory_MemAvailable_bytes", "gauge", "", 0.8e12, 1.6e12),
    ("node_network_receive_bytes", "counter", 'device="eth0"', 1e6, 1e8),
    ("node_network_transmit_bytes", "counter", 'device="eth0"', 1e6, 1e8),
    ("node_infiniband_port_data_received_bytes", "counter", 'device="mlx5_0",port="1"', 1e9,
     1e11),
    ("node_infiniband_port_data_transmitted_bytes", "counter", 'device="mlx5_0",port="1"', 1e9,
     1e11),
    ("node_infiniband_port_transmit_wait", "counter", 'device="mlx5_0",port="1"', 0, 1e4),
    ("node_infiniband_link_error_recovery", "counter", 'device="mlx5_0",port="1"', 0, 0),
    ("node_infiniband_link_downed", "counter", 'device="mlx5_0",port="1"', 0, 0),
    ("node_infiniband_rate_bytes_per_second", "gauge", 'device="mlx5_0",port="1"', 5e10, 5e10),
    ("node_mountstats_nfs_read_bytes", "counter",
     'export="nfs01:/datasets",mountaddr="10.0.0.5",protocol="tcp"', 1e8, 1e10),
    ("node_mountstats_nfs_write_bytes", "counter",
     'export="nfs01:/datasets",mountaddr="10.0.0.5",protocol="tcp"', 1e6, 1e9),
)


def _gpu_families() -> list[tuple[str, float, float]]:
    """(dcgm name, low, high) for every GPU measure the archive reads, from the catalogue."""
    from apps.clusters.adapters.catalogue import JOB_MEASURES, Catalogue

    catalogue, out = Catalogue(), []
    for measure in JOB_MEASURES:
        spec = catalogue.metric(measure)
        low, high = UNIT_VALUES.get(spec.unit, (0.0, 0.0))  # codes and counts: zero
        out.append((spec.name, low / spec.scale, high / spec.scale))
    return out


def _wave(low: float, high: float, t: int, phase: float) -> float:
    return low + (high - low) * (0.5 + 0.45 * math.sin((t - T0) / 900 + phase))


def _write_day(out: IO[str]) -> None:
    times = [T0 + STEP * (i + 1) for i in range(HOURS * 3600 // STEP)]
    for name, low, high in _gpu_families():
        out.write(f"# HELP {name} bench\n# TYPE {name} gauge\n")
        for node in range(NODES):
            for gpu in range(8):
                labels = (f'{name}{{gpu="{gpu}",UUID="GPU-{node}-{gpu}",'
                          f'Hostname="gpu{node:02d}",hpc_job="{JOB}"}}')
                out.write("".join(f"{labels} {_wave(low, high, t, gpu + node):.4g} {t}\n"
                                  for t in times))
    for family, kind, extra, low, high in NODE_FAMILIES:
        out.write(f"# HELP {family} bench\n# TYPE {family} {kind}\n")
        name = f"{family}_total" if kind == "counter" else family
        for node in range(NODES):
            labels = ",".join(x for x in (extra, f'instance="gpu{node:02d}:9100"') if x)
            total = 0.0
            for t in times:
                value = _wave(low, high, t, node)
                total += value
                out.write(f"{name}{{{labels}}} {total if kind == 'counter' else value:.6g} {t}\n")
    out.write("# HELP beacon_bench_dataset marker\n# TYPE beacon_bench_dataset gauge\n")
    out.write(f"{MARKER} 1 {T0}\n# EOF\n")


def _write_week(out: IO[str]) -> None:
    times = range(WEEK_T0 + STEP, WEEK_T0 + WEEK_DAYS * 86400 + 1, STEP)
    name = "DCGM_FI_PROF_SM_ACTIVE"
    out.write(f"# HELP {name} bench\n# TYPE {name} gauge\n")
    for gpu in range(WEEK_GPUS):
        labels = f'{name}{{gpu="{gpu}",UUID="GPU-w-{gpu}",Hostname="gpu90",hpc_job="{WEEK_JOB}"}}'
        out.write("".join(f"{labels} {_wave(0.1, 0.9, t, gpu):.4g} {t}\n" for t in times))
    out.write("# EOF\n")


def _tsdb_figures() -> dict[str, int]:
    """Samples, series and bytes of the TSDB blocks on disk (for docs/SCALING.md)."""
    out = {"samples": 0, "series": 0, "bytes": 0, "index_bytes": 0, "chunk_bytes": 0,
           "blocks": 0}
    for meta in (PROM_DIR / "data").glob("*/meta.json"):
        block_stats = json.loads(meta.read_text()).get("stats", {})
        out["samples"] += int(block_stats.get("numSamples", 0))
        out["series"] += int(block_stats.get("numSeries", 0))
        out["bytes"] += sum(p.stat().st_size for p in meta.parent.rglob("*") if p.is_file())
        out["index_bytes"] += (meta.parent / "index").stat().st_size
        out["chunk_bytes"] += sum(p.stat().st_size for p in (meta.parent / "chunks").iterdir())
        out["blocks"] += 1
    return out


# --- The measured paths -----------------------------------------------------------------


class _Recorder(requests.Session):
    """A session that notes each POST, so the floor can replay exactly the same requests."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, dict[str, str]]] = []

    def post(self, url: Any, data: Any = None, **kwargs: Any) -> requests.Response:
        self.calls.append((str(url), dict(data or {})))
        return super().post(url, data=data, **kwargs)


def _floor(session: requests.Session, calls: list[tuple[str, dict[str, str]]],
           gc_paused: bool = False) -> int:
    """The bare requests: POST, check the status, decode; returns the series count.

    ``gc_paused`` decodes with the cyclic collector off, as the adapter does: the floor of
    the same decoding, to show the adapter's own work (parsing, grouping) apart.
    """
    series = 0
    for url, form in calls:
        response = session.post(url, data=form, timeout=60)
        response.raise_for_status()
        if gc_paused:
            gc.disable()
        try:
            series += len(response.json()["data"]["result"])
        finally:
            if gc_paused:
                gc.enable()
    return series


def _page(source: Any, window: Any) -> tuple[float, float, Any]:
    """The page path: fetch through the adapter, then summarise (seconds of each part)."""
    from apps.analysis.efficiency import summarise_job
    from apps.jobs.archive import analyse

    started = time.perf_counter()
    telemetry = source.fetch(JOB, window, [])
    fetched = time.perf_counter()
    result = summarise_job(telemetry.gpus, window, 64 * HOURS, gpu_count=64)
    analyse(telemetry, result, window)
    return fetched - started, time.perf_counter() - started, telemetry


def _measure(repeats: int) -> dict[str, Any]:
    from apps.analysis.timeseries import Window
    from apps.clusters.adapters.catalogue import Catalogue
    from apps.clusters.adapters.prometheus import PrometheusClient
    from apps.jobs.archive_sources import PrometheusSource

    window = Window(T0, T0 + HOURS * 3600)
    recorder = _Recorder()
    source = PrometheusSource(PrometheusClient(URL, timeout=60, session=recorder), Catalogue())
    _, _, telemetry = _page(source, window)  # also warms Prometheus's page cache
    calls, session = list(recorder.calls), requests.Session()
    floor, floor_nogc, adapter, page = [], [], [], []
    for _ in range(repeats):
        started = time.perf_counter()
        series = _floor(session, calls)
        floor.append(time.perf_counter() - started)
        a, g, _ = _page(source, window)
        adapter.append(a)
        page.append(g)
        started = time.perf_counter()
        _floor(session, calls, gc_paused=True)
        floor_nogc.append(time.perf_counter() - started)
    return {"floor": floor, "floor_nogc": floor_nogc, "adapter": adapter, "page": page,
            "queries": len(calls),
            "series": series, "points": telemetry.plan.n, "gpus": len(telemetry.gpus),
            "nodes": len(telemetry.nodes), "warnings": telemetry.warnings}


def _max_samples() -> dict[str, int]:
    """Prometheus's peak samples for the 8-GPU week, and the 512-GPU figures it implies."""
    from apps.analysis.timeseries import Window
    from apps.clusters.adapters.catalogue import Catalogue
    from apps.clusters.adapters.prometheus import PrometheusClient
    from apps.clusters.adapters.telemetry import fetch_by_label, peak_samples

    window = Window(WEEK_T0, WEEK_T0 + WEEK_DAYS * 86400)
    catalogue = Catalogue()
    telemetry = fetch_by_label(PrometheusClient(URL, timeout=60), catalogue, WEEK_JOB, window,
                               ("sm_active",), stats=True)
    if len(telemetry.gpus) != WEEK_GPUS:
        raise BenchError(f"the 7-day job returned {len(telemetry.gpus)} GPUs, not {WEEK_GPUS}")
    scale = 512 // WEEK_GPUS
    return {"measured": telemetry.peak_samples, "measured_512": telemetry.peak_samples * scale,
            "bound_512": peak_samples(512, telemetry.plan, catalogue.scrape_interval),
            "points": telemetry.plan.n, "step": round(telemetry.plan.step)}


# --- The benchmark ----------------------------------------------------------------------


def main(quick: bool) -> Result:
    repeats = 3 if quick else 7
    from apps.core.errors import AdapterError

    with tempfile.TemporaryDirectory() as data_dir, PROM.running():
        setup_django(data_dir)  # archive.analyse sits in a Django app (no database used)
        try:
            loaded = _load_dataset()
            runs, week = _measure(repeats), _max_samples()
        except (AdapterError, requests.RequestException) as exc:
            raise BenchError(f"Prometheus at {URL} failed during the run: {exc}") from None
    result = _result(quick, repeats, loaded, runs, week)
    tsdb = _tsdb_figures()
    if tsdb["samples"]:
        result.notes.append(
            f"Storage (for docs/SCALING.md): the TSDB holds {tsdb['samples']:,} samples in "
            f"{tsdb['blocks']} blocks, {tsdb['bytes'] / 1e6:.1f} MB on disk = "
            f"{tsdb['bytes'] / tsdb['samples']:.2f} bytes per sample with the index, "
            f"{tsdb['chunk_bytes'] / tsdb['samples']:.2f} in chunks alone (synthetic values "
            "of 4 significant digits; integer gauges such as utilisation or temperature "
            f"compress better); index {tsdb['index_bytes'] / max(tsdb['series'], 1):,.0f}"
            " bytes per series per block.")
    return result


def _result(quick: bool, repeats: int, loaded: float, runs: dict[str, Any],
            week: dict[str, int]) -> Result:
    floor, nogc, adapter, page = (stats(runs[k]) for k in ("floor", "floor_nogc", "adapter",
                                                             "page"))
    ratio_a = stats([a / f for a, f in zip(runs["adapter"], runs["floor"], strict=True)])
    ratio_p = stats([p / f for p, f in zip(runs["page"], runs["floor"], strict=True)])
    ratio_n = stats([a / f for a, f in zip(runs["adapter"], runs["floor_nogc"], strict=True)])
    return Result(
        name="job_metrics", title="Job-page metrics against the bare PromQL HTTP calls",
        command=f"python -m bench job_metrics{' --quick' if quick else ''}",
        inputs={
            "job": f"64 GPUs (8 nodes) x {HOURS} h at {STEP} s; every dcgm field the archive "
                   "reads, node_exporter counters of the 8 nodes",
            "server": "Prometheus 2.42 on loopback, the bench's own (deploy/dev/prometheus.sh "
                      "on a free port, data in var/bench-prometheus)",
            "dataset": f"backfilled with promtool in {loaded:.0f} s" if loaded
            else "already backfilled (var/bench-prometheus)",
            "requests": f"{runs['queries']} range queries of {runs['points']} points, "
                        f"{runs['series']} series returned; {repeats} runs, alternating",
        },
        columns=["what", "time", "x floor (per run)"],
        rows=[["floor: the same POSTs, requests + .json()", _ms(floor), "1"],
              ["adapter: PrometheusSource.fetch (parse, group per GPU)", _ms(adapter),
               ratio_a.text(" x", 2)],
              ["(floor decoding with the GC paused, as the adapter does; adapter / it)",
               _ms(nogc), ratio_n.text(" x", 2)],
              ["page: fetch + summarise_job + analyse (health, straggler)", _ms(page),
               ratio_p.text(" x", 2)]],
        checks=[
            Check("job-page metrics come back (adapter) in <= 1.3 x the bare HTTP calls",
                  ratio_a.text(" x", 2), ratio_a.median <= 1.3),
            Check("every GPU and node came back (64, 8), no warnings",
                  f"{runs['gpus']}, {runs['nodes']}; warnings: {len(runs['warnings'])}",
                  runs["gpus"] == 64 and runs["nodes"] == NODES and not runs["warnings"]),
            Check("512-GPU 7-day job under the default query.max-samples (50 M)",
                  f"{week['measured_512']:,} peak samples per query",
                  week["measured_512"] < DEFAULT_MAX_SAMPLES),
        ],
        notes=[f"Max samples: Prometheus reported peakSamples = {week['measured']:,} for an "
               f"{WEEK_GPUS}-GPU 7-day query ({week['points']} points, step "
               f"{week['step']} s); x {512 // WEEK_GPUS} for 512 GPUs = "
               f"{week['measured_512']:,}; the adapter's own bound "
               f"(telemetry.peak_samples) says {week['bound_512']:,}.",
               "The floor replays the requests the adapter sent (same PromQL, same form "
               "fields), recorded in this run; the difference is the portal's own work.",
               "The adapter decodes and parses each answer with the cyclic garbage collector "
               "paused (prometheus.py::_gc_paused): the bare .json() of the floor runs with "
               "it on, which is why the adapter can come in under 1 x. The third row compares "
               "the adapter with a floor that pauses it too: that ratio is the cost of "
               "parsing into floats and grouping per GPU alone."],
    )


def _ms(s: Any) -> str:
    return f"{s.median * 1000:.0f} ms ({s.low * 1000:.0f}–{s.high * 1000:.0f}, n={s.runs})"


if __name__ == "__main__":
    cli("job_metrics", main)
