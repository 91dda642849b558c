"""The quotas API: visible accounts with usage; preview and apply (admins) with conflicts and
Slurm failures as 409 / 502 / 503, nothing applied then."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from apps.clusters import services as cluster_services
from apps.core.errors import AdapterError, TransientAdapterError
from apps.quotas import services
from apps.quotas.models import Quota


def api(world, persona: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(world.users[persona])
    return client


@pytest.fixture
def patched(slurm, monkeypatch):
    monkeypatch.setattr(cluster_services, "client_for", lambda cluster: slurm)
    return slurm


@pytest.mark.parametrize(("persona", "accounts"), [
    ("bob", {"nlp"}), ("dave", {"vision"}), ("staff", {"nlp", "vision"}),
])
def test_accounts_list_the_visible_set(world, persona, accounts):
    data = api(world, persona).get(reverse("api:quota-account-list")).json()
    assert {row["account"] for row in data["results"]} == accounts


def _preview(client, nlp, minutes=6000):
    return client.post(reverse("api:quota-account-preview", args=[nlp.pk]),
                       {"month": "2026-11", "gpu_minutes": minutes}, format="json")


def _apply(client, nlp, shown, minutes=6000):
    return client.post(reverse("api:quota-account-apply", args=[nlp.pk]), {
        "month": "2026-11", "gpu_minutes": minutes, "seen_minutes": shown["old_minutes"],
        "seen_version": shown["version"], "reason": "budget"}, format="json")


def test_preview_then_apply(world, patched, nlp):
    services.check_cluster(world.cluster, patched)  # Slurm's associations synced once
    client = api(world, "staff")
    shown = _preview(client, nlp).json()
    assert shown["command"].endswith("GrpTRESMins=gres/gpu=6000") and shown["version"] == 0
    applied = _apply(client, nlp, shown)
    assert applied.status_code == 200 and applied.json()["gpu_minutes"] == 6000
    detail = client.get(reverse("api:quota-account-detail", args=[nlp.pk])).json()
    assert detail["quota"]["gpu_hours"] == 100 and detail["slurm_minutes"] == 6000


def test_a_stale_apply_is_a_409_and_writes_nothing(world, patched, nlp):
    client = api(world, "staff")
    stale = _preview(client, nlp).json()
    _apply(client, nlp, _preview(client, nlp).json())
    again = _apply(client, nlp, stale, minutes=18000)
    assert again.status_code == 409 and "look again" in again.json()["detail"]
    assert Quota.objects.get().gpu_minutes == 6000


@pytest.mark.parametrize(("error", "code"), [
    (AdapterError("Slurm changed nothing:  Nothing modified", service="slurm"), 502),
    (TransientAdapterError("Problem talking to the database", service="slurm"), 503),
])
def test_slurm_failures_are_502_or_503_and_nothing_is_applied(world, patched, nlp, error, code):
    client = api(world, "staff")
    shown = _preview(client, nlp).json()
    patched.limit_fail = error
    response = _apply(client, nlp, shown)
    assert response.status_code == code and str(error) in response.json()["detail"]
    assert not Quota.objects.exists()


def test_negative_values_are_a_400_and_absurd_ones_a_409(world, patched, nlp):
    client = api(world, "staff")
    assert _preview(client, nlp, minutes=-3).status_code == 400  # the schema says minimum 0
    response = _preview(client, nlp, minutes=10**12)
    assert response.status_code == 409 and "absurd" in response.json()["detail"]


def test_leads_cannot_preview_or_apply(world, patched, nlp):
    assert _preview(api(world, "alice"), nlp).status_code == 403
    assert patched.calls == []


def test_the_api_preview_shows_the_consequence_the_account_reads_after_apply(world, patched, nlp):
    """Issue 26: a preview states what the new limit does, in the figures the account's row
    reads once it is applied."""
    from tests.quotas.conftest import shares

    patched.share_rows = shares({"nlp": 2710.8 * 60, "vision": 0.0})
    services.check_cluster(world.cluster, patched)
    client = api(world, "staff")
    shown = _preview(client, nlp, minutes=1200 * 60).json()
    assert shown["blocks"] is True and shown["after"]["percent"] == 225.9
    assert shown["after"]["used_hours"] == shown["usage"]["used_hours"] == 2710.8
    assert "bob" in shown["users"] and shown["pending_jobs"] >= 0
    assert shown["usage"]["quota"] is None  # nothing written by a preview
    _apply(client, nlp, shown, minutes=1200 * 60)
    detail = client.get(reverse("api:quota-account-detail", args=[nlp.pk])).json()
    assert detail["percent"] == shown["after"]["percent"]
    assert detail["month_hours"] == shown["usage"]["month_hours"]
    roomy = _preview(client, nlp, minutes=5000 * 60).json()
    assert roomy["blocks"] is False and roomy["after"]["level"] == 0
    unlimited = _preview(client, nlp, minutes=None).json()
    assert unlimited["after"] is None and unlimited["blocks"] is False
