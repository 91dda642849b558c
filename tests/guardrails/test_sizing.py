"""Right-sizing from the stored archive: the job page's advice, the users' weekly digest and
the leads' team digest (waste by kind in GPU-hours), each sent once."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.core import mail

from apps.analysis.timeseries import GpuKey
from apps.guardrails import sizing
from apps.guardrails.models import AlertPreference, Digest, TeamAlertSetting
from apps.jobs import archive
from tests.conftest import T0, make_job
from tests.guardrails.conftest import BUSY, IDLE, TimedSource

# T0 is Monday 2026-11-02 09:00 UTC: the jobs end that week; digests go out the next.
NEXT_WEEK = datetime(2026, 11, 10, 8, 0, tzinfo=T0.tzinfo)


def archived(job, busy_gpus: int):
    keys = [GpuKey("gpu01", i) for i in range(job.gpus)]
    source = TimedSource(keys, lambda key, t: BUSY if key.gpu < busy_gpus else IDLE)
    archive.archive_job(job, source)
    return job


@pytest.fixture
def wasteful(world):
    """bob: 8 H100s for 10 h with a 24 h limit, 4 of them idle the whole run."""
    world.users["bob"].email = "bob@example.org"
    world.users["bob"].save()
    world.users["alice"].email = "alice@example.org"
    world.users["alice"].save()
    job = make_job(world.cluster, 700, world.users["bob"], world.team_a, start_time=T0,
                   end_time=T0 + timedelta(hours=10), time_limit_min=24 * 60, name="sweep")
    return archived(job, busy_gpus=4)


def test_the_job_page_shows_what_to_ask_for_instead(wasteful, login):
    advice = {r.kind: r for r in sizing.advice_for(wasteful)}
    assert advice["gpus"].line == "#SBATCH --gres=gpu:h100:4"
    assert advice["gpus"].waste_gpu_hours == pytest.approx(40.0)
    assert advice["time"].line == "#SBATCH --time=15:00:00"
    assert "ran 10.0 h of the 24.0 h it asked for (42%)" in advice["time"].evidence
    page = login("bob").get("/jobs/testcluster/700/").content.decode()
    assert "#SBATCH --gres=gpu:h100:4" in page and "4 of its 8 GPUs did no work" in page


def test_a_light_one_gpu_job_is_told_of_a_mig_slice(world):
    job = make_job(world.cluster, 701, world.users["bob"], world.team_a, gpus=1,
                   gpu_equivalent=1.0, gpu_types={"h100": 1}, start_time=T0,
                   end_time=T0 + timedelta(hours=4), state="FAILED")
    light = {**BUSY, "gpu_util": 0.3, "sm_active": 0.1, "fb_used": 7000.0}
    archive.archive_job(job, TimedSource([GpuKey("gpu01", 0)], lambda k, t: light))
    [advice] = sizing.advice_for(job)
    assert advice.line == "#SBATCH --gres=gpu:1g.10gb:1"


def test_running_jobs_get_no_advice(world):
    job = make_job(world.cluster, 702, world.users["bob"], world.team_a, state="RUNNING",
                   end_time=None)
    assert sizing.advice_for(job) == []


def test_the_weekly_digests_go_out_once(wasteful, world):
    stats = sizing.send_digests(NEXT_WEEK)
    assert stats["week"] == "2026-11-02" and stats["user_digests"] == 1
    assert stats["team_digests"] == 1  # alice leads team A (eve too, but she is disabled)
    bobs = next(m for m in mail.outbox if m.to == ["bob@example.org"])
    assert "Right-sizing your GPU jobs: week of 2026-11-02" in bobs.subject
    assert "Instead of --gres=gpu:h100:8: #SBATCH --gres=gpu:h100:4" in bobs.body
    assert "/jobs/testcluster/700/" in bobs.body
    leads = next(m for m in mail.outbox if m.to == ["alice@example.org"])
    assert "GPUs held idle: 40.0" in leads.body and "bob: 40.0" in leads.body
    assert "time limit asked for and not used: 112.0" in leads.body
    sent = len(mail.outbox)
    again = sizing.send_digests(NEXT_WEEK + timedelta(hours=1))
    assert again["user_digests"] == again["team_digests"] == 0 and len(mail.outbox) == sent
    assert Digest.objects.count() == 2  # bob's and alice's


def test_digests_can_be_turned_off(wasteful, world):
    AlertPreference.objects.create(user=world.users["bob"], digest=False)
    TeamAlertSetting.objects.create(team=world.team_a, lead_digest=False)
    stats = sizing.send_digests(NEXT_WEEK)
    assert stats["user_digests"] == stats["team_digests"] == 0 and not mail.outbox


def test_last_week_runs_monday_to_monday():
    monday, start, end = sizing.last_week(NEXT_WEEK)
    assert str(monday) == "2026-11-02" and (end - start).days == 7
    assert start.weekday() == 0 and start.hour == 0
