"""The chargeback pages' forms: what an admin types -> typed values, or the error shown."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from apps.analysis.chargeback import Policy
from apps.chargeback.forms import AdjustmentForm, RateForm, ReconcileForm, TermsForm
from apps.clusters.models import Cluster

RATE = {"partition": "gpu", "gpu_model": "h100", "price": "2.5", "valid_from": "2026-11-01",
        "valid_until": "", "note": ""}


@pytest.mark.django_db
@pytest.mark.parametrize(("changes", "error_field"), [
    ({}, None),
    ({"partition": "", "gpu_model": ""}, None),  # the default rate
    ({"valid_until": "2026-12-01"}, None),
    ({"price": "-1"}, "price"),
    ({"price": "two"}, "price"),
    ({"price": "0.00001"}, "price"),  # more than 4 decimals
    ({"valid_from": ""}, "valid_from"),
    ({"valid_from": "2026-13-01"}, "valid_from"),
    ({"valid_until": "2026-11-01"}, "valid_until"),  # not after valid_from
])
def test_rate(changes, error_field):
    form = RateForm({**RATE, **changes})
    if error_field is None:
        assert form.is_valid(), form.errors
        assert form.cleaned_data["price"] == Decimal(form.data["price"])
        assert form.cleaned_data["valid_from"] == date(2026, 11, 1)
    else:
        assert not form.is_valid() and list(form.errors) == [error_field]


@pytest.mark.parametrize(("amount", "typed", "error"), [
    ("-12.50", Decimal("-12.50"), None),
    ("", None, "an adjustment needs an amount"),
    ("ten", None, "the amount is not a number"),
])
def test_adjustment(amount, typed, error):
    form = AdjustmentForm({"amount": amount, "description": "refund"})
    if error is None:
        assert form.is_valid() and form.cleaned_data["amount"] == typed
    else:
        assert not form.is_valid() and form.first_error() == error


@pytest.mark.parametrize(("policy", "fee", "typed", "error"), [
    ("allocated", "0.1", (Policy.ALLOCATED, Decimal("0.1")), None),
    ("useful_plus_fee", "", (Policy.USEFUL_PLUS_FEE, Decimal("0")), None),
    ("nobody", "0", None, "unknown policy nobody"),
    ("allocated", "a lot", None, "the waste fee is not a number"),
])
def test_terms(policy, fee, typed, error):
    form = TermsForm({"policy": policy, "waste_fee": fee})
    if error is None:
        assert form.is_valid()
        assert (form.cleaned_data["policy"], form.cleaned_data["waste_fee"]) == typed
    else:
        assert not form.is_valid() and form.first_error() == error


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "error"), [("gpu-a", None), ("gpu-z", "no such cluster"),
                                             ("", "no such cluster")])
def test_reconcile(name, error):
    cluster = Cluster.objects.create(name="gpu-a")
    form = ReconcileForm({"cluster": name})
    if error is None:
        assert form.is_valid() and form.cleaned_data["cluster"] == cluster
    else:
        assert not form.is_valid() and form.errors["cluster"] == [error]
