"""Trace analysis: Beacon's reader + analysis against HTA 0.5.0 on the same multi-rank traces.

1. Generates real PyTorch CPU DDP traces once (``tests/jobs/ddp_run.py``: 4 gloo ranks, a
   20 ms data-loading straggler on rank 1) into ``var/bench-traces/``.
2. HTA lives in its own virtualenv, never in Beacon's (it pulls jupyterlab, pandas 3 and
   numpy 2): the bench creates ``var/bench-venv`` the first time
   (``python3.11 -m venv var/bench-venv && var/bench-venv/bin/pip install
   holistictraceanalysis==0.5.0``).
3. Each side runs in fresh processes, in alternation, ``repeats`` times for time and again
   for memory. Wall time is measured inside the process from the first file read to the
   verdict (interpreter start and imports are excluded, which favours HTA: pandas imports
   slowly); CPU time counts the process and its children. Memory is the peak proportional
   set size (PSS) of the process *and its children*, sampled every 5 ms from /proc: both
   sides parse one rank per process over a fork pool, whose shared pages PSS counts once.
   Timing runs are not sampled: on two cores the sampler would steal time from the worker.
4. On CPU (gloo) traces HTA's temporal breakdown and straggler analysis fail (no GPU
   kernels); the bench times what HTA needs to get there, ``TraceAnalysis`` (parse) plus
   the attempted temporal breakdown, records the error, and runs the one breakdown that
   works on CPU traces (``get_gpu_user_annotation_breakdown(use_gpu_annotation=False)``).
Targets (issue 6): >= 5x faster than HTA, <= 1/5 of its memory, for ``analyze_trace`` as it
runs by default (one process per core).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, BenchError, Check, Result, cli, stats

SAMPLE_S = 0.005
HTA_VENV = Path(os.environ.get("BENCH_HTA_VENV") or ROOT / "var" / "bench-venv")
HTA_PACKAGE = "holistictraceanalysis==0.5.0"
WORLD_SIZE, STEPS, SLOW_RANK, SLOW_PHASE = 4, 40, 1, "data_loading"

# --- The two workers (each runs in its own process) -------------------------------------

OURS = """
import json, os, sys, time
from pathlib import Path
from apps.analysis.phases import analyze, report
from apps.jobs.adapters.kineto import KinetoReader, find_trace_files
c0, t0 = sum(os.times()[:4]), time.perf_counter()
files = find_trace_files([Path(sys.argv[1])])
result = report(analyze(KinetoReader().read_many(files, int(sys.argv[2]))))
elapsed, cpu = time.perf_counter() - t0, sum(os.times()[:4]) - c0
print(json.dumps({"seconds": elapsed, "cpu": cpu, "straggler": result["straggler"],
                  "errors": []}))
"""

HTA = """
import json, logging, os, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
c0, t0 = sum(os.times()[:4]), time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
errors = []
try:
    analysis.get_temporal_breakdown(visualize=False)
except Exception as exc:
    errors.append(f"get_temporal_breakdown: {type(exc).__name__}: {exc}")
elapsed, cpu = time.perf_counter() - t0, sum(os.times()[:4]) - c0
try:
    analysis.get_potential_stragglers(visualize=False)
except Exception as exc:
    errors.append(f"get_potential_stragglers: {type(exc).__name__}: {exc}")
works = analysis.get_gpu_user_annotation_breakdown(use_gpu_annotation=False, visualize=False)
print(json.dumps({"seconds": elapsed, "cpu": cpu, "straggler": None, "errors": errors,
                  "cpu_annotation_rows": 0 if works is None else len(works)}))
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


def _run(python: str, code: str, trace_dir: Path, sample: bool,
         workers: int = 1) -> dict[str, Any]:
    """One run: the worker's own timing, or (``sample``) the peak memory of its process tree."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([python, "-c", code, str(trace_dir), str(workers)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
                            text=True)
    peak = 0
    while sample and proc.poll() is None:
        peak = max(peak, _tree_pss_kib(proc.pid))
        time.sleep(SAMPLE_S)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise BenchError(f"{python} failed on {trace_dir}:\n{err.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["peak_mib"] = peak / 1024
    return result


# --- Inputs: the traces and HTA's virtualenv --------------------------------------------


def _traces() -> Path:
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


def _measure(sides: list[tuple[str, str, str, int]], trace_dir: Path,
             repeats: int) -> dict[str, list[dict[str, Any]]]:
    """Each side ``repeats`` times for time, then for memory, in alternation."""
    timed: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in sides}
    sampled: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in sides}
    for sample, into in ((False, timed), (True, sampled)):
        for _ in range(repeats):
            for label, python, code, workers in sides:
                into[label].append(_run(python, code, trace_dir, sample, workers))
    return {label: [{**t, "peak_mib": m["peak_mib"]}
                    for t, m in zip(timed[label], sampled[label], strict=True)]
            for label in timed}


def main(quick: bool) -> Result:
    repeats = 3 if quick else 7
    hta_python = _hta_python()
    trace_dir = _traces()
    size = sum(p.stat().st_size for p in trace_dir.iterdir()) / 2**20
    cores = os.cpu_count() or 1
    ours = f"Beacon, {cores} processes (analyze_trace default)"
    sides = [("Beacon, 1 process", sys.executable, OURS, 1),
             (ours, sys.executable, OURS, cores),
             ("HTA 0.5.0 (its process pool)", hta_python, HTA, 1)]
    runs = _measure(sides, trace_dir, repeats)
    hta = runs[sides[-1][0]]
    verdict = runs[ours][0]["straggler"] or {}
    speed = _median(hta, "seconds") / _median(runs[ours], "seconds")
    memory = _median(runs[ours], "peak_mib") / _median(hta, "peak_mib")
    return Result(
        name="traces", title="Trace analysis against HTA TraceAnalysis",
        command=f"python -m bench traces{' --quick' if quick else ''}",
        inputs={"traces": f"real torch CPU DDP run: {WORLD_SIZE} gloo ranks, {STEPS} traced "
                          f"steps, {size:.1f} MiB of Kineto JSON "
                          f"({trace_dir.relative_to(ROOT)})",
                "truth": f"rank {SLOW_RANK} slowed by 20 ms a step in {SLOW_PHASE} (timed "
                         "inside the run)",
                "peer": f"{HTA_PACKAGE} in {HTA_VENV.name}: TraceAnalysis + "
                        "get_temporal_breakdown",
                "runs": f"{repeats} fresh processes per side for time, {repeats} for memory"},
        columns=["side", "wall (inside the process)", "CPU (median)", "peak PSS (tree)",
                 "speed-up vs HTA", "memory vs HTA"],
        rows=_rows(runs, hta),
        checks=[
            Check(">= 5x faster than HTA (wall, medians)", f"{speed:.1f} x", speed >= 5),
            Check("<= 1/5 of HTA's peak memory", f"{memory:.2f}", memory <= 0.2),
            Check(f"names the straggler: rank {SLOW_RANK}, {SLOW_PHASE}",
                  f"rank {verdict.get('rank')}, {verdict.get('phase')}",
                  verdict.get("rank") == SLOW_RANK and verdict.get("phase") == SLOW_PHASE),
        ],
        notes=[*(f"HTA: {e}" for e in hta[0]["errors"]),
               "HTA's one breakdown that works on CPU traces "
               "(get_gpu_user_annotation_breakdown, use_gpu_annotation=False) returned "
               f"{hta[0].get('cpu_annotation_rows')} rows and names no straggler.",
               "HTA spreads its parse over every core, so its wall time drops more than "
               "Beacon's single process when the machine is idle; CPU time shows the work."],
    )


def _rows(runs: dict[str, list[dict[str, Any]]],
          hta: list[dict[str, Any]]) -> list[list[Any]]:
    hta_s, hta_mib = _median(hta, "seconds"), _median(hta, "peak_mib")
    return [[label, stats([r["seconds"] for r in rows]).text(" s", 3),
             f"{_median(rows, 'cpu'):.3f} s", stats([r["peak_mib"] for r in rows]).text(" MiB"),
             f"{hta_s / _median(rows, 'seconds'):.1f} x",
             f"{_median(rows, 'peak_mib') / hta_mib:.2f}"] for label, rows in runs.items()]


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


if __name__ == "__main__":
    cli("traces", main)
