"""Trace analysis: ``analyze_trace`` against HTA 0.5.0, in the process and as a whole command.

1. Inputs: real PyTorch CPU DDP traces generated once (``tests/jobs/ddp_run.py``: 4 gloo
   ranks, a 20 ms data-loading straggler on rank 1) into ``var/bench-traces/``, and the real
   GPU traces of the development set (``tests/fixtures/traces/real-gpu/``, HTA's own test
   data): the three largest in a full run, the largest with ``--quick``.
2. HTA lives in its own virtualenv, never in Beacon's (it pulls jupyterlab, pandas 3 and
   numpy 2): the bench creates ``var/bench-venv`` the first time
   (``python3.11 -m venv var/bench-venv && var/bench-venv/bin/pip install
   holistictraceanalysis==0.5.0``).
3. Each side runs in fresh processes, in alternation, ``repeats`` times for time and again
   for memory. Two figures per run:
   - **whole command**, what a user waits for: from process start to exit, measured by the
     parent (interpreter start, imports, reading, analysis, printing). Beacon's side is
     ``python manage.py analyze_trace DIR --json`` exactly as a user types it; HTA's a
     script that imports it, loads the traces and computes the same figures.
   - **in the process**: from the first file read to the verdict, measured by the process
     itself (imports excluded, which favours HTA: pandas imports slowly).
   CPU time counts the process and its children. Memory is the peak proportional set size
   (PSS) of the whole command's process *and its children*, sampled every 5 ms from /proc:
   both sides parse one rank per process over a fork pool, whose shared pages PSS counts
   once. Timing runs are not sampled: on two cores the sampler would steal time.
4. What HTA computes: on GPU traces ``get_temporal_breakdown`` (idle, compute, other) and
   ``get_comm_comp_overlap``, the figures ``analyze_trace`` prints in its GPU timeline; both
   sides' idle and overlap figures are reported. On CPU (gloo) traces HTA's temporal
   breakdown and straggler analysis fail (no GPU kernels); its time is then what it needs to
   get there (load plus the failed attempt), and the error is recorded.
Targets (issue 18): the whole command >= 5x faster than HTA and <= 1/5 of its peak memory
on the largest traces of the development set, on the CPU DDP traces too.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, BenchError, Check, Result, cli, stats

SAMPLE_S = 0.005
HTA_VENV = Path(os.environ.get("BENCH_HTA_VENV") or ROOT / "var" / "bench-venv")
HTA_PACKAGE = "holistictraceanalysis==0.5.0"
WORLD_SIZE, STEPS, SLOW_RANK, SLOW_PHASE = 4, 40, 1, "data_loading"
REAL_GPU = ROOT / "tests" / "fixtures" / "traces" / "real-gpu"
# the largest traces of the development set, largest first (events: 216k, 109k, 105k)
GPU_SETS = ("df_index_resolver", "trace_diff_control", "trace_diff_test")

# --- The workers (each runs in its own process) -----------------------------------------

# Beacon in the process: what analyze_trace does, timed from the first read to the verdict
OURS = """
import json, os, sys, time
from pathlib import Path
c0, t0 = sum(os.times()[:4]), time.perf_counter()
from apps.analysis.phases import analyze, report
from apps.jobs.adapters.kineto import read_trace_paths
imported = time.perf_counter() - t0
c0, t0 = sum(os.times()[:4]), time.perf_counter()
reading = read_trace_paths([Path(sys.argv[1])], workers=int(sys.argv[2]))
result = report(analyze(reading.traces))
elapsed, cpu = time.perf_counter() - t0, sum(os.times()[:4]) - c0
print(json.dumps({"seconds": elapsed, "cpu": cpu, "imports": imported, "report": result}))
"""

# HTA: load, then the figures analyze_trace prints (and its straggler, where it can)
HTA = """
import json, logging, os, sys, time
t0 = time.perf_counter()
logging.disable(logging.WARNING)
import warnings
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
imported = time.perf_counter() - t0
c0, t0 = sum(os.times()[:4]), time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
errors, figures = [], {}
try:
    temporal = analysis.get_temporal_breakdown(visualize=False)
    figures["idle_pct"] = {int(r["rank"]): float(r["idle_time_pctg"])
                           for _, r in temporal.iterrows()}
except Exception as exc:
    errors.append(f"get_temporal_breakdown: {type(exc).__name__}: {exc}")
try:
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    figures["overlap_pct"] = {int(r["rank"]): float(r["comp_comm_overlap_pctg"])
                              for _, r in overlap.iterrows()}
except Exception as exc:
    errors.append(f"get_comm_comp_overlap: {type(exc).__name__}: {exc}")
if len(analysis.t.traces) > 1:
    try:
        analysis.get_potential_stragglers(visualize=False)
    except Exception as exc:
        errors.append(f"get_potential_stragglers: {type(exc).__name__}: {exc}")
elapsed, cpu = time.perf_counter() - t0, sum(os.times()[:4]) - c0
print(json.dumps({"seconds": elapsed, "cpu": cpu, "imports": imported, "errors": errors,
                  "figures": figures}, default=str))
"""


def _tree_pss_kib(pid: int) -> int:
    """Memory of ``pid`` and all its descendants (PSS: pages shared after a fork count once)."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            rollup = Path(f"/proc/{current}/smaps_rollup").read_text()
            total += int(next(line.split()[1] for line in rollup.splitlines()
                              if line.startswith("Pss:")))
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError):
            continue  # the process ended between two reads
    return total


def _spawn(cmd: list[str], sample: bool) -> dict[str, Any]:
    """One fresh process: its whole wall and CPU time (``wait4``), or its peak PSS tree.

    Output goes to files: a pipe left unread could block the child, and ``communicate``
    would reap it before ``wait4`` reads its resource usage.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOG_LEVEL": "warning"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT, text=True)
        peak = 0
        if sample:
            while proc.poll() is None:
                peak = max(peak, _tree_pss_kib(proc.pid))
                time.sleep(SAMPLE_S)
            status_code, cpu = proc.returncode, 0.0
        else:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = status_code = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
        whole = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if status_code != 0:
        raise BenchError(f"`{' '.join(cmd[:3])} ...` failed (exit {status_code}):\n"
                         f"{stderr.strip()[-2000:]}")
    return {"whole": whole, "whole_cpu": cpu, "peak_mib": peak / 1024, "stdout": stdout}


# --- Inputs: the traces and HTA's virtualenv --------------------------------------------


def _ddp_traces() -> Path:
    """Real DDP traces with a data-loading straggler on rank 1, generated once and kept."""
    folder = (ROOT / "var" / "bench-traces" / f"ws{WORLD_SIZE}-steps{STEPS}" / "slow_data"
              / "traces")
    if folder.exists() and any(folder.iterdir()):
        return folder
    try:
        from tests.jobs.ddp_run import Scenario, generate
    except ImportError as exc:
        raise BenchError(f"cannot generate the traces: {exc} (pip install -r "
                         "requirements-dev.txt brings torch)") from None
    scenario = Scenario("slow_data", slow_rank=SLOW_RANK, phase=SLOW_PHASE, delay_ms=20.0,
                        steps=STEPS)
    generate(folder.parent.parent, [scenario], WORLD_SIZE)
    return folder


def _hta_python() -> str:
    """The bench-only virtualenv's interpreter, with HTA installed (created the first time)."""
    python = HTA_VENV / "bin" / "python"
    if python.exists() and _hta_importable(python):
        return str(python)
    steps = [([sys.executable, "-m", "venv", str(HTA_VENV)], "BENCH_HTA_VENV not writable?"),
             ([str(HTA_VENV / "bin" / "pip"), "install", "-q", HTA_PACKAGE],
              "PyPI unreachable?")]
    print(f"creating {HTA_VENV} with {HTA_PACKAGE} (first run only)", file=sys.stderr,
          flush=True)
    for cmd, hint in steps if not python.exists() else steps[1:]:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchError(f"`{' '.join(cmd)}` failed ({hint}):\n"
                             f"{done.stderr.strip()[-1500:]}")
    if not _hta_importable(python):
        raise BenchError(f"{python} cannot import hta after installing {HTA_PACKAGE}")
    return str(python)


def _hta_importable(python: Path) -> bool:
    return subprocess.run([str(python), "-c", "import hta.trace_analysis"],
                          capture_output=True).returncode == 0


# --- The benchmark ----------------------------------------------------------------------


def _sides(hta_python: str, trace_dir: Path, workers: int) -> dict[str, list[str]]:
    return {
        "Beacon: manage.py analyze_trace --json": [
            sys.executable, "manage.py", "analyze_trace", str(trace_dir), "--json"],
        "Beacon in the process": [sys.executable, "-c", OURS, str(trace_dir), str(workers)],
        "HTA 0.5.0": [hta_python, "-c", HTA, str(trace_dir)],
    }


def _measure_memory(sides: dict[str, list[str]], repeats: int) -> dict[str, list[float]]:
    peaks: dict[str, list[float]] = {label: [] for label in sides
                                     if label != "Beacon in the process"}
    for _ in range(repeats):
        for label in peaks:
            peaks[label].append(_spawn(sides[label], sample=True)["peak_mib"])
    return peaks


def _dataset(name: str, trace_dir: Path, hta_python: str, repeats: int,
             workers: int) -> dict[str, Any]:
    sides = _sides(hta_python, trace_dir, workers)
    timed: dict[str, list[dict[str, Any]]] = {label: [] for label in sides}
    for _ in range(repeats):
        for label, cmd in sides.items():
            run = _spawn(cmd, sample=False)
            lines = run.pop("stdout").strip().splitlines()
            if label == "Beacon: manage.py analyze_trace --json":
                run["report"] = json.loads("\n".join(lines))
            else:
                run.update(json.loads(lines[-1]))
            timed[label].append(run)
    memory = _measure_memory(sides, repeats)
    size = sum(p.stat().st_size for p in trace_dir.iterdir() if p.is_file()) / 2**20
    return {"name": name, "dir": trace_dir, "size_mib": size, "timed": timed, "memory": memory}


def main(quick: bool) -> Result:
    repeats = 3 if quick else 5
    hta_python = _hta_python()
    workers = os.cpu_count() or 1
    sets = [("CPU DDP, 4 gloo ranks", _ddp_traces())]
    sets += [(f"GPU {name}", REAL_GPU / name) for name in (GPU_SETS[:1] if quick else GPU_SETS)]
    results = [_dataset(name, folder, hta_python, repeats, workers) for name, folder in sets]
    rows, checks, notes = [], [], []
    for data in results:
        rows += _rows(data)
        checks += _checks(data)
        notes += _notes(data)
    return Result(
        name="traces", title="Trace analysis against HTA TraceAnalysis",
        command=f"python -m bench traces{' --quick' if quick else ''}",
        inputs={
            "CPU DDP": f"real torch CPU DDP run: {WORLD_SIZE} gloo ranks, {STEPS} traced steps, "
                       f"rank {SLOW_RANK} slowed by 20 ms a step in {SLOW_PHASE} "
                       f"({_dir(results[0])}, {results[0]['size_mib']:.1f} MiB)",
            "GPU": "real GPU traces of the development set, HTA's test data "
                   "(tests/fixtures/traces/real-gpu/: " + ", ".join(
                       f"{d['dir'].name} {d['size_mib']:.1f} MiB gzipped" for d in results[1:])
                   + ")",
            "peer": f"{HTA_PACKAGE} in {HTA_VENV.name}: TraceAnalysis + "
                    "get_temporal_breakdown + get_comm_comp_overlap (+ stragglers with 2+ ranks)",
            "runs": f"{repeats} fresh processes per side for time, {repeats} for memory; "
                    f"Beacon reads with {workers} processes (analyze_trace's default here)",
        },
        columns=["traces", "side", "whole command", "in the process", "CPU (whole)",
                 "peak PSS (tree)", "speed-up vs HTA: whole / in process", "memory vs HTA"],
        rows=rows, checks=checks, notes=notes)


def _dir(data: dict[str, Any]) -> str:
    return str(data["dir"].relative_to(ROOT))


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


def _rows(data: dict[str, Any]) -> list[list[Any]]:
    timed, memory = data["timed"], data["memory"]
    hta = timed["HTA 0.5.0"]
    hta_whole, hta_inner = _median(hta, "whole"), _median(hta, "seconds")
    hta_mib = statistics.median(memory["HTA 0.5.0"])
    rows = []
    for label, runs in timed.items():
        inner = _median(runs, "seconds") if "seconds" in runs[0] else None
        whole = _median(runs, "whole") if label != "Beacon in the process" else None
        mib = memory.get(label)
        rows.append([
            data["name"], label,
            stats([r["whole"] for r in runs]).text(" s", 2) if whole else "—",
            stats([r["seconds"] for r in runs]).text(" s", 3) if inner is not None else "—",
            f"{_median(runs, 'whole_cpu'):.2f} s" if whole else "—",
            stats(mib).text(" MiB") if mib else "—",
            f"{hta_whole / whole:.1f} x" if whole else "—",
            f"{hta_inner / inner:.1f} x" if inner is not None else "—",
            f"{statistics.median(mib) / hta_mib:.2f}" if mib else "—",
        ])
    # the two speed-up figures share one column
    return [[*r[:6], f"{r[6]} / {r[7]}", r[8]] for r in rows]


def _checks(data: dict[str, Any]) -> list[Check]:
    timed, memory = data["timed"], data["memory"]
    ours, hta = timed["Beacon: manage.py analyze_trace --json"], timed["HTA 0.5.0"]
    speed = _median(hta, "whole") / _median(ours, "whole")
    share = statistics.median(memory["Beacon: manage.py analyze_trace --json"]) / \
        statistics.median(memory["HTA 0.5.0"])
    checks = [Check(f"{data['name']}: whole command >= 5x faster than HTA", f"{speed:.1f} x",
                    speed >= 5),
              Check(f"{data['name']}: <= 1/5 of HTA's peak memory", f"{share:.2f}",
                    share <= 0.2)]
    if data["name"].startswith("CPU"):
        verdict = ours[0]["report"]["straggler"] or {}
        checks.append(Check(f"names the straggler: rank {SLOW_RANK}, {SLOW_PHASE}",
                            f"rank {verdict.get('rank')}, {verdict.get('phase')}",
                            verdict.get("rank") == SLOW_RANK
                            and verdict.get("phase") == SLOW_PHASE))
    return checks


def _notes(data: dict[str, Any]) -> list[str]:
    """HTA's errors, and both sides' GPU figures where HTA computes them."""
    hta = data["timed"]["HTA 0.5.0"][0]
    report = data["timed"]["Beacon: manage.py analyze_trace --json"][0]["report"]
    notes = [f"{data['name']}: HTA {e}" for e in hta.get("errors", [])]
    figures = hta.get("figures", {})
    for rank in report["ranks"]:
        gpu = rank["gpu"]
        if not gpu:
            continue
        window = rank["step_ms"]
        idle = 100 * gpu["idle_ms"] / window
        overlap = (100 * (1 - gpu["exposed_communication_ms"] / gpu["communication_ms"])
                   if gpu["communication_ms"] else None)
        hta_idle = figures.get("idle_pct", {}).get(str(rank["rank"]))
        hta_overlap = figures.get("overlap_pct", {}).get(str(rank["rank"]))
        notes.append(
            f"{data['name']} rank {rank['rank']}: GPU idle {idle:.1f} % of the step (HTA "
            f"{_pct(hta_idle)}), communication overlapped by compute "
            f"{_pct(overlap)} (HTA {_pct(hta_overlap)}); per step: idle {gpu['idle_ms']:.2f}, "
            f"compute {gpu['compute_ms']:.2f}, communication {gpu['communication_ms']:.2f}, "
            f"exposed {gpu['exposed_communication_ms']:.2f} ms")
    imports = _median(data["timed"]["HTA 0.5.0"], "imports")
    notes.append(f"{data['name']}: HTA's imports take {imports:.2f} s of its whole command "
                 f"(pandas, numpy, plotly)")
    return notes


def _pct(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{value:.1f} %"  # NaN: no comms


if __name__ == "__main__":
    cli("traces", main)
