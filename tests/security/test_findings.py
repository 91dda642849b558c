"""Storing hits: one finding per condition, occurrences, re-runs, reopening, entities,
and who gets told when."""

from __future__ import annotations

import pytest

from apps.security.findings import record_hits
from apps.security.models import Finding, FindingEvent
from tests.security.conftest import T, hit

pytestmark = pytest.mark.django_db


def test_the_same_condition_updates_one_finding(world):
    record_hits(world.cluster, [hit(start=T, end=T + 900)])
    result = record_hits(world.cluster, [hit(start=T + 900, end=T + 1800)])
    [finding] = Finding.objects.all()
    assert (result.created, result.updated) == (0, 1)
    assert finding.occurrences == 1 and finding.last_seen.timestamp() == T + 1800
    assert finding.first_seen.timestamp() == T


def test_a_later_sighting_is_a_new_occurrence(world):
    record_hits(world.cluster, [hit(start=T, end=T + 900)])
    record_hits(world.cluster, [hit(start=T + 7200, end=T + 8000)])
    [finding] = Finding.objects.all()
    assert finding.occurrences == 2 and finding.last_seen.timestamp() == T + 8000


def test_rerunning_a_window_changes_nothing(world):
    hits = [hit(start=T, end=T + 900), hit(start=T + 7200, end=T + 8000),
            hit("ssh_without_allocation", "gpu04:mallory", start=T + 50, end=T + 50)]
    record_hits(world.cluster, hits)
    before = list(Finding.objects.values("pk", "occurrences", "last_seen", "first_seen"))
    events = FindingEvent.objects.count()
    again = record_hits(world.cluster, list(reversed(hits)))
    assert again.created == 0 and again.updated == 0 and again.unchanged == 3
    assert list(Finding.objects.values("pk", "occurrences", "last_seen", "first_seen")) == before
    assert FindingEvent.objects.count() == events


def test_distinct_conditions_are_distinct_findings(world):
    record_hits(world.cluster, [hit(dedup="gpu01:0"), hit(dedup="gpu01:1"),
                                hit("miner_in_job", dedup="gpu01:0")])
    assert Finding.objects.count() == 3


def test_a_resolved_finding_seen_again_after_resolution_reopens(world):
    from apps.security.findings import transition

    record_hits(world.cluster, [hit(start=T, end=T + 900)])
    finding = Finding.objects.get()
    transition(finding, world.users["staff"], "resolve", reason="killed the process")
    finding.refresh_from_db()
    # an older sighting (before the resolution) does not reopen it
    record_hits(world.cluster, [hit(start=T + 5000, end=T + 6000)])
    finding.refresh_from_db()
    assert finding.status == "resolved"
    later = finding.resolved_at.timestamp() + 3600
    result = record_hits(world.cluster, [hit(start=later, end=later + 900)])
    finding.refresh_from_db()
    assert result.reopened == 1 and finding.status == "open"
    assert finding.events.filter(action="reopened", actor=None).exists()


def test_suppressed_findings_stay_suppressed_and_quiet(world):
    from datetime import timedelta

    from django.utils import timezone

    from apps.security.findings import transition

    record_hits(world.cluster, [hit(severity="critical")])
    finding = Finding.objects.get()
    transition(finding, world.users["staff"], "suppress", reason="burn-in of new nodes",
               until=timezone.now() + timedelta(days=2))
    later = timezone.now().timestamp() + 60
    result = record_hits(world.cluster, [hit(severity="critical", start=later, end=later + 900)])
    finding.refresh_from_db()
    assert finding.status == "suppressed" and finding.occurrences == 2
    assert result.notify_now == [] and not finding.notify_pending


def test_entities_are_linked_to_jobs_users_and_teams(world):
    record_hits(world.cluster, [
        hit("miner_in_job", "job:101", job_id=101, user="bob", team="nlp"),
        hit("ssh_without_allocation", "gpu01:carol", user="carol", team="vision"),
        hit("secret_in_job_script", "999:x", job_id=999, user="ghost", team="unmapped"),
    ])
    miner = Finding.objects.get(rule_key="miner_in_job")
    assert miner.job == world.jobs["bob"] and miner.user == world.users["bob"]
    assert miner.team == world.team_a and miner.node.name == "gpu01"
    ssh = Finding.objects.get(rule_key="ssh_without_allocation")
    assert ssh.job is None and ssh.user == world.users["carol"] and ssh.team == world.team_b
    unknown = Finding.objects.get(rule_key="secret_in_job_script")
    assert unknown.job is None and unknown.job_id_raw == 999 and unknown.team is None


def test_critical_findings_are_sent_at_once_others_wait_for_the_digest(world):
    result = record_hits(world.cluster, [hit(severity="critical", dedup="a"),
                                         hit(severity="medium", dedup="b")])
    critical = Finding.objects.get(dedup_key="gpu_activity_without_job:a")
    medium = Finding.objects.get(dedup_key="gpu_activity_without_job:b")
    assert result.notify_now == [critical.pk]
    assert medium.notify_pending and not critical.notify_pending


def test_a_quieter_sighting_never_lowers_the_severity_and_a_louder_one_escalates(world):
    record_hits(world.cluster, [hit(severity="high", start=T, end=T + 900)])
    record_hits(world.cluster, [hit(severity="medium", start=T + 900, end=T + 1800)])
    finding = Finding.objects.get()
    assert finding.severity == "high"
    result = record_hits(world.cluster, [hit(severity="critical", start=T + 1800,
                                             end=T + 2700)])
    finding.refresh_from_db()
    assert finding.severity == "critical" and result.notify_now == [finding.pk]
    assert finding.events.filter(action="escalated").exists()


def test_titles_and_keys_are_cut_to_their_columns(world):
    record_hits(world.cluster, [hit(dedup="x" * 500, title="y" * 500)])
    finding = Finding.objects.get()
    assert len(finding.dedup_key) == 300 and len(finding.title) == 300
