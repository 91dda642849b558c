"""A fresh demo works out of the box (issue 19), on a small simulated demo loaded once:

- plain ``make demo`` is calm: no run failed while loading, running jobs show their stored
  metrics and say live refresh needs Prometheus, viewing them queues nothing;
- chargeback is ready: an example rate card labelled as such, a draft statement for every
  team in every simulated month, priced.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import time_machine
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from django.urls import reverse

from apps.chargeback.models import Rate, Statement
from apps.core.models import TaskRun
from apps.demo import loader as demo
from apps.jobs.models import Job, JobMetrics

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

# Two days across a month's end, so the demo has two months to bill.
NOW = datetime(2026, 11, 1, 18, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("readydemo")
    call_command("simulate", out=str(out), nodes=4, days=2, seed=3, now=NOW.isoformat(),
                 telemetry_step=300, cluster="readydemo", stdout=io.StringIO())
    return out


@pytest.fixture(scope="module")
def loaded(folder: Path, django_db_setup: Any, django_db_blocker: Any
           ) -> Iterator[demo.LoadResult]:
    """Loaded once for the module, at the simulated "now" (so the sync sees jobs that just
    ended, as ``make demo`` does), inside a transaction rolled back at the end. What the
    load publishes on commit runs at once, as under ``make demo``'s autocommit (eager tasks
    run in the middle of the load, before the archive stage)."""
    with django_db_blocker.unblock(), transaction.atomic():
        with time_machine.travel(NOW, tick=False), _autocommit_hooks():
            result = demo.load(folder)
        yield result
        transaction.set_rollback(True)


def _autocommit_hooks() -> Any:
    return mock.patch.object(transaction, "on_commit",
                             lambda func, using=None, robust=False: func())


def _client(name: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=name))
    return client


def test_no_run_failed_or_partial_while_the_demo_loaded(loaded):
    assert TaskRun.objects.exists()
    # partial too: a demo run that could not read a source it was asked for (issue 17)
    assert list(TaskRun.objects.filter(status__in=[TaskRun.Status.FAILED,
                                                   TaskRun.Status.PARTIAL])
                .values_list("kind", "error")) == []
    page = _client("admin").get(reverse("core-platform")).content.decode()
    runs = page.split("<h2>Recent background runs")[1].split("</section>")[0]
    assert "succeeded" in runs and "failed" not in runs and "partial" not in runs


def test_a_running_job_shows_stored_metrics_and_queues_no_refresh(loaded):
    job = (Job.objects.filter(state="RUNNING", metrics__status__in=JobMetrics.MEASURED)
           .select_related("user").first())
    assert job is not None, "the demo has a running job with telemetry"
    runs = TaskRun.objects.count()
    with time_machine.travel(NOW, tick=False):
        html = _client("admin").get(reverse("jobs-detail", args=[
            job.cluster.name, job.job_id])).content.decode()
    assert 'id="no-live-source"' in html and "make demo-full" in html
    assert "Metrics could not be refreshed" not in html
    assert TaskRun.objects.count() == runs  # nothing queued, nothing failed


def test_chargeback_is_ready_with_example_prices_and_a_draft_per_team_and_month(loaded):
    stage = loaded.stages["chargeback"]
    assert stage["months"] == ["2026-10", "2026-11"]
    rates = list(Rate.objects.all())
    assert len(rates) == stage["example_rates"] >= 2
    assert all(r.note == demo.EXAMPLE_NOTE and "example prices" in r.note for r in rates)
    teams = {t["account"] for t in demo.describe(loaded_folder(loaded))["teams"]}
    for month in stage["months"]:
        drafts = Statement.objects.filter(period__month=f"{month}-01", status="draft")
        assert {s.team.slug for s in drafts} <= teams and drafts.count() >= 3, month
        assert all(s.amount > 0 for s in drafts if s.allocated_hours > 0), month
        assert not drafts.filter(lines__price__isnull=True).exists(), month
    page = _client("admin").get(reverse("chargeback-home") + "?month=2026-10").content.decode()
    assert "example prices (demo)" in page and "no rate" not in page


def test_loading_again_keeps_the_rate_card_and_rewrites_the_same_drafts(loaded, folder):
    before = sorted(Statement.objects.values_list("team__slug", "period__month", "amount"))
    with time_machine.travel(NOW, tick=False), _autocommit_hooks():
        again = demo.load(folder)
    assert again.stages["chargeback"]["example_rates"] == 0  # the card is an admin's now
    assert sorted(Statement.objects.values_list("team__slug", "period__month",
                                                "amount")) == before


def loaded_folder(result: demo.LoadResult) -> Path:
    return Path(str(Job.objects.filter(cluster__name=result.cluster).first().cluster
                    .slurm_settings["dir"])).parent


def _page(job: Job) -> str:
    with time_machine.travel(NOW, tick=False):
        response = _client("admin").get(reverse("jobs-detail", args=[job.cluster.name,
                                                                     job.job_id]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_shortest_job_with_telemetry_has_readable_charts(loaded):
    from apps.jobs import charts

    metrics = (JobMetrics.objects.filter(status__in=JobMetrics.MEASURED, points__gt=0)
               .select_related("job__cluster").order_by("points", "job__job_id").first())
    assert metrics is not None and metrics.points <= charts.MARKERS_UP_TO
    html = _page(metrics.job)
    assert 'id="sparse-note"' in html and '"mode": "lines+markers"' in html
    assert "one sample every 5 min" in html  # the telemetry interval this demo was made at


def test_every_kind_of_ending_in_the_demo_is_explained(loaded):
    ended = (Job.objects.exclude(state__in=Job.ACTIVE_STATES)
             .order_by("state", "exit_code", "exit_signal", "job_id"))
    seen: dict[tuple, Job] = {}
    for job in ended:
        seen.setdefault((job.state, job.exit_code, job.exit_signal), job)
    assert len({state for state, _, _ in seen}) >= 5, seen.keys()
    for (state, _, _), job in seen.items():
        card = _page(job).split('id="ending"')[1].split("</section>")[0]
        assert "How it ended:" in card, state
        assert ("What to check" in card) == (state != "COMPLETED"), state
        assert "stdout" in card  # a path, or why it is unknown
