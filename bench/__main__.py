"""``python -m bench [--quick] [NAME ...]``: run benchmarks, write docs/BENCHMARKS.md.

Each benchmark runs in its own process. Sections of benchmarks not run this time (or that
failed this time) are kept from the previous docs/BENCHMARKS.md with their own "Run:" line,
so one benchmark can be re-run alone. A benchmark that cannot run says why and the others
still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.common import EXIT_CANNOT_RUN, RESULT_MARK, load_average, machine, to_markdown

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "BENCHMARKS.md"
# In the order they run. Each is bench/<name>.py; add new ones on a line of their own.
BENCHMARKS = [
    "sacct_import",   # issue 4: Slurm import vs json.load
    "joblist",        # issue 6: job list p95 at 20 clients
    "job_metrics",    # issue 5: job-page metrics vs bare PromQL HTTP
    "archive_size",   # issue 5: archive bytes per GPU-job
    "traces",         # issue 6: trace analysis vs HTA
    "demo",           # issue 3: simulate + load_demo
    "db_size",        # issue 11: rows and bytes per job, for docs/SCALING.md
    "chargeback",     # issue 8: a month's statements vs a hand-written GROUP BY
    "slo",            # issue 7: 50 teams' scorecards vs hand-written SQL; the page's time
    "reports",        # issue 30: usage reports per team/user and day vs hand-written SQL
    "detect_scale",   # issue 17: one live detection window at 1k-10k GPUs
    "archive_drop",   # issue 29: dropping a month of the partitioned archive
    "detect_stores",  # issue 29: detection over 4 stores, floor vs big size: CPU/GPU, RSS
    "traces_job",     # issue 29: 64 ranks x 110 MB through a Celery worker vs HTA
]
SECTION = re.compile(r"<!-- bench:(\w+) -->\n(.*?)<!-- /bench:\1 -->\n", re.S)


def run_one(name: str, quick: bool) -> dict[str, object] | str:
    """The benchmark's result, or the reason it could not produce one."""
    cmd = [sys.executable, "-m", f"bench.{name}"] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return dict(json.loads(line[len(RESULT_MARK):]))
    if proc.returncode == EXIT_CANNOT_RUN and "cannot run: " in proc.stderr:
        return proc.stderr[proc.stderr.rindex("cannot run: "):].strip()
    return (f"failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
            f"{proc.stdout[-1000:]}")


def run_line(quick: bool, seconds: float, load_before: float, load_after: float,
             on: str | None = None) -> str:
    """When, how, how long, on which machine and beside how much other work: a section
    kept from an earlier run still says where its figures came from."""
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
            f"{', --quick' if quick else ', full'}, {seconds:.0f} s on {on or machine()}; "
            f"1-min load average {load_before:.2f} before, {load_after:.2f} after (other "
            f"agents share this machine when it is above the core count)")


def write_doc(results: dict[str, str], quick: bool) -> None:
    old = dict(SECTION.findall(DOC.read_text())) if DOC.exists() else {}
    old.update(results)
    head = ("# Benchmarks\n\nProduced by `make bench` (`python -m bench`); each section says the "
            "command that made it and when it ran. Figures are medians with (min–max, n runs). "
            "Ratios compare with a floor or a peer measured in the same run, because these "
            "machines are shared: a section whose load average exceeds the core count ran "
            "beside other work, and its times are pessimistic. The protocol and the services "
            "each benchmark needs: bench/README.md.\n\n"
            f"Last run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
            f"{' (--quick)' if quick else ''} of {', '.join(sorted(results)) or 'nothing'} "
            f"on {machine()}.\n\n")
    order = [n for n in BENCHMARKS if n in old] + sorted(set(old) - set(BENCHMARKS))
    body = "".join(f"<!-- bench:{n} -->\n{old[n]}<!-- /bench:{n} -->\n\n" for n in order)
    DOC.write_text(head + body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", choices=[[], *BENCHMARKS], default=[])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, under 5 minutes")
    args = parser.parse_args()
    results, failed, started = {}, {}, time.perf_counter()
    for name in args.names or BENCHMARKS:
        print(f"== bench {name}{' (quick)' if args.quick else ''}", flush=True)
        load_before, t0 = load_average(), time.perf_counter()
        result = run_one(name, args.quick)
        if isinstance(result, str):
            failed[name] = result
            print(f"!! bench {name}: {result}\n", file=sys.stderr, flush=True)
            continue
        result["run"] = run_line(args.quick, time.perf_counter() - t0, load_before,
                                 load_average())
        results[name] = to_markdown(result)
        print(results[name], flush=True)
    if results:
        write_doc(results, args.quick)
        print(f"wrote {DOC.relative_to(ROOT)}")
    print(f"bench: {len(results)} run, {len(failed)} not run, "
          f"{time.perf_counter() - started:.0f} s in total")
    if failed:
        print("not run: " + "; ".join(f"{n}: {m.splitlines()[0]}" for n, m in failed.items()),
              file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
