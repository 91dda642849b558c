"""Forms of the findings pages: a lifecycle action's input turned into typed values for
``findings.transition``, which words every refusal (a missing expiry, a non-admin assignee)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.core.forms import MessageForm


class FindingActionForm(MessageForm):
    """What the finding page posts. An unreadable date or an unknown user becomes None: the
    transition then refuses with its own message, as it did before forms came."""

    action = forms.CharField(required=False, strip=False)
    reason = forms.CharField(required=False, strip=False)
    until = forms.CharField(required=False, strip=False)
    assignee = forms.CharField(required=False, strip=False)

    def clean_until(self) -> datetime | None:
        return when(self.cleaned_data["until"])

    def clean_assignee(self) -> Any:
        username = self.cleaned_data["assignee"]
        if not username:
            return None
        return get_user_model().objects.filter(username=username).first()


def when(value: str) -> datetime | None:
    """A date or a date and time from the form (dates end at midnight UTC)."""
    if not value or len(value) > 40:
        return None
    try:
        parsed = parse_datetime(value) or parse_datetime(f"{value}T00:00:00")
    except ValueError:
        return None
    if parsed is not None and parsed.tzinfo is None:
        parsed = timezone.make_aware(parsed, UTC)
    return parsed
