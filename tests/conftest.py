"""Shared fixtures: the personas, a cluster with teams and jobs, and the CI rule for skips.

Personas (STYLE.md §5): ``alice`` leads team A, ``bob`` and ``tom`` are researchers in team A
(tom is bob's teammate), ``carol`` is a researcher in team B, ``dave`` leads team B,
``staff`` is a platform admin and ``eve`` is a disabled account.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.accounts.models import Membership, Team
from apps.clusters.models import Cluster, Node, SlurmAccount
from apps.jobs.models import Job

PERSONAS = ("anon", "alice", "bob", "tom", "carol", "dave", "staff", "eve")

# --- Under CI, a skipped test is a failed test ----------------------------------------


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    """`make test`: each shared service's tests on a worker of its own (tests/xdist_lanes.py)."""
    from tests.xdist_lanes import LaneScheduling

    return LaneScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if not items and os.environ.get("CI") == "true":
        raise pytest.UsageError("no tests collected: refusing to pass under CI")
    from tests.xdist_lanes import restore_db_order

    restore_db_order(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        # Integration tests must run in CI: a missing service is a failure there.
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped under CI=true, which is a failure: {reason}"


# --- Personas and a small world ------------------------------------------------------

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


# The world's jobs run in November 2026: tests that read "this month" from the clock travel there.
WORLD_NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


@pytest.fixture
def in_the_worlds_month() -> Any:
    """Put the wall clock in the world's month (it ticks on from there)."""
    import time_machine

    with time_machine.travel(WORLD_NOW, tick=True) as traveller:
        yield traveller


@dataclass
class World:
    cluster: Cluster
    team_a: Team
    team_b: Team
    users: dict[str, User]
    jobs: dict[str, Job]


def make_job(cluster: Cluster, job_id: int, user: User | None, team: Team | None,
             **fields: Any) -> Job:
    """A finished 8-GPU job owned by ``user``; override any field."""
    values: dict[str, Any] = {
        "display_id": str(job_id), "name": f"job-{job_id}",
        "user_name": user.username if user else "ghost", "user": user,
        "account": team.slug if team else "", "team": team, "partition": "gpu",
        "state": Job.State.COMPLETED, "exit_code": 0, "exit_signal": 0,
        "submit_time": T0 + timedelta(minutes=job_id),
        "start_time": T0 + timedelta(minutes=job_id + 5),
        "end_time": T0 + timedelta(minutes=job_id + 65), "time_limit_min": 120,
        "nodes": "gpu01", "node_count": 1, "cpus": 16, "memory_mb": 64000,
        "gpus": 8, "gpu_equivalent": 8.0, "gpu_types": {"h100": 8},
    }
    values.update(fields)
    return Job.objects.create(cluster=cluster, job_id=job_id, **values)


@pytest.fixture
def world(db: Any) -> World:
    cluster = Cluster.objects.create(name="testcluster", display_name="Test cluster")
    Node.objects.create(cluster=cluster, name="gpu01", gpu_type="h100", gpu_count=8)
    team_a = Team.objects.create(slug="nlp", name="NLP")
    team_b = Team.objects.create(slug="vision", name="Vision")
    SlurmAccount.objects.create(cluster=cluster, name="nlp", team=team_a)
    SlurmAccount.objects.create(cluster=cluster, name="vision", team=team_b)
    users = {name: User.objects.create_user(name, password="pw") for name in PERSONAS[1:]}
    users["staff"].is_staff = True
    users["staff"].save()
    users["eve"].is_active = False
    users["eve"].save()
    for name, team, role in (("alice", team_a, "lead"), ("bob", team_a, "member"),
                             ("tom", team_a, "member"), ("carol", team_b, "member"),
                             ("dave", team_b, "lead"), ("eve", team_a, "lead")):
        Membership.objects.create(user=users[name], team=team, role=role)
    jobs = {
        "bob": make_job(cluster, 101, users["bob"], team_a),
        "tom": make_job(cluster, 102, users["tom"], team_a),
        "alice": make_job(cluster, 103, users["alice"], team_a),
        "carol": make_job(cluster, 201, users["carol"], team_b),
        "orphan": make_job(cluster, 301, None, None, account="unmapped"),
    }
    return World(cluster, team_a, team_b, users, jobs)


@pytest.fixture
def login(world: World) -> Any:
    """``login("bob")`` returns a test client signed in as that persona (anon: none)."""

    def _client(persona: str) -> Client:
        client = Client()
        if persona != "anon":
            client.force_login(world.users[persona])
        return client

    return _client
