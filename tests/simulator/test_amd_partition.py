"""The simulator's MI300X partition (issue 28 item 5): AMD nodes in a partition of their own,
their GPUs written as AMD's Device Metrics Exporter writes them, a thermal straggler planted
there that the archive's verdict names; the NVIDIA nodes the same as without them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.simulator import SimConfig, SimulationError
from apps.simulator.run import plan
from tests.simulator import openmetrics
from tests.simulator.conftest import NOW, run


@pytest.fixture(scope="module")
def amd_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run(tmp_path_factory.mktemp("amd"), amd_nodes=1)


def test_amd_nodes_are_a_partition_of_their_own_and_leave_the_nvidia_nodes_alone():
    base = plan(SimConfig(nodes=4, days=3.0, seed=7, now=NOW)).cluster
    mixed = plan(SimConfig(nodes=4, days=3.0, seed=7, now=NOW, amd_nodes=2)).cluster
    assert mixed.nodes[:4] == base.nodes  # same names, groups and UUIDs
    assert [(n.name, n.gpu_type, n.group.exporter) for n in mixed.nodes[4:]] == [
        ("mi01", "mi300x", "amd"), ("mi02", "mi300x", "amd")]
    assert mixed.partition("mi300x").node_indices == (4, 5)
    assert all("mi300x" not in p.name for p in base.partitions)


def test_too_many_amd_nodes_are_refused_by_name():
    with pytest.raises(SimulationError, match="--amd-nodes"):
        SimConfig(nodes=500, now=NOW, amd_nodes=20).validated()


def test_the_amd_nodes_gpus_are_written_in_the_amd_exporters_names(amd_run):
    desc = json.loads((amd_run / "cluster.json").read_text())
    [mi01] = [n for n in desc["nodes"] if n["name"] == "mi01"]
    assert (mi01["exporter"], mi01["model"]) == ("amd", "AMD Instinct MI300X")
    families: dict[str, openmetrics.Family] = {}
    for path in sorted((amd_run / "telemetry").glob("*.om")):
        for name, family in openmetrics.read(path).items():  # promtool's rules, by hand
            list(openmetrics.series(family))  # each series contiguous, in time order
            families.setdefault(name, openmetrics.Family(name, family.kind)).samples += \
                family.samples
    hosts = {name: {s[1].get("hostname") or s[1].get("Hostname") for s in f.samples}
             for name, f in families.items() if name.startswith(("gpu_", "DCGM_", "pcie_"))}
    assert hosts["gpu_gfx_activity"] == {"mi01"} and "mi01" not in hosts["DCGM_FI_DEV_GPU_UTIL"]
    for family in ("gpu_prof_sm_active", "gpu_used_vram", "gpu_junction_temperature",
                   "gpu_violation_socket_thermal_residency_percentage", "gpu_xgmi_link_tx",
                   "pcie_bandwidth"):
        assert families[family].kind == "gauge", family
    clocks = {s[1]["clock_type"] for s in families["gpu_clock"].samples}
    assert clocks == {"system", "memory"}
    labelled = [s[1] for s in families["gpu_gfx_activity"].samples if "job_id" in s[1]]
    assert labelled and all(s["job_partition"] == "mi300x" for s in labelled)
    assert {"job_user", "gpu_id", "serial_number", "card_model"} <= set(labelled[0])


def test_the_planted_amd_straggler_is_named_by_the_archive(amd_run):
    from apps.analysis.efficiency import summarise_job
    from apps.analysis.timeseries import GpuKey, Window
    from apps.clusters.adapters.catalogue import Catalogue
    from apps.jobs.archive import analyse
    from apps.jobs.archive_sources import OpenMetricsSource

    truth = json.loads((amd_run / "ground_truth.json").read_text())
    [planted] = [f for f in truth["findings"] if f["kind"] == "straggler_gpu"
                 and f["entity"]["node"] == "mi01"]
    assert planted["details"]["cause"] == "thermal"  # AMD's exporter writes no XID
    window = Window(planted["window"]["start"], planted["window"]["end"])
    catalogue = Catalogue.from_config({"exporters": ["dcgm", "amd"], "scrape_interval": 300})
    telemetry = OpenMetricsSource([amd_run / "telemetry"], catalogue).fetch(
        str(planted["entity"]["job_id"]), window, [])
    assert telemetry.binding == "label" and set(telemetry.vendors.values()) == {"amd"}
    result = summarise_job(telemetry.gpus, window, 8 * window.seconds / 3600)
    verdict = analyse(telemetry, result, window).straggler
    assert result.measure == "sm_active" and verdict.status == "found"
    [named] = verdict.stragglers
    assert (named.key, named.cause) == (GpuKey("mi01", planted["entity"]["gpu"]), "thermal")


def test_slurm_lists_the_mi300x_gres_where_the_cluster_has_them(amd_run, small_run):
    def gres(run_dir: Path) -> str:
        return (run_dir / "slurm" / "sshare.txt").read_text()

    assert "gres/gpu:mi300x=" in gres(amd_run) and "gres/gpu:mi300x" not in gres(small_run)
    sacct = (amd_run / "slurm" / "sacct.json").read_text()
    assert '"gpu:mi300x"' in sacct and '"partition": "mi300x"' in sacct
