"""Forms of the chargeback pages: they turn what an admin typed into typed values for services."""

from __future__ import annotations

from django import forms


class AdjustmentForm(forms.Form):
    """A correction line: the amount parsed to a Decimal here, its business rules in services."""

    amount = forms.DecimalField(error_messages={"required": "an adjustment needs an amount",
                                                "invalid": "the amount is not a number"})
    # Blank is let through: services.add_adjustment refuses it with its own words.
    description = forms.CharField(required=False, max_length=2000)

    def first_error(self) -> str:
        """One line for the page's message (the form itself is not re-rendered)."""
        return next(str(e) for errors in self.errors.values() for e in errors)
