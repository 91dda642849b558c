"""Shared pieces for benchmarks: timing statistics, machine facts, services, results.

Each benchmark is a module ``bench/<name>.py`` with ``main(quick: bool) -> Result``, run as
``python -m bench.<name> [--quick]`` through :func:`cli`. The runner (``python -m bench``)
starts each in its own process (so each sets its own Django settings) and writes
``docs/BENCHMARKS.md``. A benchmark that cannot run (a service down, a tool missing) raises
:class:`BenchError`; :func:`cli` prints its message and exits 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

RESULT_MARK = "BENCH-RESULT "
ROOT = Path(__file__).resolve().parent.parent
EXIT_CANNOT_RUN = 2


class BenchError(Exception):
    """The benchmark cannot run here; the message says what is missing and how to fix it."""


# --- Statistics ------------------------------------------------------------------------


@dataclass
class Stats:
    median: float
    low: float
    high: float
    runs: int

    def text(self, unit: str = "", digits: int = 1) -> str:
        return (f"{self.median:.{digits}f}{unit} "
                f"({self.low:.{digits}f}–{self.high:.{digits}f}, n={self.runs})")


def stats(values: Sequence[float]) -> Stats:
    return Stats(statistics.median(values), min(values), max(values), len(values))


def timed(fn: Callable[[], Any], repeats: int) -> tuple[Stats, Any]:
    """Wall-clock seconds of ``fn`` over ``repeats`` runs; returns the stats and the last result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return stats(times), result


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class ChildRun:
    """One child process: its wall time, its own peak RSS, and what it printed."""

    seconds: float
    peak_rss_mb: float
    returncode: int
    stdout: str
    stderr: str
    cpu_seconds: float = 0.0  # user + system, its own: less swayed by other load than wall

    def check(self, what: str) -> ChildRun:
        """Raise a BenchError naming ``what`` with the end of its output if it failed."""
        if self.returncode != 0:
            tail = (self.stderr.strip() or self.stdout.strip())[-2000:]
            raise BenchError(f"{what} failed (exit {self.returncode}):\n{tail}")
        return self


def run_child(cmd: Sequence[str], env: dict[str, str] | None = None,
              cwd: Path = ROOT) -> ChildRun:
    """Run ``cmd`` and measure it alone: ``wait4`` gives this child's own peak RSS.

    ``env`` is the child's whole environment (default: this process's).

    Output goes to temporary files rather than pipes, because ``communicate()`` would reap
    the child itself and its resource usage would be lost.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, cwd=cwd,
                                env=os.environ.copy() if env is None else env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # already reaped: tell Popen
        out.seek(0)
        err.seek(0)
        return ChildRun(seconds, usage.ru_maxrss / 1024, proc.returncode, out.read(),
                        err.read(), usage.ru_utime + usage.ru_stime)


# --- Machine ---------------------------------------------------------------------------


def machine() -> str:
    cores = os.cpu_count()
    with open("/proc/meminfo") as fh:
        mem_kb = int(fh.readline().split()[1])
    with open("/proc/cpuinfo") as fh:
        cpu = next((line.split(":", 1)[1].strip() for line in fh
                    if line.startswith("model name")), platform.machine())
    return (f"{cores} cores ({cpu}), {mem_kb / 1024 / 1024:.0f} GB RAM, "
            f"Python {platform.python_version()}")


def load_average() -> float:
    """The 1-minute load average: above the core count, other work shared the machine."""
    return os.getloadavg()[0]


# --- Services --------------------------------------------------------------------------


def database_url(name: str) -> str:
    """The PostgreSQL database of benchmark ``name``: ``<BENCH_DB_PREFIX>_<name>``.

    ``BENCH_POSTGRES_URL`` is the server (default: loopback, user postgres); the prefix
    (default ``beacon_bench``) lets parallel checkouts keep their data apart.
    """
    server = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432")
    prefix = os.environ.get("BENCH_DB_PREFIX", "beacon_bench")
    return f"{server.rstrip('/')}/{prefix}_{name}"


def job_count(env: str, quick: bool) -> int:
    """How many jobs a PostgreSQL bench fills: ``env`` when set (issue 29's 10M is a run with
    ``<env>=10000000``), else 1,000,000, or 100,000 with ``--quick``."""
    raw = os.environ.get(env) or ("100000" if quick else "1000000")
    try:
        n_jobs = int(raw.replace("_", ""))
    except ValueError:
        raise BenchError(f"{env}={raw!r}: give a whole number of jobs") from None
    if n_jobs < 1000:
        raise BenchError(f"{env}={n_jobs}: give at least 1,000 jobs")
    return n_jobs


def sized_command(name: str, env: str, quick: bool) -> str:
    """The command line that makes this run again, naming ``env`` when it set the size."""
    size = f"{env}={os.environ[env]} " if os.environ.get(env) else ""
    return f"{size}python -m bench {name}" + (" --quick" if quick else "")


def ensure_database(url: str, *, fresh: bool = False) -> None:
    """Create the benchmark's own PostgreSQL database if it is missing (``fresh``: anew).

    A fresh database cannot hold another checkout's migrations. Raises BenchError when
    PostgreSQL does not answer, naming the address and the variables that choose another.
    """
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
            if fresh:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                [name]).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BenchError(
            f"PostgreSQL is not reachable at {parts.hostname}:{parts.port or 5432} ({first}). "
            "Start PostgreSQL 15, or set BENCH_POSTGRES_URL to a server where the benchmark "
            "may create databases.") from None
    except psycopg.Error as exc:
        raise BenchError(f"cannot prepare database {name!r}: {exc}") from None


def setup_django(data_dir: str | Path, database_url: str | None = None) -> None:
    """Configure Django for this process (SQLite in ``data_dir`` unless a URL is given)."""
    env = {"BEACON_DATA_DIR": str(data_dir), "LOG_LEVEL": "warning",
           "DJANGO_SETTINGS_MODULE": "portal.settings"}
    if database_url:
        env["DATABASE_URL"] = database_url
    else:
        os.environ.pop("DATABASE_URL", None)
    os.environ.update(env)
    import django

    django.setup()


def table_sizes(tables: Sequence[str]) -> dict[str, tuple[int, int]]:
    """``{table: (rows, bytes)}`` in PostgreSQL: heap + TOAST + indexes, after ANALYZE."""
    from django.db import connection

    sizes = {}
    with connection.cursor() as cur:
        for table in tables:  # names come from the benchmark's code, never from input
            quoted = connection.ops.quote_name(table)
            cur.execute(f"VACUUM ANALYZE {quoted}")
            cur.execute(f"SELECT count(*), pg_total_relation_size(%s) FROM {quoted}",  # noqa: S608
                        [table])
            rows, size = cur.fetchone()
            sizes[table] = (int(rows), int(size))
    return sizes


def require_tool(name: str, install: str) -> str:
    """The path of a command-line tool, or a BenchError saying how to install it."""
    import shutil

    path = shutil.which(name)
    if not path:
        raise BenchError(f"`{name}` is not installed; {install}")
    return path


def free_port() -> int:
    """A port nobody listens on now: other checkouts run their own Prometheus too."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BenchPrometheus:
    """A benchmark's own loopback Prometheus 2.42 (``deploy/dev/prometheus.sh``).

    Loading data with promtool restarts the server, which the shared instance on 9091 must
    not suffer while tests use it: each benchmark runs its own, on ``BENCH_PROM_PORT`` (else
    a free port), with its data in ``data_dir`` (kept, so datasets are backfilled once).
    """

    SCRIPT = ROOT / "deploy" / "dev" / "prometheus.sh"

    def __init__(self, data_dir: Path) -> None:
        self.port = int(os.environ.get("BENCH_PROM_PORT") or free_port())
        self.data_dir = data_dir
        self.url = f"http://127.0.0.1:{self.port}"

    def script(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PROM_PORT": str(self.port), "PROM_DIR": str(self.data_dir)}
        return subprocess.run([str(self.SCRIPT), *args], env=env, capture_output=True,
                              text=True)

    @contextmanager
    def running(self) -> Iterator[None]:
        """Started here if it is not running, and then stopped after."""
        install = "install Debian's prometheus package (it brings promtool)"
        require_tool("prometheus", install)
        require_tool("promtool", install)
        started = self.script("status").returncode != 0
        if started:
            up = self.script("up")
            if up.returncode != 0:
                raise BenchError(f"could not start the bench's Prometheus on {self.url} "
                                 f"(BENCH_PROM_PORT): {(up.stderr or up.stdout).strip()[-800:]}")
        try:
            yield
        finally:
            if started:
                self.script("down")

    def has(self, selector: str, at: float) -> bool:
        """Whether ``selector`` (a dataset's marker series) has a sample at ``at``."""
        import requests

        try:
            body = requests.get(f"{self.url}/api/v1/query",
                                params={"query": selector, "time": at}, timeout=10).json()
        except (requests.RequestException, ValueError) as exc:
            raise BenchError(f"Prometheus at {self.url} does not answer: {exc}") from None
        return bool(body.get("data", {}).get("result"))

    def backfill(self, *files: Path) -> None:
        """OpenMetrics files into TSDB blocks, queryable when this returns."""
        done = self.script("backfill", *map(str, files))
        if done.returncode != 0:
            raise BenchError(f"promtool backfill failed: {done.stderr.strip()[-800:]}")


# --- Results ---------------------------------------------------------------------------


@dataclass
class Check:
    """One target from the issues: what was measured against what it must be."""

    target: str
    measured: str
    ok: bool


@dataclass
class Result:
    name: str
    title: str
    command: str
    inputs: dict[str, Any]
    columns: list[str]
    rows: list[list[Any]]
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def emit(self) -> None:
        """Print the result for the runner (one line, prefixed)."""
        print(RESULT_MARK + json.dumps(asdict(self)), flush=True)


def cli(name: str, main: Callable[[bool], Result]) -> None:
    """``python -m bench.<name> [--quick]``: emit the result, or say clearly why it cannot run."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}")
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer runs")
    args = parser.parse_args()
    from django.core.exceptions import ImproperlyConfigured

    try:
        result = main(args.quick)
    except BenchError as exc:
        print(f"bench {name} cannot run: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_CANNOT_RUN) from None
    except ImproperlyConfigured as exc:  # the environment's settings (portal/settings.py)
        print(f"bench {name} cannot run: Beacon's settings refuse this environment: {exc}",
              file=sys.stderr, flush=True)
        raise SystemExit(EXIT_CANNOT_RUN) from None
    result.emit()


def to_markdown(result: dict[str, Any]) -> str:
    lines = [f"## {result['title']}", "", f"Command: `{result['command']}`", ""]
    if result.get("run"):
        lines += [f"Run: {result['run']}", ""]
    lines += [f"- {k}: {v}" for k, v in result["inputs"].items()]
    lines += ["", "| " + " | ".join(result["columns"]) + " |",
              "|" + "---|" * len(result["columns"])]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in result["rows"]]
    if result["checks"]:
        lines += ["", "| target | measured | met |", "|---|---|---|"]
        lines += [f"| {c['target']} | {c['measured']} | {'yes' if c['ok'] else '**no**'} |"
                  for c in result["checks"]]
    lines += [""] + [f"> {n}" for n in result["notes"]]
    return "\n".join(lines).rstrip() + "\n"
