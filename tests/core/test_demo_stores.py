"""``make demo-full``'s telemetry split by store (``apps/demo/stores.py``, issue 29): each
store's folder gets exactly its own nodes' samples, by Beacon's routing, as valid
OpenMetrics. The live bring-up with two real stores is tests/integration/test_demo_full.py.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from apps.clusters.models import Node, Partition, TelemetryStore
from apps.core.errors import AdapterError
from apps.demo.stores import split_telemetry
from apps.jobs.adapters.openmetrics import read_series

WINDOW = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="gpu01",hpc_job="7"} 90 1000
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="gpu01",hpc_job="7"} 91 1030
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-3",Hostname="gpu03"} 0 1000
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-4",Hostname="gpu04",hpc_job="8"} 50 1000
# HELP gpu_gfx_activity Graphics engine activity.
# TYPE gpu_gfx_activity gauge
gpu_gfx_activity{gpu_id="0",hostname="mi01",job_id="9"} 70 1000
# HELP node_memory_MemTotal_bytes Memory.
# TYPE node_memory_MemTotal_bytes gauge
node_memory_MemTotal_bytes{instance="gpu03:9100",job="node"} 1024 1000
node_memory_MemTotal_bytes{instance="gpu01:9100",job="node"} 1024 1000
node_memory_MemTotal_bytes{instance="mi01:9100",job="node"} 1024 1000
# HELP up Scrape target up.
# TYPE up gauge
up{job="slurm"} 1 1000
# EOF
"""


@pytest.fixture
def sharded(world, tmp_path):
    """gpu01 (default store), gpu03 in partition a100 (store vm), gpu04 by glob (store b),
    mi01 an AMD node nobody claims (default)."""
    cluster = world.cluster
    cluster.metric_labels = {"exporters": ["dcgm", "amd"]}
    cluster.save()
    a100 = Partition.objects.create(cluster=cluster, name="a100")
    for name in ("gpu03", "gpu04", "mi01"):
        Node.objects.create(cluster=cluster, name=name, gpu_type="h100", gpu_count=8)
    Node.objects.get(cluster=cluster, name="gpu03").partitions.add(a100)
    TelemetryStore.objects.create(cluster=cluster, name="vm", url="http://vm.test:8428",
                                  kind="victoriametrics", partitions=["a100"])
    TelemetryStore.objects.create(cluster=cluster, name="b", url="http://b.test:9090",
                                  hosts=["gpu0[4-9]"], order=1)
    source = tmp_path / "telemetry"
    source.mkdir()
    (source / "20260101T0000Z.om").write_text(WINDOW)
    (source / "20260101T0600Z.om").write_text(WINDOW.replace(" 1000\n", " 22600\n")
                                              .replace(" 1030\n", " 22630\n"))
    return cluster, source


def _samples(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def test_it_gives_each_store_exactly_its_own_nodes_samples(sharded, tmp_path):
    cluster, source = sharded
    parts = split_telemetry(cluster, source, tmp_path / "split")
    assert {name: sorted(p.nodes) for name, p in parts.items()} == {
        "b": ["gpu04"], "default": ["gpu01", "mi01"], "vm": ["gpu03"]}
    assert {name: (p.samples, p.files) for name, p in parts.items()} == {
        "b": (2, 2), "default": (12, 2), "vm": (4, 2)}
    vm = _samples(tmp_path / "split" / "vm" / "20260101T0000Z.om")
    assert vm == ['DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-3",Hostname="gpu03"} 0 1000',
                  'node_memory_MemTotal_bytes{instance="gpu03:9100",job="node"} 1024 1000']
    default = _samples(tmp_path / "split" / "default" / "20260101T0000Z.om")
    assert 'up{job="slurm"} 1 1000' in default  # no node: where Beacon looks, the default
    assert 'gpu_gfx_activity{gpu_id="0",hostname="mi01",job_id="9"} 70 1000' in default
    every = sorted(s for name in parts for f in sorted((tmp_path / "split" / name).glob("*.om"))
                   for s in _samples(f))
    assert every == sorted(s for f in sorted(source.glob("*.om")) for s in _samples(f))


def test_each_part_is_valid_openmetrics_with_every_family_header(sharded, tmp_path):
    cluster, source = sharded
    split_telemetry(cluster, source, tmp_path / "split")
    part = tmp_path / "split" / "b" / "20260101T0600Z.om"
    text = part.read_text()
    assert text.endswith("# EOF\n")
    assert text.count("# TYPE ") == WINDOW.count("# TYPE ")
    with part.open() as lines:
        series = read_series(lines)  # Beacon's own reader: raises on invalid text
    assert [(s.metric, s.labels["Hostname"], s.points) for s in series] == [
        ("DCGM_FI_DEV_GPU_UTIL", "gpu04", ((22600.0, 50.0),))]


def test_splitting_again_replaces_the_folders_files(sharded, tmp_path):
    cluster, source = sharded
    out = tmp_path / "split"
    (out / "vm").mkdir(parents=True)
    (out / "vm" / "19990101T0000Z.om").write_text("# EOF\n")  # a stale window
    (out / "vm" / "notes.txt").write_text("kept")
    split_telemetry(cluster, source, out)
    split_telemetry(cluster, source, out)
    assert sorted(p.name for p in (out / "vm").iterdir()) == [
        "20260101T0000Z.om", "20260101T0600Z.om", "notes.txt"]
    assert len(_samples(out / "vm" / "20260101T0000Z.om")) == 2


def test_without_stores_everything_goes_to_the_default_store(world, tmp_path):
    source = tmp_path / "telemetry"
    source.mkdir()
    (source / "w.om").write_text(WINDOW)
    parts = split_telemetry(world.cluster, source, tmp_path / "split")
    assert list(parts) == ["default"] and parts["default"].samples == 9


@pytest.mark.parametrize(("text", "why"), [
    (WINDOW.replace("# EOF\n", ""), "no '# EOF' after line 17"),
    (WINDOW.replace(" 91 1030", " 91"), "line 4: expected 'name{labels} value timestamp'"),
    (WINDOW.replace('} 0 1000', '} 0 1000 # {trace_id="1"} 1'), "line 5: expected"),
    (WINDOW.replace('{gpu="1",', '{gpu=1,'), "OpenMetrics line 6"),
])
def test_a_bad_file_is_an_error_naming_the_file_and_line(sharded, tmp_path, text, why):
    cluster, source = sharded
    (source / "20260101T0600Z.om").write_text(text)
    with pytest.raises(AdapterError) as exc:
        split_telemetry(cluster, source, tmp_path / "split")
    assert "20260101T0600Z.om" in str(exc.value) and why in str(exc.value)


def test_a_folder_without_telemetry_is_an_error(world, tmp_path):
    with pytest.raises(AdapterError, match=r"no \*\.om telemetry files in"):
        split_telemetry(world.cluster, tmp_path, tmp_path / "split")


def test_the_command_prints_each_stores_part(sharded, tmp_path):
    cluster, source = sharded
    out = io.StringIO()
    call_command("split_telemetry", str(source), "--cluster", cluster.name, "--out",
                 str(tmp_path / "split"), stdout=out)
    assert f"vm: 1 node(s) (gpu03), 4 samples in 2 file(s) -> {tmp_path}/split/vm" \
        in out.getvalue()
    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        call_command("split_telemetry", str(source), "--cluster", "nope", "--out", "x")
    with pytest.raises(CommandError, match=r"no \*\.om telemetry files"):
        call_command("split_telemetry", str(tmp_path / "split" / "missing"), "--cluster",
                     cluster.name, "--out", str(tmp_path / "x"))
