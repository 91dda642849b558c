"""The environment helpers: clear errors that name the variable, and the DATABASE_URL parser."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal import settings as s

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("raw", "expected"), [
    ("1", True), ("true", True), ("YES", True), ("on", True),
    ("0", False), ("false", False), ("No", False), ("", False),
])
def test_env_bool_reads_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("X_FLAG", raw)
    assert s.env_bool("X_FLAG", not expected) is expected


def test_env_bool_names_the_variable_on_garbage(monkeypatch):
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG='maybe'"):
        s.env_bool("X_FLAG", False)


def test_env_int_refuses_text_and_values_below_the_minimum(monkeypatch):
    monkeypatch.setenv("X_N", "ten")
    with pytest.raises(ImproperlyConfigured, match="X_N='ten': expected an integer"):
        s.env_int("X_N", 1)
    monkeypatch.setenv("X_N", "-3")
    with pytest.raises(ImproperlyConfigured, match="at least 0"):
        s.env_int("X_N", 1, minimum=0)
    monkeypatch.setenv("X_N", "42")
    assert s.env_int("X_N", 1) == 42


def test_env_str_reads_a_secret_from_a_file(monkeypatch, tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    monkeypatch.setenv("X_PW_FILE", str(secret))
    assert s.env_str("X_PW") == "hunter2"
    monkeypatch.setenv("X_PW_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="X_PW_FILE"):
        s.env_str("X_PW")


def test_env_choice_lists_the_allowed_values(monkeypatch):
    monkeypatch.setenv("X_BACKEND", "soap")
    with pytest.raises(ImproperlyConfigured, match="expected one of cli, rest"):
        s.env_choice("X_BACKEND", "cli", ("cli", "rest"))


def test_database_url_postgres_with_escapes_and_options():
    db = s.database_from_url("postgres://bea%40con:p%2Fw@db.example:5433/beacon?sslmode=require")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "bea@con", "p/w", "db.example", "5433", "beacon")
    assert db["OPTIONS"] == {"sslmode": "require"}


def test_database_url_sqlite_and_bad_schemes():
    assert s.database_from_url("sqlite:////tmp/x.db")["NAME"] == "/tmp/x.db"
    with pytest.raises(ImproperlyConfigured, match="unsupported scheme 'mysql'"):
        s.database_from_url("mysql://h/db")
    with pytest.raises(ImproperlyConfigured, match="no database name"):
        s.database_from_url("postgres://h:5432/")


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


def test_a_bad_environment_value_is_one_line_naming_the_variable(tmp_path):
    out = _manage("check", DEBUG="perhaps", BEACON_DATA_DIR=str(tmp_path))
    assert out.returncode == 1
    assert out.stderr.strip() == ("beacon: configuration error: DEBUG='perhaps': "
                                  "expected a boolean (1/0, true/false, yes/no)")


def test_a_missing_database_is_one_clear_line(tmp_path):
    out = _manage("migrate", "--check", BEACON_DATA_DIR=str(tmp_path),
                  DATABASE_URL="postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert out.returncode == 1
    errors = [line for line in out.stderr.splitlines() if " INFO " not in line]
    assert len(errors) == 1, out.stderr
    assert errors[0].startswith("beacon: database unavailable: ")
    assert "Connection refused" in errors[0]


def test_a_prometheus_url_without_scheme_fails_the_system_check(tmp_path):
    out = _manage("check", PROMETHEUS_URL="prom.example:9090", BEACON_DATA_DIR=str(tmp_path))
    assert out.returncode == 1
    assert "clusters.E001" in out.stderr and "PROMETHEUS_URL" in out.stderr


def test_idle_thresholds_that_make_no_reading_fail_the_system_check(settings):
    from apps.core.checks import check_idle_rules

    assert check_idle_rules() == []
    settings.IDLE_BELOW_PERCENT, settings.MOSTLY_IDLE_BELOW_PERCENT = 20, 10
    [error] = check_idle_rules()
    assert error.id == "core.E003" and "idle_below <= mostly_idle_below" in error.msg


def _mail_settings(**env: str) -> dict[str, object]:
    code = ("from django.conf import settings as s; import json; "
            "print(json.dumps({k: getattr(s, k) for k in ('EMAIL_BACKEND', 'EMAIL_HOST', "
            "'EMAIL_PORT', 'EMAIL_USE_TLS', 'EMAIL_HOST_USER', 'DEFAULT_FROM_EMAIL')}))")
    out = _manage("shell", "-c", code, **env)
    assert out.returncode == 0, out.stderr
    import json

    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_mail_settings_are_read_once_and_not_reset(tmp_path):
    # Only the host set: the port and TLS keep the one block's defaults (a second block
    # once reset them to 25 without TLS).
    mail = _mail_settings(BEACON_DATA_DIR=str(tmp_path), EMAIL_HOST="smtp.example.org",
                          EMAIL_HOST_USER="beacon", DEFAULT_FROM_EMAIL="portal@example.org")
    assert mail == {"EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
                    "EMAIL_HOST": "smtp.example.org", "EMAIL_PORT": 587,
                    "EMAIL_USE_TLS": True, "EMAIL_HOST_USER": "beacon",
                    "DEFAULT_FROM_EMAIL": "portal@example.org"}


def test_without_a_mail_host_mail_goes_to_the_console_and_smtp_defaults_are_submission(
        tmp_path):
    mail = _mail_settings(BEACON_DATA_DIR=str(tmp_path))
    assert mail["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"
    assert mail["EMAIL_HOST"] == "" and mail["EMAIL_PORT"] == 587 and mail["EMAIL_USE_TLS"]


def test_behind_https_health_and_metrics_still_answer_plain_http_inside(tmp_path):
    code = ("from django.conf import settings as s; import json; print(json.dumps("
            "[s.ALLOWED_HOSTS, s.SECURE_SSL_REDIRECT, s.SECURE_REDIRECT_EXEMPT]))")
    out = _manage("shell", "-c", code, BEACON_DATA_DIR=str(tmp_path),
                  SITE_URL="https://beacon.example.org", ALLOWED_HOSTS="beacon.example.org",
                  INTERNAL_HOSTS="web", SECRET_KEY="x" * 50)
    assert out.returncode == 0, out.stderr
    import json
    import re

    hosts, redirect, exempt = json.loads(out.stdout.strip().splitlines()[-1])
    assert hosts == ["beacon.example.org", "web"] and redirect is True
    assert any(re.search(p, "health/") for p in exempt)
    assert any(re.search(p, "metrics") for p in exempt)
    assert not any(re.search(p, "jobs/") for p in exempt)
