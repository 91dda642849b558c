"""Every SLO page renders whatever an admin configured: objectives scoped to a partition or
cluster with no jobs, a team with no jobs at all, extreme targets and waits, every SLI and
window. No data is shown as "no data", never as a server error (issue 19)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.clusters.models import Cluster
from apps.slo import services
from apps.slo.models import Objective
from apps.slo.templatetags.slo import gpu_hours, pct, rate, seconds
from tests.slo.conftest import NOW, objective

pytestmark = pytest.mark.django_db
ODD = [
    {"sli": "queue_wait", "scope": "partition", "partition": "nowhere"},
    {"sli": "queue_wait", "scope": "team", "partition": "nowhere"},
    {"sli": "job_success", "scope": "team", "partition": "nowhere", "window": "calendar_month"},
    {"sli": "gpu_efficiency", "scope": "partition", "partition": "nowhere"},
    {"sli": "queue_wait", "scope": "platform", "wait_minutes": 1, "target": 0.9999},
    {"sli": "job_success", "scope": "platform", "target": 0.0001, "window": "rolling_28d"},
    {"sli": "gpu_efficiency", "scope": "team", "window": "calendar_month", "target": 0.5},
]


@pytest.mark.parametrize("values", [None, "", "n/a", [], {}, 0, -5, 1e12, float("nan")])
def test_the_formatting_filters_take_anything_a_template_hands_them(values):
    for fn in (seconds, gpu_hours, pct, rate):
        assert isinstance(fn(values), str)


def test_an_objective_on_a_partition_without_jobs_still_renders_every_page(world, jobs, login):
    """The reported 500: a partition-scoped objective with no jobs gave details without
    p50/p90 and ``|seconds`` got the empty string."""
    empty_cluster = Cluster.objects.create(name="empty", display_name="No jobs here")
    for n, values in enumerate(ODD):
        objective(**{**values, "name": f"odd {n}"})
    objective("queue_wait", name="odd empty cluster", cluster=empty_cluster)
    services.run_evaluation(NOW, notify=False)
    assert Objective.objects.count() >= len(ODD) + 1
    for persona in ("staff", "alice", "bob", "carol"):
        client = login(persona)
        for url in (reverse("slo-list"), reverse("slo-classification"),
                    reverse("slo-team", args=["nlp"]), reverse("slo-team", args=["vision"]),
                    reverse("slo-team-export", args=["nlp"])):
            status = client.get(url).status_code
            assert status in (200, 404), (persona, url, status)
    page = login("alice").get(reverse("slo-team", args=["nlp"])).content.decode()
    assert "no data" in page


def test_a_team_without_any_job_renders_its_scorecards(world, login):
    objective("queue_wait", name="waits", scope="team")
    objective("job_success", name="endings", scope="team", window="calendar_month")
    services.run_evaluation(NOW, notify=False)
    response = login("dave").get(reverse("slo-team", args=["vision"]))
    assert response.status_code == 200
    assert "no data" in response.content.decode()
