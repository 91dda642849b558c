"""Forms of the quota edit page: they turn what an admin typed into typed values (a month as a
date, GPU-hours as a Decimal, seen values as ints). The checks against the month's ceiling
(negative, absurd, not whole minutes) stay in ``services.quota_minutes``."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from django import forms

from apps.chargeback.forms import MonthForm


class QuotaForm(MonthForm):
    """Preview step: month, GPU-hours (blank: no limit) and the reason."""

    hours = forms.CharField(required=False, strip=False)
    # The reason is the service's business (it is recorded as typed).
    reason = forms.CharField(required=False, strip=False)

    def clean_hours(self) -> Decimal | None:
        raw = self.cleaned_data["hours"]
        if not raw.strip():
            return None
        try:
            value = Decimal(raw.strip())
        except InvalidOperation:
            value = Decimal("NaN")
        if not value.is_finite():
            raise forms.ValidationError(f"{raw!r} is not a number of GPU-hours")
        return value


class QuotaApplyForm(QuotaForm):
    """Apply step: the preview's values plus what the admin saw (Slurm's value, the version)."""

    seen_minutes = forms.CharField(required=False)
    seen_version = forms.CharField(required=False)
    # The first error reported is the first one met by the page before forms came.
    field_order = ["month", "seen_minutes", "hours", "seen_version", "reason"]

    def clean_seen_minutes(self) -> int | None:
        return _optional_int(self.cleaned_data["seen_minutes"])

    def clean_seen_version(self) -> int:
        return _optional_int(self.cleaned_data["seen_version"]) or 0


def _optional_int(raw: str) -> int | None:
    raw = raw.strip()
    if not raw:
        return None
    if not re.fullmatch(r"-?[0-9]+", raw):
        raise forms.ValidationError(f"{raw!r} is not a whole number")
    return int(raw)
