"""Forms of the chargeback pages: they turn what an admin typed into typed values for services."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django import forms

from apps.analysis.chargeback import Policy
from apps.chargeback.models import Rate
from apps.chargeback.services import ChargebackError, current_month, parse_month
from apps.clusters.models import Cluster
from apps.core.forms import MessageForm


class MonthForm(MessageForm):
    """``month`` as ``YYYY-MM``; blank means this month. The view answers 404 when it is invalid."""

    # strip=False: " " was refused before forms came, and still is.
    month = forms.CharField(required=False, strip=False)

    def clean_month(self) -> date:
        raw = self.cleaned_data["month"]
        try:
            return parse_month(raw) if raw else current_month()
        except ChargebackError as exc:
            raise forms.ValidationError(str(exc)) from None

    def month_error(self) -> str | None:
        """Why the month was refused, or None (validates the form if not yet done)."""
        self.is_valid()
        errors = self.errors.get("month")
        return str(errors[0]) if errors else None


class AdjustmentForm(MessageForm):
    """A correction line: the amount parsed to a Decimal here, its business rules in services."""

    amount = forms.DecimalField(error_messages={"required": "an adjustment needs an amount",
                                                "invalid": "the amount is not a number"})
    # Blank is let through: services.add_adjustment refuses it with its own words.
    description = forms.CharField(required=False, max_length=2000)


class TermsForm(MessageForm):
    """A month's policy and waste fee (the fee's 0..1 range is checked by ``cb.Terms``)."""

    policy = forms.ChoiceField(choices=[(p.value, p.value) for p in Policy],
                               error_messages={"invalid_choice": "unknown policy %(value)s"})
    waste_fee = forms.DecimalField(required=False,
                                   error_messages={"invalid": "the waste fee is not a number"})

    def clean_policy(self) -> Policy:
        return Policy(self.cleaned_data["policy"])

    def clean_waste_fee(self) -> Decimal:
        fee = self.cleaned_data["waste_fee"]
        return Decimal("0") if fee is None else fee


class ReconcileForm(forms.Form):
    """Which cluster to compare with Slurm's own report (admins: every cluster)."""

    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all(), to_field_name="name",
                                     error_messages={"required": "no such cluster",
                                                     "invalid_choice": "no such cluster"})


class RateForm(forms.ModelForm):
    """A rate of the rate card, added or edited by an admin (the model checks its dates)."""

    class Meta:
        model = Rate
        fields = ["partition", "gpu_model", "price", "valid_from", "valid_until", "note"]
        widgets = {"valid_from": forms.DateInput(attrs={"type": "date"}),
                   "valid_until": forms.DateInput(attrs={"type": "date"})}
        labels = {"gpu_model": "GPU model", "price": "Price per GPU-hour"}
