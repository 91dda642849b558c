"""label_jobs: stored batch scripts (recorded) through the shipped rules into Job.labels."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.clusters import labels, sync
from apps.clusters.models import Cluster
from apps.jobs.models import Job
from tests.fake import FakeSlurm

pytestmark = pytest.mark.django_db


@pytest.fixture
def synced() -> tuple[Cluster, FakeSlurm]:
    cluster = Cluster.objects.create(name="devcluster", slurm_backend="cli")
    slurm = FakeSlurm.recorded()
    sync.sync_cluster(cluster, slurm)
    return cluster, slurm


def test_it_labels_jobs_from_their_scripts(synced):
    cluster, slurm = synced
    stats = labels.label_jobs(cluster, slurm)
    assert stats["jobs"] == Job.objects.count() and stats["labelled"] == 1
    megatron = Job.objects.get(job_id=21).labels
    assert (megatron["launcher"], megatron["framework"], megatron["tensor_parallel"]) == (
        "torchrun", "megatron-lm", 4)
    # a --wrap script: looked at; no #SBATCH --output ("": Slurm's default or the command line)
    assert Job.objects.get(job_id=5).labels == {"rules": 2, "stdout": ""}


def test_labelled_jobs_are_not_fetched_again(synced):
    cluster, slurm = synced
    labels.label_jobs(cluster, slurm)
    slurm.calls = []
    assert labels.label_jobs(cluster, slurm)["jobs"] == 0
    assert "job_scripts" not in slurm.call_names()


def test_a_label_is_a_list_filter(synced, client, django_user_model):
    cluster, slurm = synced
    labels.label_jobs(cluster, slurm)
    staff = django_user_model.objects.create_user("ops", is_staff=True)
    client.force_login(staff)
    page = client.get("/jobs/", {"scope": "all", "launcher": "torchrun"})
    assert page.status_code == 200
    assert [j.job_id for j in page.context["page"].rows] == [21]


def test_the_job_page_shows_the_labels(synced, client, django_user_model):
    cluster, slurm = synced
    labels.label_jobs(cluster, slurm)
    staff = django_user_model.objects.create_user("ops", is_staff=True)
    client.force_login(staff)
    text = client.get("/jobs/devcluster/21/").content.decode()
    assert "megatron-lm" in text and "TP 4" in text and "/datasets/c4/en" in text


OTHER = {"rules": 1, "launcher": "deepspeed", "framework": "deepspeed", "nodes": 4,
         "procs_per_node": 4, "tensor_parallel": 2, "pipeline_parallel": 1,
         "datasets": ["/datasets/imagenet/train"], "checkpoints": ["/scratch/ckpt/vit"]}


@pytest.mark.parametrize(("params", "expected"), [
    ({"nodes": "2"}, {21}), ({"nodes": "4"}, {5}), ({"nodes": "3"}, set()),
    ({"procs_per_node": "8"}, {21}), ({"tensor_parallel": "4"}, {21}),
    ({"tensor_parallel": "2"}, {5}), ({"pipeline_parallel": "2"}, {21}),
    ({"dataset": "c4"}, {21}), ({"dataset": "IMAGENET"}, {5}), ({"dataset": "/datasets/"}, {21, 5}),
    ({"checkpoint": "gpt-13b"}, {21}), ({"checkpoint": "/scratch"}, {5}),
    ({"tensor_parallel": "4", "dataset": "imagenet"}, set()),
])
def test_parallelism_and_paths_are_list_and_api_filters(synced, client, django_user_model,
                                                        params, expected):
    cluster, slurm = synced
    labels.label_jobs(cluster, slurm)
    Job.objects.filter(job_id=5).update(labels=OTHER)  # a second labelled job to tell apart
    staff = django_user_model.objects.create_user("ops", is_staff=True)
    client.force_login(staff)
    page = client.get("/jobs/", {"scope": "all", "group": "tasks", **params})
    assert {j.job_id for j in page.context["page"].rows} == expected
    api = client.get(reverse("api:job-list"), params).json()
    assert {j["job_id"] for j in api["results"]} == expected


def test_the_form_keeps_the_label_filters(synced, client, django_user_model):
    staff = django_user_model.objects.create_user("ops", is_staff=True)
    client.force_login(staff)
    text = client.get("/jobs/", {"scope": "all", "tensor_parallel": "4",
                                 "dataset": "/datasets/c4"}).content.decode()
    assert 'name="tensor_parallel" min="0" value="4"' in text
    assert 'name="dataset" value="/datasets/c4"' in text


@pytest.mark.parametrize("params", [{"nodes": "-1"}, {"tensor_parallel": "x"},
                                    {"pipeline_parallel": str(2**40)}])
def test_bad_label_numbers_are_a_400_in_the_api(synced, client, django_user_model, params):
    staff = django_user_model.objects.create_user("ops", is_staff=True)
    client.force_login(staff)
    assert client.get(reverse("api:job-list"), params).status_code == 400
