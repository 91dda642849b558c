"""Implausible records on the job page, the admins' acceptance (audited), the job list's
filter, the API and the Platform page (issue 25)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.audit.models import AuditEvent
from apps.jobs.models import Job

REASONS = ["claims 16 GPUs; the cluster has 8"]
KEPT_OUT = "It is stored as Slurm sent it and kept out of chargeback and SLOs until an admin " \
           "accepts it."


@pytest.fixture
def flagged(world) -> Job:
    job = world.jobs["bob"]
    job.implausible, job.gpus, job.gpu_equivalent = REASONS, 16, 16.0
    job.save()
    return job


def _page(login, persona: str, job: Job) -> str:
    return login(persona).get(reverse("jobs-detail", args=[job.cluster.name, job.job_id])
                              ).content.decode()


def _accept(login, persona: str, job: Job, note: str = "gpu02 was retired in December",
            client=None):
    client = client or login(persona)
    return client.post(reverse("jobs-accept", args=[job.cluster.name, job.job_id]),
                       {"note": note})


def test_the_owner_reads_why_the_record_is_left_out_and_gets_no_button(flagged, login):
    html = _page(login, "bob", flagged)
    assert "<strong>Implausible record.</strong>" in html
    assert "<li>claims 16 GPUs; the cluster has 8</li>" in html and KEPT_OUT in html
    assert "not counted: <a href=\"#plausibility\">implausible record</a>" in html
    assert "jobs-accept" not in html and "/accept/" not in html


def test_an_admin_accepts_with_a_note_and_the_audit_log_keeps_it(flagged, login, world):
    html = _page(login, "staff", flagged)
    assert f'action="{reverse("jobs-accept", args=["testcluster", 101])}"' in html
    assert 'name="csrfmiddlewaretoken"' in html and 'name="note"' in html
    response = _accept(login, "staff", flagged)
    assert response.status_code == 303 and response["Location"].endswith("#plausibility")
    flagged.refresh_from_db()
    assert flagged.implausible_accepted_by == world.users["staff"] and not flagged.is_held_back
    event = AuditEvent.objects.get(action=AuditEvent.Action.ADMIN, target="job testcluster:101")
    assert (event.username, event.details) == ("staff", {
        "action": "implausible record accepted", "reasons": REASONS,
        "note": "gpu02 was retired in December"})
    after = _page(login, "bob", flagged)
    assert "<strong>Implausible record, accepted.</strong>" in after
    assert "Accepted by staff on" in after and "chargeback and SLOs count it" in after
    assert "not counted" not in after


def test_accepting_needs_a_note(flagged, login):
    client = login("staff")
    response = _accept(login, "staff", flagged, note="  ", client=client)
    assert response.status_code == 303
    flagged.refresh_from_db()
    assert flagged.is_held_back and not AuditEvent.objects.filter(
        action=AuditEvent.Action.ADMIN).exists()
    page = client.get(response["Location"]).content.decode()
    assert "Say why the record is right: the note goes to the audit log." in page


@pytest.mark.parametrize("persona", ["bob", "alice", "tom", "carol", "dave"])
def test_only_admins_accept(flagged, login, persona):
    assert _accept(login, persona, flagged).status_code == 403
    flagged.refresh_from_db()
    assert flagged.is_held_back


def test_a_job_beacon_does_not_have_is_a_404(world, login):
    url = reverse("jobs-accept", args=["testcluster", 999])
    assert login("staff").post(url, {"note": "x"}).status_code == 404


def test_a_record_that_cannot_be_right_offers_no_button_and_is_refused(world, login):
    job = world.jobs["tom"]
    job.implausible = ["claims 1,000,000,000,000 GPUs; the cluster has 8"]
    job.gpus, job.gpu_equivalent = 2**31 - 1, 1e12
    job.save()
    html = _page(login, "staff", job)
    assert "It cannot be accepted: it claims more than any cluster has." in html
    assert 'name="note"' not in html
    client = login("staff")
    response = _accept(login, "staff", job, client=client)
    page = client.get(response["Location"]).content.decode()
    assert page.count("It cannot be accepted: it claims more than any cluster has.") == 2
    job.refresh_from_db()
    assert job.is_held_back


def test_the_job_list_filters_flagged_records(flagged, login, world):
    other = world.jobs["carol"]
    other.implausible, other.implausible_accepted_at = REASONS, other.submit_time
    other.save()
    client = login("staff")

    def listed(value: str) -> set[int]:
        page = client.get(reverse("jobs-list"), {"scope": "all", "implausible": value})
        return {r.job_id for r in page.context["page"].rows}

    assert listed("1") == {101}
    assert listed("accepted") == {201}
    assert listed("any") == {101, 201}
    assert len(listed("")) == 5
    assert login("carol").get(reverse("jobs-list"), {"implausible": "1"}).context[
        "page"].rows == []  # bob's record is not hers to see


def test_the_api_exposes_the_flag_and_the_acceptance(flagged, login):
    client = login("alice")
    detail = client.get(reverse("api:job-detail", args=[flagged.pk])).json()
    assert (detail["implausible"], detail["implausible_accepted_at"],
            detail["implausible_accepted_by"]) == (REASONS, None, None)
    _accept(login, "staff", flagged)
    listed = client.get(reverse("api:job-list"), {"implausible": "accepted"}).json()
    [row] = listed["results"]
    assert (row["job_id"], row["implausible_accepted_by"]) == (101, "staff")
    assert row["implausible_accepted_at"] is not None


def test_the_platform_page_counts_the_records_waiting_for_an_admin(flagged, login):
    html = login("staff").get(reverse("core-platform")).content.decode()
    assert "1 implausible job record\n  left out of chargeback and SLOs" in html
    assert "?implausible=1&amp;scope=all" in html
