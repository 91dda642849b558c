"""The "My API tokens" form: a token's name, tidied as the token list shows it."""

from __future__ import annotations

from django import forms

NAME_MAX = 80


class TokenForm(forms.Form):
    name = forms.CharField(required=False)

    def clean_name(self) -> str:
        # Runs of blanks (a pasted line break) become one space, then the stored length applies;
        # an empty name is refused by tokens.create, which says what a name is for.
        return " ".join(self.cleaned_data["name"].split())[:NAME_MAX]
