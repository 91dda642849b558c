"""Single sign-on settings from the environment: LDAP (django-auth-ldap), OIDC
(mozilla-django-oidc) and the directory groups that give team memberships.

Each function returns the library's settings (empty: that sign-on is off);
``portal/settings.py`` adds them to its globals.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_choice, env_int, env_str


def sso_team_groups(raw: str) -> dict[str, list[tuple[str, str]]]:
    """Parse ``group:team[:role],...`` (role member or lead) into group -> [(team, role)]."""
    mapping: dict[str, list[tuple[str, str]]] = {}
    for entry in (e.strip() for e in raw.split(",") if e.strip()):
        parts = entry.split(":")
        role = parts[2] if len(parts) == 3 else "member"
        if len(parts) not in (2, 3) or not parts[0] or not parts[1] or role not in (
                "member", "lead"):
            raise ImproperlyConfigured(
                f"SSO_TEAM_GROUPS: {entry!r} is not group:team or group:team:member|lead")
        mapping.setdefault(parts[0], []).append((parts[1], role))
    return mapping


def ldap_settings() -> dict[str, object]:
    """django-auth-ldap's AUTH_LDAP_* settings from LDAP_* variables (empty: LDAP is off)."""
    uri = env_str("LDAP_SERVER_URI")
    if not uri:
        return {}
    import ldap
    from django_auth_ldap.config import (
        GroupOfNamesType,
        GroupOfUniqueNamesType,
        LDAPSearch,
        PosixGroupType,
    )

    group_types = {"groupofnames": GroupOfNamesType, "posixgroup": PosixGroupType,
                   "groupofuniquenames": GroupOfUniqueNamesType}
    group_type = env_choice("LDAP_GROUP_TYPE", "groupofnames", tuple(group_types))
    timeout = env_int("LDAP_TIMEOUT", 5, minimum=1)
    values: dict[str, object] = {
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_START_TLS": env_bool("LDAP_START_TLS", False),
        "AUTH_LDAP_USER_ATTR_MAP": {"first_name": "givenName", "last_name": "sn",
                                    "email": "mail"},
        "AUTH_LDAP_GROUP_TYPE": group_types[group_type](name_attr="cn"),
        "AUTH_LDAP_REQUIRE_GROUP": env_str("LDAP_REQUIRE_GROUP") or None,
        "AUTH_LDAP_CONNECTION_OPTIONS": {ldap.OPT_NETWORK_TIMEOUT: timeout,
                                         ldap.OPT_TIMEOUT: timeout},
        "AUTH_LDAP_CACHE_TIMEOUT": 0,  # group changes apply at the next sign-in
    }
    template = env_str("LDAP_USER_DN_TEMPLATE")
    if template:  # direct bind as the user, who then reads their own groups
        values["AUTH_LDAP_USER_DN_TEMPLATE"] = template
        values["AUTH_LDAP_BIND_AS_AUTHENTICATING_USER"] = True
    else:  # search with a read-only service account; the library escapes %(user)s
        values["AUTH_LDAP_BIND_DN"] = env_str("LDAP_BIND_DN")
        values["AUTH_LDAP_BIND_PASSWORD"] = env_str("LDAP_BIND_PASSWORD")
        values["AUTH_LDAP_USER_SEARCH"] = LDAPSearch(
            _required("LDAP_USER_SEARCH_BASE", "or set LDAP_USER_DN_TEMPLATE"),
            ldap.SCOPE_SUBTREE, env_str("LDAP_USER_FILTER", "(uid=%(user)s)"))
    group_base = env_str("LDAP_GROUP_SEARCH_BASE")
    if group_base:
        values["AUTH_LDAP_GROUP_SEARCH"] = LDAPSearch(
            group_base, ldap.SCOPE_SUBTREE, env_str("LDAP_GROUP_FILTER", "(objectClass=*)"))
    return values


def oidc_settings() -> dict[str, object]:
    """mozilla-django-oidc's settings from OIDC_* variables (empty: OIDC is off)."""
    client_id = env_str("OIDC_RP_CLIENT_ID")
    if not client_id:
        return {}
    hint = "OIDC is on because OIDC_RP_CLIENT_ID is set"
    return {
        "OIDC_RP_CLIENT_ID": client_id,
        "OIDC_RP_CLIENT_SECRET": env_str("OIDC_RP_CLIENT_SECRET"),
        "OIDC_OP_AUTHORIZATION_ENDPOINT": _required("OIDC_OP_AUTHORIZATION_ENDPOINT", hint),
        "OIDC_OP_TOKEN_ENDPOINT": _required("OIDC_OP_TOKEN_ENDPOINT", hint),
        "OIDC_OP_USER_ENDPOINT": _required("OIDC_OP_USER_ENDPOINT", hint),
        # Asymmetric signatures checked with the provider's published keys; the library's
        # default (HS256) would accept anything signed with the client secret.
        "OIDC_RP_SIGN_ALGO": env_choice("OIDC_RP_SIGN_ALGO", "rs256", ("rs256", "es256")).upper(),
        "OIDC_OP_JWKS_ENDPOINT": _required("OIDC_OP_JWKS_ENDPOINT", hint),
        "OIDC_RP_SCOPES": env_str("OIDC_RP_SCOPES", "openid email profile"),
        "OIDC_TIMEOUT": env_int("OIDC_TIMEOUT", 10, minimum=1),  # the default waits forever
        "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": env_int("OIDC_RENEW_SECONDS", 900, minimum=60),
        "OIDC_STORE_ID_TOKEN": True,
        "LOGIN_REDIRECT_URL_FAILURE": "/accounts/login/?sso=failed",
    }


def _required(name: str, hint: str) -> str:
    value = env_str(name)
    if not value:
        raise ImproperlyConfigured(f"{name} is required ({hint})")
    return value
