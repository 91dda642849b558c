"""Benchmarks never run in the test suite; this only checks that each one can start."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS
from bench.common import Check, Result, to_markdown

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_imports_and_has_a_main(name):
    module = importlib.import_module(f"bench.{name}")
    assert callable(module.main)


def test_the_runner_lists_its_benchmarks():
    out = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert "--quick" in out.stdout
    assert all(name in out.stdout for name in BENCHMARKS)


def test_results_render_as_markdown_tables():
    result = Result("x", "X bench", "python -m bench x", {"jobs": 3}, ["a", "b"], [[1, 2]],
                    [Check("a < 2", "1", True), Check("b < 1", "2", False)])
    text = to_markdown({**asdict(result), "run": "today, --quick"})
    assert "| 1 | 2 |" in text and "| b < 1 | 2 | **no** |" in text
    assert "Run: today, --quick" in text


# Each benchmark, with what takes away the service or tool it needs, and what it must say.
# Port 9 (discard) on loopback: nothing listens, so PostgreSQL "is down". An empty PATH:
# no wrk, no prometheus. A short SECRET_KEY: Beacon's settings refuse to start.
POSTGRES_DOWN = ({"BENCH_POSTGRES_URL": "postgres://postgres@127.0.0.1:9"},
                 "PostgreSQL is not reachable at 127.0.0.1:9")
FAILURES = {
    "sacct_import": POSTGRES_DOWN,
    "joblist": ({"PATH": "{empty}"}, "`wrk` is not installed; install the Debian package"),
    "job_metrics": ({"PATH": "{empty}"}, "`prometheus` is not installed"),
    "archive_size": POSTGRES_DOWN,
    "traces": ({"BENCH_HTA_VENV": "/dev/null/venv"},
               "-m venv /dev/null/venv` failed (BENCH_HTA_VENV not writable?)"),
    "demo": ({"SECRET_KEY": "short"},
             "Beacon's settings refuse this environment: SECRET_KEY: must be at least 32"),
    "db_size": POSTGRES_DOWN,
    "chargeback": POSTGRES_DOWN,
    "slo": POSTGRES_DOWN,
    "reports": POSTGRES_DOWN,
    "detect_scale": ({"PATH": "{empty}"}, "`prometheus` is not installed"),
    "detect_stores": ({"PATH": "{empty}"}, "`prometheus` is not installed"),
    "archive_drop": POSTGRES_DOWN,
    "traces_job": POSTGRES_DOWN,
}


def test_every_benchmark_has_a_failure_case():
    assert set(FAILURES) == set(BENCHMARKS)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_that_cannot_run_says_why_without_a_traceback(name, tmp_path):
    changes, message = FAILURES[name]
    env = {**os.environ, **{k: v.replace("{empty}", str(tmp_path)) for k, v in changes.items()}}
    proc = subprocess.run([sys.executable, "-m", f"bench.{name}", "--quick"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"bench {name} cannot run: " in proc.stderr and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_runner_reports_a_benchmark_that_cannot_run_and_keeps_the_docs(tmp_path):
    env = {**os.environ, **POSTGRES_DOWN[0]}
    before = (ROOT / "docs" / "BENCHMARKS.md").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "chargeback"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "not run: chargeback: cannot run: PostgreSQL is not reachable" in proc.stderr
    assert (ROOT / "docs" / "BENCHMARKS.md").read_bytes() == before


def test_each_sections_run_line_names_the_machine():
    from bench.__main__ import run_line
    from bench.common import machine

    line = run_line(True, 12.4, 0.5, 1.5, on="2 cores (Test CPU), 8 GB RAM")
    assert ", --quick, 12 s on 2 cores (Test CPU), 8 GB RAM; 1-min load average 0.50" in line
    assert f"on {machine()};" in run_line(False, 1, 0, 0)
    assert "cores (" in machine() and "GB RAM" in machine()


def test_the_demo_bench_reads_load_demo_stage_times():
    from bench.demo import _stages

    out = ("traces: 6/6 (100%), 0 s elapsed, ETA 0 s\n"
           "jobs         {'created': 2821, 'errors': 0, 'seconds': 1.2}\n"
           "gpu history  {'intervals': 8372, 'seconds': 0.4}\n"
           "Demo logins (kept in the data folder as demo-logins.txt):\n")
    assert _stages(out) == {"jobs": 1.2, "gpu history": 0.4}


def test_the_slo_bench_without_postgresql_says_so_without_a_traceback():
    env = {**os.environ, "BENCH_POSTGRES_URL": "postgres://postgres@127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-m", "bench.slo", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "cannot run: PostgreSQL is not reachable at 127.0.0.1:9" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_slo_bench_floor_is_complete_sql():
    from bench.slo import BURN, _floor_sql

    statements = _floor_sql()
    assert len(statements) == 8
    assert all("$" not in sql for sql in statements)  # every template part filled
    assert all(f"%(b{w})s" in statements[0] for w in BURN)


def test_the_reports_bench_floor_is_complete_sql():
    from bench.reports import floor_sql

    statements = floor_sql("j.team_id")
    assert len(statements) == 4
    assert all("{" not in sql.replace("{}", "") for sql in statements)  # every part filled
    assert all("j.team_id" in sql for sql in statements)
