"""Named API tokens (issue 27 item 7): an optional expiry, refused once past it; DRF's
plaintext tokens hashed into named ones by a data migration, and DRF's token app gone."""

from __future__ import annotations

import importlib
from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.accounts import tokens
from apps.accounts.models import ApiToken
from apps.audit.models import AuditEvent

JOBS = "/api/v1/jobs/"
MIGRATION = importlib.import_module("apps.accounts.migrations.0005_token_expiry_drf_tokens")


def _api(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def test_a_token_works_until_it_expires_then_says_so(world):
    token, key = tokens.create(world.users["bob"], "ci", days=30)
    assert token.expires_at - timezone.now() == pytest.approx(timedelta(days=30),
                                                              abs=timedelta(minutes=1))
    assert _api(key).get(JOBS).status_code == 200
    with time_machine.travel(token.expires_at + timedelta(seconds=1)):
        refused = _api(key).get(JOBS)
    assert refused.status_code == 401
    assert "expired on" in refused.json()["detail"]


def test_a_token_without_expiry_lasts_until_revoked(world):
    token, key = tokens.create(world.users["bob"], "ci", days=None)
    assert token.expires_at is None
    with time_machine.travel(timezone.now() + timedelta(days=5000)):
        assert _api(key).get(JOBS).status_code == 200


@pytest.mark.parametrize("days", [0, -1, tokens.MAX_DAYS + 1])
def test_a_lifetime_out_of_range_is_refused(world, days):
    with pytest.raises(tokens.TokenError, match="from 1 to"):
        tokens.create(world.users["bob"], "ci", days=days)
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(("choice", "days"), [("30", 30), ("365", 365), ("never", None),
                                              (None, 90)])
def test_the_page_makes_a_token_with_the_chosen_lifetime(world, login, choice, days):
    form = {"name": "export"} | ({"expires": choice} if choice else {})
    made = login("bob").post(reverse("accounts-tokens"), form)
    assert made.status_code == 200
    token = ApiToken.objects.get()
    if days is None:
        assert token.expires_at is None
        assert "until you revoke it" in made.content.decode()
    else:
        assert token.expires_at - token.created_at == pytest.approx(timedelta(days=days),
                                                                    abs=timedelta(minutes=1))
    listed = login("bob").get(reverse("accounts-tokens")).content.decode()
    assert "<th>Expires</th>" in listed


def test_the_page_refuses_an_unknown_lifetime(world, login):
    made = login("bob").post(reverse("accounts-tokens"), {"name": "x", "expires": "forever"})
    assert made.status_code == 400 and not ApiToken.objects.exists()


def test_the_list_marks_an_expired_token(world, login):
    token, _ = tokens.create(world.users["bob"], "old", days=1)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    page = login("bob").get(reverse("accounts-tokens")).content.decode()
    assert "<strong>expired</strong>" in page


def test_drf_plaintext_tokens_are_gone_from_the_settings():
    assert "rest_framework.authtoken" not in settings.INSTALLED_APPS
    classes = settings.REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]
    assert "rest_framework.authentication.TokenAuthentication" not in classes
    assert "apps.accounts.tokens.NamedTokenAuthentication" in classes


# --- The data migration ------------------------------------------------------------------


def _make_drf_table(rows: list[tuple[str, int, str]]) -> None:
    """DRF's authtoken_token as a site that ran rest_framework.authtoken has it."""
    with connection.cursor() as cursor:
        cursor.execute('CREATE TABLE "authtoken_token" ("key" varchar(40) NOT NULL PRIMARY KEY, '
                       '"created" timestamp with time zone NOT NULL, '
                       '"user_id" integer NOT NULL UNIQUE)')
        for row in rows:
            cursor.execute('INSERT INTO "authtoken_token" ("key", "user_id", "created") '
                           "VALUES (%s, %s, %s)", row)


class _Editor:
    """What the migration uses of a schema editor, inside the test's transaction (SQLite's
    own editor refuses to open there)."""

    connection = connection

    def execute(self, sql: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql)


def _migrate() -> None:
    from django.apps import apps

    MIGRATION.hash_drf_tokens(apps, _Editor())


def test_the_migration_hashes_drf_tokens_and_drops_the_plaintext(world):
    bob, staff = world.users["bob"], world.users["staff"]
    keys = ["a" * 40, "0123456789abcdef0123456789abcdef01234567"]
    _make_drf_table([(keys[0], bob.pk, "2025-01-02 03:04:05+00:00"),
                     (keys[1], staff.pk, "2025-06-01 00:00:00+00:00")])
    _migrate()
    assert "authtoken_token" not in connection.introspection.table_names()
    migrated = {t.user: t for t in ApiToken.objects.all()}
    assert set(migrated) == {bob, staff}
    assert migrated[bob].digest == ApiToken.digest_of(keys[0])
    assert migrated[bob].created_at.year == 2025 and migrated[bob].expires_at is None
    assert all(key not in f"{t.digest} {t.name} {t.hint}" for key in keys
               for t in migrated.values())
    assert _api(keys[0]).get(JOBS).status_code == 200  # the old key still works, hashed
    jobs = _api(keys[1]).get(JOBS).json()["results"]
    assert len(jobs) == len(world.jobs)  # as the admin it belongs to


def test_the_migration_does_nothing_where_drf_tokens_never_existed(world):
    _migrate()
    assert not ApiToken.objects.exists()


# --- manage.py create_token ----------------------------------------------------------------


def test_create_token_prints_a_working_key_and_rotates(world):
    out = StringIO()
    call_command("create_token", "staff", "--name", "collector", "--days", "365", stdout=out,
                 stderr=StringIO())
    first = out.getvalue().strip()
    assert first.startswith(ApiToken.PREFIX) and _api(first).get(JOBS).status_code == 200
    out = StringIO()
    call_command("create_token", "staff", "--name", "collector", "--replace", stdout=out,
                 stderr=StringIO())
    second = out.getvalue().strip()
    assert _api(first).get(JOBS).status_code == 401
    assert _api(second).get(JOBS).status_code == 200
    assert ApiToken.objects.get().expires_at is None
    kinds = list(AuditEvent.objects.filter(action=AuditEvent.Action.TOKEN)
                 .order_by("at", "id").values_list("details__kind", flat=True))
    assert kinds == ["created", "revoked", "created"]


def test_create_token_names_an_unknown_user(world):
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("create_token", "nobody", "--name", "x", stdout=StringIO())


def test_an_admin_revokes_a_token_and_it_is_audited(world, login):
    world.users["staff"].is_superuser = True  # the admin's delete takes the permission
    world.users["staff"].save()
    token, key = tokens.create(world.users["bob"], "ci")
    url = reverse("admin:accounts_apitoken_delete", args=[token.pk])
    assert login("staff").post(url, {"post": "yes"}).status_code == 302
    assert _api(key).get(JOBS).status_code == 401
    assert AuditEvent.objects.filter(details__kind="revoked").count() == 1
