"""One job, one answer (issue 26): a running notebook busy 8 % now and then, its GPU memory
held 92 % of 72 hours, gets the diagnosis finding and the alert, and the job page and the
job list say the same words and numbers."""

from __future__ import annotations

from datetime import timedelta

from apps.analysis.idleness import read
from apps.guardrails import services
from apps.guardrails.models import Alert
from apps.jobs.models import JobFinding
from tests.guardrails.conftest import HELD, START, TimedSource, gpus

BURST = {"gpu_util": 0.8, "sm_active": 0.5, "tensor_active": 0.1, "fb_used": 18000.0,
         "power": 300.0}


def notebook(key, t):
    """Works 4 minutes in every 40 at 80 %: 8 % busy, never idle an hour in a row."""
    minute = int((t - START.timestamp()) // 60)
    return BURST if minute % 40 < 4 else HELD


def test_a_mostly_idle_job_gets_both_the_finding_and_the_alert(running, login):
    services.run_checks(now=START + timedelta(hours=72), source=TimedSource(gpus(4), notebook),
                        jobs=type(running).objects.filter(pk=running.pk))
    finding = JobFinding.objects.get(job=running, key="idle-memory-held")
    alert = Alert.objects.get(job=running, kind="memory_held")
    summary = read(0.08, 0.92, 72.0).summary
    assert summary.startswith("Mostly idle, GPU memory held: busy 8% of 72.0 h")
    assert alert.text.startswith(summary)
    assert finding.title == "Mostly idle, GPU memory held"
    assert "busy only 8% of the time over 72.0 h" in finding.text
    assert "memory held 92% of it" in finding.text
    page = login("bob").get(f"/jobs/testcluster/{running.job_id}/").content.decode()
    assert "No alert on this job so far" not in page
    assert summary.split(": ", 1)[1] in page  # the efficiency card's reading
    listing = login("bob").get("/jobs/").content.decode()
    assert f'title="{summary}">Mostly idle, GPU memory held</span>' in listing


def test_a_busy_job_has_neither(running, login):
    services.run_checks(now=START + timedelta(hours=72),
                        source=TimedSource(gpus(4), lambda k, t: BURST),
                        jobs=type(running).objects.filter(pk=running.pk))
    assert not Alert.objects.filter(job=running).exists()
    assert not JobFinding.objects.filter(job=running, key__startswith="idle").exists()
    assert "tag-idle" not in login("bob").get("/jobs/").content.decode()
