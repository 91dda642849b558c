"""Issue 25's example: a sacct record claiming 10^12 GPUs no longer reaches the team's
statement; an implausible record an admin accepts counts from the next refresh."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse

from apps.chargeback import services
from apps.chargeback.models import Statement
from apps.clusters.importer import import_sacct
from apps.jobs import plausibility
from apps.jobs.models import Job
from apps.quotas.services import account_usage
from tests.chargeback.conftest import NOV
from tests.clusters.test_import_plausibility import dump, record

AFTER = datetime(2026, 12, 3, tzinfo=UTC)
D = Decimal


def _bobs(job_id: int, gpus: int) -> dict:
    """bob's one-hour h100 job in account nlp (team A), on the world's cluster (8 GPUs)."""
    return record(job_id, gpus=gpus, cluster="testcluster", account="nlp", user="bob",
                  association={"account": "nlp", "cluster": "testcluster", "user": "bob",
                               "partition": None})


def _statement(world) -> Statement:
    services.refresh_statements(NOV, now=AFTER)
    return Statement.objects.get(team=world.team_a, period__month=NOV)


def test_a_record_claiming_a_trillion_gpus_stays_off_the_statement(world, rates):
    result = import_sacct(world.cluster, io.BytesIO(dump(_bobs(901, 10**12))))
    assert result.implausible == 1 and result.error_count == 0
    statement = _statement(world)
    # the world's three 8-GPU hours of team A only: 24 h x 3.00 EUR (h100)
    assert (statement.allocated_hours, statement.amount) == (D("24.0000"), D("72.00"))
    job = Job.objects.select_related("cluster").get(job_id=901)
    with pytest.raises(plausibility.NotAcceptable):
        plausibility.accept(job, world.users["staff"], "sure")
    assert _statement(world).amount == D("72.00")


def test_an_accepted_record_counts_from_the_next_refresh(world, rates):
    import_sacct(world.cluster, io.BytesIO(dump(_bobs(902, 16))))  # 16 GPUs on 8: flagged
    assert _statement(world).amount == D("72.00")
    job = Job.objects.select_related("cluster").get(job_id=902)
    assert job.implausible == ["claims 16 GPUs; the cluster has 8"]
    assert plausibility.accept(job, world.users["staff"], "gpu02 was retired in December")
    statement = _statement(world)
    assert (statement.allocated_hours, statement.amount) == (D("40.0000"), D("120.00"))


def test_quota_usage_leaves_held_back_records_out(world):
    make = dict(start_time=datetime(2026, 11, 20, 8, tzinfo=UTC),
                end_time=datetime(2026, 11, 20, 9, tzinfo=UTC))
    job = Job.objects.get(job_id=101)
    Job.objects.filter(pk=job.pk).update(implausible=["claims 16 GPUs; the cluster has 8"],
                                         **make)
    account = world.cluster.accounts.get(name="nlp")
    now = datetime(2026, 11, 25, tzinfo=UTC)
    assert account_usage(account, None, now).month_hours == pytest.approx(16.0)  # 102, 103
    Job.objects.filter(pk=job.pk).update(implausible_accepted_at=now)
    assert account_usage(account, None, now).month_hours == pytest.approx(24.0)


def test_the_statement_page_says_what_it_left_out_and_links_to_it(world, rates, login):
    import_sacct(world.cluster, io.BytesIO(dump(_bobs(901, 10**12))))
    statement = _statement(world)
    html = login("alice").get(reverse("chargeback-statement", args=[statement.pk])).content
    text = html.decode()
    assert "1 implausible job record\n  left out of this statement until an admin accepts it" \
        in text
    assert f'href="{reverse("jobs-list")}?implausible=1&amp;scope=team&amp;team=nlp"' in text
    listed = login("alice").get(reverse("jobs-list"),
                                {"implausible": "1", "scope": "team", "team": "nlp"})
    assert [r.job_id for r in listed.context["page"].rows] == [901]
    other = Statement.objects.get(team=world.team_b, period__month=NOV)
    page = login("staff").get(reverse("chargeback-statement", args=[other.pk]))
    assert b"implausible" not in page.content
