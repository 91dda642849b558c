"""API fuzzing: schemathesis against the drf-spectacular schema, in-process, authenticated.

Every operation under /api/v1/ gets generated valid and invalid requests (positive and
negative modes) as a signed-in lead of team A: no 5xx, every status declared, every body
conforming to the schema. Bounded here (CI); ``make fuzz`` runs longer.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from apps.accounts.models import ApiToken
from portal.wsgi import application

TOKEN = "f" * 40
MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
# CI replays the same examples every run; ``make fuzz`` explores new ones each time.
DERANDOMIZE = os.environ.get("FUZZ_RANDOM", "") != "1"
SEEN: Counter[tuple[str, int]] = Counter()  # (persona, status) over every generated call

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
schema.config.update(headers={"Authorization": f"Token {TOKEN}"})


@pytest.fixture(params=["alice", "staff"])
def api_user(request, world):
    """A lead (own and team objects behind the ids, admin endpoints refused) and an admin."""
    ApiToken.objects.create(user=world.users[request.param], name="fuzz",
                            digest=ApiToken.digest_of(TOKEN), hint=TOKEN[:10])
    # Requests go straight to the WSGI app, which closes the database connection after
    # each one; Django's test client turns that off, and so must we, or the test's
    # transaction (and its data) goes with the first request.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield request.param
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def map_query(ctx, query):
    """Leave ``cursor`` out: a cursor is an opaque token only the API writes, which the schema
    cannot describe, so every generated one is rightly a 400 (a "valid request rejected" to
    schemathesis). ``tests/api/test_hostile_input.py`` fuzzes cursors on their own."""
    if query:
        query.pop("cursor", None)
    return query


@schema.hooks.apply(map_query)
@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_api_conforms_to_its_schema(case, api_user):
    response = case.call_and_validate()
    SEEN[(api_user, response.status_code)] += 1


# A database test like the fuzz tests above: pytest-django runs database-free tests after
# every database test, and `make test` may hand those later tests to another worker, where
# SEEN is empty (tests/xdist_lanes.py). With the mark it stays in the same run of the module.
@pytest.mark.django_db
def test_the_fuzzing_reached_the_api_signed_in():
    """Guard against a green run that only ever saw 401s (a wrong or missing token)."""
    if not SEEN:
        pytest.skip("runs after the fuzz tests above, in the same session")
    for persona in ("alice", "staff"):
        assert SEEN[(persona, 200)] > 0, dict(SEEN)
    assert SEEN[("alice", 403)] > 0  # the lead was refused the admin-only runs
