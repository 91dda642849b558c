"""Load the simulator's cluster and jobs into the database for tests (a stand-in importer).

Until ``manage.py load_demo`` lands (it runs the real sacct importer), tests that need the
simulator's jobs create them from ``slurm/sacct.json`` here: the fields the job pages,
the archive and the verdicts read, nothing more. Only tests import this module.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User

from apps.accounts.models import Membership, Team
from apps.clusters.models import Cluster, Node, SlurmAccount
from apps.jobs.models import Job

_RANGE = re.compile(r"^(?P<prefix>[^\[]+)\[(?P<body>[^\]]+)\]$")


def expand(nodes: str) -> list[str]:
    """``gpu[01-03,05]`` -> gpu01, gpu02, gpu03, gpu05 (one bracket group, as sacct prints)."""
    match = _RANGE.match(nodes)
    if not match:
        return [n for n in nodes.split(",") if n]
    names = []
    for part in match["body"].split(","):
        lo, _, hi = part.partition("-")
        for number in range(int(lo), int(hi or lo) + 1):
            names.append(f"{match['prefix']}{number:0{len(lo)}d}")
    return names


def load_cluster(out: Path, name: str = "demo") -> Cluster:
    """The cluster, nodes, teams, users and account mappings from ``cluster.json``."""
    desc = json.loads((out / "cluster.json").read_text())
    step = json.loads((out / "ground_truth.json").read_text())["meta"]["telemetry_step"]
    cluster = Cluster.objects.create(name=name, display_name="Simulated", is_simulated=True,
                                     metric_labels={"scrape_interval": step})
    for node in desc["nodes"]:
        Node.objects.create(cluster=cluster, name=node["name"], gpu_type=node["gpu_type"],
                            gpu_count=len(node["gpus"]), cpus=node["cpus"])
    for team in desc["teams"]:
        row = Team.objects.create(slug=team["account"], name=team["description"])
        SlurmAccount.objects.create(cluster=cluster, name=team["account"], team=row)
        for user, role in [(team["lead"], "lead"), *((m, "member") for m in team["members"])]:
            Membership.objects.create(user=User.objects.get_or_create(username=user)[0],
                                      team=row, role=role)
    return cluster


def load_jobs(cluster: Cluster, out: Path, job_ids: set[int] | None = None) -> list[Job]:
    """Jobs from ``slurm/sacct.json`` (all, or ``job_ids``)."""
    teams = {t.slug: t for t in Team.objects.all()}
    users = {u.username: u for u in User.objects.all()}
    doc = json.loads((out / "slurm" / "sacct.json").read_text())
    jobs = [_job(cluster, raw, teams, users) for raw in doc["jobs"]
            if job_ids is None or raw["job_id"] in job_ids]
    return Job.objects.bulk_create(jobs)


def _job(cluster: Cluster, raw: dict[str, Any], teams: dict[str, Team],
         users: dict[str, User]) -> Job:
    array = raw["array"]
    gpus = sum(t["count"] for t in raw["tres"]["allocated"]
               if t["type"] == "gres" and t["name"] == "gpu")
    cpus = sum(t["count"] for t in raw["tres"]["allocated"] if t["type"] == "cpu")
    user = raw["association"]["user"]
    times = raw["time"]
    display = f"{array['job_id']}_{array['task_id']}" if array["job_id"] else str(raw["job_id"])
    return Job(
        cluster=cluster, job_id=raw["job_id"], display_id=display,
        array_job_id=array["job_id"] or None, array_task_id=array["task_id"],
        name=raw["name"], user_name=user, user=users.get(user), account=raw["account"],
        team=teams.get(raw["account"]), partition=raw["partition"], qos=raw["qos"],
        state=raw["state"]["current"], submit_time=_dt(times["submission"]),
        start_time=_dt(times["start"]), end_time=_dt(times["end"]),
        time_limit_min=times["limit"], nodes=raw["nodes"],
        node_count=raw["allocation_nodes"], gpus=gpus, gpu_equivalent=float(gpus), cpus=cpus,
    )


def _dt(epoch: int | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=UTC) if epoch else None
