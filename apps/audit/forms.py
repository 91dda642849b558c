"""The audit page's filter, read from the query string."""

from __future__ import annotations

from django import forms

from apps.audit.models import AuditEvent


class AuditFilterForm(forms.Form):
    # An unknown action is ignored (no filter), as a stale bookmark should still open the page.
    action = forms.ChoiceField(choices=[("", "all"), *AuditEvent.Action.choices], required=False)
    user = forms.CharField(required=False, strip=True)

    def clean_user(self) -> str:
        return str(self.cleaned_data["user"])[:150]

    def filters(self) -> dict[str, str]:
        """The valid filters only: ``{"action": ..., "username": ...}`` without the blank ones."""
        self.is_valid()
        data = self.cleaned_data
        found = {"action": data.get("action", ""), "username": data.get("user", "")}
        return {key: value for key, value in found.items() if value}
