"""visible_to(): the one rule for who sees which jobs and teams."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from apps.accounts.models import Team
from apps.clusters.models import Cluster
from apps.core.models import TaskRun
from apps.jobs.models import Job, JobGpu

pytestmark = pytest.mark.django_db

EXPECTED_JOBS = {
    "bob": {101},                      # a researcher sees only their own jobs
    "tom": {102},                      # a teammate does not see bob's
    "carol": {201},
    "alice": {101, 102, 103},          # a lead sees the team's jobs (and her own)
    "dave": {201},                     # the other lead sees only team B
    "staff": {101, 102, 103, 201, 301},  # admins see everything, unmapped accounts too
    "eve": set(),                      # a disabled lead sees nothing
}


@pytest.mark.parametrize(("persona", "expected"), EXPECTED_JOBS.items())
def test_each_persona_sees_exactly_their_jobs(world, persona, expected):
    seen = set(Job.objects.visible_to(world.users[persona]).values_list("job_id", flat=True))
    assert seen == expected


def test_anonymous_sees_no_jobs_teams_or_runs(world):
    anon = AnonymousUser()
    assert not Job.objects.visible_to(anon).exists()
    assert not Team.objects.visible_to(anon).exists()
    assert not Cluster.objects.visible_to(anon).exists()
    assert not TaskRun.objects.visible_to(anon).exists()


def test_teams_are_visible_to_members_only(world):
    assert set(Team.objects.visible_to(world.users["bob"])) == {world.team_a}
    assert set(Team.objects.visible_to(world.users["dave"])) == {world.team_b}
    assert set(Team.objects.visible_to(world.users["staff"])) == {world.team_a, world.team_b}


def test_a_lead_of_two_teams_sees_both_without_duplicates(world):
    from apps.accounts.models import Membership

    Membership.objects.create(user=world.users["alice"], team=world.team_b, role="lead")
    ids = list(Job.objects.visible_to(world.users["alice"]).values_list("job_id", flat=True))
    assert sorted(ids) == [101, 102, 103, 201]


def test_gpu_bindings_follow_their_job(world):
    node = world.cluster.nodes.get()
    for job in (world.jobs["bob"], world.jobs["carol"]):
        JobGpu.objects.create(job=job, node=node, gpu_index=0, start=job.start_time)
    assert {g.job.job_id for g in JobGpu.objects.visible_to(world.users["bob"])} == {101}
    assert {g.job.job_id for g in JobGpu.objects.visible_to(world.users["dave"])} == {201}


def test_jobs_synced_before_the_user_existed_are_linked_on_creation(world):
    from django.contrib.auth.models import User

    from tests.conftest import make_job

    make_job(world.cluster, 401, None, world.team_b, user_name="newbie")
    newbie = User.objects.create_user("newbie")
    assert set(Job.objects.visible_to(newbie).values_list("job_id", flat=True)) == {401}


def test_task_runs_are_for_admins_only(world):
    TaskRun.objects.create(kind="sync")
    assert TaskRun.objects.visible_to(world.users["staff"]).count() == 1
    assert TaskRun.objects.visible_to(world.users["alice"]).count() == 0
