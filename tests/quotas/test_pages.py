"""Quota pages: who sees which accounts, the admin's preview -> confirm flow, conflicts and
Slurm refusals shown on the form, and a quota-held job's reason in words on its page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.clusters import services as cluster_services
from apps.core.errors import AdapterError
from apps.quotas.models import Quota, QuotaChange
from tests.conftest import make_job


@pytest.fixture
def patched(slurm, monkeypatch):
    """The views reach Slurm through ``clusters.services.client_for``: answer with the fake."""
    monkeypatch.setattr(cluster_services, "client_for", lambda cluster: slurm)
    return slurm


@pytest.mark.parametrize(("persona", "accounts"), [
    ("bob", {"nlp"}), ("alice", {"nlp"}), ("carol", {"vision"}), ("staff", {"nlp", "vision"}),
])
def test_members_see_their_teams_quotas_only(world, login, nlp, persona, accounts):
    QuotaChange.objects.create(account=nlp, month=nlp.created_at.date().replace(day=1),
                               kind="drift", new_minutes=60)
    page = login(persona).get(reverse("quotas-home"))
    assert {row.account.name for row in page.context["rows"]} == accounts
    assert len(page.context["changes"]) == (1 if persona == "staff" else 0)  # admins only


def _preview(client, nlp, hours="100", reason="Q4 budget"):
    return client.post(reverse("quotas-edit", args=[nlp.pk]),
                       {"step": "preview", "month": "2026-11", "hours": hours,
                        "reason": reason})


def _confirm(client, nlp, preview_ctx, hours="100"):
    p = preview_ctx["preview"]
    return client.post(reverse("quotas-edit", args=[nlp.pk]), {
        "step": "apply", "month": f"{p.month:%Y-%m}", "hours": hours, "reason": "Q4 budget",
        "seen_minutes": "" if p.old_minutes is None else p.old_minutes,
        "seen_version": p.version})


def test_the_admin_previews_the_exact_command_then_confirms(world, login, patched, nlp):
    client = login("staff")
    page = _preview(client, nlp)
    text = page.content.decode()
    assert "sacctmgr -i modify account where name=nlp set GrpTRESMins=gres/gpu=6000" in text
    assert "Preview: nothing is written yet" in text and not Quota.objects.exists()
    done = _confirm(client, nlp, page.context)
    assert done.status_code == 303
    assert Quota.objects.get().gpu_minutes == 6000
    assert patched.account_limits("nlp").grp_tres_mins == {"gres/gpu": 6000}


def test_two_admins_on_one_quota_the_second_is_told(world, login, patched, nlp):
    first, second = login("staff"), login("staff")
    seen = _preview(second, nlp, hours="300").context
    _confirm(first, nlp, _preview(first, nlp).context)
    page = _confirm(second, nlp, seen, hours="300")
    assert page.status_code == 409
    assert "Not applied" in page.content.decode() and "changed this quota" in page.context["error"]
    assert Quota.objects.get().gpu_minutes == 6000


def test_a_refusal_from_slurm_is_shown_and_nothing_is_applied(world, login, patched, nlp):
    client = login("staff")
    seen = _preview(client, nlp).context
    patched.limit_fail = AdapterError("Slurm changed nothing:  Nothing modified",
                                      service="slurm")
    page = _confirm(client, nlp, seen)
    assert page.status_code == 200 and "Nothing modified" in page.context["error"]
    assert not Quota.objects.exists() and QuotaChange.objects.get().kind == "failed"


@pytest.mark.parametrize(("hours", "message"), [("-1", "cannot be negative"),
                                                ("1e9", "absurd"),
                                                ("ten", "'ten' is not a number of GPU-hours")])
def test_negative_and_absurd_values_are_refused_on_the_form(world, login, patched, nlp, hours,
                                                            message):
    page = _preview(login("staff"), nlp, hours=hours)
    assert message in page.context["error"] and "preview" not in page.context


def test_a_bad_month_is_a_400_keeping_the_input_and_a_bad_seen_value_is_not_applied(
        world, login, patched, nlp):
    """Issue 26: a month typo gave a full 404 page and lost what was typed."""
    client = login("staff")
    url = reverse("quotas-edit", args=[nlp.pk])
    bad_month = {"step": "preview", "month": "2026-13", "hours": "17", "reason": "grant"}
    page = client.post(url, bad_month)
    assert page.status_code == 400 and "preview" not in page.context
    text = page.content.decode()
    assert "month &#x27;2026-13&#x27; is not YYYY-MM" in text and 'value="2026-13"' in text
    assert 'value="17"' in text and 'value="grant"' in text  # nothing typed is lost
    page = client.get(url, {"month": "nov"})
    assert page.status_code == 400 and 'value="nov"' in page.content.decode()
    page = client.post(url, {"step": "apply", "month": "2026-11", "hours": "100", "reason": "r",
                             "seen_minutes": "x", "seen_version": "0"})
    assert page.status_code == 200
    assert page.context["error"] == "Not applied: 'x' is not a whole number"
    assert not patched.calls


def test_leads_cannot_set_quotas(world, login, patched, nlp):
    assert _preview(login("alice"), nlp).status_code == 403
    assert not patched.calls


def test_a_job_held_by_the_quota_says_so_in_words(world, login):
    job = make_job(world.cluster, 500, world.users["bob"], world.team_a, state="PENDING",
                   start_time=None, end_time=None, reason="AssocGrpGRESMinutes")
    page = login("bob").get(reverse("jobs-detail", args=[world.cluster.name, job.job_id]))
    text = page.content.decode()
    assert "(AssocGrpGRESMinutes)" in text
    assert "your team&#x27;s GPU-hour quota is used up" in text
    assert reverse("quotas-home") in text


def test_the_quota_page_says_when_each_figure_was_taken(world, login, slurm, nlp):
    """Issue 26: Slurm's decayed usage is as of the last sshare sync; the team's GPU-hours
    this month are its statement's, as of its computation: the figure, words and time the
    statement page shows (the page said 1,500.9 live where the statement said 1,490.6)."""
    from datetime import UTC, date, datetime, timedelta

    import time_machine
    from django.utils import timezone

    from apps.analysis.figures import gpu_hours_text
    from apps.chargeback import services as billing
    from apps.chargeback.models import Statement
    from apps.quotas import services
    from tests.quotas.conftest import shares

    with time_machine.travel(datetime(2026, 11, 20, 12, tzinfo=UTC), tick=False):
        slurm.share_rows = shares({"nlp": 1500.94 * 60})
        services.check_cluster(world.cluster, slurm, now=timezone.now() - timedelta(hours=2))
        Quota.objects.create(account=nlp, month=date(2026, 11, 1), gpu_minutes=1200 * 60)
        staff = login("staff")
        text = staff.get(reverse("quotas-home")).content.decode()
        assert "1,500.9 of 1,200.0 GPU-h (Slurm's decayed" in text and "(sshare)" in text
        assert "no statement yet" in text and "(live)" not in text
        billing.refresh_statements(date(2026, 11, 1), now=timezone.now() - timedelta(hours=1))
        statement = Statement.objects.get(team__slug="nlp", period__month=date(2026, 11, 1))
        figure = (f'data-subject="team:nlp/2026-11" data-value="'
                  f'{gpu_hours_text(statement.allocated_hours)}" data-at="2026-11-20T11:00:00')
        quotas = staff.get(reverse("quotas-home")).content.decode()
        assert figure in quotas and "as of 2026-11-20 11:00 UTC (statement draft)" in quotas
        edit = staff.get(reverse("quotas-edit", args=[nlp.pk])).content.decode()
        assert figure in edit and "as of 2026-11-20 11:00 UTC (statement draft)" in edit
        page = staff.get(reverse("chargeback-statement", args=[statement.pk])).content.decode()
        assert figure in page
        link = reverse("chargeback-statement", args=[statement.pk])
        team = staff.get(reverse("accounts-team-detail", args=["nlp"])).content.decode()
        assert figure in team and f'<a href="{link}">statement</a>' in team
        member = login("bob").get(reverse("accounts-team-detail", args=["nlp"])).content.decode()
        assert figure in member and link not in member  # researchers see no statements



def test_the_preview_shows_the_consequence_with_the_numbers_the_page_shows_after(
        world, login, patched, nlp):
    """Issue 26: "no limit", then a 1,200 GPU-h quota against 2,710.8 GPU-h of decayed usage
    blocked the team at once with a figure the preview never showed. The preview now says
    it, with the same figures the quota page shows once confirmed."""
    from apps.quotas import services
    from tests.quotas.conftest import shares

    patched.share_rows = shares({"nlp": 2710.8 * 60, "vision": 0.0})
    services.check_cluster(world.cluster, patched)
    client = login("staff")
    page = _preview(client, nlp, hours="1200")
    preview = page.context["preview"]
    text = page.content.decode()
    assert preview.blocks and 'id="quota-blocks"' in text
    assert "The new quota is already used up: new jobs wait at" in text
    assert f"<strong>{preview.after.percent}%</strong> · 2,710.8 of 1,200.0 GPU-h" in text
    assert "used up: new jobs wait" in text and "AssocGrpGRESMinutes" in text
    assert "bob" in text.split("Who would wait")[1].split("</dd>")[0]  # the account's users
    assert not Quota.objects.exists()

    _confirm(client, nlp, page.context, hours="1200")
    after = login("staff").get(reverse("quotas-home"))
    [row] = [r for r in after.context["rows"] if r.account == nlp]
    assert (row.status.percent, row.status.used_hours, row.status.limit_hours) == (
        preview.after.percent, preview.after.used_hours, preview.after.limit_hours)
    assert row.month_hours == preview.usage.month_hours
    assert row.status.percent == 225.9
    shown = after.content.decode()
    assert f"{preview.after.percent}%" in shown and "2,710.8 of 1,200.0 GPU-h" in shown
    assert "used up: new jobs wait" in shown


def test_a_quota_with_room_left_says_so_without_a_warning(world, login, patched, nlp):
    from apps.quotas import services
    from tests.quotas.conftest import shares

    patched.share_rows = shares({"nlp": 100 * 60.0, "vision": 0.0})
    services.check_cluster(world.cluster, patched)
    page = _preview(login("staff"), nlp, hours="1000")
    assert not page.context["preview"].blocks
    text = page.content.decode()
    assert 'id="quota-blocks"' not in text and "<strong>10.0%</strong>" in text
