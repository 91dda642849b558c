"""Webhooks from Django's side: the one sender configured from settings, and the check a
webhook URL gets when it is saved (issue 27; docs/SECURITY.md, "Outgoing webhooks").

Every webhook of every app goes through ``post_json`` here. A URL is checked twice: when it
is saved (``validate_webhook_url``, a validator on every webhook URL field) and again at each
send by the sender itself, because the name can point somewhere else by then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from apps.analysis import egress
from apps.analysis.egress import AllowList
from apps.core.adapters import webhook
from apps.core.errors import AdapterError

ALLOW_HINT = ("Use the chat server's public address, or ask the platform admins to allow "
              "this one (BEACON_WEBHOOK_ALLOW).")


def allow_list() -> AllowList:
    """``BEACON_WEBHOOK_ALLOW`` read (a bad entry is skipped here; the system check names it)."""
    allow, _ = egress.parse_allow_list(settings.WEBHOOK_ALLOW)
    return allow


def sender(timeout: float) -> webhook.WebhookSender:
    """The sender with the site's egress settings and the caller's timeout (seconds for
    connecting and answering together: each app has its own ``*_WEBHOOK_TIMEOUT``)."""
    return webhook.WebhookSender(webhook.Egress(
        allow=allow_list(), timeout=timeout,
        retry_after_max=float(settings.WEBHOOK_RETRY_AFTER_MAX),
        ca_bundle=settings.WEBHOOK_CA_BUNDLE))


def post_json(url: str, payload: Mapping[str, Any], *, timeout: float,
              headers: Mapping[str, str] | None = None) -> int:
    """POST ``payload`` as JSON; the 2xx status, else ``AdapterError`` (its message is fit to
    show the user; ``TransientAdapterError`` when a later try can help)."""
    return sender(timeout).post_json(url, payload, headers)


# --- When a URL is saved ----------------------------------------------------------------------


def url_problem(url: str, resolver: webhook.Resolver | None = None) -> str:
    """Why Beacon will not post to ``url``, in words for the form; "" when it may.

    A name that does not resolve now is accepted (the chat server may be down; the send
    checks again); a name that resolves to an internal address is refused like the address.
    """
    try:
        dest = webhook.target(url)
    except AdapterError:
        return "Enter an http:// or https:// URL."
    literal = egress.parse_address(dest.host)
    try:
        addresses = (resolver or webhook.resolve)(dest.host, dest.port)
    except (OSError, UnicodeError):
        addresses = []
    allow = allow_list()
    refused = (egress.check(dest.host, addresses, allow).refused if addresses
               else egress.check_name(dest.host, allow))
    if not refused:
        return ""
    what = f"{'an' if refused[0] in 'aeiou' else 'a'} {refused} address"
    if literal is not None:
        return f"Beacon does not post to {literal}: it is {what}, inside the network. {ALLOW_HINT}"
    return f"Beacon does not post to {dest.host}: it points at {what}, inside the network. " \
           f"{ALLOW_HINT}"


def validate_webhook_url(value: str) -> None:
    """Django validator for webhook URL fields (models, forms, serializers)."""
    if value and (problem := url_problem(value)):
        raise ValidationError(problem, code="webhook_address")


def allow_listed(url: str) -> dict[str, str]:
    """``{"host", "allowed_by"}`` when ``url`` reaches an internal address only because the
    allow-list names it (saving it is audited), else ``{}``. Never the path: it holds the
    webhook's secret."""
    try:
        dest = webhook.target(url)
        addresses = webhook.resolve(dest.host, dest.port)
    except (AdapterError, OSError, UnicodeError):
        return {}
    entry = egress.check(dest.host, addresses, allow_list()).allowed_by
    return {"host": dest.host_header, "allowed_by": entry} if entry else {}
