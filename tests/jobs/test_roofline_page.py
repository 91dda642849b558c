"""The job page's roofline and the detail API's ``roofline`` field (issue 30, item 2), from
telemetry files in each exporter's text through the archive's OpenMetrics path."""

from __future__ import annotations

from datetime import timedelta
from html import unescape
from pathlib import Path

import pytest
from django.urls import reverse

from apps.analysis.gpu_peaks import BY_KEY
from apps.clusters.models import Node
from apps.jobs import archive
from apps.jobs.archive_sources import OpenMetricsSource, catalogue_for
from tests.conftest import T0, make_job

STEP, MINUTES = 30, 20
H100 = "NVIDIA H100 80GB HBM3"
# what a GPU reports: dcgm-exporter ratios, AMD percentages
FULL_DCGM = {"DCGM_FI_DEV_GPU_UTIL": 95, "DCGM_FI_PROF_SM_ACTIVE": 0.7,
             "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.4, "DCGM_FI_PROF_DRAM_ACTIVE": 0.5,
             "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.0, "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 0.2,
             "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 0.1}
DEFAULT_COUNTERS = {k: v for k, v in FULL_DCGM.items() if "FP" not in k}
NO_PROFILING = {"DCGM_FI_DEV_GPU_UTIL": 95, "DCGM_FI_DEV_POWER_USAGE": 600}
FULL_AMD = {"gpu_gfx_activity": 95, "gpu_umc_activity": 30, "gpu_prof_sm_active": 60,
            "gpu_prof_tensor_active_percent": 50, "gpu_prof_valu_pipe_issue_util": 20}
AMD_NO_PROFILER = {"gpu_gfx_activity": 95, "gpu_umc_activity": 30}


def _labels(vendor: str, host: str, gpu: int, job: int, model: str) -> str:
    if vendor == "amd":
        return (f'gpu_id="{gpu}",card_model="{model}",hostname="{host}",job_id="{job}"')
    named = f',modelName="{model}"' if model else ""
    return f'gpu="{gpu}",UUID="GPU-{host}-{gpu}"{named},Hostname="{host}",hpc_job="{job}"'


def _write(path: Path, vendor: str, fields: dict[str, float], job: int, start: float,
           model: str, gpus: int = 2, prefix: str = "") -> Path:
    times = [start + STEP * (k + 1) for k in range(MINUTES * 60 // STEP)]
    lines = [f"{prefix}{name}{{{_labels(vendor, 'gpu01', gpu, job, model)}}} {value} {t}"
             for gpu in range(gpus) for name, value in fields.items() for t in times]
    path.write_text("\n".join(lines) + "\n# EOF\n")
    return path


@pytest.fixture
def roofline_page(world, login, tmp_path):
    """``roofline_page(vendor, fields, model)``: an archived job's page and API as bob sees it."""
    cluster = world.cluster
    counter = iter(range(500, 600))

    def _page(vendor: str, fields: dict[str, float], model: str = H100,
              labels: dict | None = None, **job_fields) -> tuple[str, dict]:
        cluster.metric_labels = labels or {"exporters": ["dcgm", "amd"], "scrape_interval": STEP}
        cluster.save()
        job_id = next(counter)
        start = T0 + timedelta(hours=5)
        job = make_job(cluster, job_id, world.users["bob"], world.team_a, nodes="gpu01",
                       start_time=start, end_time=start + timedelta(minutes=MINUTES),
                       gpus=2, gpu_equivalent=2.0, **job_fields)
        path = _write(tmp_path / f"{job_id}.om", vendor, fields, job_id, start.timestamp(),
                      model, prefix=(labels or {}).get("amd", {}).get("prefix", ""))
        archive.archive_job(job, OpenMetricsSource([path], catalogue_for(cluster)))
        client = login("bob")
        html = client.get(reverse("jobs-detail", args=[cluster.name, job_id])).content.decode()
        api = client.get(reverse("api:job-detail", args=[job.pk])).json()
        return unescape(html), api["roofline"]

    return _page


def test_an_h100_job_with_every_pipe_is_placed_per_gpu(roofline_page):
    html, api = roofline_page("dcgm", FULL_DCGM)
    assert api["status"] == "ready" and api["model"] == H100
    assert api["peaks"]["key"] == "h100-sxm" and api["missing_fields"] == []
    peaks = BY_KEY["h100-sxm"]
    flops = 0.4 * peaks.pipes["tensor"] + 0.2 * peaks.pipes["fp32"] + 0.1 * peaks.pipes["fp16"]
    assert [p["gpu"] for p in api["points"]] == ["gpu01:0", "gpu01:1"]
    for point in api["points"]:
        assert point["flops_per_s"] == pytest.approx(flops)
        assert point["bytes_per_s"] == pytest.approx(0.5 * peaks.memory_bps)
        assert point["pipe"] == "tensor" and point["bound"] == "memory"
    assert 'data-figure="fig-roofline"' in html and 'id="fig-roofline"' in html
    assert "An estimate:" in html and "not counted FLOPs" in html
    assert "NVIDIA H100 SXM5 80 GB" in html and f"{flops / 1e12:.1f}" in html


def test_dcgm_default_counters_draw_the_tensor_pipe_and_name_the_others(roofline_page):
    html, api = roofline_page("dcgm", DEFAULT_COUNTERS)
    assert api["status"] == "ready"
    assert api["uncounted_pipes"] == ["fp16", "fp32", "fp64"]
    assert api["missing_fields"] == ["DCGM_FI_PROF_PIPE_FP16_ACTIVE",
                                     "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
                                     "DCGM_FI_PROF_PIPE_FP64_ACTIVE"]
    assert 'id="roofline-partial"' in html and "<code>DCGM_FI_PROF_PIPE_FP32_ACTIVE</code>" in html


def test_a_job_without_profiling_fields_says_which_would_enable_it(roofline_page):
    html, api = roofline_page("dcgm", NO_PROFILING)
    assert api["status"] == "no_fields" and api["points"] == [] and api["peaks"] is None
    assert api["missing_fields"] == [
        "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE"]
    assert "No roofline for this job." in html and "fig-roofline" not in html
    assert "Scraping these fields would enable it" in html
    assert "<code>DCGM_FI_PROF_DRAM_ACTIVE</code>" in html and "dcgm-collectors.csv" in html
    assert "gpu_prof" not in html.split('id="roofline"')[1].split("</section>")[0]


def test_an_mi300x_job_is_placed_in_amds_words(roofline_page):
    html, api = roofline_page("amd", FULL_AMD, "AMD Instinct MI300X", gpu_types={"mi300x": 2})
    peaks = BY_KEY["mi300x"]
    assert api["status"] == "ready" and api["peaks"]["key"] == "mi300x"
    [point, _] = api["points"]
    assert point["flops_per_s"] == pytest.approx(0.5 * peaks.pipes["tensor"]
                                                 + 0.2 * peaks.pipes["valu"])
    assert point["bytes_per_s"] == pytest.approx(0.3 * peaks.memory_bps)
    assert "matrix cores (MFMA)" in html and "fig-roofline" in html


def test_an_mi300x_job_without_profiler_metrics_names_amds_fields_with_the_sites_prefix(
        roofline_page):
    labels = {"exporters": ["amd"], "scrape_interval": STEP, "amd": {"prefix": "amd_"}}
    html, api = roofline_page("amd", AMD_NO_PROFILER, "AMD Instinct MI300X", labels=labels)
    assert api["status"] == "no_fields"
    assert api["missing_fields"] == ["amd_gpu_prof_tensor_active_percent",
                                     "amd_gpu_prof_valu_pipe_issue_util"]
    assert "ProfilerMetrics" in html and "DCGM_FI" not in html.split('id="roofline"')[1]


def test_an_unknown_model_is_said_not_guessed(roofline_page):
    html, api = roofline_page("dcgm", FULL_DCGM, "NVIDIA L40S")
    assert api["status"] == "unknown_model" and api["points"] == []
    assert "No published peaks are kept for the GPU model 'NVIDIA L40S'" in html


def test_without_a_model_label_slurms_gpu_type_names_the_model(roofline_page, world):
    world.cluster.gpu_types = [{"name": "h100", "model": "NVIDIA H100 PCIe"}]
    world.cluster.save()
    _, api = roofline_page("dcgm", FULL_DCGM, model="")
    assert api["status"] == "ready" and api["peaks"]["key"] == "h100-pcie"
    assert api["model"] == "NVIDIA H100 PCIe"


def test_a_bare_slurm_type_does_not_say_which_h100_and_is_unknown(roofline_page):
    _, api = roofline_page("dcgm", FULL_DCGM, model="")
    assert api["status"] == "unknown_model" and api["model"] == "h100"


def test_the_polled_partial_shows_the_roofline_too(roofline_page, world, login):
    roofline_page("dcgm", FULL_DCGM)
    job = world.cluster.jobs.order_by("-job_id").first()
    url = reverse("jobs-metrics", args=[world.cluster.name, job.job_id])
    assert 'id="roofline"' in login("bob").get(url).content.decode()


def test_a_job_without_metrics_has_a_no_gpus_roofline_in_the_api(world, login):
    job = world.jobs["bob"]
    api = login("bob").get(reverse("api:job-detail", args=[job.pk])).json()
    assert api["roofline"]["status"] == "no_gpus" and api["roofline"]["points"] == []


def test_the_node_gpu_type_wins_over_the_jobs_request(world):
    from apps.jobs.roofline import slurm_model

    Node.objects.filter(name="gpu01").update(gpu_type="h200")
    job = world.jobs["bob"]
    assert slurm_model(job) == "h100"  # no GPUs held: the job's own type
    job.gpus_held.create(node=Node.objects.get(name="gpu01"), gpu_index=0, start=T0)
    assert slurm_model(job) == "h200"
