"""A job page with metrics, in a real browser: every chart renders, the console stays clean,
and another team's researcher gets a 404."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from apps.analysis.timeseries import GpuKey
from apps.jobs import archive
from apps.jobs.traces import import_trace
from tests.conftest import make_job
from tests.jobs.fake_telemetry import FakeSource
from tests.trace_builder import BASE_NS, Options, Step, simulate, to_chrome

pytestmark = [pytest.mark.integration("chromium"), pytest.mark.django_db(transaction=True)]

PEERS = {"gpu_util": 0.98, "sm_active": 0.41, "tensor_active": 0.2, "fb_used": 60000.0,
         "power": 600.0, "temperature": 68.0, "sm_clock": 1980.0, "throttle_reasons": 0.0,
         "xid": 0.0, "nvlink_tx": 3e10, "pcie_rx": 6e8}
RECORDED = datetime.fromtimestamp(BASE_NS / 1e9 + Options().start_us / 1e6, tz=UTC)


@pytest.fixture
def job_with_metrics(world, tmp_path):
    """bob's job: archived metrics with a thermally throttled straggler, and a trace."""
    # transactional tests flush the tables: put the shipped diagnosis rules back first
    call_command("diagnosis_rules", "--reset", stdout=io.StringIO())
    job = make_job(world.cluster, 4242, world.users["bob"], world.team_a,
                   start_time=RECORDED - timedelta(minutes=30),
                   end_time=RECORDED + timedelta(minutes=30))
    gpus = {GpuKey("gpu01", i): dict(PEERS) for i in range(8)}
    gpus[GpuKey("gpu01", 5)].update(sm_active=0.86, temperature=89.0, sm_clock=1148.0,
                                    throttle_reasons=0x60)
    archive.archive_job(job, FakeSource(gpus))
    plans = [[Step(backward=38.0 if r == 2 else 8.0)] * 6 for r in range(4)]
    for trace in simulate(plans):
        (tmp_path / trace.source).write_text(json.dumps(to_chrome(trace)))
    import_trace(job, [tmp_path])
    return job


def test_the_job_page_draws_every_chart_without_console_errors(job_with_metrics, live_server,
                                                                page, sign_in, console_errors,
                                                                shot):
    sign_in(page, "bob")
    page.goto(f"{live_server.url}/jobs/testcluster/4242/")
    figures = page.locator("[data-figure]")
    expected = figures.count()
    assert expected >= 13  # efficiency 3, straggler 1, per-GPU 7, health 1, phases 1
    page.wait_for_function(
        f"document.querySelectorAll('[data-figure] svg.main-svg').length >= {expected}")
    for name in ("fig-heatmap", "fig-waiting", "fig-gpu-temperature", "fig-gpu-events",
                 "fig-phases"):
        assert page.locator(f'[data-figure="{name}"] svg.main-svg').count() >= 1, name
    assert "GPU gpu01:5 is the straggler" in page.locator("#stragglers").inner_text()
    assert "A faulty GPU slows the whole job" in page.locator("#diagnosis").inner_text()
    assert "rank 2 ◀ straggler (backward)" in page.locator("#phases").inner_text()
    shot(page, "job-page-metrics")
    # docs/screenshots/job-page.png is this one: header, efficiency and straggler verdict
    shot(page, "job-page-top", height=2140)
    assert console_errors == []


def test_another_teams_researcher_gets_a_404(job_with_metrics, live_server, page, sign_in):
    sign_in(page, "carol")
    response = page.goto(f"{live_server.url}/jobs/testcluster/4242/")
    assert response.status == 404
    assert "straggler" not in page.content()
