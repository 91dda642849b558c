"""``make demo`` shows its steps and counts "ready" from the command's start (issue 26)."""

from __future__ import annotations

import io
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.clusters.models import Cluster
from apps.demo.management.commands import demo

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_simulate_only_writes_the_month_and_touches_no_database(tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_T0", str(int(time.time()) - 42))
    out = io.StringIO()
    call_command("demo", "--out", str(tmp_path / "sim"), "--simulate-only", "--nodes", "4",
                 "--days", "1", "--telemetry-step", "3600", stdout=out)
    assert (tmp_path / "sim" / "cluster.json").is_file()
    assert not Cluster.objects.exists()
    assert "simulated month ready" in out.getvalue()
    assert "after the make command started" in out.getvalue()


def test_times_count_from_the_make_command(monkeypatch):
    monkeypatch.setenv("DEMO_T0", str(int(time.time()) - 100))
    assert demo.since_start() in ("100 s after the make command started",
                                  "101 s after the make command started")
    monkeypatch.delenv("DEMO_T0")
    assert demo.since_start().endswith(" s") and "make" not in demo.since_start()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_prints_its_steps_and_the_server_says_when_it_answers():
    out = subprocess.run(["make", "-n", "--no-print-directory", "demo"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    steps = [line for line in out.splitlines() if line.startswith('echo "==> [')]
    assert [s.split("]")[0][-3:] for s in steps] == ["1/3", "2/3", "3/3"]
    assert all("date +%s" in s for s in steps)  # each says how long since the start
    # the simulation runs beside the migration; "ready" is printed once gunicorn listens
    assert "--simulate-only &" in out and "gunicorn_ready.py" in out
    hook = (ROOT / "deploy/dev/gunicorn_ready.py").read_text()
    assert "def when_ready" in hook and "DEMO_T0" in hook
    makefile = (ROOT / "Makefile").read_text()
    assert "DEMO_T0 := $(shell date +%s)" in makefile  # set when make starts: install included


def test_the_ready_hook_counts_from_the_start(monkeypatch, capsys):
    import runpy

    hook = runpy.run_path(str(ROOT / "deploy/dev/gunicorn_ready.py"))
    monkeypatch.setenv("DEMO_T0", str(int(time.time()) - 90))
    monkeypatch.setenv("SITE_URL", "http://127.0.0.1:8123")
    hook["when_ready"](None)
    said = capsys.readouterr().out
    assert said.startswith("==> ready in 9") and "http://127.0.0.1:8123/" in said
