"""Single sign-on backends: LDAP (django-auth-ldap) and OIDC (mozilla-django-oidc).

Both end in the same two services: the directory's groups decide team memberships and
the admin flag (``services.apply_sso_groups``), and the directory's login name becomes
the user's Slurm name (``services.set_slurm_username``). Both are configured from the
environment in ``portal/settings.py`` and are off unless configured.
"""

from __future__ import annotations

import logging
from typing import Any

import jwt
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django_auth_ldap.backend import LDAPBackend
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from apps.accounts import services
from apps.accounts.models import Profile

log = logging.getLogger("beacon.auth")


class BeaconLDAPBackend(LDAPBackend):
    """LDAP sign-in; after each success, groups -> teams and the Slurm name from an attribute."""

    def authenticate_ldap_user(self, ldap_user: Any, password: str) -> Any:
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is not None:
            services.apply_sso_groups(user, ldap_user.group_names)
            services.set_slurm_username(user, _slurm_name_from_ldap(user, ldap_user))
        return user


def _slurm_name_from_ldap(user: Any, ldap_user: Any) -> str:
    attr = settings.LDAP_SLURM_USERNAME_ATTR
    values = ldap_user.attrs.get(attr, []) if attr else []
    name = values[0] if values else ""
    return "" if name == user.username else name[:64]


class BeaconOIDCBackend(OIDCAuthenticationBackend):
    """OIDC sign-in that identifies people by the provider's ``sub``, never by e-mail."""

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        subject = claims.get("sub")
        if not subject:
            return self.UserModel.objects.none()
        return self.UserModel.objects.filter(profile__oidc_subject=subject)

    def verify_token(self, token: str, **kwargs: Any) -> Any:
        """The library checks the signature and nonce; also check audience and issuer."""
        try:
            payload = super().verify_token(token, **kwargs)
        except jwt.InvalidTokenError as exc:  # expired, not yet valid, malformed
            raise SuspiciousOperation(f"OIDC: ID token refused ({exc})") from exc
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("OIDC: the ID token was issued for another client")
        if settings.OIDC_OP_ISSUER and payload.get("iss") != settings.OIDC_OP_ISSUER:
            raise SuspiciousOperation("OIDC: the ID token comes from another issuer")
        return payload

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        # A username claim is required to name the account; e-mail is not.
        return bool(claims.get("sub")) and bool(claims.get(settings.OIDC_USERNAME_CLAIM))

    def create_user(self, claims: dict[str, Any]) -> Any:
        username = str(claims[settings.OIDC_USERNAME_CLAIM])[:150]
        if self.UserModel.objects.filter(username=username).exists():
            # A local account with this name exists: binding it to this identity would
            # let whoever controls the IdP entry take it over. An admin links it instead.
            log.warning("OIDC sign-in refused: user %r exists and is not bound to sub %r",
                        username, claims["sub"])
            return None
        with transaction.atomic():
            user = self.UserModel.objects.create_user(username, email=claims.get("email", ""))
            Profile.objects.update_or_create(user=user,
                                             defaults={"oidc_subject": claims["sub"]})
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        user.first_name = str(claims.get("given_name", user.first_name))[:150]
        user.last_name = str(claims.get("family_name", user.last_name))[:150]
        user.email = str(claims.get("email", user.email))[:254]
        user.save(update_fields=["first_name", "last_name", "email"])
        groups = claims.get(settings.OIDC_GROUPS_CLAIM) or []
        services.apply_sso_groups(user, [str(g) for g in groups] if isinstance(groups, list)
                                  else [])
        slurm_name = str(claims.get(settings.OIDC_SLURM_USERNAME_CLAIM) or "")[:64]
        services.set_slurm_username(user, "" if slurm_name == user.username else slurm_name)
        return user
