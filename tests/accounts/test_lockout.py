"""Sign-in lockout (issue 27 item 5): it says how long, attempts during it do not extend it,
and an admin can always lift it (a command and an admin action, both audited)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from apps.accounts.lockout import lockout_ends, minutes_left
from apps.audit.models import AuditEvent

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
M = timedelta(minutes=1)


@pytest.mark.parametrize(("attempts", "limit", "ends"), [
    ([], 3, None),
    ([(T0, 2)], 3, None),  # under the limit: no lockout
    ([(T0, 3)], 3, T0 + 15 * M),
    ([(T0, 1), (T0 + 5 * M, 2)], 3, T0 + 15 * M),  # the oldest record is needed
    ([(T0, 2), (T0 + 5 * M, 3)], 3, T0 + 20 * M),  # the newest alone is enough
    ([(T0 + 5 * M, 2), (T0, 2)], 3, T0 + 15 * M),  # any order
])
def test_the_lockout_ends_when_the_window_holds_fewer_than_the_limit(attempts, limit, ends):
    assert lockout_ends(attempts, limit, 15 * M) == ends


@pytest.mark.parametrize(("left", "minutes"), [
    (15 * M, 15), (14 * M + timedelta(seconds=1), 15), (timedelta(seconds=1), 1),
    (timedelta(0), 1),
])
def test_minutes_left_round_up(left, minutes):
    assert minutes_left(T0 + left, T0) == minutes


def _sign_in(client: Client, password: str, ip: str = "127.0.0.1"):
    return client.post(reverse("login"), {"username": "bob", "password": password},
                       REMOTE_ADDR=ip)


@pytest.fixture
def locked(world, settings):
    """bob locked out from 127.0.0.1 at T0 (three failures, a 15-minute cool-off)."""
    settings.AXES_FAILURE_LIMIT = 3
    with time_machine.travel(T0, tick=False) as clock:
        client = Client()
        codes = [_sign_in(client, "wrong").status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        yield client, clock


def test_the_lockout_page_says_how_long_is_left(locked):
    client, clock = locked
    clock.move_to(T0 + 4 * M + timedelta(seconds=30))
    response = _sign_in(client, "wrong")
    assert response.status_code == 429
    assert "Try again in 11 minutes" in response.content.decode()
    assert response["Retry-After"] == "630"


def test_attempts_during_the_lockout_do_not_extend_it(locked):
    client, clock = locked
    clock.move_to(T0 + 10 * M)
    assert _sign_in(client, "pw").status_code == 429  # the right password waits too
    assert _sign_in(client, "wrong").status_code == 429
    assert "Try again in 5 minutes" in _sign_in(client, "wrong").content.decode()
    clock.move_to(T0 + 15 * M + timedelta(seconds=1))  # axes' default: locked until 09:25
    assert _sign_in(client, "pw").status_code == 302


def test_the_unlock_command_lifts_it_at_once_and_is_audited(locked):
    client, _ = locked
    call_command("unlock_sign_in", "bob")
    assert _sign_in(client, "pw").status_code == 302
    event = AuditEvent.objects.get(action=AuditEvent.Action.UNLOCK)
    assert event.target == "sign-in of bob"
    assert event.details == {"via": "manage.py unlock_sign_in", "attempt_records_removed": 1}


def test_the_admin_action_lifts_it_and_names_the_admin(locked, world):
    client, _ = locked
    world.users["staff"].is_superuser = True  # the user admin needs the auth permissions
    world.users["staff"].save()
    admin = Client()
    admin.force_login(world.users["staff"])
    response = admin.post(reverse("admin:auth_user_changelist"),
                          {"action": "unlock_sign_in",
                           "_selected_action": [world.users["bob"].pk]}, follow=True)
    assert "Sign-in unlocked for 1 user(s): 1 failed-attempt record(s) removed" in \
        response.content.decode()
    assert _sign_in(client, "pw").status_code == 302
    event = AuditEvent.objects.get(action=AuditEvent.Action.UNLOCK)
    assert (event.actor, event.details["via"]) == (world.users["staff"], "admin action")


@pytest.mark.parametrize("persona", ["alice", "staff"])  # staff: no auth.change_user
def test_only_admins_who_may_change_users_have_the_action(locked, world, persona):
    client = Client()
    client.force_login(world.users[persona])
    client.post(reverse("admin:auth_user_changelist"),
                {"action": "unlock_sign_in", "_selected_action": [world.users["bob"].pk]})
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.UNLOCK).exists()
    assert _sign_in(locked[0], "pw").status_code == 429
