"""``manage.py jobstats``: the job's statistics as a readable text report."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from apps.accounts.models import Contact
from apps.analysis.timeseries import GpuKey
from apps.clusters.models import Cluster
from apps.jobs import archive
from apps.jobs.models import TraceRankPhases, TraceRun
from tests.conftest import make_job
from tests.jobs.fake_telemetry import FakeSource

pytestmark = pytest.mark.django_db

PEERS = {"gpu_util": 0.98, "sm_active": 0.41, "tensor_active": 0.2, "temperature": 68.0,
         "sm_clock": 1980.0, "throttle_reasons": 0.0}


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("jobstats", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def job(world):
    job = world.jobs["bob"]
    gpus = {GpuKey("gpu01", i): dict(PEERS) for i in range(8)}
    gpus[GpuKey("gpu01", 3)].update(sm_active=0.85, temperature=90.0, sm_clock=1100.0,
                                    throttle_reasons=0x40)
    Contact.objects.create(area="hardware", name="HW on-call", email="hw@example.org")
    archive.archive_job(job, FakeSource(gpus))
    run = TraceRun.objects.create(job=job, fingerprint="x", world_size=2, steps=8,
                                  straggler_rank=1, straggler_phase="backward",
                                  straggler_excess_ms=31.5, waiting_ranks=[0])
    TraceRankPhases.objects.create(trace_run=run, rank=0, step_ms=100, communication_ms=45)
    TraceRankPhases.objects.create(trace_run=run, rank=1, step_ms=100, backward_ms=60)
    return job


def test_the_report_has_efficiency_straggler_phases_and_diagnosis(job):
    text = _run("testcluster", "101")
    assert "Job ID: 101" in text and "User/Account: bob/nlp" in text
    assert "GPU utilisation (busy)" in text and "98%]" in text
    assert "gpu01:3" in text and "STRAGGLER" in text and "thermal 100%" in text
    assert "Found (high confidence): GPU gpu01:3 is the straggler" in text
    assert "<- straggler" in text and "(waited)" in text
    assert "Rank 1 is the straggler: 31.5 ms more own work per step, in backward." in text
    assert "[hardware, critical] A faulty GPU slows the whole job" in text
    assert "Talk to: HW on-call · hw@example.org" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_the_cluster_may_come_as_an_option_or_be_left_out_when_unique(job):
    assert _run("101", "--cluster", "testcluster") == _run("testcluster", "101")
    assert _run("101") == _run("testcluster", "101")


def test_an_unarchived_job_says_so(world):
    text = _run("testcluster", "102")
    assert "No GPU metrics are stored for this job yet." in text
    assert "Nothing to report." in text


@pytest.mark.parametrize(("args", "words"), [
    (("testcluster", "999"), "no job 999 on cluster 'testcluster'"),
    (("a", "b", "c"), "give CLUSTER JOBID"),
])
def test_bad_arguments_are_explained(world, args, words):
    with pytest.raises(CommandError, match=words):
        _run(*args)


def test_an_ambiguous_id_asks_for_the_cluster(world):
    make_job(Cluster.objects.create(name="other"), 101, None, None)
    with pytest.raises(CommandError, match="several clusters"):
        _run("101")
