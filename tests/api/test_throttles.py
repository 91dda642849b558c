"""API rate limits (issue 27 item 7): per token, per address, a scope of their own for the
collectors' ingest endpoints, and a 429 that says when to come back."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from apps.accounts import tokens
from portal.env import env_rate

JOBS = "/api/v1/jobs/"
INGEST = "/api/v1/security/ingest/sshd/"
OFF = {"api_token": None, "api_address": None, "ingest_token": None, "ingest_address": None}


@pytest.fixture
def rates(settings):
    """Limits on, from a clean count; the test sets the rates it wants."""
    cache.clear()
    settings.API_THROTTLE_RATES = dict(OFF)
    yield settings.API_THROTTLE_RATES
    cache.clear()


def _client(key: str, address: str = "192.0.2.10") -> Client:
    return Client(HTTP_AUTHORIZATION=f"Token {key}", REMOTE_ADDR=address)


def test_a_token_over_its_rate_gets_a_429_with_retry_after(world, rates):
    rates["api_token"] = "3/min"
    _, key = tokens.create(world.users["bob"], "ci")
    api = _client(key)
    assert [api.get(JOBS).status_code for _ in range(3)] == [200, 200, 200]
    refused = api.get(JOBS)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["detail"]


def test_each_token_has_its_own_budget(world, rates):
    rates["api_token"] = "2/min"
    _, first = tokens.create(world.users["bob"], "one")
    _, second = tokens.create(world.users["bob"], "two")
    assert [_client(first).get(JOBS).status_code for _ in range(3)] == [200, 200, 429]
    assert _client(second).get(JOBS).status_code == 200  # same user, same address


def test_a_signed_in_session_is_limited_per_user(world, login, rates):
    rates["api_token"] = "2/min"
    alice = login("alice")
    assert [alice.get(JOBS).status_code for _ in range(3)] == [200, 200, 429]
    assert login("bob").get(JOBS).status_code == 200


def test_an_address_is_limited_across_tokens_and_before_authentication(world, rates):
    rates["api_address"] = "3/min"
    _, key = tokens.create(world.users["bob"], "ci")
    codes = [_client("bcn_not-a-token").get(JOBS).status_code for _ in range(2)]
    codes += [_client(key).get(JOBS).status_code for _ in range(2)]
    assert codes == [401, 401, 200, 429]  # bad tokens count too
    refused = Client(REMOTE_ADDR="192.0.2.10").get(JOBS)
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert _client(key, address="192.0.2.11").get(JOBS).status_code == 200


def test_the_address_is_the_one_the_trusted_proxy_saw(world, rates, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    rates["api_address"] = "1/min"
    proxy = "127.0.0.1"
    first = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.1")
    second = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.2")
    assert first.get(JOBS).status_code == 401
    assert second.get(JOBS).status_code == 401  # another client behind the same proxy
    assert first.get(JOBS).status_code == 429


def test_pages_are_not_counted(world, login, rates):
    rates["api_address"] = "1/min"
    bob = login("bob")
    assert [bob.get("/health/").status_code for _ in range(3)] == [200, 200, 200]


def test_ingest_endpoints_have_their_own_scope(world, rates):
    rates.update(api_token="1/min", ingest_token="3/min")
    _, key = tokens.create(world.users["staff"], "collector")
    api = _client(key)
    body = {"cluster": "testcluster", "lines": ["not an sshd line"]}
    codes = [api.post(INGEST, body, content_type="application/json").status_code
             for _ in range(4)]
    assert codes == [201, 201, 201, 429]
    assert api.get(JOBS).status_code == 200  # the API budget is untouched by ingest


def test_ingest_per_address(world, rates):
    rates["ingest_address"] = "1/min"
    _, key = tokens.create(world.users["staff"], "collector")
    body = {"cluster": "testcluster", "lines": ["not an sshd line"]}
    node = _client(key, address="10.1.0.1")
    assert node.post(INGEST, body, content_type="application/json").status_code == 201
    assert node.post(INGEST, body, content_type="application/json").status_code == 429
    other = _client(key, address="10.1.0.2")
    assert other.post(INGEST, body, content_type="application/json").status_code == 201


def test_unset_rates_mean_no_limit(world, rates):
    _, key = tokens.create(world.users["bob"], "ci")
    assert {_client(key).get(JOBS).status_code for _ in range(30)} == {200}


@pytest.mark.parametrize(("raw", "expected"), [
    ("600/min", "600/min"), ("10/s", "10/s"), ("5000/DAY", "5000/day"), ("off", None),
])
def test_rates_are_read_from_the_environment(monkeypatch, raw, expected):
    monkeypatch.setenv("X_RATE", raw)
    assert env_rate("X_RATE", "1/s") == expected


@pytest.mark.parametrize("raw", ["lots", "10", "10/fortnight", "0/min", "-1/s", "1.5/s"])
def test_a_bad_rate_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("X_RATE", raw)
    with pytest.raises(ImproperlyConfigured, match="X_RATE="):
        env_rate("X_RATE", "1/s")


def test_the_shipped_defaults_limit_every_scope():
    from portal import settings as shipped

    assert all(shipped.API_THROTTLE_RATES.values())
    assert set(shipped.API_THROTTLE_RATES) == set(OFF)
