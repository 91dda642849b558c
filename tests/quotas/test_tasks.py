"""The periodic quota check and its command twin call the same service (eager Celery)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from apps.clusters import services as cluster_services
from apps.core.models import TaskRun
from apps.quotas import tasks as quota_tasks


def test_the_quota_check_runs_for_clusters_with_slurm_and_its_twin(
        world, slurm, monkeypatch, django_capture_on_commit_callbacks):
    monkeypatch.setattr(cluster_services, "client_for", lambda cluster: slurm)
    assert quota_tasks.check_all_clusters() == 0  # the world's cluster has no Slurm backend
    world.cluster.slurm_backend = "cli"
    world.cluster.save()
    with django_capture_on_commit_callbacks(execute=True):  # tasks are enqueued on commit
        assert quota_tasks.check_all_clusters() == 1
    assert TaskRun.objects.filter(kind="quotas.check", status="succeeded").count() == 1
    out = io.StringIO()
    call_command("check_quotas", world.cluster.name, stdout=out)
    assert "0 drifted, 0 warnings sent" in out.getvalue()


@pytest.mark.parametrize("args", [[], ["x", "--all"]])
def test_the_quota_command_needs_one_cluster_or_all(db, args):
    with pytest.raises(CommandError, match="cluster name or --all"):
        call_command("check_quotas", *args)
