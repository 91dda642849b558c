"""The demo's jobs have a roofline (issue 30, item 2): the simulator writes the tensor
(matrix) pipe, DRAM (UMC) activity and the model label on every GPU model it simulates, so
a busy job on each is placed on its model's roofline, its FP pipes (or VALU) named missing."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean

import pytest

from apps.analysis.health import gpu_health
from apps.analysis.roofline import GpuActivity, roofline
from apps.analysis.timeseries import Window
from apps.clusters.adapters.catalogue import Catalogue
from apps.jobs.archive_sources import OpenMetricsSource
from tests.simulator.conftest import run


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run(tmp_path_factory.mktemp("roofline"), amd_nodes=1)


def _busiest_job_per_model(out: Path) -> dict[str, dict]:
    """Each GPU model's longest single-node job inside the telemetry's day, on a node whose
    exporter labels its jobs (the others are bound through Slurm's GPUs, not read here)."""
    cluster = json.loads((out / "cluster.json").read_text())
    model_of = {n["name"]: n["gpu_type"] for n in cluster["nodes"] if n["job_mapping"]}
    jobs = json.loads((out / "slurm" / "sacct.json").read_text())["jobs"]
    first = cluster["now"] - cluster["telemetry"]["days"] * 86400
    picked: dict[str, dict] = {}
    for job in jobs:
        start, end = job["time"]["start"], job["time"]["end"]
        node = job["nodes"]
        if node not in model_of or not start or start < first or not start < end <= \
                cluster["now"]:
            continue
        best = picked.get(model_of[node])
        if best is None or end - start > best["time"]["end"] - best["time"]["start"]:
            picked[model_of[node]] = job
    return picked


def test_a_job_on_every_simulated_model_is_on_its_roofline(demo):
    catalogue = Catalogue.from_config({"exporters": ["dcgm", "amd"], "scrape_interval": 300})
    source = OpenMetricsSource([demo / "telemetry"], catalogue)
    picked = _busiest_job_per_model(demo)
    assert set(picked) == {"h100", "h200", "a100", "mi300x"}
    for kind, job in picked.items():
        window = Window(job["time"]["start"], job["time"]["end"])
        telemetry = source.fetch(str(job["job_id"]), window, [])
        gpus = []
        for key, series in telemetry.gpus.items():
            h = gpu_health(series, window)
            tensor = fmean(v for _, v in series["tensor_active"].points) \
                if "tensor_active" in series else None
            gpus.append(GpuActivity(str(key), telemetry.models.get(key, ""),
                                    telemetry.vendors[key], h.dram_mean,
                                    {"tensor": tensor, "fp64": h.fp64_mean,
                                     "fp32": h.fp32_mean, "fp16": h.fp16_mean,
                                     "valu": h.valu_mean}))
        result = roofline(gpus)
        assert result.status == "ready", (kind, result.reason)
        assert result.peaks is not None and result.peaks.key.startswith(kind)
        assert result.points and result.partial == (
            ("valu",) if kind == "mi300x" else ("fp16", "fp32", "fp64"))
