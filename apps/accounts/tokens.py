"""Named API tokens: made and revoked on the "My API tokens" page (or ``manage.py
create_token`` for service accounts), checked by the API's ``Authorization: Token <key>``
header. The only kind of token: DRF's plaintext ones were hashed into these (migration
accounts 0005), so their keys still work."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from apps.accounts.models import ApiToken
from apps.audit import services as audit
from apps.audit.models import AuditEvent

MAX_PER_USER = 20
TOUCH_EVERY = timedelta(minutes=5)  # last_used_at is written at most this often
MAX_DAYS = 3650  # an expiry further out than this is a typo, not a policy


class TokenError(Exception):
    """A token the page refuses to make, with the reason."""


def create(user: Any, name: str, request: Any = None,
           days: int | None = None) -> tuple[ApiToken, str]:
    """A new token for ``user``, valid for ``days`` (None: until revoked); returns it and its
    key (the only time the key exists)."""
    name = " ".join(name.split())[:80]
    if not name:
        raise TokenError("give the token a name that says what it is for")
    if days is not None and not 1 <= days <= MAX_DAYS:
        raise TokenError(f"a token lasts from 1 to {MAX_DAYS} days, or until revoked")
    if ApiToken.objects.filter(user=user).count() >= MAX_PER_USER:
        raise TokenError(f"you have {MAX_PER_USER} tokens: revoke one you no longer use first")
    key = ApiToken.PREFIX + secrets.token_urlsafe(30)
    expires = timezone.now() + timedelta(days=days) if days is not None else None
    token = ApiToken.objects.create(user=user, name=name, digest=ApiToken.digest_of(key),
                                    hint=key[:10], expires_at=expires)
    audit.record(AuditEvent.Action.TOKEN, request, user, target=f"api token: {token}",
                 details={"kind": "created", "expires": expires.isoformat() if expires else None})
    return token, key


def revoke(token: ApiToken, request: Any = None) -> None:
    audit.record(AuditEvent.Action.TOKEN, request, token.user, target=f"api token: {token}",
                 details={"kind": "revoked"})
    token.delete()


def revoke_named(user: Any, name: str, request: Any = None) -> int:
    """Revoke every token of ``user`` called ``name`` (rotation); how many there were."""
    name = " ".join(name.split())[:80]
    found = list(ApiToken.objects.filter(user=user, name=name))
    for token in found:
        revoke(token, request)
    return len(found)


class NamedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>`` names one of the users' named tokens, found by the
    key's SHA-256; an unknown, expired or disabled user's token is a 401."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        token = (ApiToken.objects.select_related("user")
                 .filter(digest=ApiToken.digest_of(key)).first())
        if token is None:
            raise AuthenticationFailed("Invalid token.")
        now = timezone.now()
        if token.expired(now):
            raise AuthenticationFailed(
                f"Token expired on {token.expires_at:%Y-%m-%d %H:%M} UTC: make a new one on "
                "'My API tokens'.")
        if not token.user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        if token.last_used_at is None or now - token.last_used_at > TOUCH_EVERY:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token
