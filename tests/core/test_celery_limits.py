"""Celery limits (issue 27 item 7): memory per worker child and time limits per kind of
task, from settings, on the tasks the worker runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from apps.core.checks import check_task_time_limits
from portal.celery import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tasks():
    app.loader.import_default_modules()
    return {name: task for name, task in app.tasks.items() if name.startswith("apps.")}


def test_every_named_task_exists(tasks):
    named = {name for _, names in settings.TASK_KINDS.values() for name in names}
    assert named <= set(tasks), named - set(tasks)  # a typo would silently get the default


def test_each_task_runs_under_its_kinds_limits(tasks):
    grace = settings.TASK_TIME_LIMIT_GRACE
    kind_of = {name: soft for soft, names in settings.TASK_KINDS.values() for name in names}
    for name, task in tasks.items():
        soft = kind_of.get(name, settings.CELERY_TASK_SOFT_TIME_LIMIT)
        assert (task.soft_time_limit, task.time_limit) == (soft, soft + grace), name


def test_trace_parsing_gets_longer_than_a_sync(tasks):
    traces = tasks["apps.jobs.tasks.collect_traces"]
    sync = tasks["apps.clusters.tasks.sync_cluster"]
    assert traces.soft_time_limit > sync.soft_time_limit > settings.CELERY_TASK_SOFT_TIME_LIMIT


def test_the_worker_replaces_a_child_past_the_memory_limit():
    assert app.conf.worker_max_memory_per_child == 2048 * 1024  # KiB, as Celery reads it


def test_the_broker_does_not_redeliver_a_task_still_within_its_limit():
    visibility = app.conf.broker_transport_options["visibility_timeout"]
    assert visibility > settings.TASK_LONGEST_SECONDS


# In a fresh process, as a worker starts: the environment changes the limits.
PROBE = """
import django, json; django.setup()
from portal.celery import app
app.loader.import_default_modules()
t = app.tasks["apps.jobs.tasks.collect_traces"]
d = app.tasks["apps.core.tasks.prune_task_runs"]
print(json.dumps([t.soft_time_limit, t.time_limit, d.soft_time_limit, d.time_limit,
                  app.conf.worker_max_memory_per_child,
                  app.conf.broker_transport_options["visibility_timeout"]]))
"""


def test_the_limits_come_from_the_environment(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings",
           "BEACON_DATA_DIR": str(tmp_path), "TASK_TIME_LIMIT_TRACES": "7200",
           "TASK_TIME_LIMIT_GRACE": "30", "TASK_TIME_LIMIT_DEFAULT": "120",
           "WORKER_MAX_MEMORY_MB": "512"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [7200, 7230, 120, 150, 512 * 1024,
                                                        7230 + 600]


def test_the_shipped_limits_pass_the_check():
    assert check_task_time_limits() == []


@pytest.mark.parametrize(("change", "expected"), [
    ({"SLURM_SYNC_CLAIM_EXPIRY": 600}, "SLURM_SYNC_CLAIM_EXPIRY"),
    ({"SECURITY_CLAIM_EXPIRY": 900}, "SECURITY_CLAIM_EXPIRY"),
    ({"TASK_RUN_STALE_MINUTES": 60}, "TASK_RUN_STALE_MINUTES"),
])
def test_a_limit_longer_than_a_claim_or_the_sweep_is_warned_about(settings, change, expected):
    for name, value in change.items():
        setattr(settings, name, value)
    problems = check_task_time_limits()
    assert [p.id for p in problems] == ["core.W004"] and expected in problems[0].msg
