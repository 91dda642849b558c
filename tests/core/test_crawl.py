"""Every journey, for every persona, twice (issue 19 item 8): on a small simulated demo, the
admin, a team lead and a researcher each follow every link and submit every form with its
default (or first) values; then all of it again on the state the first pass left (drafts
made, quotas previewed, tokens made, runs recorded), with odd admin settings added
(``odd_configuration``). No server error, no broken link, no in-page link (``#section``)
without its section, no absolute link off the address the portal is served on (issue 26:
the demo's digests pointed at port 8000 while it was served on 8123)."""

from __future__ import annotations

import io
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db.models import Count, Exists, OuterRef
from django.test import Client
from django.utils import timezone

from apps.accounts.models import Membership, Team
from apps.chargeback.models import Rate
from apps.clusters.models import Cluster, SlurmAccount
from apps.demo import loader as demo
from apps.quotas.models import Quota
from apps.slo import services as slo
from apps.slo.models import Objective
from tests.crawl import SERVED, Crawler

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 nodes x 2 days with hourly telemetry: every kind of page, loaded in seconds."""
    out = tmp_path_factory.mktemp("crawl")
    call_command("simulate", out=str(out), nodes=4, days=2, seed=11, now="2026-11-02T06:00:00Z",
                 telemetry_step=3600, cluster="crawl", stdout=io.StringIO())
    return out


def personas() -> dict[str, User]:
    lead = Membership.objects.filter(role=Membership.Role.LEAD).select_related("user")[0].user
    researcher = (User.objects.filter(memberships__role=Membership.Role.MEMBER)
                  .exclude(memberships__role=Membership.Role.LEAD)
                  .annotate(n=Count("jobs")).order_by("-n", "username")[0])
    return {"admin": User.objects.get(username=demo.ADMIN), "lead": lead,
            "researcher": researcher}


def kinds_of_job_page(user: User) -> tuple[str, ...]:
    """One job page of each shape the user can see (with and without telemetry, running,
    pending, with findings): each has its own sections, and its in-page links must match."""
    from apps.jobs.models import Job

    jobs = Job.objects.visible_to(user)
    picks = [rerun(user),
             jobs.filter(metrics__status__in=("live", "complete")).first(),
             jobs.filter(metrics__isnull=True, start_time__isnull=False).first(),
             jobs.filter(metrics__status="no_data").first(),
             jobs.filter(state=Job.State.PENDING).first(),
             jobs.filter(state=Job.State.RUNNING).first(),
             jobs.filter(findings__isnull=False).first()]
    return tuple(f"/jobs/{j.cluster.name}/{j.job_id}/" for j in picks if j is not None)


def rerun(user: User) -> Any:
    """A job the user sees whose name they ran before (not as an array task): its page links
    the comparison with that run. None when the user has no such pair."""
    from apps.jobs.models import Job

    jobs = Job.objects.visible_to(user).filter(array_job_id__isnull=True)
    earlier = jobs.filter(cluster=OuterRef("cluster"), user_name=OuterRef("user_name"),
                          name=OuterRef("name"), submit_time__lt=OuterRef("submit_time"))
    return jobs.filter(Exists(earlier)).first()


def odd_configuration() -> None:
    """What an admin may configure that the demo does not: objectives over partitions and
    clusters without jobs, extreme targets, a free rate and one for a GPU model nobody has,
    a cluster without a Slurm backend, a quota of zero hours scheduled for next year."""
    empty = Cluster.objects.create(name="empty", display_name="No jobs yet")
    team = Team.objects.order_by("slug")[0]
    SlurmAccount.objects.create(cluster=empty, name=team.slug, team=team)
    Objective.objects.create(name="odd: nowhere partition", sli="queue_wait", wait_minutes=1,
                             target=0.9999, scope="partition", partition="nowhere")
    Objective.objects.create(name="odd: empty cluster", sli="job_success", target=0.0001,
                             scope="team", cluster=empty, window="calendar_month")
    Objective.objects.create(name="odd: team nowhere", sli="gpu_efficiency", target=0.5,
                             scope="team", team=team, partition="nowhere")
    Rate.objects.create(price=Decimal("0"), valid_from=date(2000, 1, 1))
    Rate.objects.create(price=Decimal("99999999.9999"), gpu_model="tpu", partition="nowhere",
                        valid_from=date(2026, 10, 1), valid_until=date(2026, 10, 2))
    Quota.objects.create(account=SlurmAccount.objects.filter(cluster__name="crawl")[0],
                         month=date(2027, 1, 1), gpu_minutes=0, state=Quota.State.SCHEDULED)
    slo.run_evaluation(timezone.now(), notify=False)


def test_every_link_and_form_works_for_every_persona_twice(folder, tmp_path, settings):
    settings.SITE_URL = SERVED  # the address the test client serves on, as make demo sets it
    demo.load(folder)
    people = personas()
    faults: list[str] = []
    seen: dict[str, list[int]] = {}
    for number in (1, 2):
        if number == 2:
            odd_configuration()
        for role, user in people.items():
            client = Client(raise_request_exception=False)
            client.force_login(user)
            report = Crawler(client).crawl(also=kinds_of_job_page(user))
            seen.setdefault(role, []).append(len(report.visited))
            compared = {url for _, url, status in report.visited
                        if url.startswith("/jobs/compare/") and status == 200}
            assert compared, f"{role}: the job list's Compare form was not followed"
            if rerun(user) is not None:  # its page's "compare with the previous run"
                assert any("?ids=" in url for url in compared), (role, compared)
            faults += [f"pass {number}, {role} ({user.username}): {f}"
                       for f in report.server_errors + report.broken_links
                       + report.form_errors + report.missing_anchors + report.offsite_links]
            assert report.forms >= 3, (role, report.forms)
    assert faults == [], "\n".join(faults)
    assert all(min(counts) >= 30 for counts in seen.values()), seen
