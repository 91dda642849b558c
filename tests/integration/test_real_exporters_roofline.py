"""The roofline from real telemetry (issue 30, item 2): exporter-shaped endpoints scraped by a
real Prometheus and a real VictoriaMetrics (issue 29), archived through ``PrometheusSource``,
shown on the job page and the API.

Four nodes, one job each, scraped every second by a private Prometheus and a private
VictoriaMetrics at once (each test runs on each store):

- ``h01``: dcgm-exporter with the profiling fields Beacon's collectors file turns on (DRAM,
  tensor, FP64/FP32/FP16 pipes) on an H100 SXM5: job 9101 is placed on the roofline;
- ``h02``: dcgm-exporter without profiling (no ``DCGM_FI_PROF_*`` at all): job 9102 is told
  which fields would enable it;
- ``mi01``: AMD's Device Metrics Exporter (site prefix ``amd_``) with ProfilerMetrics on
  (MFMA, VALU issue) on an MI300X: job 9103 is placed on the MI300X's roofline;
- ``mi02``: the same exporter with ProfilerMetrics off: job 9104 is told the AMD fields.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from html import unescape

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from apps.analysis.gpu_peaks import BY_KEY
from apps.clusters.models import Cluster, Node
from apps.jobs.archive import archive_job
from apps.jobs.models import Job, JobMetrics
from tests.integration.exporters import (
    AmdEndpoint,
    AmdGpu,
    DcgmEndpoint,
    Gpu,
    Scrape,
    Site,
    Target,
    scraping_stores,
)

pytestmark = [pytest.mark.integration("exporters"), pytest.mark.slow]
DURATION = 25
PREFIX = "amd_"
PIPES = {"fp64": 0.05, "fp32": 0.2, "fp16": 0.1}


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    work = tmp_path_factory.mktemp("roofline-exporters")
    profiled = DcgmEndpoint("h01", [Gpu(i, f"GPU-h01-{i}", util=90.0, fb_used=60000.0,
                                        power=600.0, tensor=0.5, pipes=PIPES, jobs=["9101"])
                                    for i in range(2)])
    plain = DcgmEndpoint("h02", [Gpu(0, "GPU-h02-0", util=90.0, fb_used=60000.0, power=600.0,
                                     jobs=["9102"], profiling=False)])
    amd = AmdEndpoint("mi01", [AmdGpu(i, gfx=95.0, valu=60.0, mfma=50.0, valu_issue=20.0,
                                      vram=150000.0, power=650.0, sclk=2100.0,
                                      job=("9103", "ann", "mi300x")) for i in range(2)],
                      prefix=PREFIX)
    amd_plain = AmdEndpoint("mi02", [AmdGpu(0, gfx=95.0, vram=150000.0, power=650.0,
                                            job=("9104", "ann", "mi300x"), profiler=False)],
                            prefix=PREFIX)
    with profiled, plain, amd, amd_plain:
        targets = [Target("dcgm", profiled.port, "h01", 9400),
                   Target("dcgm", plain.port, "h02", 9400),
                   Target("amd", amd.port, "mi01", 5000),
                   Target("amd", amd_plain.port, "mi02", 5000)]
        with scraping_stores(targets, work) as urls:
            t0 = time.time()
            time.sleep(DURATION)
            yield Scrape(urls, t0, time.time())


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@pytest.fixture
def jobs(site: Site, db: None) -> dict[int, Job]:
    cluster = Cluster.objects.create(name="roofs", prometheus_url=site.url,
                                     metric_labels=site.metric_labels(
                                         scrape_interval=1, exporters=["dcgm", "amd"],
                                         amd={"prefix": PREFIX}))
    for host, kind in (("h01", "h100"), ("h02", "h100"), ("mi01", "mi300x"),
                       ("mi02", "mi300x")):
        Node.objects.create(cluster=cluster, name=host, gpu_type=kind, gpu_count=2)
    out = {}
    for job_id, host, gpus, kind in ((9101, "h01", 2, "h100"), (9102, "h02", 1, "h100"),
                                     (9103, "mi01", 2, "mi300x"), (9104, "mi02", 1, "mi300x")):
        out[job_id] = Job.objects.create(
            cluster=cluster, job_id=job_id, display_id=str(job_id), name=f"job-{job_id}",
            user_name="ann", account="research", partition="gpu", state=Job.State.COMPLETED,
            submit_time=_when(site.t0 - 60), start_time=_when(site.t0 + 2),
            end_time=_when(site.end - 2), time_limit_min=60, nodes=host, node_count=1,
            cpus=8, memory_mb=64000, gpus=gpus, gpu_equivalent=float(gpus),
            gpu_types={kind: gpus})
        metrics = archive_job(out[job_id])  # the cluster's Prometheus: PrometheusSource
        assert metrics.status == JobMetrics.Status.COMPLETE and metrics.source == "prometheus"
    return out


def _seen(job: Job) -> tuple[str, dict]:
    """The job's roofline section on its page and its API field, as an admin sees them."""
    client = Client()
    client.force_login(User.objects.create_user(f"admin{job.job_id}", is_staff=True))
    html = client.get(reverse("jobs-detail", args=[job.cluster.name, job.job_id])).content
    section = re.search(r'<section class="card" id="roofline">.*?</section>',
                        unescape(html.decode()), re.S)
    assert section, "the job page has a roofline section"
    api = client.get(reverse("api:job-detail", args=[job.pk])).json()
    return section.group(0), api["roofline"]


def test_a_job_with_the_profiling_fields_is_on_its_h100s_roofline(jobs: dict[int, Job]) -> None:
    html, api = _seen(jobs[9101])
    peaks = BY_KEY["h100-sxm"]
    assert api["status"] == "ready" and api["model"] == "NVIDIA H100 80GB HBM3"
    assert api["missing_fields"] == [] and api["uncounted_pipes"] == []
    flops = (0.5 * peaks.pipes["tensor"] + sum(v * peaks.pipes[p] for p, v in PIPES.items()))
    assert [p["gpu"] for p in api["points"]] == ["h01:0", "h01:1"]
    for point in api["points"]:
        assert point["flops_per_s"] == pytest.approx(flops, rel=1e-4)
        # DCGM_FI_PROF_DRAM_ACTIVE = 0.4 x 90 % busy
        assert point["bytes_per_s"] == pytest.approx(0.36 * peaks.memory_bps, rel=1e-4)
        assert point["bound"] == "compute" and point["pipe"] == "tensor"
    assert 'data-figure="fig-roofline"' in html and "not counted FLOPs" in html
    summary = jobs[9101].metric_summaries.get(gpu_index=0)
    assert (summary.fp32_mean, summary.gpu_model) == (pytest.approx(0.2),
                                                      "NVIDIA H100 80GB HBM3")


def test_a_job_without_them_says_which_dcgm_fields_would_enable_it(jobs: dict[int, Job]) -> None:
    html, api = _seen(jobs[9102])
    assert api["status"] == "no_fields" and api["points"] == []
    assert api["missing_fields"] == [
        "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE"]
    assert "No roofline for this job." in html and "fig-roofline" not in html
    assert "<code>DCGM_FI_PROF_DRAM_ACTIVE</code>" in html


def test_an_mi300x_job_with_profiler_metrics_is_on_its_roofline(jobs: dict[int, Job]) -> None:
    html, api = _seen(jobs[9103])
    peaks = BY_KEY["mi300x"]
    assert api["status"] == "ready" and api["peaks"]["key"] == "mi300x"
    for point in api["points"]:
        assert point["flops_per_s"] == pytest.approx(
            0.5 * peaks.pipes["tensor"] + 0.2 * peaks.pipes["valu"], rel=1e-4)
        # gpu_umc_activity = 0.4 x 95 % GFX activity
        assert point["bytes_per_s"] == pytest.approx(0.38 * peaks.memory_bps, rel=1e-4)
    assert "matrix cores (MFMA)" in html and 'data-figure="fig-roofline"' in html


def test_an_mi300x_job_without_them_names_the_sites_amd_fields(jobs: dict[int, Job]) -> None:
    html, api = _seen(jobs[9104])
    assert api["status"] == "no_fields"
    assert api["missing_fields"] == [f"{PREFIX}gpu_prof_tensor_active_percent",
                                     f"{PREFIX}gpu_prof_valu_pipe_issue_util"]
    assert "ProfilerMetrics" in html and "DCGM_FI" not in html
