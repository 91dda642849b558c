"""Chargeback and quota pages in a real browser under the CSP: the teams' waste chart draws
with no console error, and a quota-held job says why in words."""

from __future__ import annotations

import pytest

from apps.chargeback import services
from apps.chargeback.services import current_month
from tests.chargeback.conftest import archive
from tests.conftest import make_job

pytestmark = [pytest.mark.integration("chromium"), pytest.mark.django_db(transaction=True)]


def test_the_admin_sees_the_teams_waste_chart(world, live_server, page, sign_in,
                                              console_errors, shot):
    archive(world.jobs["bob"], 0.25, held_idle=0.75)
    month = world.jobs["bob"].start_time.date().replace(day=1)
    services.refresh_statements(month)
    sign_in(page, "staff")
    page.goto(f"{live_server.url}/chargeback/?month={month:%Y-%m}")
    page.wait_for_selector("[data-figure=fig-team-split] .main-svg")
    assert page.locator("table.table tbody tr").first.inner_text().startswith("NLP")
    shot(page, "chargeback-month")
    page.goto(f"{live_server.url}/quotas/")
    assert "GPU-hour quotas" in page.locator("h1").inner_text()
    assert console_errors == []


def test_a_quota_held_job_says_why(world, live_server, page, sign_in, console_errors):
    make_job(world.cluster, 600, world.users["bob"], world.team_a, state="PENDING",
             start_time=None, end_time=None, reason="AssocGrpGRESMinutes")
    sign_in(page, "bob")
    page.goto(f"{live_server.url}/jobs/testcluster/600/")
    assert "your team's GPU-hour quota is used up" in page.locator(".pending-reason").inner_text()
    page.goto(f"{live_server.url}/chargeback/me/?month={current_month():%Y-%m}")
    assert "My GPU usage" in page.locator("h1").inner_text()
    assert console_errors == []
