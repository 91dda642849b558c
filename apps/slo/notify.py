"""Telling leads and admins when an SLO is breached or its budget burns fast: once each.

An episode opens an ``Alert`` row (the partial unique constraint allows one open alert per
objective, subject and kind: whoever creates it sends it) and closes when the condition
clears (a breach only once the budget is back above ``SLO_RESOLVE_MARGIN``, so an SLI
hovering at its target does not page again and again). A later episode is a new alert.

Messages go by e-mail (Django's backend) to the team's leads and the platform admins (plus
``SLO_NOTIFY_EMAILS``), and to ``SLO_WEBHOOK_URL`` as a Slack or Mattermost incoming-webhook
body (``SLO_WEBHOOK_FORMAT``). Each links to the scorecard. A channel that failed is retried
alone on the next run (``channels`` records the ones that worked); a send in progress is
claimed with a conditional UPDATE so two workers never send the same alert.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse

from apps.accounts.models import Membership
from apps.core.errors import AdapterError
from apps.core.webhooks import post_json
from apps.slo.models import Alert, Scorecard

log = logging.getLogger(__name__)
CLAIM = timedelta(minutes=10)  # longer than a send can take (timeouts of 10 s per channel)


def wanted_kinds(card: Scorecard) -> set[str]:
    """The alert kinds this scorecard's state calls for."""
    kinds: set[str] = set()
    if card.total > 0 and card.budget_remaining <= 0:
        kinds.add(Alert.Kind.BREACH)
    if any(name.startswith("page-") for name in card.alerts or []):
        kinds.add(Alert.Kind.FAST_BURN)
    return kinds


def _cleared(kind: str, card: Scorecard | None) -> bool:
    if card is None:
        return True
    if kind == Alert.Kind.BREACH:
        return card.budget_remaining > settings.SLO_RESOLVE_MARGIN
    return kind not in wanted_kinds(card)


def raise_alerts(now: datetime) -> dict[str, int]:
    """Open alerts for new episodes, resolve finished ones, send what is unsent."""
    cards = {(c.objective_id, c.subject): c for c in Scorecard.objects.filter(
        objective__enabled=True, objective__notify=True).select_related("objective", "team")}
    opened = resolved = 0
    for alert in Alert.objects.filter(resolved_at__isnull=True):
        if _cleared(alert.kind, cards.get((alert.objective_id, alert.subject))):
            Alert.objects.filter(pk=alert.pk).update(resolved_at=now)
            resolved += 1
    for card in cards.values():
        for kind in sorted(wanted_kinds(card)):
            opened += _open(card, kind, now)
    sent = sum(deliver(alert, now) for alert in
               Alert.objects.filter(sent_at__isnull=True, resolved_at__isnull=True)
               .select_related("objective", "team"))
    return {"alerts_opened": opened, "alerts_resolved": resolved, "alerts_sent": sent}


def _open(card: Scorecard, kind: str, now: datetime) -> int:
    """Create the open alert of this episode unless there is one (then: 0)."""
    if Alert.objects.filter(objective=card.objective, subject=card.subject, kind=kind,
                            resolved_at__isnull=True).exists():
        return 0
    try:
        with transaction.atomic():
            Alert.objects.create(objective=card.objective, subject=card.subject,
                                 team=card.team, kind=kind, opened_at=now, sli=card.sli,
                                 budget_remaining=card.budget_remaining,
                                 message=message(card, kind))
    except IntegrityError:  # another worker opened it first: it sends it
        return 0
    return 1


# --- The message ------------------------------------------------------------------------------


def scorecard_url(card: Scorecard | Alert) -> str:
    if card.team is not None:
        return settings.SITE_URL + reverse("slo-team", args=[card.team.slug])
    return settings.SITE_URL + reverse("slo-list")


def _pct(value: float | None) -> str:
    return "no data" if value is None else f"{value * 100:.1f}%"


def message(card: Scorecard, kind: str) -> str:
    o, who = card.objective, card.subject_label
    if kind == Alert.Kind.BREACH:
        head = f"{who}: SLO \"{o.name}\" is breached"
    else:
        fastest = max(((w, r) for w, r in (card.burn_rates or {}).items() if r is not None),
                      key=lambda item: item[1], default=("", 0.0))
        head = (f"{who}: SLO \"{o.name}\" is burning its error budget fast "
                f"(burn rate {fastest[1]:.1f} over {fastest[0]})")
    text = (f"{head}: {_pct(card.sli)} against a target of {o.target_text} "
            f"({o.get_window_display()}); {_pct(card.budget_remaining)} of the error budget "
            f"left.")
    if card.exhaustion_at and card.budget_remaining > 0:
        text += f" At the last day's rate it is spent by {card.exhaustion_at:%Y-%m-%d %H:%M} UTC."
    return text


def webhook_body(alert: Alert) -> dict[str, Any]:
    """Slack and Mattermost incoming webhooks both take ``text`` (their link syntax differs)
    and ``attachments``."""
    url = scorecard_url(alert)
    mattermost = settings.SLO_WEBHOOK_FORMAT == "mattermost"
    link = f"[scorecard]({url})" if mattermost else f"<{url}|scorecard>"
    body: dict[str, Any] = {
        "text": f"{alert.message} {link}",
        "attachments": [{
            "fallback": alert.message, "color": "#c62828" if alert.kind == "breach"
            else "#b35900", "title": alert.get_kind_display(), "title_link": url,
            "fields": [{"title": "SLO", "value": alert.objective.name, "short": True},
                       {"title": "budget left", "value": _pct(alert.budget_remaining),
                        "short": True}]}],
    }
    if mattermost:
        body["username"] = "Beacon"
    return body


# --- Delivery ---------------------------------------------------------------------------------


def recipients(alert: Alert) -> list[str]:
    """The team's leads (team scorecards), every platform admin, and SLO_NOTIFY_EMAILS."""
    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    who = Q(is_staff=True)
    if alert.team_id:
        who |= Q(pk__in=Membership.objects.filter(team_id=alert.team_id,
                                                   role=Membership.Role.LEAD).values("user_id"))
    emails = set(users.filter(who).values_list("email", flat=True))
    return sorted(emails | set(settings.SLO_NOTIFY_EMAILS))


def _configured(alert: Alert) -> list[str]:
    channels = []
    if recipients(alert):
        channels.append("email")
    if settings.SLO_WEBHOOK_URL:
        channels.append("webhook")
    return channels


def deliver(alert: Alert, now: datetime) -> int:
    """Send the channels this alert has not been through yet; 1 when it is now sent.

    1. claim it (conditional UPDATE: a concurrent worker gets 0 rows and leaves it);
    2. send each missing channel, recording those that worked;
    3. mark it sent once every configured channel worked; release the claim.
    """
    claimed = Alert.objects.filter(pk=alert.pk, sent_at__isnull=True).filter(
        Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)).update(
        claimed_until=now + CLAIM)
    if not claimed:
        return 0
    done, errors = list(alert.channels or []), []
    for channel in [c for c in _configured(alert) if c not in done]:
        try:
            _send(channel, alert)
            done.append(channel)
        except (OSError, AdapterError) as exc:  # smtplib errors are OSErrors
            errors.append(f"{channel}: {exc}")
    complete = not errors
    Alert.objects.filter(pk=alert.pk).update(
        channels=done, error="; ".join(errors)[:2000], claimed_until=None,
        sent_at=now if complete else None)
    log.info("slo: alert %s (%s) via %s%s", alert.pk, alert.kind, done or "no channel",
             f"; failed: {errors}" if errors else "")
    return int(complete)


def _send(channel: str, alert: Alert) -> None:
    if channel == "email":
        subject = f"[Beacon SLO] {alert.message.split(':', 1)[0]}: {alert.get_kind_display()}"
        send_mail(subject[:200], f"{alert.message}\n\nScorecard: {scorecard_url(alert)}\n",
                  None, recipients(alert), fail_silently=False)
    else:
        post_json(settings.SLO_WEBHOOK_URL, webhook_body(alert),
                  timeout=settings.SLO_WEBHOOK_TIMEOUT)


def open_alerts(cards: Sequence[Scorecard]) -> dict[tuple[int, str], list[Alert]]:
    """Open alerts of these scorecards (the pages mark them)."""
    out: dict[tuple[int, str], list[Alert]] = {}
    for alert in Alert.objects.filter(resolved_at__isnull=True,
                                      objective__in={c.objective_id for c in cards}):
        out.setdefault((alert.objective_id, alert.subject), []).append(alert)
    return out
