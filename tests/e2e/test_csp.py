"""The content security policy, verified in Chromium with the real plotly.min.js."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration("chromium"), pytest.mark.urls("tests.e2e.csp_probe"),
              pytest.mark.django_db(transaction=True)]


def test_plotly_draws_under_the_policy_with_no_violation(live_server, page, console_errors):
    response = page.goto(f"{live_server.url}/csp-probe/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.wait_for_function("document.querySelectorAll('div.chart .main-svg').length >= 2")
    assert page.locator("g.trace.bars").count() == 1
    assert page.locator("g.trace.scatter").count() == 1
    assert page.locator("g.hm").count() == 1
    # Plotly's own stylesheet (modebar, hover) was allowed in through its hash.
    rules = page.evaluate("Array.from(document.styleSheets).filter(s => !s.href)"
                          ".map(s => s.cssRules.length)")
    assert rules and all(n > 0 for n in rules)
    assert console_errors == []


def test_an_inline_script_is_blocked_and_reported(live_server, page, console_errors):
    page.goto(f"{live_server.url}/csp-probe/?inline=1")
    page.wait_for_selector("div.chart svg.main-svg")
    assert page.evaluate("window.inlineRan === undefined")
    assert any("Content Security Policy" in e for e in console_errors)


@pytest.mark.urls("portal.urls")
def test_the_admin_and_the_audit_page_work_under_the_policy(world, live_server, page, sign_in,
                                                            console_errors, shot):
    world.users["staff"].is_superuser = True
    world.users["staff"].save()
    sign_in(page, "staff")
    page.goto(f"{live_server.url}/admin/accounts/team/{world.team_a.pk}/change/")
    page.fill("input[name=name]", "NLP research")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/accounts/team/")
    page.goto(f"{live_server.url}/platform/audit/")
    rows = page.locator("table.table tbody tr")
    assert "Admin edit" in rows.first.inner_text()  # newest first: the edit above
    assert "team: NLP research" in rows.first.inner_text()
    shot(page, "audit-log")
    assert console_errors == []


@pytest.mark.urls("portal.urls")
def test_the_job_page_charts_draw_under_the_policy(world, live_server, page, sign_in,
                                                   console_errors, shot):
    from tests.jobs.test_job_page import _archive

    _archive(world.jobs["bob"])
    sign_in(page, "bob")
    page.goto(f"{live_server.url}/jobs/testcluster/101/")
    page.wait_for_function(
        "document.querySelectorAll('[data-figure] .main-svg').length >= 3")
    assert page.evaluate("typeof window.htmx") == "object"  # htmx loaded, no style injected
    shot(page, "job-page-efficiency-csp")
    assert console_errors == []
