"""Deployment hardening: check --deploy, cookies, CSP, session clocks, login rate limiting."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from apps.audit.models import AuditEvent
from apps.core.net import client_ip

ROOT = Path(__file__).resolve().parents[2]


def _production_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    # DJANGO_ALLOW_ASYNC_UNSAFE is set by the browser tests' conftest, never in production
    dropped = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**clean, "SECRET_KEY": secrets.token_urlsafe(50), "DEBUG": "0",
            "SITE_URL": "https://beacon.example.org", "ALLOWED_HOSTS": "beacon.example.org",
            "DATABASE_URL": "postgres://beacon@127.0.0.1:5432/beacon",
            "REDIS_URL": "redis://127.0.0.1:6379/0", "BEACON_DATA_DIR": str(tmp_path),
            **overrides}


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


# --- check --deploy ------------------------------------------------------------------


def test_check_deploy_passes_with_no_warnings_under_production_settings(tmp_path):
    out = _manage(_production_env(tmp_path), "check", "--deploy", "--fail-level", "WARNING")
    assert out.returncode == 0, out.stderr + out.stdout
    assert "System check identified no issues" in out.stdout


@pytest.mark.parametrize(("override", "warning"), [
    ({"DEBUG": "1"}, "security.W018"),
    ({"SITE_URL": "http://beacon.example.org"}, "security.W012"),  # cookies not Secure
    ({"SECURE_HSTS_SECONDS": "0"}, "security.W004"),
])
def test_check_deploy_fails_when_production_settings_are_weakened(tmp_path, override, warning):
    out = _manage(_production_env(tmp_path, **override), "check", "--deploy",
                  "--fail-level", "WARNING")
    assert out.returncode == 1
    assert warning in out.stderr


# --- cookies -------------------------------------------------------------------------

_SHOW = ("import json; from django.conf import settings as s; print(json.dumps({k: getattr(s, k) "
         "for k in ('SESSION_COOKIE_NAME', 'CSRF_COOKIE_NAME', 'SESSION_COOKIE_SECURE', "
         "'CSRF_COOKIE_SECURE', 'SESSION_COOKIE_DOMAIN', 'CSRF_COOKIE_DOMAIN', "
         "'SESSION_COOKIE_PATH', 'CSRF_COOKIE_PATH', 'SESSION_COOKIE_AGE')}))")


def _cookie_settings(env: dict[str, str]) -> dict[str, object]:
    out = _manage(env, "shell", "-c", _SHOW)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_https_sites_get_secure_host_prefixed_cookies(tmp_path):
    cookies = _cookie_settings(_production_env(tmp_path, SESSION_ABSOLUTE_TIMEOUT="28800"))
    assert cookies == {
        "SESSION_COOKIE_NAME": "__Host-sessionid", "CSRF_COOKIE_NAME": "__Host-csrftoken",
        "SESSION_COOKIE_SECURE": True, "CSRF_COOKIE_SECURE": True,
        # __Host- cookies must have no Domain and Path=/, or browsers drop them
        "SESSION_COOKIE_DOMAIN": None, "CSRF_COOKIE_DOMAIN": None,
        "SESSION_COOKIE_PATH": "/", "CSRF_COOKIE_PATH": "/", "SESSION_COOKIE_AGE": 28800,
    }


def test_plain_http_keeps_plain_cookie_names(tmp_path):
    # A __Host- cookie over http would be dropped by the browser: no sign-in at all.
    cookies = _cookie_settings(_production_env(tmp_path, SITE_URL="http://127.0.0.1:8000"))
    assert cookies["SESSION_COOKIE_NAME"] == "sessionid"
    assert cookies["SESSION_COOKIE_SECURE"] is False


# --- content security policy -----------------------------------------------------------


def _directives(header: str) -> dict[str, list[str]]:
    parts = (d.strip().split() for d in header.split(";") if d.strip())
    return {p[0]: p[1:] for p in parts}


def test_every_page_carries_a_csp_without_inline_or_eval_scripts(world, login):
    response = login("bob").get(reverse("core-home"))
    policy = _directives(response["Content-Security-Policy"])
    assert policy["script-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert not any("unsafe" in v for v in policy["style-src-elem"] + policy["default-src"])


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I)
EVENT_HANDLER = re.compile(r"\son[a-z]+\s*=", re.I)
JS_URL = re.compile(r"(href|src|action)\s*=\s*[\"']?\s*javascript:", re.I)


@pytest.mark.parametrize("template", sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "templates").rglob("*.html")))
def test_templates_have_no_inline_script(template):
    text = (ROOT / template).read_text()
    assert not INLINE_SCRIPT.search(text), "inline <script>: move it to static/js/"
    assert not EVENT_HANDLER.search(text), "inline event handler: bind it from static/js/"
    assert not JS_URL.search(text)


@pytest.mark.parametrize("html", [
    "<script>alert(1)</script>", "<SCRIPT type='module'>x()</SCRIPT>",
    '<a href="#" onclick="x()">', '<a href="javascript:x()">',
])
def test_the_template_scan_catches_inline_script(html):
    assert INLINE_SCRIPT.search(html) or EVENT_HANDLER.search(html) or JS_URL.search(html)


def test_the_template_scan_allows_files_and_json_script():
    html = ('<script src="/static/js/charts.js"></script>'
            '<script id="f" type="application/json">{}</script>')
    assert not INLINE_SCRIPT.search(html)


# --- session clocks ----------------------------------------------------------------------


@pytest.fixture
def signed_in_bob(world, settings):
    settings.SESSION_IDLE_TIMEOUT = 3600
    settings.SESSION_ABSOLUTE_TIMEOUT = 8 * 3600
    traveller = time_machine.travel("2026-11-02 09:00Z", tick=False)
    clock = traveller.start()
    client = Client()
    client.force_login(world.users["bob"])
    yield client, clock
    traveller.stop()


def test_an_active_session_survives_short_pauses(signed_in_bob):
    client, clock = signed_in_bob
    for _ in range(4):
        clock.shift(timedelta(minutes=50))
        assert client.get(reverse("core-home")).status_code == 200


def test_an_idle_session_ends(signed_in_bob):
    client, clock = signed_in_bob
    clock.shift(timedelta(minutes=61))
    response = client.get(reverse("core-home"))
    assert response.status_code == 302 and "/login/" in response["Location"]
    logout = AuditEvent.objects.get(action=AuditEvent.Action.LOGOUT)
    assert (logout.username, logout.details) == ("bob", {"reason": "idle"})


def test_a_busy_session_still_ends_at_the_absolute_limit(signed_in_bob):
    client, clock = signed_in_bob
    statuses = []
    for _ in range(10):  # a request every 50 minutes: never idle, 8h20 in all
        clock.shift(timedelta(minutes=50))
        statuses.append(client.get(reverse("core-home")).status_code)
    assert statuses == [200] * 9 + [302]
    assert AuditEvent.objects.get(action="logout").details == {"reason": "absolute"}


def test_a_session_without_clocks_is_not_trusted(world):
    client = Client()
    client.force_login(world.users["bob"])
    session = client.session
    del session["beacon_auth_at"]
    session.save()
    assert client.get(reverse("core-home")).status_code == 302


# --- login rate limiting -------------------------------------------------------------------


def _sign_in(client: Client, password: str, ip: str = "127.0.0.1") -> int:
    return client.post(reverse("login"), {"username": "bob", "password": password},
                       REMOTE_ADDR=ip).status_code


def test_repeated_failures_lock_out_that_user_from_that_address(world, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()
    assert [_sign_in(client, "wrong") for _ in range(3)] == [200, 200, 429]
    assert _sign_in(client, "pw") == 429  # the right password no longer helps
    assert _sign_in(Client(), "pw", ip="127.0.0.2") == 302  # bob from elsewhere is fine
    actions = Counter(AuditEvent.objects.values_list("action", flat=True))
    assert actions == {"login_failed": 4, "lockout": 2, "login": 1}


def test_a_success_before_the_limit_resets_the_count(world, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()
    assert [_sign_in(client, p) for p in ("wrong", "wrong", "pw")] == [200, 200, 302]
    client.post(reverse("logout"))
    assert [_sign_in(client, "wrong") for _ in range(2)] == [200, 200]


# --- client address ------------------------------------------------------------------------


@pytest.mark.parametrize(("hops", "forwarded", "expected"), [
    (0, "203.0.113.9", "127.0.0.1"),  # no trusted proxy: the header is ignored
    (1, "198.51.100.1, 203.0.113.9", "203.0.113.9"),  # the proxy appended the client
    (2, "198.51.100.1, 203.0.113.9", "198.51.100.1"),
    (3, "198.51.100.1, 203.0.113.9", "127.0.0.1"),  # fewer hops than declared: REMOTE_ADDR
    (1, "not-an-ip", "127.0.0.1"),
])
def test_client_ip_trusts_only_the_declared_proxies(rf, settings, hops, forwarded, expected):
    settings.TRUSTED_PROXY_COUNT = hops
    request = rf.get("/", HTTP_X_FORWARDED_FOR=forwarded, REMOTE_ADDR="127.0.0.1")
    assert client_ip(request) == expected
