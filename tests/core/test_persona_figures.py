"""Issue 26's "done when": a walk of the three personas at one frozen time, on a small
simulated demo, that fails on

- a form error shown for a form's default values (``Report.form_errors``),
- an in-page link without its target and an absolute link off the served address (as
  ``test_crawl.py``, on the same walk),
- a figure two pages state differently for the same job or team at the same time: a job's
  GPU-hours, idle share and memory peak, a team's GPU-hours in the month
  (``apps/core/facts.py`` marks them; ``tests/facts.py`` compares them).

The walk reads: it submits the GET forms (filters) with their defaults, not the POST forms
(a refresh, a preview, a new token), so every page it sees shows the same data. The crawl
(``test_crawl.py``) submits those and fails on their form errors too.

The walk visits more job pages than the crawl (the jobs with alerts, flagged readings and
memory advice), so each job figure is seen on the list, the job page and the alerts.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from django.test import Client

from apps.demo import loader as demo
from apps.guardrails.models import Alert
from apps.jobs.models import Job
from tests.core.test_crawl import folder, kinds_of_job_page, personas  # noqa: F401 (fixture)
from tests.crawl import SERVED, Crawler, Report, Stated, _PageParser
from tests.facts import contradictions

pytestmark = [pytest.mark.django_db]

SIMULATED_NOW = datetime.fromisoformat("2026-11-02T06:00:00+00:00")  # test_crawl's folder
# Half an hour after the simulated "now": running jobs have gone on past the statements'
# snapshot and their last stored metrics, as on a real site between two refreshes.
WALK_AT = SIMULATED_NOW + timedelta(minutes=30)
JOB_PAGES = 40


def job_pages(user) -> tuple[str, ...]:
    """The job pages whose figures other pages repeat: the user's alerted jobs, jobs with
    stored metrics (idle readings, node memory) and one of each shape."""
    jobs = Job.objects.visible_to(user).select_related("cluster")
    alerted = jobs.filter(pk__in=Alert.objects.values("job")).order_by("-pk")[:15]
    measured = jobs.filter(metrics__status__in=("live", "complete"),
                           metrics__held_idle_hours__gt=0).order_by("-metrics__held_idle_hours")
    picks = [*kinds_of_job_page(user), *(f"/jobs/{j.cluster.name}/{j.job_id}/"
                                         for j in [*alerted, *measured[:15]])]
    return tuple(dict.fromkeys(picks))


def walk(people) -> tuple[list[str], list[Stated], dict[str, Report]]:
    faults: list[str] = []
    stated: list[Stated] = []
    reports: dict[str, Report] = {}
    for role, user in people.items():
        client = Client(raise_request_exception=False)
        client.force_login(user)
        crawler = Crawler(client, limits={"jobs-detail": JOB_PAGES}, posts=False)
        report = crawler.crawl(also=job_pages(user))
        reports[role] = report
        faults += [f"{role} ({user.username}): {f}" for f in report.server_errors
                   + report.form_errors + report.missing_anchors + report.offsite_links]
        stated += report.facts
    return faults, stated, reports


@pytest.mark.slow
def test_three_personas_see_no_false_error_and_no_two_answers(folder, settings):  # noqa: F811
    settings.SITE_URL = SERVED
    with time_machine.travel(SIMULATED_NOW, tick=False):
        demo.load(folder)
    with time_machine.travel(WALK_AT, tick=False):
        faults, stated, reports = walk(personas())
    faults += contradictions(stated)
    assert faults == [], "\n".join(faults)
    # the walk saw each fact on more than one page, for more than one subject
    for fact in ("job-gpu-hours", "job-idle-share", "team-month-gpu-hours"):
        pages = {s.page for s in stated if s.fact == fact}
        subjects = {s.subject for s in stated if s.fact == fact}
        assert len(pages) >= 2 and len(subjects) >= 2, (fact, pages, subjects)
    assert all(r.forms >= 2 for r in reports.values())


# --- The checks can fail ------------------------------------------------------------------

def _stated(page: str, html: str) -> list[Stated]:
    parser = _PageParser("http://testserver" + page)
    parser.feed(html)
    return parser.facts


QUOTAS = ('<td><span data-fact="team-month-gpu-hours" data-subject="team:nlp/2026-11" '
          'data-value="1,500.9 GPU-h" data-at="2026-11-02T06:30:00+00:00">1,500.9</span></td>')
STATEMENT = ('<div><span data-fact="team-month-gpu-hours" data-subject="team:nlp/2026-11" '
             'data-value="1,490.6 GPU-h" data-at="2026-11-02T01:00:00+00:00">1,490.6</span></div>')


def test_it_finds_a_team_month_stated_from_two_snapshots():
    found = contradictions(_stated("/quotas/", QUOTAS) + _stated("/chargeback/statements/1/",
                                                                  STATEMENT))
    assert len(found) == 1 and "team:nlp/2026-11" in found[0]
    assert "1,500.9 GPU-h" in found[0] and "1,490.6 GPU-h" in found[0]
    # one snapshot, the same text: nothing to say
    same = STATEMENT.replace("/chargeback/statements/1/", "/quotas/")
    assert contradictions(_stated("/chargeback/statements/1/", STATEMENT)
                          + _stated("/quotas/", same)) == []


def _job(value: str, at: str = "", shown: str | None = None) -> str:
    when = f' data-at="{at}"' if at else ""
    return (f'<p>GPU-hours <span data-fact="job-gpu-hours" data-subject="job:hpc/7" '
            f'data-value="{value}"{when}>{value if shown is None else shown}</span></p>')


def test_it_finds_a_job_figure_stated_two_ways_at_one_moment():
    found = contradictions(_stated("/jobs/hpc/7/", _job("12.4 GPU-h"))
                           + _stated("/jobs/", _job("12.3 GPU-h")))
    assert len(found) == 1 and "job:hpc/7" in found[0]


def test_a_dated_snapshot_of_a_job_is_not_its_figure_now():
    """A running job's last stored metrics (or an alert) describe an earlier moment."""
    assert contradictions(_stated("/jobs/hpc/7/", _job("12.4 GPU-h"))
                          + _stated("/jobs/hpc/7/", _job("11.9 GPU-h",
                                                         "2026-11-02T06:00:00+00:00"))) == []


def test_a_figure_shown_other_than_its_text_is_found():
    assert contradictions(_stated("/jobs/", _job("12.4 GPU-h", shown="12.4"))) == []
    found = contradictions(_stated("/jobs/", _job("12.4 GPU-h", shown="12")))
    assert len(found) == 1 and "shown as '12'" in found[0]


def test_a_form_error_on_a_default_answer_is_reported():
    parser = _PageParser("http://testserver/jobs/?state=")
    parser.feed('<form method="get"><select name="state"><option value="">any</option></select>'
                '</form><p class="error" role="alert">state: Select a valid choice.</p>'
                '<p class="muted">fine</p>')
    assert parser.errors == ["state: Select a valid choice."]
