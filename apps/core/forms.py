"""Form pieces shared by the apps' ``forms.py``: Django forms only, no domain import."""

from __future__ import annotations

from django import forms


class MessageForm(forms.Form):
    """A form whose errors come back as one message on the page it was posted from."""

    def first_error(self) -> str:
        """One line for the page's message (the form itself is not re-rendered)."""
        return next(str(e) for errors in self.errors.values() for e in errors)
