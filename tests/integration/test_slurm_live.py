"""The live cluster view's reads (issue 30) against the REAL Slurm dev clusters (22.05, 24.11,
26.05), through the cli and the rest backend: a reservation this module creates (as root, a
month ahead and ten minutes long, so no one's jobs are held back; deleted at the end), a QOS
of its own with limits (attached to no association), and a pending job's estimated start as
``squeue --start`` prints it. Expected values come from what the test asked Slurm to create
and from Slurm's own text output, never from Beacon's parsers."""

from __future__ import annotations

import os
import re
from datetime import timedelta

import pytest

from apps.clusters import sync, sync_limits
from apps.clusters.models import QosLimit, Reservation
from apps.jobs.models import Job
from tests.integration.slurm import SlurmDev, text_time, wait_for

pytestmark = [pytest.mark.integration("slurm"), pytest.mark.slow, pytest.mark.django_db]

NAME = f"beacon_it_{os.getpid()}"  # this run's reservation and QOS: never another run's
QOS = f"beacon_it_qos_{os.getpid()}"
RES_NODE = "gpu04"


@pytest.fixture(scope="module")
def made(slurm: SlurmDev):
    """The reservation and the QOS, created once per release and removed afterwards."""
    slurm.run("scontrol", "delete", f"reservation={NAME}", check=False)
    slurm.run("scontrol", "create", "reservation", f"ReservationName={NAME}",
              "StartTime=now+30days", "Duration=10", f"Nodes={RES_NODE}", "Users=bob",
              "Flags=MAINT")
    slurm.run("sacctmgr", "-i", "add", "qos", QOS, "Priority=7", "GrpTRES=gres/gpu=5",
              "MaxTRESPerUser=gres/gpu=3", "MaxTRESPerJob=gres/gpu=2", "MaxJobsPerUser=2",
              "MaxWall=01:00:00")
    try:
        yield _shown(slurm)
    finally:
        slurm.run("scontrol", "delete", f"reservation={NAME}", check=False)
        slurm.run("sacctmgr", "-i", "delete", "qos", QOS, check=False)


def _shown(slurm: SlurmDev) -> dict[str, str]:
    """``scontrol show reservation NAME -o`` as Slurm prints it (UTC, ISO times)."""
    line = slurm.run("scontrol", "show", "reservation", NAME, "-o")
    return dict(re.findall(r"(\w+)=(\S*)", line))


def test_the_reservation_reads_as_scontrol_prints_it(slurm, backend, made):
    [res] = [r for r in slurm.client(backend).reservations() if r.name == NAME]
    assert res.start == text_time(made["StartTime"]) and res.end == text_time(made["EndTime"])
    assert res.end - res.start == timedelta(minutes=10)
    assert (res.nodes, res.node_count, res.users) == (RES_NODE, 1, ("bob",))
    assert "MAINT" in res.flags


def test_the_qos_limits_read_as_created(slurm, backend, made):
    [qos] = [q for q in slurm.client(backend).qos() if q.name == QOS]
    assert (qos.priority, qos.grp_tres, qos.max_tres_per_user, qos.max_tres_per_job) == (
        7, {"gres/gpu": 5}, {"gres/gpu": 3}, {"gres/gpu": 2})
    assert (qos.max_jobs_per_user, qos.max_wall_min, qos.max_submit_per_user) == (2, 60, None)


def test_the_sync_stores_both_and_running_it_again_changes_nothing(slurm, backend, made):
    cluster = slurm.new_cluster(backend)
    stats = sync_limits.sync_limits(cluster)
    assert stats["notes"] == {}, stats
    res = Reservation.objects.get(cluster=cluster, name=NAME)
    assert res.node_names == [RES_NODE] and res.start == text_time(made["StartTime"])
    assert QosLimit.objects.get(cluster=cluster, name=QOS).max_tres_per_user == {"gres/gpu": 3}
    before = sorted(Reservation.objects.values_list("pk", "name", "start", "end"))
    sync_limits.sync_limits(cluster)
    assert sorted(Reservation.objects.values_list("pk", "name", "start", "end")) == before


def test_a_pending_jobs_estimated_start_is_what_squeue_start_prints(slurm, backend, made):
    job_id = slurm.sbatch("bob", "--begin=now+2hours", "--time=5", "--wrap", "true")
    try:
        printed = wait_for(lambda: slurm.run("squeue", "--start", "-h", "-j", str(job_id),
                                             "-o", "%S").strip(), 30, "squeue --start")
        # slurmdbd learns of a job a moment after slurmctld (22.05: seconds)
        wait_for(lambda: slurm.sacct_text([job_id]), 60, f"job {job_id} in accounting")
        cluster = slurm.new_cluster(backend)
        sync.sync_queue(cluster)
        job = Job.objects.get(cluster=cluster, job_id=job_id)
        assert job.state == "PENDING" and job.estimated_start == text_time(printed)
    finally:
        slurm.run("scancel", str(job_id), check=False)


def test_the_live_view_colours_a_real_jobs_gpus_and_names_it_to_its_owner_only(slurm, backend,
                                                                               made, client):
    """A running 2-GPU job of bob's, synced (nodes, jobs, queue and GPU bindings) from the
    real cluster: its two GPUs link to its page for bob and show as another user's to carol,
    who never sees its id."""
    from django.contrib.auth.models import User
    from django.urls import reverse

    bob = User.objects.create_user("bob")
    carol = User.objects.create_user("carol")
    job_id = slurm.sbatch("bob", "--qos=high", "--time=5", "--gres=gpu:2", "-J", "live-view-it",
                          "--wrap", "sleep 120")
    try:
        slurm.wait_running(job_id)
        wait_for(lambda: slurm.sacct_text([job_id]), 60, f"job {job_id} in accounting")
        cluster = slurm.new_cluster(backend)
        sync.sync_nodes(cluster)
        sync.sync_cluster(cluster)
        sync.sync_queue(cluster)
        link = f'href="/jobs/{cluster.name}/{job_id}/"'
        client.force_login(bob)
        page = client.get(reverse("clusters-live", args=[cluster.name])).content.decode()
        grid = page.split('class="table gpu-grid"')[1].split("</table>")[0]
        assert grid.count(link) == 2, grid
        client.force_login(carol)
        page = client.get(reverse("clusters-live", args=[cluster.name])).content.decode()
        # A bare id is no test on a young cluster (seen on a reset 24.11: job 3 beside GPU 3
        # and a count of 8): its link, its name, "job N" and its id in any URL are.
        assert link not in page and "live-view-it" not in page
        assert f"job {job_id}" not in page and f"/{job_id}/" not in page
        assert page.count("another user's job") >= 2
    finally:
        slurm.run("scancel", str(job_id), check=False)
