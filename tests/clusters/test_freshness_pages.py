"""Pages say how fresh Slurm data is, stay up when Slurm is down, and escape hostile text."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.clusters.models import Cluster

pytestmark = pytest.mark.django_db


def _job_page(world, login, persona="bob"):
    job = world.jobs["bob"]
    return login(persona).get(reverse("jobs-detail", args=[world.cluster.name, job.job_id]))


def test_a_failed_sync_shows_a_stale_banner_not_a_500(world, login):
    Cluster.objects.filter(pk=world.cluster.pk).update(
        slurm_backend="cli", last_sync_ok_at=timezone.now() - timedelta(hours=2),
        last_sync_error="TransientAdapterError: squeue: Unable to contact slurm controller")
    page = _job_page(world, login)
    assert page.status_code == 200
    text = page.content.decode()
    assert "may be out of date" in text and "last refreshed 2" in text
    assert "Unable to contact" not in text  # details are for admins
    assert "Unable to contact" in _job_page(world, login, "staff").content.decode()
    cluster_page = login("bob").get(reverse("clusters-detail", args=[world.cluster.name]))
    assert cluster_page.status_code == 200 and "may be out of date" in cluster_page.content.decode()


def test_fresh_data_shows_no_banner_but_its_age(world, login):
    Cluster.objects.filter(pk=world.cluster.pk).update(
        slurm_backend="cli", last_sync_ok_at=timezone.now() - timedelta(minutes=3))
    text = _job_page(world, login).content.decode()
    assert "may be out of date" not in text
    assert "Slurm data refreshed 3" in text


def test_a_simulated_cluster_says_simulated_not_out_of_date(world, login):
    """Issue 26: "may be out of date" on the demo after 10 minutes; its Slurm is the
    simulator's saved month, so there is nothing newer to sync."""
    Cluster.objects.filter(pk=world.cluster.pk).update(
        slurm_backend="files", is_simulated=True,
        last_sync_ok_at=timezone.now() - timedelta(hours=3))
    assert not Cluster.objects.get(pk=world.cluster.pk).is_stale
    cluster_page = login("bob").get(reverse("clusters-detail", args=[world.cluster.name]))
    for text in (_job_page(world, login).content.decode(), cluster_page.content.decode(),
                 login("bob").get(reverse("jobs-list")).content.decode()):
        assert "may be out of date" not in text
    assert f"Slurm data for {world.cluster.title} is simulated" in cluster_page.content.decode()


def test_hostile_job_text_is_escaped(world, login):
    job = world.jobs["bob"]
    job.name = "<script>alert(1)</script>"
    job.comment = "<img src=x onerror=alert(2)>"
    job.work_dir = "/home/bob/\"><b>x</b>"
    job.save()
    text = _job_page(world, login).content.decode()
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;alert(1)" in text
    assert "<img src=x" not in text and "<b>x</b>" not in text


def test_a_pending_job_shows_its_estimated_start(world, login):
    job = world.jobs["bob"]
    job.state, job.reason = "PENDING", "Priority"
    job.estimated_start = timezone.now() + timedelta(hours=1)
    job.save()
    text = _job_page(world, login).content.decode()
    assert "Estimated start" in text and "Priority" in text


@pytest.mark.parametrize("url_name", ["jobs-list", "core-home"])
def test_list_pages_show_the_stale_banner_and_its_age(world, login, url_name):
    Cluster.objects.filter(pk=world.cluster.pk).update(
        slurm_backend="cli", last_sync_ok_at=timezone.now() - timedelta(hours=2),
        last_sync_error="TransientAdapterError: sacct: Problem talking to the database")
    page = login("bob").get(reverse(url_name))
    assert page.status_code == 200
    text = page.content.decode()
    assert f"Slurm data for {world.cluster.title} may be out of date" in text
    assert "last refreshed 2" in text and "the last sync failed" in text
    assert "Problem talking" not in text  # details are for admins
    assert "Problem talking" in login("staff").get(reverse(url_name)).content.decode()


@pytest.mark.parametrize("url_name", ["jobs-list", "core-home"])
def test_list_pages_show_the_age_of_fresh_data_without_a_banner(world, login, url_name):
    Cluster.objects.filter(pk=world.cluster.pk).update(
        slurm_backend="cli", last_sync_ok_at=timezone.now() - timedelta(minutes=3))
    text = login("bob").get(reverse(url_name)).content.decode()
    assert "may be out of date" not in text
    assert f"Slurm data for {world.cluster.title} refreshed 3" in text


def test_clusters_without_a_live_sync_say_nothing(world, login):
    Cluster.objects.filter(pk=world.cluster.pk).update(slurm_backend="none")
    Cluster.objects.create(name="sim", slurm_backend="files", is_simulated=True)
    text = login("bob").get(reverse("jobs-list")).content.decode()
    assert "Slurm data for" not in text


def test_a_pyslurm_cluster_says_its_backend_never_ran_against_a_real_slurm(world, login):
    """pyslurm 25.11 builds only against libslurm 25.11, which Beacon never ran: the pages say
    so (docs/slurm.md §2), and building the page builds no client (pyslurm is not installed)."""
    page = login("bob").get(reverse("clusters-detail", args=[world.cluster.name]))
    assert "Not run against a real Slurm here" not in page.content.decode()
    Cluster.objects.filter(pk=world.cluster.pk).update(slurm_backend="pyslurm")
    text = login("bob").get(reverse("clusters-detail", args=[world.cluster.name])).content.decode()
    assert "Not run against a real Slurm here" in text
    assert "has not run against a real libslurm 25.11 here" in text
    platform = login("staff").get(reverse("core-platform")).content.decode()
    assert "not run against a real Slurm here" in platform


def test_a_node_with_two_gpu_models_lists_both(world, login):
    from apps.clusters.models import Node

    Node.objects.create(cluster=world.cluster, name="gpu05", gpu_type="h100+h200", gpu_count=6,
                        gpu_types={"h100": 2, "h200": 4})
    Node.objects.create(cluster=world.cluster, name="cpu01")
    text = login("bob").get(reverse("clusters-detail", args=[world.cluster.name])).content
    row = text.decode().split(">gpu05</a></td>", 1)[1].split("</tr>", 1)[0]
    assert "2 × h100, 4 × h200" in row
    cpu = text.decode().split(">cpu01</a></td>", 1)[1].split("</tr>", 1)[0]
    assert "<td>—</td>" in cpu
