"""The idle-job policy against the REAL Slurm dev clusters (22.05, 24.11, 26.05).

Three real jobs hold a GPU each: one whose GPU stays idle, one that computes, one an admin
exempted. Beacon syncs them from Slurm, reads their telemetry, warns the owner of the idle
one, and once the grace period is over cancels it with ``scancel`` through the cli backend;
Slurm's own accounting then says CANCELLED, while the busy and the exempt job still run.
The rest backend's ``DELETE job`` is checked on the same cluster.

The dev cluster's GPUs are device files (no DCGM), so the test writes the telemetry a
dcgm-exporter would have scraped (labelled ``hpc_job`` with the real job ids) as an
OpenMetrics file, loads it into a telemetry store of its own, Prometheus or VictoriaMetrics
(issue 29: the policy runs once on each), which the guardrails read as they would a site's,
and reads the policy's clock hours after the jobs started instead of waiting hours: the
submission, the sync, the cancel and its outcome are Slurm's.
Start the clusters with ``sudo RELEASE=<r> bash deploy/dev/slurm.sh up``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core import mail

from apps.accounts.models import Membership, Team
from apps.audit.models import AuditEvent
from apps.clusters import sync
from apps.clusters.adapters.slurm import Action
from apps.clusters.models import SlurmAccount
from apps.guardrails import services
from apps.guardrails.models import Exemption, PolicyAction
from apps.jobs.models import Job
from tests.integration.exporters import STORE_KINDS, backfill, private_store
from tests.integration.prom import om_series
from tests.integration.slurm import wait_for

pytestmark = [pytest.mark.integration("slurm"), pytest.mark.slow, pytest.mark.django_db]

USER, ACCOUNT = "bob", "nlp"  # no GPU cap or quota on the dev cluster
STEP = 60


def _telemetry(path: Path, jobs: dict[int, tuple[str, bool]], start: float, end: float) -> Path:
    """dcgm-exporter samples every STEP s for each job's GPU: busy or idle (memory held)."""
    families = {"DCGM_FI_DEV_GPU_UTIL": (97.0, 0.0), "DCGM_FI_PROF_SM_ACTIVE": (0.7, 0.0),
                "DCGM_FI_DEV_FB_USED": (60000.0, 9000.0), "DCGM_FI_DEV_POWER_USAGE": (550.0, 80.0)}
    lines = []
    for family, (busy_value, idle_value) in families.items():
        lines.append(f"# TYPE {family} gauge")
        for job_id, (node, busy) in jobs.items():
            name = om_series(family, {"Hostname": node, "gpu": "0", "UUID": f"GPU-{job_id}",
                                      "hpc_job": str(job_id)})
            t = start
            while t <= end:
                lines.append(f"{name} {busy_value if busy else idle_value} {t:.0f}")
                t += STEP
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def world(db, slurm):
    cluster = slurm.new_cluster("cli", metric_labels={"scrape_interval": STEP})
    team = Team.objects.create(slug="it-guard", name="Guardrails test team")
    SlurmAccount.objects.create(cluster=cluster, name=ACCOUNT, team=team)
    owner = User.objects.create_user(USER, email="bob@example.org")
    Membership.objects.create(user=owner, team=team)
    return cluster


@pytest.fixture
def submitted(slurm):
    ids: dict[str, int] = {}
    yield ids
    if ids:
        slurm.run("scancel", *map(str, ids.values()), check=False)


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_an_idle_job_is_warned_then_cancelled_and_busy_or_exempt_ones_are_not(
        slurm, world, submitted, settings, tmp_path, kind):
    settings.GUARDRAILS_POLICY = "enforce"
    settings.GUARDRAILS_POLICY_IDLE_MINUTES, settings.GUARDRAILS_POLICY_GRACE_MINUTES = 120, 60
    for role in ("idle", "busy", "exempt"):
        submitted[role] = slurm.sbatch(USER, f"--account={ACCOUNT}", "--qos=high", "--time=30",
                                      "--gres=gpu:1", "-J", f"guard-{role}", "--wrap", "sleep 900")
    for job_id in submitted.values():
        slurm.wait_running(job_id)
    # slurmdbd gets a job's start some seconds after slurmctld: sync once accounting has it
    wait_for(lambda: all(r["State"] == "RUNNING" for r in slurm.sacct_text(
        submitted.values()).values()) and len(slurm.sacct_text(submitted.values())) == 3, 90,
        "the running jobs in accounting", every=2)
    sync.sync_cluster(world)
    sync.sync_queue(world)
    jobs = {role: Job.objects.get(cluster=world, job_id=i) for role, i in submitted.items()}
    assert all(j.state == "RUNNING" and j.gpus == 1 for j in jobs.values())
    Exemption.objects.create(kind="job", value=str(submitted["exempt"]), cluster=world,
                             reason="demo for the board")

    start = min(j.start_time for j in jobs.values())
    files = _telemetry(tmp_path / "dcgm.om", {
        j.job_id: (j.nodes, role == "busy") for role, j in jobs.items()},
        start.timestamp(), (start + timedelta(hours=4)).timestamp())
    with private_store(tmp_path, kind) as (url, env):
        backfill(env, [files])
        world.prometheus_url = url  # the guardrails' own read: the cluster's store
        world.metric_labels = {**world.metric_labels, "store": kind}
        world.save(update_fields=["prometheus_url", "metric_labels"])
        _policy(slurm, world, jobs, submitted, start)


def _policy(slurm, world, jobs, submitted, start):
    """Two passes of the policy, 2.5 and 3.7 hours into the jobs: a warning, then the
    cancel, through Slurm; the busy and the exempt job untouched."""
    running = Job.objects.filter(pk__in=[j.pk for j in jobs.values()])
    services.run_checks(now=start + timedelta(hours=2.5), jobs=running)
    assert _steps(jobs["idle"]) == ["warned"]
    assert _steps(jobs["busy"]) == [] and _steps(jobs["exempt"]) == ["exempt"]
    warning = next(m for m in mail.outbox if "will be cancelled" in m.subject)
    assert f"scancel {submitted['idle']}" in warning.body
    assert set(slurm.states(submitted.values()).values()) == {"RUNNING"}  # nothing cancelled yet

    services.run_checks(now=start + timedelta(hours=3.7), jobs=running)
    assert _steps(jobs["idle"]) == ["warned", "cancelled"]
    wait_for(lambda: slurm.states([submitted["idle"]]).get(submitted["idle"])
             in (None, "CANCELLED"), 60, "the idle job cancelled")
    wait_for(lambda: slurm.finished_in_accounting([submitted["idle"]]), 60,
             "the cancel in accounting")
    assert slurm.sacct_text([submitted["idle"]])[submitted["idle"]]["State"].startswith(
        "CANCELLED")
    others = slurm.states([submitted["busy"], submitted["exempt"]])
    assert others == {submitted["busy"]: "RUNNING", submitted["exempt"]: "RUNNING"}
    audited = {(e.target.rsplit(":", 1)[1], e.details["action"])
               for e in AuditEvent.objects.filter(action="guardrail")}
    assert audited == {(str(submitted["idle"]), "warned"), (str(submitted["idle"]), "cancelled"),
                       (str(submitted["exempt"]), "exempt")}
    world.refresh_from_db()
    world.sync_marker = ""  # the sync reads accounting again (the cancel changed it)
    world.save(update_fields=["sync_marker"])
    sync.sync_cluster(world)
    assert Job.objects.get(pk=jobs["idle"].pk).state == "CANCELLED"


def _steps(job: Job) -> list[str]:
    return list(PolicyAction.objects.filter(job=job).order_by("at", "pk")
                .values_list("action", flat=True))


def test_each_backend_cancels_a_running_job_and_shrugs_at_an_ended_one(slurm, world, submitted,
                                                                       backend):
    submitted["job"] = job_id = slurm.sbatch(USER, f"--account={ACCOUNT}", "--qos=high",
                                             "--time=10", "--wrap", "sleep 600")
    slurm.wait_running(job_id)
    client = slurm.client(backend)
    assert client.cannot(Action.CANCEL) == ""
    client.cancel_job(job_id)
    wait_for(lambda: slurm.finished_in_accounting([job_id]), 60, "the cancel in accounting")
    assert slurm.sacct_text([job_id])[job_id]["State"].startswith("CANCELLED")
    client.cancel_job(job_id)  # already ended: not an error
