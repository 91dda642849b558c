"""The "My API tokens" form: a token's name, tidied as the token list shows it, and how long
it lasts."""

from __future__ import annotations

from django import forms

NAME_MAX = 80
# How long a new token lasts; "never" keeps it until it is revoked.
LIFETIMES = [("30", "30 days"), ("90", "90 days"), ("365", "a year"), ("never", "until revoked")]
DEFAULT_LIFETIME = "90"


class TokenForm(forms.Form):
    name = forms.CharField(required=False)
    expires = forms.ChoiceField(choices=LIFETIMES, required=False)

    def clean_name(self) -> str:
        # Runs of blanks (a pasted line break) become one space, then the stored length applies;
        # an empty name is refused by tokens.create, which says what a name is for.
        return " ".join(self.cleaned_data["name"].split())[:NAME_MAX]

    def clean_expires(self) -> int | None:
        """Days the token lasts (None: until revoked); a form without the field gets the
        default, as the page preselects it."""
        value = self.cleaned_data["expires"] or DEFAULT_LIFETIME
        return None if value == "never" else int(value)
