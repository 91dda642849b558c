"""The site's configuration as admins keep it (models, admin forms) and as a detection run
honours it: recurring quiet windows in the cluster's time zone, SSH sources per kind of
user, InfiniBand baselines per partition, component aliases."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.clusters.models import Node, Partition
from apps.security.detection import Sources, detect
from apps.security.ingest import ingest_inventory, ingest_sshd
from apps.security.models import (
    AllowListEntry,
    ComponentAlias,
    Finding,
    IbStorageBaseline,
    QuietSchedule,
    SshAllowedSource,
)
from tests.security.telemetry_files import counter_lines, gpu_lines, write

pytestmark = pytest.mark.django_db
START = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)  # a Monday; 13:00 in Berlin
STEP = 60.0


def busy_gpu0(folder: Path) -> None:
    lines = gpu_lines("gpu01", 0, START.timestamp(), 20, STEP,
                      lambda i: {"util": 97, "fb": 24000, "tensor": 0.0})
    write(folder / "20261102T1200Z.om", lines)


def run(world, folder: Path | None = None) -> object:
    return detect(world.cluster, START, START + timedelta(minutes=30), Sources(openmetrics=folder))


def found(rule: str) -> list[Finding]:
    return list(Finding.objects.filter(rule_key=rule))


# --- Quiet windows ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "fields", "quiet"), [
    ("daily 12:55 Berlin for 30 min, GPU 0", {"start_time": time(12, 55), "gpus": "0"}, True),
    ("daily 12:55 Berlin for 30 min, GPU 1", {"start_time": time(12, 55), "gpus": "1"}, False),
    ("daily 12:55 Berlin, by UUID", {"start_time": time(12, 55), "gpus": "GPU-gpu01-0"}, True),
    ("daily 12:55 Berlin, whole node", {"start_time": time(12, 55)}, True),
    ("daily 12:55 but in UTC: an hour late", {"start_time": time(12, 55), "timezone": "UTC"},
     False),
    ("weekly on Mondays", {"start_time": time(12, 55), "repeat": "weekly", "weekdays": "mon"},
     True),
    ("weekly on Tuesdays", {"start_time": time(12, 55), "repeat": "weekly", "weekdays": "tue"},
     False),
    ("daily, but disabled", {"start_time": time(12, 55), "enabled": False}, False),
    ("daily, ended the week before", {"start_time": time(12, 55),
                                      "ends_at": datetime(2026, 10, 26, tzinfo=UTC)}, False),
    ("once, covering the run", {"repeat": "once", "starts_at": START - timedelta(minutes=5),
                                "ends_at": START + timedelta(hours=1)}, True),
])
def test_quiet_windows_in_the_clusters_time_zone(world, tmp_path, name, fields, quiet):
    world.cluster.timezone = "Europe/Berlin"
    world.cluster.save()
    busy_gpu0(tmp_path)
    row = QuietSchedule(nodes="gpu0*", minutes=30, reason="health check", **fields)
    row.full_clean()
    row.save()
    run(world, tmp_path)
    assert len(found("gpu_activity_without_job")) == (0 if quiet else 1)


@pytest.mark.parametrize(("fields", "field"), [
    ({"repeat": "daily", "minutes": 5}, "start_time"),
    ({"repeat": "daily", "start_time": time(4), "minutes": 0}, "minutes"),
    ({"repeat": "daily", "start_time": time(4), "minutes": 8 * 1440}, "minutes"),
    ({"repeat": "weekly", "start_time": time(4), "minutes": 5}, "weekdays"),
    ({"repeat": "weekly", "start_time": time(4), "minutes": 5, "weekdays": "tuesday-ish"},
     "weekdays"),
    ({"repeat": "once", "starts_at": START}, "starts_at"),
    ({"repeat": "daily", "start_time": time(4), "minutes": 5, "gpus": "0, x7"}, "gpus"),
    ({"repeat": "daily", "start_time": time(4), "minutes": 5, "timezone": "Berlin"}, "timezone"),
    ({"repeat": "daily", "start_time": time(4), "minutes": 5, "nodes": " "}, "nodes"),
])
def test_bad_quiet_windows_are_refused_with_the_field_named(fields, field):
    values = {"nodes": "gpu*", "reason": "x", **fields}
    with pytest.raises(ValidationError) as caught:
        QuietSchedule(**values).full_clean()
    assert field in caught.value.message_dict


# --- SSH sources per kind of user -----------------------------------------------------------------

LINES = [
    "Nov  2 12:05:00 gpu01 sshd[71]: Accepted publickey for slurmadm from 10.30.0.5 port 5001 ssh2",
    "Nov  2 12:06:00 gpu01 sshd[72]: Accepted publickey for carol from 10.30.0.5 port 5002 ssh2",
    "Nov  2 12:07:00 gpu01 sshd[73]: Accepted publickey for slurmadm from 10.20.0.9 port 5003 ssh2",
    "Nov  2 12:08:00 gpu01 sshd[74]: Accepted publickey for carol from 10.20.0.9 port 5004 ssh2",
]


def test_an_admin_bastion_only_admins_may_come_from(world):
    AllowListEntry.objects.create(kind="admin_user", value="slurmadm", reason="site admin")
    for name, network, who in (("login nodes", "10.20.0.0/24", "everyone"),
                               ("admin bastion", "10.30.0.5", "admins")):
        row = SshAllowedSource(name=name, network=network, who=who)
        row.full_clean()
        row.save()
    ingest_sshd(world.cluster, LINES, reference=START)
    run(world)
    [finding] = found("ssh_unexpected_source")
    assert (finding.user_name, finding.evidence["source_ip"]) == ("carol", "10.30.0.5")
    assert finding.evidence["why"] == "admin bastion is for admins only"


def test_bad_networks_are_refused():
    with pytest.raises(ValidationError, match="CIDR"):
        SshAllowedSource(name="x", network="10.0.0.0/33").full_clean()


# --- InfiniBand baselines per partition -----------------------------------------------------------


def ib_file(folder: Path, rate: float) -> None:
    family = "node_infiniband_port_data_received_bytes_total"
    # every 30 s: the cluster's scrape interval, the frame's step
    lines = counter_lines(family, "gpu01", START.timestamp() - 600, 80, 30.0, lambda i: rate)
    write(folder / "20261102T1200Z.om", {family: lines})


@pytest.mark.parametrize(("partition", "baseline", "hits"), [
    ("io", 8.0, 0),       # gpu01 is in io: 6 GB/s is its storage traffic
    ("gpu", 8.0, 1),      # another partition's baseline does not apply
    ("io", 4.0, 1),       # above its own baseline
])
def test_infiniband_baseline_per_partition(world, tmp_path, partition, baseline, hits):
    io = Partition.objects.create(cluster=world.cluster, name="io")
    Partition.objects.create(cluster=world.cluster, name="gpu")
    Node.objects.get(cluster=world.cluster, name="gpu01").partitions.add(io)
    row = IbStorageBaseline(name="Lustre clients", partition=partition, gbytes_per_s=baseline)
    row.full_clean()
    row.save()
    ib_file(tmp_path, 6e9)
    run(world, tmp_path)
    assert len(found("ib_traffic_without_multinode_job")) == hits
    for finding in found("ib_traffic_without_multinode_job"):
        assert finding.evidence["baseline_from"] in ("rule default", "Lustre clients")


@pytest.mark.parametrize("fields", [{"nodes": "gpu*", "partition": "io"}, {},
                                    {"nodes": "gpu*", "gbytes_per_s": -1.0}])
def test_a_baseline_names_nodes_or_a_partition_and_a_positive_rate(fields):
    with pytest.raises(ValidationError):
        IbStorageBaseline(**{"name": "x", "gbytes_per_s": 2.0, **fields}).full_clean()


# --- Component aliases ----------------------------------------------------------------------------


def test_inventories_meet_advisories_through_aliases(world):
    ingest_inventory(world.cluster, [
        {"node": "gpu01", "collected_at": START.isoformat(),
         "software": {"torch": "2.5.1", "nvidia-container-toolkit": "1.17.7",
                      "site-pt:ml/2024.1": "2.4.0"}}])
    run(world)
    names = {(f.evidence["software"], f.evidence["version"]) for f in found("vulnerable_software")}
    assert names == {("pytorch", "2.5.1"), ("nvidia_container_toolkit", "1.17.7")}
    alias = ComponentAlias(alias="Site PT", component="PyTorch")
    alias.full_clean()
    alias.save()
    assert (alias.alias, alias.component) == ("site_pt", "pytorch")
    run(world)
    [module] = [f for f in found("vulnerable_software") if f.evidence["version"] == "2.4.0"]
    assert module.evidence["provided_by"] == ["ml/2024.1"]


def test_an_alias_must_differ_from_its_component():
    with pytest.raises(ValidationError):
        ComponentAlias(alias="PyTorch", component="pytorch").full_clean()


# --- The admin ------------------------------------------------------------------------------------


def test_admins_keep_the_site_configuration_in_the_admin(login, world):
    world.users["staff"].is_superuser = True
    world.users["staff"].save()
    client = login("staff")
    add = reverse("admin:security_quietschedule_add")
    form = {"nodes": "gpu0*", "gpus": "0", "reason": "DCGM health check", "enabled": "on",
            "repeat": "daily", "start_time": "04:00", "minutes": "5", "weekdays": "",
            "timezone": "", "starts_at_0": "", "starts_at_1": "", "ends_at_0": "",
            "ends_at_1": "", "cluster": ""}
    assert client.post(add, form).status_code == 302
    row = QuietSchedule.objects.get()
    assert row.when() == "daily at 04:00 for 5 min (UTC)"
    page = client.get(reverse("admin:security_quietschedule_change", args=[row.pk]))
    assert page.status_code == 200 and "04:00..04:05" in page.content.decode()
    refused = client.post(add, {**form, "repeat": "weekly"})
    assert refused.status_code == 200 and "which weekdays" in refused.content.decode()
    assert client.post(reverse("admin:security_sshallowedsource_add"), {
        "name": "admin bastion", "network": "10.30.0.5", "who": "admins", "reason": "",
        "cluster": ""}).status_code == 302
    assert client.post(reverse("admin:security_ibstoragebaseline_add"), {
        "name": "Lustre clients", "nodes": "", "partition": "io", "gbytes_per_s": "6",
        "reason": "", "cluster": ""}).status_code == 302
    assert client.post(reverse("admin:security_componentalias_add"), {
        "alias": "site-torch", "component": "pytorch", "note": ""}).status_code == 302
    assert ComponentAlias.objects.get().alias == "site_torch"
    for name in ("quietschedule", "sshallowedsource", "ibstoragebaseline", "componentalias"):
        assert client.get(reverse(f"admin:security_{name}_changelist")).status_code == 200
    assert "torch = pytorch" in client.get(
        reverse("admin:security_componentalias_add")).content.decode()
