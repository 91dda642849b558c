"""Each audience's main flow in a real browser: "My team" for a lead, "Platform" for an
admin, "Security" for both. Pages render, charts draw where the page has one, links and
filters lead where they say, and the console stays clean."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.chargeback import services as chargeback
from apps.core.models import TaskRun
from apps.security.findings import record_hits
from tests.chargeback.conftest import archive
from tests.security.conftest import hit

pytestmark = [pytest.mark.integration("chromium"), pytest.mark.django_db(transaction=True)]


def _rows(page, selector: str = "table.table tbody tr"):
    return page.locator(selector)


def _first_text(row) -> str:
    """A table row's first non-empty cell (the job list starts with a tick box)."""
    return next(cell.strip() for cell in row.inner_text().split("\t") if cell.strip())


# --- My team (a lead) ---------------------------------------------------------------------------


def test_a_lead_walks_my_team_filters_the_team_jobs_and_sees_the_usage_chart(
        world, live_server, page, sign_in, console_errors, shot):
    archive(world.jobs["bob"], 0.25, held_idle=0.75)
    month = world.jobs["bob"].start_time.date().replace(day=1)
    chargeback.refresh_statements(month)
    sign_in(page, "alice")
    page.click("nav.mainnav >> text=My team")
    page.wait_for_url(f"{live_server.url}/team/")
    assert page.locator("h1").inner_text() == "My team"
    assert {r.inner_text().split("\t")[0].strip() for r in _rows(page).all()} >= {"101", "102",
                                                                                   "103"}
    page.click("main >> text=NLP")  # the team she leads
    page.wait_for_url(f"{live_server.url}/teams/nlp/")
    assert page.locator("h1").inner_text().startswith("NLP")
    members = page.locator("section.card", has_text="Members").inner_text()
    assert "alice" in members and "bob" in members and "carol" not in members
    team_jobs = page.locator("section.card", has_text="Jobs you can see in this team")
    assert team_jobs.locator("tbody tr").count() == 3  # her team's jobs, not Vision's
    shot(page, "team-page-lead")

    page.go_back()
    page.click("text=all team jobs →")
    page.wait_for_url("**/jobs/?scope=team")
    assert _rows(page).count() == 3
    page.fill("input[name=q]", "101")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**q=101**")
    # the job list's first column is the comparison tick box: the id is the first text
    assert [_first_text(r) for r in _rows(page).all()] == ["101"]

    page.click("nav.mainnav >> text=GPU-hours")
    page.wait_for_url(f"{live_server.url}/chargeback/")
    page.goto(f"{live_server.url}/chargeback/?month={month:%Y-%m}")
    page.wait_for_selector("[data-figure=fig-team-split] .main-svg")
    assert "Vision" not in page.locator("main").inner_text()  # a lead sees her team only
    assert console_errors == []


# --- Platform (an admin) ----------------------------------------------------------------------


def test_an_admin_walks_platform_runs_and_a_team(world, live_server, page, sign_in,
                                                  console_errors, shot):
    now = timezone.now()
    TaskRun.objects.create(kind="sync_cluster", cluster=world.cluster, target="testcluster",
                           status=TaskRun.Status.SUCCEEDED, started_at=now - timedelta(minutes=3),
                           finished_at=now - timedelta(minutes=2), stats={"created": 5})
    TaskRun.objects.create(kind="archive_job", cluster=world.cluster, target="job 101",
                           status=TaskRun.Status.FAILED, started_at=now - timedelta(minutes=1),
                           finished_at=now, error="TransientAdapterError: Prometheus down")
    sign_in(page, "staff")
    page.click("nav.mainnav >> text=Platform")
    page.wait_for_url(f"{live_server.url}/platform/")
    assert page.locator("h1").inner_text() == "Platform"
    main = page.locator("main").inner_text()
    assert "Test cluster" in main and "NLP" in main and "Vision" in main
    assert "sync_cluster" in main and "archive_job" in main
    shot(page, "platform")

    page.click("main >> text=Background runs")
    page.wait_for_url(f"{live_server.url}/platform/runs/")
    runs = page.locator("main").inner_text()
    assert "failed" in runs and "succeeded" in runs and "Prometheus down" in runs
    page.go_back()
    page.click("main >> text=Vision")
    page.wait_for_url(f"{live_server.url}/teams/vision/")
    assert page.locator("h1").inner_text().startswith("Vision")
    assert "carol" in page.locator("section.card", has_text="Members").inner_text()
    assert console_errors == []


# --- Security (an admin, then a lead) -----------------------------------------------------------


@pytest.fixture
def findings(world):
    record_hits(world.cluster, [
        hit("miner_in_job", "job:101", job_id=101, user="bob", team="nlp", severity="critical",
            title="Miner-like load in job 101"),
        hit("secret_in_job_script", "201:github:x", job_id=201, user="carol", team="vision",
            node="", title="Secret in the script of job 201"),
        hit("gpu_activity_without_job", "gpu01:3", gpu=3, title="GPU busy without a job"),
    ])


def test_security_findings_filter_and_open_a_finding(findings, live_server, page, sign_in,
                                                     console_errors, shot):
    sign_in(page, "staff")
    page.click("nav.mainnav >> text=Security")
    page.wait_for_url(f"{live_server.url}/security/")
    assert page.locator("h1").inner_text() == "Security findings"
    assert _rows(page).count() == 3
    page.select_option("select[name=severity]", "critical")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**severity=critical**")
    assert _rows(page).count() == 1
    shot(page, "security-findings")
    page.click("text=Miner-like load in job 101")
    page.wait_for_url(f"{live_server.url}/security/findings/**")
    assert "Miner-like load in job 101" in page.locator("h1").inner_text()
    for section in ("#evidence", "#actions", "#timeline"):
        assert page.locator(section).is_visible(), section
    shot(page, "security-finding")
    assert console_errors == []


def test_a_lead_sees_only_her_teams_findings(findings, live_server, page, sign_in,
                                            console_errors):
    sign_in(page, "alice")
    page.goto(f"{live_server.url}/security/")
    titles = page.locator("main").inner_text()
    assert "Miner-like load in job 101" in titles
    assert "Secret in the script of job 201" not in titles and "GPU busy" not in titles
    assert console_errors == []
