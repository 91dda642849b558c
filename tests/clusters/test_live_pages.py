"""The live cluster view and the node page (issue 30) for the three personas: every GPU
coloured, jobs named only as far as ``visible_to`` allows, the pending queue by Slurm's
estimated start, reservations and QOS limits from stored rows, telemetry said honestly."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.clusters.models import Node, Partition, QosLimit, Reservation
from apps.jobs.models import Job, JobGpu, JobMetricSummary
from tests.conftest import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def live(world):
    """gpu01 (8 × h100): bob's running job holds GPUs 0-1 (one busy, one idle with memory
    held), carol's holds 2; gpu02 is drained; gpu03 is in a reservation in force.
    Pending: bob's job estimated to start in 2 hours, carol's in 1 hour."""
    now = timezone.now()
    cluster = world.cluster
    part = Partition.objects.create(cluster=cluster, name="gpu", is_default=True)
    gpu01 = Node.objects.get(cluster=cluster, name="gpu01")
    Node.objects.filter(pk=gpu01.pk).update(state="mixed", gpus_used=3, gpu_types={"h100": 8})
    gpu02 = Node.objects.create(cluster=cluster, name="gpu02", gpu_type="h100", gpu_count=8,
                                gpu_types={"h100": 8}, state="idle+drain",
                                state_reason="bad DIMM")
    gpu03 = Node.objects.create(cluster=cluster, name="gpu03", gpu_type="a100", gpu_count=4,
                                gpu_types={"a100": 4}, state="idle")
    for node in (gpu01, gpu02, gpu03):
        node.partitions.add(part)
    Reservation.objects.create(cluster=cluster, name="maint-gpu03", node_names=["gpu03"],
                               nodes="gpu03", users=["alice"], start=now - timedelta(hours=1),
                               end=now + timedelta(hours=1))
    Reservation.objects.create(cluster=cluster, name="old", node_names=["gpu01"],
                               start=now - timedelta(days=2), end=now - timedelta(days=1))
    QosLimit.objects.create(cluster=cluster, name="high", priority=100,
                            max_tres_per_user={"gres/gpu": 16}, flags=["DenyOnLimit"])
    bob_run = make_job(cluster, 501, world.users["bob"], world.team_a, name="bob-running",
                       state=Job.State.RUNNING, end_time=None, start_time=now)
    carol_run = make_job(cluster, 502, world.users["carol"], world.team_b,
                         name="carol-secret-run", state=Job.State.RUNNING, end_time=None,
                         start_time=now)
    for job, index in ((bob_run, 0), (bob_run, 1), (carol_run, 2)):
        JobGpu.objects.create(job=job, node=gpu01, gpu_index=index, start=now)
    summary = {"measure": "sm_active", "measured_s": 600, "p5": 0, "p50": 0, "p95": 0,
               "idle_fraction": 0, "useful": 0, "waiting": 0, "held_idle": 0, "no_process": 0}
    JobMetricSummary.objects.create(job=bob_run, host="gpu01", gpu_index=0, mean=0.9,
                                    fb_used_mib=30_000, **summary)
    JobMetricSummary.objects.create(job=bob_run, host="gpu01", gpu_index=1, mean=0.0,
                                    fb_used_mib=30_000, **summary)
    make_job(cluster, 601, world.users["bob"], world.team_a, name="bob-waits",
             state=Job.State.PENDING, start_time=None, end_time=None, reason="Resources",
             estimated_start=now + timedelta(hours=2), req_gpus=8)
    make_job(cluster, 602, world.users["carol"], world.team_b, name="carol-secret-wait",
             state=Job.State.PENDING, start_time=None, end_time=None, reason="Priority",
             estimated_start=now + timedelta(hours=1), req_gpus=4)
    return world


def _grid(html: str) -> str:
    return html.split('class="table gpu-grid"')[1].split("</table>")[0]


def _page(login, persona, name="clusters-live", **kwargs):
    response = login(persona).get(reverse(name, kwargs={"name": "testcluster", **kwargs}))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize("persona", ["bob", "alice", "staff"])
def test_every_persona_sees_every_gpu_coloured(live, login, persona):
    html = _grid(_page(login, persona))
    assert html.count('class="gpu gpu-busy"') == 1  # bob's GPU 0
    assert html.count('class="gpu gpu-idle_memory"') == 1  # bob's GPU 1, idle, memory held
    assert html.count('class="gpu gpu-allocated"') == 1  # carol's GPU 2: no telemetry
    assert html.count('class="gpu gpu-down"') == 8 and "bad DIMM" in html  # gpu02 drained
    assert html.count('class="gpu gpu-reserved"') == 4  # gpu03 in maint-gpu03
    assert html.count('class="gpu gpu-idle"') == 5  # gpu01's free GPUs


def test_a_researcher_sees_other_teams_jobs_only_as_counts(live, login):
    html = _page(login, "bob")
    assert "bob-waits" in html and "/jobs/testcluster/601/" in html
    assert "/jobs/testcluster/501/" in html  # his own running job opens from its GPUs
    assert "carol-secret" not in html and "/jobs/testcluster/502/" not in html
    assert "/jobs/testcluster/602/" not in html and "602" not in html
    assert "1 pending job of other users (4 GPUs asked)" in html
    assert "another user's job" in html


def test_a_lead_sees_the_team_and_not_the_other_team(live, login):
    html = _page(login, "alice")
    assert "bob-waits" in html and "carol-secret" not in html
    assert "1 pending job of other users" in html
    assert ">you<" in html  # maint-gpu03 names alice


def test_an_admin_sees_every_pending_job_by_estimated_start(live, login):
    html = _page(login, "staff")
    assert html.index("carol-secret-wait") < html.index("bob-waits")  # 1 h before 2 h
    assert "of other users" not in html
    assert ">alice<" in html  # who the reservation is for


def test_partitions_count_free_gpus_on_usable_nodes_only(live, login):
    html = _page(login, "bob")
    assert "5 × h100" in html  # gpu01's free five; gpu02 drained, gpu03 reserved
    assert "a100" not in html.split('id="partitions"')[1].split("</section>")[0]


def test_reservations_and_qos_limits_are_shown_and_ended_ones_are_not(live, login):
    html = _page(login, "carol")
    assert "maint-gpu03" in html and "in force" in html and ">old<" not in html
    assert "DenyOnLimit" in html and "<td>16</td>" in html


def test_a_part_not_read_says_why_instead_of_none(live, login):
    live.cluster.limits_notes = {"reservations": "scontrol_reservations.txt: missing"}
    live.cluster.limits_synced_at = timezone.now()
    live.cluster.save()
    html = _page(login, "bob")
    assert "Reservations were not read: scontrol_reservations.txt: missing" in html


def test_the_partial_is_what_the_page_polls(live, login):
    html = _page(login, "bob", "clusters-live-state")
    assert "<html" not in html and 'id="gpus"' in html and "bob-waits" in html
    page = _page(login, "bob")
    assert 'data-live-every="30"' in page and "js/live.js" in page


def test_a_simulated_cluster_is_labelled_and_not_polled(live, login):
    live.cluster.is_simulated = True
    live.cluster.save()
    page = _page(login, "bob")
    assert 'data-live-every="0"' in page and "Simulated data." in page


def test_the_node_page_lists_visible_jobs_and_says_telemetry_is_not_configured(live, login,
                                                                               settings):
    settings.PROMETHEUS_URL = ""
    html = _page(login, "bob", "clusters-node", node="gpu01")
    assert "bob-running" in html and "carol-secret" not in html
    assert "1 running job of other users" in html
    telemetry = html.split('id="telemetry"')[1]
    assert "Live telemetry is not configured" in telemetry and ">90%<" in telemetry, telemetry


def test_the_node_page_of_an_unknown_node_is_a_404(live, login):
    url = reverse("clusters-node", kwargs={"name": "testcluster", "node": "nope"})
    assert login("bob").get(url).status_code == 404
