"""A varied population of GPU jobs for the SLO tests: waits of every cause, every ending,
array tasks, jobs across the window's edges, running jobs, archived and unarchived ones."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from apps.jobs.models import Job, JobMetrics
from apps.slo.models import Objective
from tests.conftest import World, make_job

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REASONS = ["", "", "", "Priority", "Resources", "AssocGrpGRES", "QOSMaxGRESPerUser",
           "Dependency", "JobHeldUser", "JobArrayTaskLimit", "ReqNodeNotAvail",
           "launch failed requeued held"]
STATES = ["COMPLETED"] * 8 + ["FAILED", "FAILED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                              "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE"]


def population(world: World, n: int = 400, seed: int = 7) -> list[Job]:
    """``n`` jobs of both teams (and some of no team) over the 10 days before NOW."""
    rng = random.Random(seed)
    users = [("bob", world.team_a), ("tom", world.team_a), ("carol", world.team_b),
             ("alice", world.team_a)]
    jobs = []
    for i in range(n):
        user, team = rng.choice(users)
        submit = NOW - timedelta(seconds=rng.uniform(0, 10 * 86400))
        jobs.append(_job(world, 1000 + i, user, team if rng.random() > 0.05 else None,
                         submit, rng))
    # an array: a task on time, one late, one throttled by its own limit, the remainder
    parent = NOW - timedelta(days=2)
    for task, (wait_min, reason) in enumerate([(1, ""), (90, "Priority"),
                                               (300, "JobArrayTaskLimit")]):
        jobs.append(make_job(world.cluster, 5000 + task, world.users["bob"], world.team_a,
                             display_id=f"5000_{task}", array_job_id=5000,
                             array_task_id=task, submit_time=parent,
                             start_time=parent + timedelta(minutes=wait_min),
                             end_time=parent + timedelta(minutes=wait_min + 60),
                             wait_reason=reason, gpus=1, gpu_equivalent=1.0))
    jobs.append(make_job(world.cluster, 5003, world.users["bob"], world.team_a,
                         display_id="5000_[3-9]", array_job_id=5000, submit_time=parent,
                         array_tasks_pending="3-9", state="PENDING", start_time=None,
                         end_time=None, node_count=0, gpus=0, gpu_equivalent=0))
    return jobs


def _job(world: World, job_id: int, user: str, team: Any, submit: datetime,
         rng: random.Random) -> Job:
    eligible = submit + timedelta(minutes=rng.choice([0, 0, 0, 5, 45])) \
        if rng.random() < 0.8 else None
    start = (eligible or submit) + timedelta(minutes=rng.choice([0, 1, 10, 29, 31, 60, 240,
                                                                 1500]))
    run = timedelta(minutes=rng.uniform(5, 3 * 1440))
    state = rng.choice(STATES)
    end: datetime | None = start + run
    if start >= NOW:  # not started yet
        return make_job(world.cluster, job_id, world.users[user], team, submit_time=submit,
                        eligible_time=eligible, start_time=None, end_time=None,
                        state="PENDING", node_count=0, gpus=0, gpu_equivalent=0)
    if end is not None and end >= NOW:
        end, state = None, "RUNNING"
    gpus = rng.choice([0.25, 1, 2, 4, 8, 8, 16, 64])
    allocated = rng.random() > 0.03  # cancelled while pending: start = end, no nodes
    if not allocated:
        state, end = "CANCELLED", start
    job = make_job(world.cluster, job_id, world.users[user], team,
                   partition=rng.choice(["gpu", "gpu", "a100"]), submit_time=submit,
                   eligible_time=eligible, start_time=start, end_time=end, state=state,
                   wait_reason=rng.choice(REASONS), gpus=int(gpus) if allocated else 0,
                   gpu_equivalent=gpus if allocated else 0.0,
                   node_count=max(1, int(gpus) // 8) if allocated else 0)
    if allocated and rng.random() < 0.7:
        hours = job.gpu_hours_until(NOW)
        useful = rng.random()
        JobMetrics.objects.create(
            job=job,
            status=rng.choice(["complete"] * 5 + ["live", "partial", "no_data", "pending"]),
            measure=rng.choice(["sm_active"] * 6 + [""]), allocated_gpu_hours=hours,
            useful_hours=hours * useful, xid_gpus=rng.choice([None, 0, 0, 0, 1]),
            ecc_dbe=rng.choice([None, 0, 0, 0, 2]))
    return job


@pytest.fixture
def jobs(world: World) -> list[Job]:
    return population(world)


def objective(sli: str, **kw: Any) -> Objective:
    """An unsaved-defaults objective, saved (tests build their own, never the seeded ones)."""
    values: dict[str, Any] = {"name": f"{sli}-{len(kw)}-{sorted(kw.items())!s:.60}",
                              "sli": sli, "target": 0.9,
                              "wait_minutes": 30 if sli == "queue_wait" else None,
                              "window": "rolling_7d", "scope": "team"}
    values.update(kw)
    return Objective.objects.create(**values)
