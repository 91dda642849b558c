"""Named API tokens: made and revoked on the "My API tokens" page, checked by the API's
``Authorization: Token <key>`` header (before DRF's own one-per-user tokens)."""

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


class TokenError(Exception):
    """A token the page refuses to make, with the reason."""


def create(user: Any, name: str, request: Any = None) -> tuple[ApiToken, str]:
    """A new token for ``user``; returns it and its key (the only time the key exists)."""
    name = " ".join(name.split())[:80]
    if not name:
        raise TokenError("give the token a name that says what it is for")
    if ApiToken.objects.filter(user=user).count() >= MAX_PER_USER:
        raise TokenError(f"you have {MAX_PER_USER} tokens: revoke one you no longer use first")
    key = ApiToken.PREFIX + secrets.token_urlsafe(30)
    token = ApiToken.objects.create(user=user, name=name, digest=ApiToken.digest_of(key),
                                    hint=key[:10])
    audit.record(AuditEvent.Action.TOKEN, request, user, target=f"api token: {token}",
                 details={"kind": "created"})
    return token, key


def revoke(token: ApiToken, request: Any = None) -> None:
    audit.record(AuditEvent.Action.TOKEN, request, token.user, target=f"api token: {token}",
                 details={"kind": "revoked"})
    token.delete()


class NamedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token bcn_...`` names one of the user's named tokens; any other key
    is DRF's one-per-user token, as before."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        if not key.startswith(ApiToken.PREFIX):
            return super().authenticate_credentials(key)
        token = (ApiToken.objects.select_related("user")
                 .filter(digest=ApiToken.digest_of(key)).first())
        if token is None:
            raise AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > TOUCH_EVERY:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token
