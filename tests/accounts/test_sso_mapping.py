"""Slurm user names to portal users, and directory groups to teams and roles."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured

from apps.accounts import services
from apps.accounts.models import Membership, Profile, Team
from apps.jobs.models import Job
from portal.sso import sso_team_groups
from tests.conftest import make_job

# --- Slurm names ------------------------------------------------------------------------


def test_usernames_map_to_themselves_without_a_profile(world):
    found = services.portal_users_by_slurm_name({"bob", "carol", "nobody"})
    assert found == {"bob": world.users["bob"].pk, "carol": world.users["carol"].pk}


def test_a_profile_claims_its_slurm_name_and_frees_the_username(world):
    services.set_slurm_username(world.users["bob"], "b.smith")
    services.set_slurm_username(world.users["carol"], "bob")  # carol is "bob" on Slurm
    found = services.portal_users_by_slurm_name({"bob", "b.smith", "carol"})
    assert found == {"b.smith": world.users["bob"].pk, "bob": world.users["carol"].pk}


def test_a_user_with_another_slurm_name_is_not_their_namesake(world):
    services.set_slurm_username(world.users["tom"], "t.jones")
    assert services.portal_users_by_slurm_name({"tom"}) == {}


def test_setting_a_slurm_name_relinks_the_jobs(world):
    bob = world.users["bob"]
    theirs = make_job(world.cluster, 501, None, None, user_name="b.smith")
    services.set_slurm_username(bob, "b.smith")
    assert set(Job.objects.filter(user=bob).values_list("job_id", flat=True)) == {501}
    assert Job.objects.get(job_id=101).user is None  # "bob" on Slurm is no longer him
    services.set_slurm_username(bob, "")
    assert set(Job.objects.filter(user=bob).values_list("job_id", flat=True)) == {101}
    assert Job.objects.get(pk=theirs.pk).user is None


def test_a_new_user_gets_their_earlier_jobs(world):
    make_job(world.cluster, 601, None, None, user_name="zoe")
    zoe = User.objects.create_user("zoe")
    assert list(Job.objects.filter(user=zoe).values_list("job_id", flat=True)) == [601]


def test_two_people_cannot_claim_one_slurm_name(world):
    from django.db import IntegrityError, transaction

    services.set_slurm_username(world.users["bob"], "shared")
    with pytest.raises(IntegrityError), transaction.atomic():
        Profile.objects.create(user=world.users["carol"], slurm_username="shared")
    Profile.objects.create(user=world.users["tom"])  # blank names do not collide
    Profile.objects.create(user=world.users["dave"])


# --- groups to teams ------------------------------------------------------------------


@pytest.fixture
def mapping(settings):
    settings.SSO_TEAM_GROUPS = sso_team_groups(
        "nlp-users:nlp,nlp-leads:nlp:lead,cv:vision,all-staff:nlp,all-staff:vision")
    settings.SSO_ADMIN_GROUPS = ["portal-admins"]


def _roles(user):
    return dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))


@pytest.mark.parametrize(("groups", "expected"), [
    ([], {}),
    (["nlp-users"], {"nlp": "member"}),
    (["nlp-users", "nlp-leads"], {"nlp": "lead"}),  # the highest role wins
    (["nlp-leads", "nlp-users"], {"nlp": "lead"}),  # whatever the order
    (["all-staff"], {"nlp": "member", "vision": "member"}),
    (["unmapped"], {}),
])
def test_roles_from_groups(mapping, groups, expected):
    assert services.roles_from_groups(groups) == expected


def test_groups_rewrite_only_the_managed_memberships(world, mapping):
    carol = world.users["carol"]  # member of vision by hand
    hand = Team.objects.create(slug="ops", name="Ops")
    Membership.objects.create(user=carol, team=hand, role="lead")
    services.apply_sso_groups(carol, ["nlp-leads"])
    assert _roles(carol) == {"nlp": "lead", "ops": "lead"}  # vision is managed: removed


def test_the_admin_group_grants_and_revokes_is_staff(world, mapping):
    bob = world.users["bob"]
    services.apply_sso_groups(bob, ["portal-admins"])
    bob.refresh_from_db()
    assert bob.is_staff
    services.apply_sso_groups(bob, [])
    bob.refresh_from_db()
    assert not bob.is_staff


def test_without_admin_groups_is_staff_is_left_alone(world, settings):
    settings.SSO_TEAM_GROUPS = {}
    settings.SSO_ADMIN_GROUPS = []
    services.apply_sso_groups(world.users["staff"], [])
    world.users["staff"].refresh_from_db()
    assert world.users["staff"].is_staff


@pytest.mark.parametrize("raw", ["nlp", "a:b:boss", ":nlp", "a::lead", "a:b:c:d"])
def test_a_bad_mapping_is_a_configuration_error_naming_the_entry(raw):
    with pytest.raises(ImproperlyConfigured, match="SSO_TEAM_GROUPS"):
        sso_team_groups(raw)


def test_a_mapping_parses_roles_and_repeats():
    assert sso_team_groups(" g1:t1 , g1:t2:lead,g2:t1:member ") == {
        "g1": [("t1", "member"), ("t2", "lead")], "g2": [("t1", "member")]}
