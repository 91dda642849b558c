"""Every route × every persona: the expected status, and a guard against unlisted routes.

Statuses: 200 ok, 302 redirect to the login page, 401 API without credentials, 403 visible
but the role is too low, 404 not visible, 405 allowed in principle but not this method.
Adding a URL without a row here fails ``test_every_route_has_a_row``; adding a method
(a POST handler, a viewset action) without its row fails
``test_every_method_a_route_implements_has_a_row``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from apps.core.models import TaskRun
from tests.conftest import PERSONAS, T0

# Who gets what, per route. "user" = every signed-in active persona.
SIGNED_IN = ("alice", "bob", "tom", "carol", "dave", "staff")
LOGGED_OUT = ("anon", "eve")  # eve is disabled: her session does not authenticate


def everyone(status: int, anon: int = 302) -> dict[str, int]:
    return {**{p: status for p in SIGNED_IN}, **{p: anon for p in LOGGED_OUT}}


def admin_only(anon: int = 302) -> dict[str, int]:
    return {**everyone(403, anon), "staff": 200}


def team_a(anon: int = 302) -> dict[str, int]:
    """Team A's objects: its members and admins see them, team B gets 404."""
    return {**everyone(200, anon), "carol": 404, "dave": 404}


def bobs_job(anon: int = 302) -> dict[str, int]:
    """bob's job: bob, his lead and admins; his teammate and team B get 404."""
    return {**everyone(404, anon), "bob": 200, "alice": 200, "staff": 200}


Args = Callable[[Any], dict[str, Any]]
NO_ARGS: Args = lambda w: {}  # noqa: E731
JOB: Args = lambda w: {"cluster": w.cluster.name, "job_id": w.jobs["bob"].job_id}  # noqa: E731
API_JOB: Args = lambda w: {"pk": w.jobs["bob"].pk}  # noqa: E731
TEAM: Args = lambda w: {"slug": w.team_a.slug}  # noqa: E731
CLUSTER: Args = lambda w: {"name": w.cluster.name}  # noqa: E731
NODE: Args = lambda w: {"name": w.cluster.name, "node": "gpu01"}  # noqa: E731
RUN: Args = lambda w: {"pk": TaskRun.objects.get_or_create(kind="sync")[0].pk}  # noqa: E731


def _trace_of_bobs_job(w: Any) -> dict[str, Any]:
    from apps.jobs.models import TraceRun

    run, _ = TraceRun.objects.get_or_create(job=w.jobs["bob"], fingerprint="f",
                                            defaults={"world_size": 2, "steps": 5})
    return {"pk": run.pk}


TRACE: Args = _trace_of_bobs_job


def _statement_of_team_a(w: Any) -> dict[str, Any]:
    from apps.chargeback.models import BillingPeriod, Statement

    period, _ = BillingPeriod.objects.get_or_create(month=date(2026, 11, 1))
    statement, _ = Statement.objects.get_or_create(team=w.team_a, period=period)
    return {"pk": statement.pk}


def _reconciliation(w: Any) -> dict[str, Any]:
    from apps.chargeback.models import Reconciliation

    row = Reconciliation.objects.create(cluster=w.cluster, month=date(2026, 11, 1),
                                        window_start=T0, window_end=T0)
    return {"pk": row.pk}


STATEMENT: Args = _statement_of_team_a
STATEMENT_CSV: Args = lambda w: {**_statement_of_team_a(w), "fmt": "csv"}  # noqa: E731
MONTH_CSV: Args = lambda w: {"month": "2026-11", "fmt": "csv"}  # noqa: E731
RECONCILIATION: Args = _reconciliation
ACCOUNT_A: Args = lambda w: {"pk": w.cluster.accounts.get(name="nlp").pk}  # noqa: E731
PERIOD: Args = lambda w: {"month": "2026-11"}  # noqa: E731


def _rate(w: Any) -> dict[str, Any]:
    from apps.chargeback.models import Rate

    return {"pk": Rate.objects.create(price=1, valid_from=date(2026, 1, 1)).pk}


def _quota_change(w: Any) -> dict[str, Any]:
    from apps.quotas.models import QuotaChange

    change = QuotaChange.objects.create(account=w.cluster.accounts.get(name="nlp"),
                                        month=date(2026, 11, 1), kind="drift")
    return {"pk": change.pk}


RATE: Args = _rate


def _bobs_token(w: Any) -> dict[str, Any]:
    from apps.accounts.models import ApiToken

    token = ApiToken.objects.create(user=w.users["bob"], name="ci", digest="0" * 64, hint="bcn_x")
    return {"pk": token.pk}


BOBS_TOKEN: Args = _bobs_token
QUOTA_CHANGE: Args = _quota_change


def api_admin_write(staff: int) -> dict[str, int]:
    """An API write: admins only. The bodies here are empty forms, so a JSON-only endpoint
    answers the admin 415; tests/chargeback and tests/quotas send real bodies."""
    return admin_post(staff, anon=401)


def team_a_leads(anon: int = 302) -> dict[str, int]:
    """Team A's statements: its lead and admins; researchers (even of team A) get 404."""
    return {**everyone(404, anon), "alice": 200, "staff": 200}


def admin_post(staff: int = 303, anon: int = 302) -> dict[str, int]:
    """An admin action: others are refused before any lookup (403)."""
    return {**everyone(403, anon), "staff": staff}
def _finding_on_bobs_job(w: Any) -> dict[str, Any]:
    from django.utils import timezone

    from apps.security.models import Finding

    job = w.jobs["bob"]
    finding, _ = Finding.objects.get_or_create(
        cluster=w.cluster, dedup_key="miner_in_job:job:101", defaults={
            "rule_key": "miner_in_job", "title": "Job 101: miner-like GPU use",
            "severity": "critical", "job": job, "job_id_raw": job.job_id,
            "team": job.team, "user_name": "bob", "first_seen": timezone.now(),
            "last_seen": timezone.now()})
    return {"pk": finding.pk}


FINDING: Args = _finding_on_bobs_job


def _scorecard_of_team_a(w: Any) -> dict[str, Any]:
    from apps.slo.models import Objective, Scorecard

    card, _ = Scorecard.objects.get_or_create(
        objective=Objective.objects.get(name="Queue wait"), subject=f"team:{w.team_a.pk}",
        defaults={"team": w.team_a, "target": 0.9, "budget_remaining": 1.0,
                  "status": "no_data", "evaluated_at": T0, "window_start": T0,
                  "window_end": T0})
    return {"pk": card.pk}


def _snapshot_of_team_a(w: Any) -> dict[str, Any]:
    from apps.slo.models import Objective, Snapshot

    snap, _ = Snapshot.objects.get_or_create(
        objective=Objective.objects.get(name="Queue wait"), subject=f"team:{w.team_a.pk}",
        month=date(2026, 11, 1), defaults={
            "team": w.team_a, "target": 0.9, "budget_remaining": 1.0, "status": "no_data",
            "period_start": T0, "period_end": T0, "computed_at": T0})
    return {"pk": snap.pk}


def _objective(w: Any) -> dict[str, Any]:
    from apps.slo.models import Objective

    return {"pk": Objective.objects.get(name="Job success").pk}


SCORECARD: Args = _scorecard_of_team_a
SNAPSHOT: Args = _snapshot_of_team_a
OBJECTIVE: Args = _objective
ENDING_RULE: Args = lambda w: {"key": "node_fail"}  # noqa: E731


def bobs_job_writes(ok: int, anon: int = 302) -> dict[str, int]:
    """A write on bob's job: whoever sees it may (``ok``), others 404."""
    return {**bobs_job(anon), "bob": ok, "alice": ok, "staff": ok}

# (method, url name, url args, expected status per persona)
MATRIX: list[tuple[str, str, Args, dict[str, int]]] = [
    ("get", "core-home", NO_ARGS, everyone(200)),
    ("get", "core-platform", NO_ARGS, admin_only()),
    ("get", "core-runs", NO_ARGS, admin_only()),
    ("get", "core-health", NO_ARGS, everyone(200, anon=200)),
    ("get", "login", NO_ARGS, everyone(302, anon=200)),
    # an empty form comes back with its errors; signed-in users are sent on (PUT is POST)
    ("post", "login", NO_ARGS, everyone(302, anon=200)),
    ("put", "login", NO_ARGS, everyone(302, anon=200)),
    ("post", "logout", NO_ARGS, everyone(302, anon=302)),
    ("get", "accounts-my-team", NO_ARGS, everyone(200)),
    ("get", "accounts-team-detail", TEAM, team_a()),
    ("get", "clusters-list", NO_ARGS, everyone(200)),
    ("get", "clusters-detail", CLUSTER, everyone(200)),
    ("get", "clusters-live", CLUSTER, everyone(200)),
    ("get", "clusters-live-state", CLUSTER, everyone(200)),
    ("get", "clusters-node", NODE, everyone(200)),
    ("get", "jobs-list", NO_ARGS, everyone(200)),
    ("get", "jobs-export", NO_ARGS, everyone(200)),
    ("post", "jobs-export", NO_ARGS, {**everyone(403), "staff": 405}),
    ("get", "jobs-detail", JOB, bobs_job()),
    ("get", "jobs-compare", NO_ARGS, everyone(200)),  # no jobs named: the page asks for them
    ("post", "jobs-detail", JOB, {**everyone(403), "staff": 405}),
    ("get", "jobs-metrics", JOB, bobs_job()),
    ("post", "jobs-metrics", JOB, {**everyone(403), "staff": 405}),
    # an empty upload comes back to the page with a message (303 See Other)
    ("post", "jobs-traces", JOB, bobs_job_writes(303)),
    ("get", "jobs-traces", JOB, everyone(405)),
    ("post", "jobs-accept", JOB, admin_post()),  # staff: no note, back to the page (303)
    ("get", "jobs-accept", JOB, {**everyone(403), "staff": 405}),
    ("get", "api:job-list", NO_ARGS, everyone(200, anon=401)),
    ("post", "api:job-list", NO_ARGS, {**everyone(403, anon=401), "staff": 405}),
    ("get", "api:job-detail", API_JOB, bobs_job(anon=401)),
    ("get", "api:job-compare-list", NO_ARGS, everyone(400, anon=401)),  # no ids: a 400 saying so
    ("delete", "api:job-detail", API_JOB, {**everyone(403, anon=401), "staff": 405}),
    ("get", "api:job-metrics", API_JOB, bobs_job(anon=401)),
    ("get", "api:job-series", API_JOB, bobs_job(anon=401)),
    ("get", "api:job-diagnosis", API_JOB, bobs_job(anon=401)),
    ("get", "api:job-traces", API_JOB, bobs_job(anon=401)),
    ("post", "api:job-traces", API_JOB, bobs_job_writes(400, anon=401)),  # 400: no file
    ("get", "api:tracerun-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:tracerun-detail", TRACE, bobs_job(anon=401)),
    ("delete", "api:tracerun-detail", TRACE, {**everyone(403, anon=401), "staff": 405}),
    ("get", "api:team-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:team-detail", TEAM, team_a(anon=401)),
    ("get", "api:cluster-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:cluster-detail", CLUSTER, everyone(200, anon=401)),
    ("get", "api:taskrun-list", NO_ARGS, admin_only(anon=401)),
    ("get", "api:taskrun-detail", RUN, admin_only(anon=401)),
    ("get", "api-schema", NO_ARGS, everyone(200, anon=200)),
    ("get", "api-docs", NO_ARGS, everyone(200, anon=200)),
    ("get", "api-redoc", NO_ARGS, everyone(200, anon=200)),
    ("get", "api:root", NO_ARGS, everyone(200, anon=200)),
    # my API tokens: each their own; an empty name is refused on the form (400)
    ("get", "accounts-tokens", NO_ARGS, everyone(200)),
    ("post", "accounts-tokens", NO_ARGS, everyone(400)),
    ("post", "accounts-token-revoke", BOBS_TOKEN, {**everyone(404), "bob": 303}),
    ("get", "accounts-token-revoke", BOBS_TOKEN, everyone(405)),
    ("get", "admin:index", NO_ARGS, {**everyone(302), "staff": 200}),
    ("get", "audit-list", NO_ARGS, admin_only()),
    ("get", "chargeback-home", NO_ARGS, everyone(200)),
    ("get", "chargeback-my-usage", NO_ARGS, everyone(200)),
    ("get", "reports-usage", NO_ARGS, everyone(200)),
    ("get", "reports-usage-export", NO_ARGS, everyone(200)),
    ("post", "reports-usage", NO_ARGS, {**everyone(403), "staff": 405}),
    ("get", "chargeback-month-export", MONTH_CSV, everyone(200)),
    ("get", "chargeback-statement", STATEMENT, team_a_leads()),
    ("post", "chargeback-statement", STATEMENT, admin_post(405)),
    ("get", "chargeback-statement-export", STATEMENT_CSV, team_a_leads()),
    ("post", "chargeback-finalise", STATEMENT, admin_post()),  # open month: refused, 303
    ("get", "chargeback-finalise", STATEMENT, everyone(405)),
    ("post", "chargeback-adjust", STATEMENT, admin_post()),  # no amount: refused, 303
    ("post", "chargeback-terms", NO_ARGS, admin_post()),
    ("get", "chargeback-rates", NO_ARGS, admin_only()),
    ("post", "chargeback-rates", NO_ARGS, admin_post(400)),  # empty form: shown again, 400
    ("get", "chargeback-rate-edit", RATE, admin_only()),
    ("post", "chargeback-rate-edit", RATE, admin_post(400)),
    ("post", "chargeback-refresh", NO_ARGS, admin_post()),
    ("post", "chargeback-reconcile", NO_ARGS, admin_post()),  # no such cluster: 303
    ("get", "chargeback-reconciliation", RECONCILIATION, admin_only()),
    ("get", "quotas-home", NO_ARGS, everyone(200)),
    ("get", "quotas-edit", ACCOUNT_A, admin_only()),
    # no Slurm backend on the test cluster: the preview shows the error on the form (200)
    ("post", "quotas-edit", ACCOUNT_A, admin_post(200)),
    ("get", "api:chargeback-usage-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:reports-api-usage-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:chargeback-rate-list", NO_ARGS, everyone(200, anon=401)),
    ("post", "api:chargeback-rate-list", NO_ARGS, api_admin_write(415)),  # JSON only
    ("get", "api:chargeback-rate-detail", RATE, everyone(200, anon=401)),
    ("delete", "api:chargeback-rate-detail", RATE, api_admin_write(204)),
    # no body: PUT misses required fields, an empty PATCH changes nothing
    ("put", "api:chargeback-rate-detail", RATE, api_admin_write(400)),
    ("patch", "api:chargeback-rate-detail", RATE, api_admin_write(200)),
    ("get", "api:chargeback-period-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:chargeback-period-detail", PERIOD, everyone(200, anon=401)),
    ("put", "api:chargeback-period-detail", PERIOD, api_admin_write(400)),  # no body: no policy
    ("get", "api:chargeback-statement-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:chargeback-statement-detail", STATEMENT, team_a_leads(anon=401)),
    ("delete", "api:chargeback-statement-detail", STATEMENT, api_admin_write(405)),
    ("post", "api:chargeback-statement-finalise", STATEMENT, api_admin_write(409)),  # open
    ("post", "api:chargeback-statement-adjustments", STATEMENT, api_admin_write(415)),
    ("get", "api:chargeback-statement-csv", STATEMENT, team_a_leads(anon=401)),
    ("get", "api:chargeback-reconciliation-list", NO_ARGS, admin_only(anon=401)),
    ("post", "api:chargeback-reconciliation-list", NO_ARGS, api_admin_write(415)),
    ("get", "api:chargeback-reconciliation-detail", RECONCILIATION, admin_only(anon=401)),
    ("get", "api:quota-account-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:quota-account-detail", ACCOUNT_A, team_a(anon=401)),
    ("post", "api:quota-account-preview", ACCOUNT_A, api_admin_write(415)),
    ("post", "api:quota-account-apply", ACCOUNT_A, api_admin_write(415)),
    ("get", "api:quota-change-list", NO_ARGS, admin_only(anon=401)),
    ("get", "api:quota-change-detail", QUOTA_CHANGE, admin_only(anon=401)),
    ("get", "security-list", NO_ARGS, everyone(200)),
    ("get", "security-detail", FINDING, bobs_job()),
    ("post", "security-detail", FINDING, {**everyone(403), "staff": 405}),
    # an empty action comes back to the page with a message (303 See Other)
    ("post", "security-transition", FINDING, bobs_job_writes(303)),
    ("get", "security-transition", FINDING, everyone(405)),
    ("get", "api:finding-list", NO_ARGS, everyone(200, anon=401)),
    ("post", "api:finding-list", NO_ARGS, {**everyone(403, anon=401), "staff": 405}),
    ("get", "api:finding-detail", FINDING, bobs_job(anon=401)),
    ("delete", "api:finding-detail", FINDING, {**everyone(403, anon=401), "staff": 405}),
    ("post", "api:finding-transition", FINDING, bobs_job_writes(400, anon=401)),  # no action
    ("get", "api:finding-transition", FINDING, everyone(405, anon=401)),
    # collectors post JSON with an admin's token; a form post is a 415
    ("post", "api:security-ingest-sshd", NO_ARGS, {**everyone(403, anon=401), "staff": 415}),
    ("get", "api:security-ingest-sshd", NO_ARGS, {**everyone(403, anon=401), "staff": 405}),
    ("post", "api:security-ingest-inventory", NO_ARGS,
     {**everyone(403, anon=401), "staff": 415}),
    ("post", "api:security-ingest-probes", NO_ARGS, {**everyone(403, anon=401), "staff": 415}),
    ("get", "slo-list", NO_ARGS, everyone(200)),
    ("get", "slo-classification", NO_ARGS, everyone(200)),
    ("get", "slo-team", TEAM, team_a()),  # members read it (only their own worst jobs)
    ("get", "slo-team-export", TEAM, team_a()),
    ("get", "slo-objective-edit", OBJECTIVE, admin_only()),
    ("post", "slo-objective-edit", OBJECTIVE, admin_post(200)),  # empty form: shown again
    ("post", "slo-evaluate", NO_ARGS, admin_post()),
    ("get", "slo-evaluate", NO_ARGS, {**everyone(403), "staff": 405}),
    ("get", "api:slo-objective-list", NO_ARGS, everyone(200, anon=401)),
    ("post", "api:slo-objective-list", NO_ARGS, api_admin_write(415)),  # JSON only
    ("get", "api:slo-objective-detail", OBJECTIVE, everyone(200, anon=401)),
    ("delete", "api:slo-objective-detail", OBJECTIVE, api_admin_write(204)),
    # an empty body: PUT misses required fields (400), PATCH changes nothing (200)
    ("put", "api:slo-objective-detail", OBJECTIVE, api_admin_write(400)),
    ("patch", "api:slo-objective-detail", OBJECTIVE, api_admin_write(200)),
    ("get", "api:slo-scorecard-list", NO_ARGS, everyone(200, anon=401)),
    ("post", "api:slo-scorecard-list", NO_ARGS, {**everyone(403, anon=401), "staff": 405}),
    ("get", "api:slo-scorecard-detail", SCORECARD, team_a(anon=401)),
    ("get", "api:slo-snapshot-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:slo-snapshot-detail", SNAPSHOT, team_a(anon=401)),
    ("delete", "api:slo-snapshot-detail", SNAPSHOT, {**everyone(403, anon=401), "staff": 405}),
    ("get", "api:slo-ending-rule-list", NO_ARGS, everyone(200, anon=401)),
    ("get", "api:slo-ending-rule-detail", ENDING_RULE, everyone(200, anon=401)),
    ("get", "guardrails-alerts", NO_ARGS, everyone(200)),
    ("get", "guardrails-preferences", NO_ARGS, everyone(200)),
    ("post", "guardrails-preferences", NO_ARGS, everyone(200)),  # empty form: shown again
    ("post", "guardrails-exempt-job", JOB, {**everyone(403), "staff": 303}),  # no reason
    ("get", "guardrails-exempt-job", JOB, {**everyone(403), "staff": 405}),
    # Closed for every persona until METRICS_TOKEN or METRICS_ALLOWED_IPS opens it
    # (tests/core/test_metrics.py covers the open cases).
    ("get", "core-metrics", NO_ARGS, everyone(403, anon=403)),
]

# Django's own admin guards every page with is_staff; only its index is exercised here.
EXEMPT_NAMESPACES = {"admin"}


@pytest.mark.parametrize(
    ("method", "name", "args", "persona", "expected"),
    [(m, n, a, p, exp[p]) for m, n, a, exp in MATRIX for p in PERSONAS],
    ids=[f"{m}-{n}-{p}" for m, n, a, exp in MATRIX for p in PERSONAS],
)
def test_route_answers_each_persona(world, login, in_the_worlds_month, method, name, args,
                                    persona, expected):
    # In the world's month: "this month" rows (a statement still open: 409) hold whatever
    # today's date is.
    url = reverse(name, kwargs=args(world))
    response = getattr(login(persona), method)(url)
    assert response.status_code == expected, f"{method.upper()} {url} as {persona}"
    if expected == 302 and name not in ("login", "logout"):
        assert "/login/" in response["Location"]


def _route_names(resolver: URLResolver, prefix: str = "") -> set[str]:
    names: set[str] = set()
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            ns = f"{prefix}{entry.namespace}:" if entry.namespace else prefix
            if entry.namespace in EXEMPT_NAMESPACES:
                continue
            names |= _route_names(entry, ns)
        elif isinstance(entry, URLPattern):
            names.add(f"{prefix}{entry.name}" if entry.name else f"{prefix}<unnamed {entry}>")
    return names


def test_every_route_has_a_row():
    listed = {name for _, name, _, _ in MATRIX}
    missing = _route_names(get_resolver()) - listed
    assert not missing, f"routes with no row in the permission matrix: {sorted(missing)}"


WRITE_METHODS = ("post", "put", "patch", "delete")


def _route_methods(resolver: URLResolver, prefix: str = "") -> set[tuple[str, str]]:
    """(url name, method) for every method a route's view implements: GET for all, and
    each write method the view class (or DRF viewset action map) handles."""
    pairs: set[tuple[str, str]] = set()
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            if entry.namespace in EXEMPT_NAMESPACES:
                continue
            ns = f"{prefix}{entry.namespace}:" if entry.namespace else prefix
            pairs |= _route_methods(entry, ns)
        elif isinstance(entry, URLPattern) and entry.name:
            pairs |= {(f"{prefix}{entry.name}", m) for m in _methods(entry.callback)}
    return pairs


def _methods(callback: Any) -> set[str]:
    actions = getattr(callback, "actions", None)  # a DRF viewset: method -> action
    if actions:
        return set(actions) & {"get", *WRITE_METHODS}  # HEAD and OPTIONS follow GET
    view = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    if view is None:  # a plain function view: at least its GET must be listed
        return {"get"}
    allowed = set(getattr(view, "http_method_names", ("get", *WRITE_METHODS)))
    found = {m for m in ("get", *WRITE_METHODS) if m in allowed and hasattr(view, m)}
    return found or {"get"}


def test_every_method_a_route_implements_has_a_row():
    listed = {(name, method) for method, name, _, _ in MATRIX}
    missing = _route_methods(get_resolver()) - listed
    assert not missing, ("(route, method) pairs with no row in the permission matrix: "
                         f"{sorted(missing)}")


@pytest.mark.parametrize(("persona", "expected"), [
    ("bob", {101}), ("tom", {102}), ("alice", {101, 102, 103}), ("dave", {201}),
    ("staff", {101, 102, 103, 201, 301}),
])
def test_api_job_list_returns_exactly_the_visible_set(world, login, persona, expected):
    data = login(persona).get(reverse("api:job-list")).json()
    assert {row["job_id"] for row in data["results"]} == expected


@pytest.mark.parametrize(("persona", "expected"), [
    ("bob", {101}), ("tom", set()), ("alice", {101, 103}), ("carol", {201}), ("dave", {201}),
    ("staff", {101, 103, 201}),
])
def test_api_trace_list_returns_exactly_the_visible_set(world, login, persona, expected):
    from apps.jobs.models import TraceRun

    for key in ("bob", "alice", "carol"):  # jobs 101, 103 and 201
        TraceRun.objects.create(job=world.jobs[key], fingerprint=key, world_size=2, steps=3)
    data = login(persona).get(reverse("api:tracerun-list")).json()
    assert {row["job_id"] for row in data["results"]} == expected


@pytest.mark.parametrize(("persona", "expected"), [
    ("bob", {101}), ("alice", {101, 102, 103}), ("carol", {201}),
])
def test_job_list_page_shows_exactly_the_visible_set(world, login, persona, expected):
    scope = "team" if persona == "alice" else "mine"
    page = login(persona).get(reverse("jobs-list"), {"scope": scope})
    assert {j.job_id for j in page.context["page"].rows} == expected


@pytest.mark.parametrize(("persona", "expected"), [
    ("bob", {"101"}), ("alice", {"101", "102", "103"}), ("carol", {"201"}),
    ("staff", {"101", "102", "103", "201", "301"}),
])
def test_job_export_holds_exactly_the_visible_set(world, login, persona, expected):
    response = login(persona).get(reverse("jobs-export"), {"scope": "all"})
    lines = b"".join(response.streaming_content).decode().splitlines()[1:]
    assert {line.split(",")[0] for line in lines} == expected
