"""``analyze_trace`` runs without Django, and says the same as the Django command."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

import apps.jobs.adapters.kineto as kineto
from apps.jobs import trace_command
from apps.jobs.adapters.kineto import KinetoReader, find_trace_files

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "traces" / "real-gpu"


def _manage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_manage_py_runs_it_before_django_and_prints_what_call_command_prints():
    folder = str(REAL / "trace_diff_control")
    done = _manage("analyze_trace", folder, "--json")
    out, err = StringIO(), StringIO()
    call_command("analyze_trace", folder, "--json", stdout=out, stderr=err)
    assert done.returncode == 0
    assert done.stdout == out.getvalue() and done.stderr == err.getvalue()
    assert json.loads(done.stdout)["ranks"][0]["gpu"]["communication_ms"] > 0


def test_the_command_path_imports_no_django():
    code = ("import sys, io; from apps.jobs.trace_command import main; "
            f"rc = main([{str(REAL / 'amd_trace')!r}], io.StringIO(), io.StringIO()); "
            "print(rc, any(m == 'django' or m.startswith('django.') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.split() == ["0", "False"], done.stderr


def test_a_refusal_is_one_line_and_exit_status_one():
    done = _manage("analyze_trace", str(REAL / "critical_path_simple_add"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("CommandError: no rank has a usable training step")
    assert "no ProfilerStep#N events" in done.stderr and "Traceback" not in done.stderr


def test_text_output_shows_the_gpu_timeline_and_what_to_check():
    out = StringIO()
    call_command("analyze_trace", str(REAL / "df_index_resolver"), stdout=out, stderr=StringIO())
    text = out.getvalue()
    assert "GPU timeline" in text and "46%" in text
    assert "verdict: the GPU is idle 46% of each step: the CPU side cannot feed it" in text
    assert "check: " in text


def test_the_environment_defaults_are_the_settings_defaults():
    # trace_command reads the variables portal/settings.py reads, without Django
    for name in trace_command.ENV_SETTINGS:
        assert trace_command.env_int(name) == getattr(settings, name)


def test_a_bad_environment_value_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("TRACE_STRAGGLER_MIN_EXCESS_MS", "five")
    err = StringIO()
    assert trace_command.main([str(REAL / "amd_trace")], StringIO(), err) == 1
    assert "TRACE_STRAGGLER_MIN_EXCESS_MS='five': expected an integer" in err.getvalue()


@pytest.mark.parametrize("folder", ["df_index_resolver", "ns_resolution_trace", "amd_trace",
                                    "trace_diff_test"])
def test_the_text_prefilter_keeps_every_event_the_analysis_reads(folder, monkeypatch):
    (path,) = find_trace_files([REAL / folder])
    filtered = KinetoReader().read(path)
    monkeypatch.setattr(kineto, "_unneeded_removed", lambda text: (text, 0))
    whole = KinetoReader().read(path)
    assert filtered.events == whole.events
    # launches that launched nothing are dropped; every GPU event's launch is kept
    gpu = {e.correlation for e in whole.events if e.on_gpu and e.correlation is not None}
    assert {c: whole.launches[c] for c in gpu if c in whole.launches} == \
        {c: filtered.launches[c] for c in gpu if c in filtered.launches}
    assert gpu & set(whole.launches) == gpu & set(filtered.launches)
