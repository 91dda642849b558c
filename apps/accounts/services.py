"""Services for accounts: Slurm identities of portal users, and SSO groups to teams."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from apps.accounts.models import Membership, Profile, Team

# --- Slurm user names ------------------------------------------------------------------


def slurm_name_of(user: Any) -> str:
    """The Slurm login of a portal user: the profile's ``slurm_username``, else the username."""
    profile = Profile.objects.filter(user=user).only("slurm_username").first()
    return (profile.slurm_username if profile else "") or user.username


def portal_users_by_slurm_name(names: set[str]) -> dict[str, int]:
    """Map Slurm user names to portal user ids.

    1. A profile's ``slurm_username`` claims that Slurm name.
    2. Otherwise a user whose username equals the Slurm name, unless that user has a
       different Slurm name of their own (then the namesake is someone else on Slurm).
    """
    if not names:
        return {}
    found = dict(Profile.objects.filter(slurm_username__in=names)
                 .values_list("slurm_username", "user_id"))
    rest = names - found.keys()
    if rest:
        namesakes = (get_user_model().objects.filter(username__in=rest)
                     .exclude(profile__slurm_username__gt="")
                     .values_list("username", "id"))
        found.update(namesakes)
    return found


def link_user_jobs(user: Any) -> int:
    """Give this user the jobs of the Slurm name they own; hand back those of names they
    no longer own. Returns how many jobs this user gained.

    Runs when a user appears after their jobs (first login, SSO) and whenever a Slurm
    name changes hands, so job ownership always agrees with ``portal_users_by_slurm_name``.
    """
    from apps.jobs.models import Job

    name = slurm_name_of(user)
    with transaction.atomic():
        stale = set(Job.objects.filter(user=user).exclude(user_name=name)
                    .values_list("user_name", flat=True).distinct())
        owners = portal_users_by_slurm_name(stale)
        for old_name in stale:
            Job.objects.filter(user=user, user_name=old_name).update(user_id=owners.get(old_name))
        if portal_users_by_slurm_name({name}).get(name) != user.pk:
            return 0
        # exclude(user=...) keeps NULLs: unlinked jobs and namesakes' jobs both move here
        return Job.objects.filter(user_name=name).exclude(user=user).update(user=user)


def set_slurm_username(user: Any, name: str) -> None:
    """Record the user's Slurm login (blank: same as the username) and relink their jobs."""
    profile, _ = Profile.objects.get_or_create(user=user)
    if profile.slurm_username != name:
        profile.slurm_username = name
        profile.save(update_fields=["slurm_username", "updated_at"])  # the signal relinks


# --- SSO groups to teams and roles -------------------------------------------------------

_RANK: dict[str, int] = {Membership.Role.MEMBER: 1, Membership.Role.LEAD: 2}


def roles_from_groups(groups: Iterable[str]) -> dict[str, str]:
    """Team slug -> role granted by these directory groups (the highest role wins)."""
    wanted: dict[str, str] = {}
    for group in groups:
        for slug, role in settings.SSO_TEAM_GROUPS.get(group, ()):
            if _RANK[role] > _RANK.get(wanted.get(slug, ""), 0):
                wanted[slug] = role
    return wanted


@transaction.atomic
def apply_sso_groups(user: Any, groups: Iterable[str]) -> None:
    """Make the user's memberships and admin flag follow their directory groups.

    Only teams named in ``SSO_TEAM_GROUPS`` are managed: memberships there are added,
    re-roled or removed to match the groups; other teams are left to the admin pages.
    Missing teams are created. With ``SSO_ADMIN_GROUPS`` set, ``is_staff`` follows it.
    """
    groups = set(groups)
    wanted = roles_from_groups(groups)
    managed = {slug for pairs in settings.SSO_TEAM_GROUPS.values() for slug, _ in pairs}
    for slug, role in wanted.items():
        team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": slug})
        Membership.objects.update_or_create(user=user, team=team, defaults={"role": role})
    (Membership.objects.filter(user=user, team__slug__in=managed - wanted.keys()).delete())
    if settings.SSO_ADMIN_GROUPS:
        is_staff = bool(groups & set(settings.SSO_ADMIN_GROUPS))
        if user.is_staff != is_staff:
            user.is_staff = is_staff
            user.save(update_fields=["is_staff"])
