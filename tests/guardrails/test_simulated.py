"""A simulated cluster's live guardrails pass (make demo-full): its running jobs read at its
simulated "now", alerts kept marked simulated, nothing sent, no policy step; the real
clusters' pass leaves it out."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core import mail
from django.core.management import call_command

from apps.core.models import TaskRun
from apps.guardrails import services
from apps.guardrails.models import Alert, PolicyAction
from apps.jobs.models import JobMetrics
from tests.guardrails.conftest import BUSY, IDLE, START, TimedSource, after, gpus

NOW = START + timedelta(hours=3)


@pytest.fixture
def simulated(running):
    cluster = running.cluster
    cluster.is_simulated = True
    cluster.simulated_now = NOW
    cluster.prometheus_url = "http://127.0.0.1:9"  # a store: the source below stands in
    cluster.save()
    return cluster


def idle_after_30_minutes() -> TimedSource:
    return TimedSource(gpus(4), lambda key, t: BUSY if key.gpu < 2 else after(30, IDLE)(key, t))


def test_it_reads_the_running_jobs_at_the_simulated_now_and_sends_nothing(simulated, running,
                                                                         settings):
    settings.GUARDRAILS_POLICY = "enforce"  # still no step: the saved Slurm cannot cancel
    source = idle_after_30_minutes()
    stats = services.check_simulated(simulated, source=source)
    assert stats is not None
    assert (stats["jobs"], stats["measured"], stats["alerts"], stats["not_checked"]) == \
        (1, 1, 1, 0)
    assert stats["sent"] == {} and stats["policy"] == {}
    assert source.calls[-1].end == NOW.timestamp()  # the simulated "now", not the clock's
    alert = Alert.objects.get(job=running)
    assert alert.status == Alert.Status.SIMULATED and alert.raised_at == NOW
    assert not mail.outbox and not PolicyAction.objects.exists()
    assert JobMetrics.objects.get(job=running).computed_at == NOW
    run = TaskRun.objects.get(kind="guardrails_check")
    assert run.cluster_id == simulated.pk and run.status == TaskRun.Status.SUCCEEDED
    assert "simulated now" in run.target


def test_the_real_clusters_pass_leaves_it_out(simulated, running):
    assert services.simulated_clusters() == [simulated]
    assert services.watched_clusters() == []
    assert services.run_checks(now=NOW, source=idle_after_30_minutes())["jobs"] == 0


def test_without_a_simulated_now_or_a_store_it_is_not_checked(simulated, running):
    simulated.simulated_now = None
    simulated.save()
    assert services.simulated_clusters() == []
    assert services.check_simulated(simulated) is None
    simulated.simulated_now, simulated.prometheus_url = NOW, ""
    simulated.save()
    assert services.simulated_clusters() == []  # plain make demo: no store to read
    assert not TaskRun.objects.filter(kind="guardrails_check").exists()


def test_the_command_checks_it_at_its_simulated_now(simulated, running):
    out = io.StringIO()
    call_command("check_guardrails", "--cluster", simulated.name, stdout=out)
    stats = json.loads(out.getvalue())  # its store is not there: counted, not fatal
    assert stats["jobs"] == 1 and stats["sent"] == {}
    run = TaskRun.objects.get(kind="guardrails_check")
    assert run.cluster_id == simulated.pk and f"{NOW:%Y-%m-%d %H:%M}" in run.target
