"""Who may do what: the role → action table, read by views and the API.

Visibility of single objects is *not* decided here but by each model's
``visible_to(user)`` queryset: an object outside it is a 404. This module answers the
second question, "may this visible user do this action?", and a "no" is a 403.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.mixins import AccessMixin
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import SAFE_METHODS, BasePermission

from apps.accounts.models import Membership

# Actions a role grants. Platform admins (is_staff) may do every action.
VIEW = "view"            # see one's own things (every signed-in, active user)
VIEW_TEAM = "view_team"  # see a team's jobs, scorecards and statements (leads)
ADMIN = "admin"          # platform data: clusters, syncs, quotas, rates, findings

# What a refused page says (the 403 page shows it, apps/core/error_pages.py)
FOR_WHOM = {ADMIN: "this page and its actions are for platform admins",
            VIEW_TEAM: "this page is for team leads: ask your team's lead or a platform admin",
            VIEW: "this page needs an active account"}

ROLE_ACTIONS: dict[str, frozenset[str]] = {
    "anonymous": frozenset(),
    Membership.Role.MEMBER: frozenset({VIEW}),
    Membership.Role.LEAD: frozenset({VIEW, VIEW_TEAM}),
}


def lead_team_ids(user: Any) -> list[int]:
    """Ids of the teams this user leads."""
    if not getattr(user, "is_authenticated", False):
        return []
    return list(Membership.objects.filter(user=user, role=Membership.Role.LEAD)
                .values_list("team_id", flat=True))


def user_can(user: Any, action: str) -> bool:
    """Whether the user holds ``action`` through any role (not tied to one object)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return False
    if user.is_staff:
        return True
    if action == VIEW:
        return True
    roles = set(Membership.objects.filter(user=user).values_list("role", flat=True))
    return any(action in ROLE_ACTIONS[role] for role in roles)


def signed_in(request: HttpRequest) -> User:
    """The user of a request that ``ActionRequiredMixin`` let through (it sends anonymous
    users to the login page), typed as the real user the ORM lookups need."""
    user = request.user
    if isinstance(user, AnonymousUser):
        raise PermissionDenied(FOR_WHOM[VIEW])
    return user


class ActionRequiredMixin(AccessMixin):
    """Class-based views: anonymous users go to the login page, others need the action.

    Set ``required_action`` (reads) and optionally ``write_action`` (POST and friends).
    """

    required_action: str = VIEW
    write_action: str | None = None

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        action = self.required_action
        if request.method not in SAFE_METHODS:
            action = self.write_action or ADMIN
        if not user_can(request.user, action):
            raise PermissionDenied(FOR_WHOM.get(action, f"this needs the {action!r} permission"))
        return super().dispatch(request, *args, **kwargs)  # type: ignore[misc]


class RolePermission(BasePermission):
    """The API's one permission class, reading ``required_action`` / ``write_action``."""

    def has_permission(self, request: Any, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            action = getattr(view, "required_action", VIEW)
        else:
            action = getattr(view, "write_action", None) or ADMIN
        return user_can(request.user, action)
