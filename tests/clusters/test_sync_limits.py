"""``sync_limits``: reservations and QOS limits stored from the adapter (tests/fake.py over
the recordings of tests/fixtures/slurm/live/), idempotent, failures said, never "none"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from apps.clusters import sync_limits
from apps.clusters.adapters.slurm import parse_live as pl
from apps.clusters.models import Cluster, QosLimit, Reservation
from apps.core.errors import AdapterError, TransientAdapterError
from apps.core.models import TaskRun
from tests.fake import FakeSlurm

pytestmark = pytest.mark.django_db
LIVE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "live" / "26.05"


@pytest.fixture
def cluster() -> Cluster:
    return Cluster.objects.create(name="dev2605", slurm_backend="cli")


@pytest.fixture
def slurm() -> FakeSlurm:
    return FakeSlurm(
        reservation_list=pl.parse_reservations_text(
            (LIVE / "scontrol_reservations.txt").read_text()),
        qos_list=pl.parse_qos_text((LIVE / "sacctmgr_qos.txt").read_text()))


def test_it_stores_reservations_and_qos_as_slurm_said(cluster, slurm):
    stats = sync_limits.sync_limits(cluster, slurm)
    assert stats["reservations"] == 1 and stats["qos"] == 4 and stats["notes"] == {}
    res = Reservation.objects.get(cluster=cluster)
    assert (res.name, res.node_names, res.users) == ("beacon_fixture", ["gpu04"], ["bob", "carol"])
    qos = QosLimit.objects.get(cluster=cluster, name="beacon_fixture_qos")
    assert qos.max_tres_per_user == {"gres/gpu": 6} and qos.max_wall_min == 120
    assert TaskRun.objects.get(kind="slurm.sync_limits").status == TaskRun.Status.SUCCEEDED


def test_running_it_twice_stores_the_same_rows(cluster, slurm):
    sync_limits.sync_limits(cluster, slurm)
    first = sorted(Reservation.objects.values_list("pk", "name", "start", "end"))
    sync_limits.sync_limits(cluster, slurm)
    assert sorted(Reservation.objects.values_list("pk", "name", "start", "end")) == first
    assert QosLimit.objects.filter(cluster=cluster).count() == 4


def test_rows_slurm_no_longer_lists_go_and_changes_are_written(cluster, slurm):
    sync_limits.sync_limits(cluster, slurm)
    [res] = slurm.reservation_list
    slurm.reservation_list = [replace(res, name="other", nodes="gpu[01-02]")]
    slurm.qos_list = [replace(q, priority=7) for q in slurm.qos_list if q.name == "high"]
    sync_limits.sync_limits(cluster, slurm)
    assert list(Reservation.objects.values_list("name", "node_names")) == [
        ("other", ["gpu01", "gpu02"])]
    assert list(QosLimit.objects.values_list("name", "priority")) == [("high", 7)]


def test_a_part_the_backend_cannot_read_keeps_its_rows_and_says_why(cluster, slurm):
    sync_limits.sync_limits(cluster, slurm)
    slurm.reservation_list = AdapterError("scontrol_reservations.txt: missing", service="slurm")
    stats = sync_limits.sync_limits(cluster, slurm)
    cluster.refresh_from_db()
    assert "missing" in cluster.limits_notes["reservations"] and "qos" not in cluster.limits_notes
    assert stats["reservations"] is None and Reservation.objects.count() == 1


def test_a_transient_failure_fails_the_run_and_writes_nothing(cluster, slurm):
    slurm.qos_list = TransientAdapterError("slurmdbd down", service="slurm")
    with pytest.raises(TransientAdapterError):
        sync_limits.sync_limits(cluster, slurm)
    assert not Reservation.objects.exists() and not QosLimit.objects.exists()
    assert TaskRun.objects.get(kind="slurm.sync_limits").status == TaskRun.Status.FAILED
