"""The main flows in a real browser: sign in, my jobs, a job page, and a 404 for others' jobs."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration("chromium"), pytest.mark.django_db(transaction=True)]


def test_a_researcher_signs_in_and_opens_their_job(world, live_server, page, sign_in,
                                                   console_errors, shot):
    sign_in(page, "bob")
    assert page.locator("h1").inner_text() == "My jobs"
    page.click("text=101")
    page.wait_for_url(f"{live_server.url}/jobs/testcluster/101/")
    assert "Job 101" in page.locator("h1").inner_text()
    shot(page, "job-page-bob")
    assert console_errors == []


def test_another_teams_researcher_gets_a_404(world, live_server, page, sign_in):
    sign_in(page, "carol")
    response = page.goto(f"{live_server.url}/jobs/testcluster/101/")
    assert response.status == 404


def test_a_lead_filters_the_team_list(world, live_server, page, sign_in, console_errors):
    sign_in(page, "alice")
    page.goto(f"{live_server.url}/jobs/?scope=team")
    assert page.locator("table.table tbody tr").count() == 3
    page.fill("input[name=q]", "job-102")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**q=job-102**")
    rows = page.locator("table.table tbody tr")
    assert rows.count() == 1 and "102" in rows.first.inner_text()
    assert console_errors == []


def test_the_job_page_names_only_active_leads(world, live_server, page, sign_in):
    sign_in(page, "bob")
    page.goto(f"{live_server.url}/jobs/testcluster/101/")
    lead = page.locator("dt:text('Lead') + dd").inner_text()
    assert lead == "alice"  # eve leads team A too, but her account is disabled
