"""OIDC sign-in through the real views and backend, with the provider faked at the HTTP seam.

No identity provider runs on this machine, so the three HTTP calls mozilla-django-oidc
makes (token, JWKS, userinfo) are answered here; everything else is real: the redirect
with state and nonce, RS256 signature checking with PyJWT, claims, user creation and the
session. Settings come from OIDC_* variables through ``portal.sso.oidc_settings``.
"""

from __future__ import annotations

import time
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth.models import User
from django.test import Client

from apps.accounts.models import Membership, Profile
from apps.audit.models import AuditEvent
from apps.jobs.models import Job
from portal import settings as portal_settings
from portal.sso import sso_team_groups

# Imported now, while OIDC is off: portal/urls.py adds the OIDC routes only when the
# settings say so at import time, and the permission matrix expects them absent.
from tests.accounts import oidc_urls

pytestmark = pytest.mark.urls(oidc_urls.__name__)

IDP = "https://idp.example.org"
CLIENT_ID = "beacon"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWK = {**jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True),
       "kid": "k1", "alg": "RS256", "use": "sig"}


@pytest.fixture
def oidc(settings, monkeypatch, db):
    env = {"OIDC_RP_CLIENT_ID": CLIENT_ID, "OIDC_RP_CLIENT_SECRET": "s3cret",
           "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{IDP}/authorize",
           "OIDC_OP_TOKEN_ENDPOINT": f"{IDP}/token", "OIDC_OP_USER_ENDPOINT": f"{IDP}/userinfo",
           "OIDC_OP_JWKS_ENDPOINT": f"{IDP}/jwks"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name, value in portal_settings.oidc_settings().items():
        setattr(settings, name, value)
    settings.OIDC_ENABLED = True
    settings.OIDC_OP_ISSUER = IDP
    settings.OIDC_SLURM_USERNAME_CLAIM = "uid"
    settings.AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend",
                                        "apps.accounts.auth.BeaconOIDCBackend",
                                        "django.contrib.auth.backends.ModelBackend"]
    settings.SSO_TEAM_GROUPS = sso_team_groups("nlp-users:nlp,nlp-leads:nlp:lead")
    settings.SSO_ADMIN_GROUPS = ["portal-admins"]


def _id_token(nonce: str, key: Any = KEY, **claims: Any) -> str:
    now = int(time.time())
    payload = {"iss": IDP, "sub": "sub-123", "aud": CLIENT_ID, "iat": now, "exp": now + 300,
               "nonce": nonce, **claims}
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": "k1"})


class FakeProvider:
    """Answers the token, JWKS and userinfo requests the way an IdP would."""

    def __init__(self, userinfo: dict[str, Any], key: Any = KEY, **token_claims: Any) -> None:
        self.userinfo, self.key, self.token_claims = userinfo, key, token_claims
        self.nonce = ""
        self.calls: list[tuple[str, Any]] = []

    def post(self, url: str, data: Any = None, **kwargs: Any) -> mock.Mock:
        self.calls.append((url, kwargs.get("timeout")))
        assert url == f"{IDP}/token" and data["code"] == "the-code"
        return _response({"id_token": _id_token(self.nonce, self.key, **self.token_claims),
                          "access_token": "at-1", "token_type": "Bearer"})

    def get(self, url: str, **kwargs: Any) -> mock.Mock:
        self.calls.append((url, kwargs.get("timeout")))
        if url == f"{IDP}/jwks":
            return _response({"keys": [JWK]})
        assert url == f"{IDP}/userinfo"
        assert kwargs["headers"]["Authorization"] == "Bearer at-1"
        return _response(self.userinfo)


def _response(body: dict[str, Any]) -> mock.Mock:
    response = mock.Mock(status_code=200, headers={"Content-Type": "application/json"})
    response.json.return_value = body
    return response


def _sign_in(provider: FakeProvider) -> Any:
    """Start at /oidc/authenticate/, come back to /oidc/callback/ as the browser would."""
    client = Client()
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302 and start["Location"].startswith(f"{IDP}/authorize?")
    query = parse_qs(urlsplit(start["Location"]).query)
    provider.nonce = query["nonce"][0]
    with mock.patch("mozilla_django_oidc.auth.requests.post", provider.post), \
            mock.patch("mozilla_django_oidc.auth.requests.get", provider.get):
        done = client.get("/oidc/callback/", {"code": "the-code", "state": query["state"][0]})
    return client, done


USERINFO = {"sub": "sub-123", "preferred_username": "alice.l", "uid": "alice",
            "email": "alice@example.org", "given_name": "Alice",
            "groups": ["nlp-leads"]}


def test_a_first_sign_in_creates_the_user_from_the_claims(oidc, world):
    provider = FakeProvider(USERINFO)
    client, done = _sign_in(provider)
    assert done.status_code == 302 and done["Location"] == "/"
    user = User.objects.get(username="alice.l")
    assert (user.email, user.first_name, user.is_staff) == ("alice@example.org", "Alice", False)
    assert Profile.objects.get(user=user).oidc_subject == "sub-123"
    assert dict(Membership.objects.filter(user=user).values_list("team__slug", "role")) == {
        "nlp": "lead"}
    # "alice" on Slurm is now alice.l: her jobs and her team's jobs are visible to her
    assert Job.objects.get(job_id=103).user == user
    assert set(Job.objects.visible_to(user).values_list("job_id", flat=True)) == {
        101, 102, 103}
    assert client.get("/").status_code == 200
    assert all(timeout == 10 for _, timeout in provider.calls)  # never wait forever
    assert AuditEvent.objects.get(action="login").details == {"backend": "BeaconOIDCBackend"}


def test_the_same_subject_signs_in_again_even_after_a_rename(oidc, world):
    _sign_in(FakeProvider(USERINFO))
    renamed = {**USERINFO, "preferred_username": "alice.lead",
               "groups": ["nlp-users", "portal-admins"]}
    _, done = _sign_in(FakeProvider(renamed))
    assert done.status_code == 302 and done["Location"] == "/"
    user = Profile.objects.get(oidc_subject="sub-123").user
    assert user.username == "alice.l" and user.is_staff  # groups re-applied
    assert dict(Membership.objects.filter(user=user).values_list("team__slug", "role")) == {
        "nlp": "member"}
    assert User.objects.filter(profile__oidc_subject__gt="").count() == 1


def test_an_existing_local_account_is_never_taken_over(oidc, world):
    client, done = _sign_in(FakeProvider({**USERINFO, "preferred_username": "bob"}))
    assert done["Location"] == "/accounts/login/?sso=failed"
    assert client.get("/").status_code == 302  # not signed in
    assert not Profile.objects.filter(user__username="bob", oidc_subject__gt="").exists()


@pytest.mark.parametrize(("why", "provider"), [
    ("signed with another key", FakeProvider(USERINFO, key=OTHER_KEY)),
    ("issued for another client", FakeProvider(USERINFO, aud="someone-else")),
    ("from another issuer", FakeProvider(USERINFO, iss="https://evil.example.org")),
    ("expired", FakeProvider(USERINFO, exp=int(time.time()) - 60)),
    ("no subject", FakeProvider({**USERINFO, "sub": ""})),
])
def test_bad_tokens_and_claims_sign_no_one_in(oidc, world, why, provider):
    client, done = _sign_in(provider)
    # A forged or misdirected token is a 400; well-signed but unusable claims redirect
    # to the failure URL. Never a 500, never a session.
    assert done.status_code == 400 or done["Location"] == "/accounts/login/?sso=failed", why
    assert not User.objects.filter(username="alice.l").exists()
    assert client.get("/").status_code == 302


def test_oidc_settings_are_off_without_a_client_id_and_strict_with_one(monkeypatch):
    monkeypatch.delenv("OIDC_RP_CLIENT_ID", raising=False)
    assert portal_settings.oidc_settings() == {}
    monkeypatch.setenv("OIDC_RP_CLIENT_ID", "beacon")
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="OIDC_OP_AUTHORIZATION_ENDPOINT"):
        portal_settings.oidc_settings()


def test_the_login_page_offers_sso_when_it_is_on(oidc):
    page = Client().get("/accounts/login/").content.decode()
    assert 'href="/oidc/authenticate/' in page

