"""An LLM job's traces at real size through the Celery path, against HTA (issue 29 item 4).

1. Inputs: 64 ranks of about 110 MB of JSON each (7 GB), replayed from the events of the
   largest real GPU trace of the development set, with a planted straggler
   (``bench/traces_job_data.py``), written once into
   ``var/bench-traces-job/w<ranks>/llm/4242/`` (a ``TRACE_ROOT`` layout: cluster ``llm``,
   job 4242) and reused while its stamp matches.
2. Beacon: a real Celery worker (prefork, 2 processes, Redis db ``BENCH_REDIS_DB``, a queue
   of its own so no other worker takes its tasks: ``bench/traces_job_worker.py``) runs
   ``collect_traces`` for the cluster: it fingerprints the 64 files and queues them in
   groups of ``TRACE_GROUP_FILES`` (``apps/jobs/trace_groups.py``), which the two pool
   processes read side by side into digests; the last group queues the analysis, which
   stores the 64 ranks as one ``TraceRun``. Timed from the collection's ``TaskRun`` start
   to the analysis' ``TaskRun`` end (as the worker recorded them); CPU is the worker tree's
   from the send to the end (``/proc``, reaped children included); memory is every worker
   process's peak RSS (``VmHWM``, sampled every 0.25 s) and the ``wait4`` peak of the
   worker once stopped (the largest of it and its pool processes).
3. HTA 0.5.0 (``bench/traces.py``'s virtualenv and script) cannot take the whole job on
   this machine: it keeps every rank's events in pandas in one process. It runs on
   ``HTA_RANKS`` ranks of the job (the straggler among them, same files), and its time for
   64 is estimated as its imports plus the rest scaled by 64 / ``HTA_RANKS`` (its parsing
   and per-rank figures grow with the ranks; the estimate leaves out that its memory would
   not fit). ``manage.py analyze_trace`` runs on the same subset, for a measured ratio.
Targets: the straggler named (rank, phase, excess within 10 %), every worker process under
1 GB, and Beacon's 64 ranks >= 5x faster than HTA's estimate for them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import (
    ROOT,
    BenchError,
    Check,
    Result,
    cli,
    database_url,
    ensure_database,
    run_child,
)
from bench.traces import HTA, HTA_PACKAGE, REAL_GPU, _hta_python
from bench.traces_job_data import STRAGGLER_MS, STRAGGLER_RANK, Job, write_job
from bench.traces_job_worker import QUEUE

TEMPLATE = REAL_GPU / "df_index_resolver" / "df_index_resolver.json.gz"
DATA = ROOT / "var" / "bench-traces-job"
CLUSTER, JOB_ID = "llm", 4242
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "12"))
SAMPLE_S = 0.25
KINDS = ("collect_traces", "digest_traces", "analyse_traces")


def _job(quick: bool) -> Job:
    world = 8 if quick else 64
    return Job(world=world, straggler=STRAGGLER_RANK if world > STRAGGLER_RANK else 5)


def _group_files() -> int:
    from django.conf import settings

    return int(settings.TRACE_GROUP_FILES)


# --- The database and the worker -------------------------------------------------------------


def _prepare(root: Path, data_dir: Path) -> Any:
    """Django on the bench's database (migrated), the cluster and job, no earlier runs."""
    url = database_url("traces_job")
    ensure_database(url)
    os.environ.update({"DATABASE_URL": url, "REDIS_URL": _redis_url(), "TRACE_ROOT": str(root),
                       "TRACE_COLLECT_SETTLE_S": "0", "BEACON_DATA_DIR": str(data_dir),
                       "LOG_LEVEL": "warning", "DJANGO_SETTINGS_MODULE": "portal.settings"})
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from apps.clusters.models import Cluster
    from apps.core.models import TaskRun
    from apps.jobs.models import Job as JobRow

    cluster, _ = Cluster.objects.get_or_create(name=CLUSTER, defaults={"display_name": "LLM"})
    JobRow.objects.update_or_create(cluster=cluster, job_id=JOB_ID, defaults={
        "display_id": str(JOB_ID), "name": "llm-pretrain", "user_name": "bench",
        "state": JobRow.State.COMPLETED, "gpus": 64, "node_count": 8,
        "submit_time": datetime(2022, 11, 30, 3, 50, tzinfo=UTC),
        "start_time": datetime(2022, 11, 30, 4, 0, tzinfo=UTC),
        "end_time": datetime(2022, 11, 30, 6, 0, tzinfo=UTC)})
    TaskRun.objects.filter(kind__in=KINDS, cluster=cluster).delete()
    job = JobRow.objects.get(cluster=cluster, job_id=JOB_ID)
    job.trace_runs.all().delete()
    job.trace_fan_outs.all().delete()  # or the groups digested last time are not read again
    return cluster


def _redis_url() -> str:
    server = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
    return f"{server.rstrip('/')}/{REDIS_DB}"


def _start_worker(log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "celery", "-A", "bench.traces_job_worker", "worker", "-Q",
           QUEUE, "-c", "2",
           "-P", "prefork", "-n", f"bench-traces-job-{os.getpid()}@%h", "--without-gossip",
           "--without-mingle", "--without-heartbeat", "--loglevel", "INFO"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    # Beacon's logging keeps celery's "ready." under WARNING: wait for the banner's task
    # list and the pool's processes (a task sent earlier would wait in Redis anyway)
    deadline = time.monotonic() + 180
    while b"[tasks]" not in log.read_bytes() or len(_tree(proc.pid)) < 3:
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise BenchError(f"the Celery worker did not start (Redis at {_redis_url()}?):\n"
                             f"{log.read_text(errors='replace')[-1500:]}")
        time.sleep(0.5)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> dict[str, float]:
    """Warm shutdown; ``wait4``: the worker's whole life, its pool processes included."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # already reaped by poll()
        return {"cpu": 0.0, "maxrss_mib": 0.0}
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"cpu": usage.ru_utime + usage.ru_stime, "maxrss_mib": usage.ru_maxrss / 1024}


def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        current = stack.pop()
        pids.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return pids


def _proc_figures(pid: int) -> tuple[float, float] | None:
    """(peak RSS so far in MiB, CPU seconds with reaped children) of one process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    hwm = next((int(line.split()[1]) for line in status.splitlines()
                if line.startswith("VmHWM:")), 0)
    ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return hwm / 1024, ticks / os.sysconf("SC_CLK_TCK")


def _tree_cpu(pid: int) -> float:
    return sum(f[1] for p in _tree(pid) if (f := _proc_figures(p)) is not None)


# --- Beacon through Celery -----------------------------------------------------------------


def _beacon(cluster: Any, data_dir: Path) -> dict[str, Any]:
    from apps.core.models import TaskRun
    from apps.jobs.models import TraceRun
    from apps.jobs.tasks import collect_traces

    worker = _start_worker(data_dir / "worker.log")
    peaks: dict[int, float] = {}
    try:
        cpu0, started = _tree_cpu(worker.pid), time.perf_counter()
        collect_traces.apply_async((cluster.pk,), queue=QUEUE)
        run = _wait_for_run(TaskRun, "collect_traces", cluster, worker, peaks)
        last = run
        if run.status == TaskRun.Status.SUCCEEDED and run.stats.get("grouped"):
            last = _wait_for_run(TaskRun, "analyse_traces", cluster, worker, peaks)
        seconds, cpu = time.perf_counter() - started, _tree_cpu(worker.pid) - cpu0
        # the runs' own span, as the worker recorded it: the send-to-start wait left out
        seconds = min(seconds, (last.finished_at - run.started_at).total_seconds())
    finally:
        life = _stop(worker)
    if last.status != TaskRun.Status.SUCCEEDED or not (run.stats.get("imported")
                                                      or run.stats.get("grouped")):
        raise BenchError(f"{last.kind} ended {last.status}: {last.error[-1500:]} "
                         f"{run.stats}")
    groups = TaskRun.objects.filter(kind="digest_traces", cluster=cluster)
    trace = TraceRun.objects.filter(job__cluster=cluster, job__job_id=JOB_ID).get()
    pool = sorted((mib for pid, mib in peaks.items() if pid != worker.pid), reverse=True)
    return {"seconds": seconds, "cpu": cpu, "trace": trace, "pool_peaks": pool,
            "main_peak": peaks.get(worker.pid, 0.0), "wait4": life,
            "fingerprint_s": run.duration_s or 0.0, "groups": groups.count(),
            "group_s": sorted(r.duration_s or 0.0 for r in groups),
            "analysis_s": last.duration_s if last is not run else 0.0}


def _wait_for_run(task_run: Any, kind: str, cluster: Any, worker: subprocess.Popen[bytes],
                  peaks: dict[int, float]) -> Any:
    """Sample every worker process's peak RSS until a run of ``kind`` has ended."""
    deadline, checked = time.monotonic() + 3600, 0.0
    while time.monotonic() < deadline:
        for pid in _tree(worker.pid):
            if (figures := _proc_figures(pid)) is not None:
                peaks[pid] = max(peaks.get(pid, 0.0), figures[0])
        if time.monotonic() - checked > 2:
            checked = time.monotonic()
            run = task_run.objects.filter(kind=kind, cluster=cluster).first()
            if run is not None and run.status not in (task_run.Status.QUEUED,
                                                      task_run.Status.RUNNING):
                return run
            failed = task_run.objects.filter(kind="digest_traces", cluster=cluster,
                                             status=task_run.Status.FAILED).first()
            if failed is not None:  # the analysis would never be queued
                raise BenchError(f"a group failed: {failed.error[-1500:]}")
        if worker.poll() is not None:
            raise BenchError("the Celery worker died during the collection")
        time.sleep(SAMPLE_S)
    raise BenchError(f"{kind} did not finish within an hour")


# --- HTA and analyze_trace on a subset of the ranks ------------------------------------------


def _subset(job: Job, folder: Path, ranks: int) -> Path:
    """A folder of links to ``ranks`` of the job's files, the straggler second."""
    chosen = [(job.straggler - 1 + k) % job.world for k in range(ranks)]
    subset = folder.parent.parent / f"subset{ranks}"
    subset.mkdir(exist_ok=True)
    for old in subset.iterdir():
        old.unlink()
    for rank in chosen:
        (subset / f"rank-{rank:02d}.pt.trace.json").symlink_to(
            folder / f"rank-{rank:02d}.pt.trace.json")
    return subset


def _on_subset(subset: Path) -> dict[str, dict[str, Any]]:
    """HTA's script and ``manage.py analyze_trace --json`` on the same files, one run
    each (a minute or more of CPU for HTA), one after the other."""
    sides = {"HTA": [_hta_python(), "-c", HTA, str(subset)],
             "Beacon": [sys.executable, "manage.py", "analyze_trace", str(subset), "--json"]}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOG_LEVEL": "warning"}
    out = {}
    for label, cmd in sides.items():
        child = run_child(cmd, env).check(label)
        lines = child.stdout.strip().splitlines()
        output = json.loads(lines[-1] if label == "HTA" else "\n".join(lines))
        out[label] = {"whole": child.seconds, "whole_cpu": child.cpu_seconds,
                      "peak_rss_mib": child.peak_rss_mb, "output": output,
                      "imports": output.get("imports", 0.0)}
    return out


# --- The benchmark -------------------------------------------------------------------------


def main(quick: bool) -> Result:
    job, hta_ranks = _job(quick), 2 if quick else 4
    root = DATA / f"w{job.world}"
    folder = root / CLUSTER / str(JOB_ID)
    data_dir = DATA / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    cluster = _prepare(root, data_dir)  # first: no PostgreSQL, no traces written
    started = time.perf_counter()
    paths = write_job(TEMPLATE, folder, job)
    made_s = time.perf_counter() - started
    size = sum(p.stat().st_size for p in paths)
    beacon = _beacon(cluster, data_dir)
    subset = _on_subset(_subset(job, folder, hta_ranks))
    return _result(quick, job, hta_ranks, size, made_s, beacon, subset)


def _result(quick: bool, job: Job, hta_ranks: int, size: int, made_s: float,
            beacon: dict[str, Any], subset: dict[str, dict[str, Any]]) -> Result:
    hta, ours = subset["HTA"], subset["Beacon"]
    scale = job.world / hta_ranks
    hta_est = hta["imports"] + (hta["whole"] - hta["imports"]) * scale
    hta_cpu_est = hta["whole_cpu"] * scale
    trace = beacon["trace"]
    peak = max([*beacon["pool_peaks"], beacon["main_peak"], beacon["wait4"]["maxrss_mib"]])
    rows = [
        [f"{job.world} ranks", f"Beacon: Celery collect_traces, {beacon['groups']} groups "
         f"(prefork worker)",
         f"{beacon['seconds']:.0f} s", f"{beacon['cpu']:.0f} s",
         ", ".join(f"{m:.0f}" for m in beacon["pool_peaks"]) + f" MiB (main "
         f"{beacon['main_peak']:.0f}; wait4 {beacon['wait4']['maxrss_mib']:.0f})",
         f"{hta_est / beacon['seconds']:.1f} x / {hta_cpu_est / beacon['cpu']:.1f} x"],
        [f"{job.world} ranks", f"HTA 0.5.0, estimated from {hta_ranks} ranks",
         f"{hta_est:.0f} s", f"{hta_cpu_est:.0f} s", "did not run: see notes", "1.0 x"],
        [f"{hta_ranks} ranks", "Beacon: manage.py analyze_trace --json", f"{ours['whole']:.1f} s",
         f"{ours['whole_cpu']:.1f} s", "—",
         f"{hta['whole'] / ours['whole']:.1f} x / {hta['whole_cpu'] / ours['whole_cpu']:.1f} x"],
        [f"{hta_ranks} ranks", "HTA 0.5.0 (TraceAnalysis + breakdown + overlap + stragglers)",
         f"{hta['whole']:.1f} s", f"{hta['whole_cpu']:.1f} s", "—", "1.0 x"],
    ]
    excess = trace.straggler_excess_ms or 0.0
    checks = [
        Check(f"names the planted straggler: rank {job.straggler}, optimizer, "
              f"{STRAGGLER_MS:.0f} ms", f"rank {trace.straggler_rank}, {trace.straggler_phase}, "
              f"{excess:.1f} ms; {trace.world_size} ranks, {trace.steps} steps",
              trace.straggler_rank == job.straggler and trace.straggler_phase == "optimizer"
              and abs(excess - STRAGGLER_MS) <= STRAGGLER_MS / 10
              and trace.world_size == job.world),
        Check("peak RSS of every worker process < 1 GB", f"{peak:.0f} MiB", peak < 1024),
        Check(f"{job.world} ranks through Celery >= 5x faster than HTA (wall, HTA estimated)",
              f"{hta_est / beacon['seconds']:.1f} x", hta_est / beacon["seconds"] >= 5),
    ]
    return Result(
        name="traces_job", title="An LLM job's traces at real size, through Celery, against HTA",
        command=f"python -m bench traces_job{' --quick' if quick else ''}",
        inputs={
            "traces": f"{job.world} ranks x {size / job.world / 1e6:.0f} MB of JSON "
                      f"({size / 1e9:.1f} GB), {job.steps} traced steps each, replayed from "
                      f"the real GPU trace df_index_resolver (bench/traces_job_data.py); "
                      f"rank {job.straggler}'s optimizer {STRAGGLER_MS:.0f} ms slower a step; "
                      f"written in {made_s:.0f} s (0 when reused)",
            "Beacon": "a real Celery worker, prefork with 2 processes, Redis db "
                      f"{REDIS_DB}, PostgreSQL: collect_traces(cluster) from TRACE_ROOT, its "
                      f"files read in groups of TRACE_GROUP_FILES={_group_files()} by "
                      "digest_trace_group tasks, then analyse_trace_groups: one TraceRun for "
                      "the job; wall = the collection's TaskRun start to the analysis' end",
            "peer": f"{HTA_PACKAGE} (bench/traces.py's script) on {hta_ranks} of the ranks, "
                    f"the straggler among them; its 64-rank time = imports + the rest x "
                    f"{scale:.0f}; one run per side (minutes of CPU each)",
        },
        columns=["ranks", "side", "wall", "CPU", "peak RSS per worker process",
                 "speed-up vs HTA: wall / CPU"],
        rows=rows, checks=checks,
        notes=[f"Beacon's verdict: {trace.verdict}",
               f"Beacon's runs: collect_traces (fingerprint 64 files, queue the groups) "
               f"{beacon['fingerprint_s']:.0f} s; {beacon['groups']} digest_traces runs of "
               f"{min(beacon['group_s'], default=0):.0f} to "
               f"{max(beacon['group_s'], default=0):.0f} s each "
               f"({sum(beacon['group_s']):.0f} s in all, on 2 pool processes); "
               f"analyse_traces {beacon['analysis_s']:.1f} s",
               f"HTA on {hta_ranks} ranks: peak RSS of its largest process "
               f"{hta['peak_rss_mib']:.0f} MiB (wait4); it holds every rank's events in "
               f"one process, so {job.world} ranks would need about "
               f"{hta['peak_rss_mib'] * scale / 1024:.0f} GB there (scaled, not run: the "
               f"whole job would take HTA about {hta_est / 60:.0f} min of this machine)",
               f"HTA errors: {hta['output'].get('errors') or 'none'}; its imports took "
               f"{hta['imports']:.1f} s",
               f"Beacon on the subset: {ours['output']['verdict']}"])


if __name__ == "__main__":
    cli("traces_job", main)
