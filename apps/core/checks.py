"""System checks on the configuration: run by every manage.py command and in CI."""

from __future__ import annotations

import stat
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import Error, Warning, register

from apps.analysis import egress
from apps.analysis.recipients import valid_domain
from apps.core.idle_rules import idle_rules


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an absolute http(s) URL, or None when it is fine."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "has no http:// or https:// scheme"
    if not parts.hostname:
        return "has no host"
    return None


@register()
def check_service_urls(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    errors = []
    for name, hint in (
        ("PROMETHEUS_URL", "e.g. http://127.0.0.1:9090"),
        ("SLURM_REST_URL", "e.g. http://127.0.0.1:6820"),
    ):
        value = getattr(settings, name, "")
        problem = value and url_problem(value)
        if problem:
            errors.append(Error(f"{name}={value!r} {problem}", hint=hint, id="clusters.E001"))
    if settings.SLURM_BACKEND == "rest" and not settings.SLURM_REST_URL:
        errors.append(Error("SLURM_BACKEND=rest needs SLURM_REST_URL", id="clusters.E002"))
    return errors


@register()
def check_redis_url(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    url = settings.REDIS_URL
    if url and urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        return [Error(f"REDIS_URL={url!r} is not a redis:// URL", id="core.E001")]
    return []


@register(deploy=True)
def check_embedded_default(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """The embedded default is for a demo or one user, not for a shared deployment."""
    warnings = []
    if "sqlite3" in str(settings.DATABASES["default"]["ENGINE"]):
        warnings.append(Warning("DATABASE_URL is unset: running on SQLite",
                                hint="set DATABASE_URL=postgres://...", id="core.W001"))
    if settings.CELERY_TASK_ALWAYS_EAGER:
        warnings.append(Warning("REDIS_URL is unset: background tasks run inside web requests",
                                hint="set REDIS_URL=redis://... and run a worker", id="core.W002"))
    return warnings


@register()
def check_webhook_egress(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """BEACON_WEBHOOK_ALLOW must parse; a configured webhook the egress policy would refuse
    (an internal address, localhost) is named now rather than at its first send. Only what
    needs no DNS is checked here: checks run with every manage.py command."""
    allow, bad = egress.parse_allow_list(settings.WEBHOOK_ALLOW)
    problems: list[Error | Warning] = [
        Error(f"BEACON_WEBHOOK_ALLOW entry {entry!r} is not a host name, *.suffix, address "
              "or network", hint="e.g. chat.corp.example,*.corp.example,10.20.0.0/16",
              id="core.E002") for entry in bad]
    for name in ("SECURITY_WEBHOOK_URL", "SLO_WEBHOOK_URL", "QUOTA_WEBHOOK_URL"):
        host = urlsplit(getattr(settings, name, "")).hostname or ""
        address = egress.parse_address(host) if host else None
        refused = (egress.check(host, [address], allow).refused if address is not None
                   else egress.check_name(host, allow) if host else "")
        if refused:
            problems.append(Warning(
                f"{name} points at {'an' if refused[0] in 'aeiou' else 'a'} {refused} address: "
                "webhooks are not sent there",
                hint="name it in BEACON_WEBHOOK_ALLOW if it is meant (docs/SECURITY.md)",
                id="core.W003"))
    return problems


@register()
def check_idle_rules(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The idleness thresholds must make one reading (idle under mostly idle, shares <= 100 %)."""
    try:
        idle_rules()
    except ValueError as exc:
        return [Error(str(exc), hint="IDLE_BELOW_PERCENT <= MOSTLY_IDLE_BELOW_PERCENT <= 100 and "
                      "IDLE_HELD_PERCENT <= 100", id="core.E003")]
    return []


@register()
def check_task_time_limits(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """A task allowed to run longer than the claim it holds or the stale-run sweep's age
    would be taken over, or marked failed, while it still runs (settings.TASK_KINDS)."""
    grace = settings.TASK_TIME_LIMIT_GRACE
    bounds = [("sync", "SLURM_SYNC_CLAIM_EXPIRY", settings.SLURM_SYNC_CLAIM_EXPIRY),
              ("detection", "SECURITY_CLAIM_EXPIRY", settings.SECURITY_CLAIM_EXPIRY)]
    problems = [
        Warning(f"TASK_TIME_LIMIT_{kind.upper()} plus the grace ({limit} s) is not under "
                f"{name} ({bound} s): a second run could take over a running one",
                hint=f"lower TASK_TIME_LIMIT_{kind.upper()} or raise {name}", id="core.W004")
        for kind, name, bound in bounds
        if (limit := settings.TASK_KINDS[kind][0] + grace) >= bound]
    stale = settings.TASK_RUN_STALE_MINUTES * 60
    if stale <= settings.TASK_LONGEST_SECONDS:
        problems.append(Warning(
            f"the longest task time limit ({settings.TASK_LONGEST_SECONDS} s) is not under "
            f"TASK_RUN_STALE_MINUTES ({stale} s): the sweep would fail runs still going",
            hint="raise TASK_RUN_STALE_MINUTES", id="core.W004"))
    return problems


@register()
def check_data_dir(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """BEACON_DATA_DIR holds the secret key and the embedded database. Beacon creates it
    0700; one that was there before (an older checkout, a volume) may let others in."""
    try:
        mode = stat.S_IMODE(settings.DATA_DIR.stat().st_mode)
    except OSError:
        return []  # not created: PostgreSQL and SECRET_KEY in the environment need none
    if not mode & 0o077:
        return []
    return [Warning(f"the data folder {settings.DATA_DIR} is readable by other local users "
                    f"(mode {mode:04o}): it holds the secret key and the SQLite database",
                    hint=f"chmod 700 {settings.DATA_DIR}", id="core.W006")]


@register()
def check_email_domain(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """BEACON_EMAIL_DOMAIN builds addresses from Slurm user names: it must be a domain."""
    domain = settings.EMAIL_DOMAIN
    if not domain or valid_domain(domain):
        return []
    return [Error(f"BEACON_EMAIL_DOMAIN={domain!r} is not a mail domain",
                  hint="e.g. example.org (Slurm user ann is then told at ann@example.org)",
                  id="core.E004")]
