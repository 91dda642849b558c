"""Quota fixtures: a Slurm (fake at the adapter boundary) holding the recorded associations
of the dev cluster, re-labelled for the test world's cluster."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from apps.clusters.adapters.slurm import ShareRow
from apps.clusters.models import SlurmAccount
from tests.fake import FakeSlurm


def shares(used_minutes: dict[str, float]) -> list[ShareRow]:
    """sshare rows whose decayed GPU usage (GrpTRESRaw gres/gpu) is ``used_minutes``."""
    return [ShareRow(account=a, grp_tres_raw={"gres/gpu": m}) for a, m in used_minutes.items()]


@pytest.fixture(autouse=True)
def _clock(in_the_worlds_month: Any) -> None:
    """Quotas are per month and the pages and API default to the current one: November 2026."""


@pytest.fixture
def slurm(world: Any) -> FakeSlurm:
    fake = FakeSlurm.recorded()
    fake.assocs = [replace(a, cluster=world.cluster.name) for a in fake.assocs]
    fake.share_rows = shares({"nlp": 0.0, "vision": 0.0})
    return fake


@pytest.fixture
def nlp(world: Any) -> SlurmAccount:
    return SlurmAccount.objects.get(cluster=world.cluster, name="nlp")
