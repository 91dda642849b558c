"""Screenshots of each persona's main pages on a small simulated demo, in a real browser
(Debian's Chromium): the README shows them. Every page must draw without a console error.

Saved under ``test-results/screenshots/``; with ``SCREENSHOTS_TO_DOCS=1`` (``make screenshots``)
also into ``docs/screenshots/``, where the README links them."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from apps.clusters.models import SlurmAccount
from apps.demo import loader as demo
from apps.jobs.models import Job
from tests.core.test_crawl import personas

pytestmark = [pytest.mark.integration("chromium"), pytest.mark.django_db(transaction=True),
              pytest.mark.slow]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
HEIGHT = 1100  # px of each page kept: what a person sees first, and a little more


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("screens")
    call_command("simulate", out=str(out), nodes=4, days=2, seed=11, now="2026-11-02T06:00:00Z",
                 telemetry_step=3600, cluster="demo", stdout=io.StringIO())
    return out


def _pages(role: str, user: User) -> list[tuple[str, str]]:
    measured = Job.objects.visible_to(user).filter(metrics__status="complete",
                                                   metrics__allocated_gpu_hours__gt=1)
    job = measured.order_by("-metrics__allocated_gpu_hours", "job_id").first()
    job_page = f"/jobs/{job.cluster.name}/{job.job_id}/" if job else "/jobs/"
    team = user.memberships.select_related("team").first()
    slo = f"/slo/teams/{team.team.slug}/" if team else "/slo/"
    return {
        "admin": [("platform", "/platform/"), ("quotas", "/quotas/"),
                  ("chargeback", "/chargeback/"), ("slos", "/slo/"), ("security", "/security/")],
        "lead": [("my-team", "/team/"), ("team-slos", slo), ("chargeback", "/chargeback/")],
        "researcher": [("my-jobs", "/"), ("job-page", job_page),
                       ("my-usage", reverse("chargeback-my-usage"))],
    }[role]


def test_each_personas_main_pages(folder, live_server, page, sign_in, console_errors, shot):
    demo.load(folder)
    people = personas()
    for user in people.values():
        user.set_password("pw")
        user.save()
    page.set_viewport_size({"width": 1280, "height": 900})
    saved = []
    for role, user in people.items():
        page.context.clear_cookies()
        sign_in(page, user.username)
        for name, url in _pages(role, user):
            response = page.goto(f"{live_server.url}{url}")
            assert response.status == 200, (role, url, response.status)
            figures = page.locator("[data-figure]").count()
            if figures:
                page.wait_for_function(f"document.querySelectorAll('[data-figure] "
                                       f"svg.main-svg').length >= {figures}")
            saved.append(shot(page, f"{role}-{name}", height=HEIGHT))
    saved += _journeys(page, live_server, sign_in, people, shot, console_errors)
    if os.environ.get("SCREENSHOTS_TO_DOCS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        for path in saved:
            shutil.copy(path, DOCS / path.name)


def _journeys(page, live_server, sign_in, people, shot, console_errors) -> list[Path]:
    """Two moments worth a picture: the admin's quota preview on the simulated Slurm, and
    the page a researcher gets for another team's job."""
    page.context.clear_cookies()
    sign_in(page, people["admin"].username)
    account = SlurmAccount.objects.get(cluster__name="demo", name="robotics")
    page.goto(f"{live_server.url}{reverse('quotas-edit', args=[account.pk])}")
    page.fill("input[name=hours]", "200")
    page.fill("input[name=reason]", "the robotics team's December deadline")
    page.click("button:has-text('Preview')")
    page.wait_for_selector("text=Slurm's dry run")
    shots = [shot(page, "admin-quota-preview", height=HEIGHT)]
    assert console_errors == []
    page.context.clear_cookies()
    researcher = people["researcher"]
    sign_in(page, researcher.username)
    other = Job.objects.exclude(team__memberships__user=researcher).exclude(team=None).first()
    response = page.goto(f"{live_server.url}/jobs/{other.cluster.name}/{other.job_id}/")
    assert response.status == 404 and "belongs to another team" in page.content()
    shots.append(shot(page, "researcher-not-found", height=700))
    # the page itself answered 404, as it should: the only console line is that status
    assert [e for e in console_errors if "status of 404" not in e] == []
    return shots
