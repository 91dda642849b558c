"""An MI300X job's page on a cluster mixing AMD and NVIDIA nodes (issue 28 item 5): the same
sections as an H100 job's, its measures in AMD's words, its thermal straggler named."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.urls import reverse

from apps.clusters.models import Node
from apps.jobs import archive
from apps.jobs.archive_sources import OpenMetricsSource, catalogue_for
from apps.jobs.models import JobMetrics
from tests.conftest import T0, make_job
from tests.jobs.vendor_telemetry import write_job

MINUTES = 40


@pytest.fixture
def pages(world, login, tmp_path):
    """An H100 job on gpu01 and an MI300X job on mi01, both with GPU 5 running hot."""
    cluster = world.cluster
    cluster.metric_labels = {"exporters": ["dcgm", "amd"], "scrape_interval": 30}
    cluster.save()
    Node.objects.create(cluster=cluster, name="mi01", gpu_type="mi300x", gpu_count=8)
    bob = world.users["bob"]
    team = world.jobs["bob"].team
    start = T0 + timedelta(hours=5)
    jobs = {"nvidia": make_job(cluster, 401, bob, team, nodes="gpu01", start_time=start,
                               end_time=start + timedelta(minutes=MINUTES)),
            "amd": make_job(cluster, 402, bob, team, nodes="mi01", start_time=start,
                            end_time=start + timedelta(minutes=MINUTES), partition="mi300x",
                            gpu_types={"mi300x": 8})}
    out = {}
    for vendor, job in jobs.items():
        path = write_job(tmp_path / f"{vendor}.om", vendor, job.nodes, str(job.job_id),
                         start.timestamp(), MINUTES, hot_gpu=5)
        metrics = archive.archive_job(job, OpenMetricsSource([path], catalogue_for(cluster)))
        url = reverse("jobs-detail", kwargs={"cluster": cluster.name, "job_id": job.job_id})
        out[vendor] = (metrics, login("bob").get(url).content.decode())
    return out


def _outline(html: str) -> list[tuple[str, str]]:
    """Each card's id and heading, the heading's words before its details."""
    cards = re.findall(r'<section class="card[^"]*"(?: id="([\w-]+)")?>\s*<h2>([^<]*)', html)
    return [(card, unescape(title).strip()) for card, title in cards]


def _figures(html: str) -> set[str]:
    return set(re.findall(r'data-figure="([\w-]+)"', html))


def test_an_mi300x_job_page_has_the_sections_of_an_h100_job_page(pages):
    (_, nvidia), (_, amd) = pages["nvidia"], pages["amd"]
    assert _outline(amd) == _outline(nvidia)
    assert {"efficiency", "stragglers", "gpus", "health"} <= {c for c, _ in _outline(amd)}
    # every chart but host-to-GPU PCIe: AMD's pcie_bandwidth does not say which direction
    assert _figures(amd) == _figures(nvidia) - {"fig-gpu-pcie"}
    assert "fig-gpu-events" in _figures(amd)  # the throttle residencies, mapped
    assert {"fig-activity", "fig-gpu-clock", "fig-gpu-nvlink", "fig-gpu-temperature"} <= \
        _figures(amd)


def test_the_mi300x_page_names_its_measures_as_amd_does(pages):
    metrics, html = pages["amd"]
    assert (metrics.gpu_vendor, metrics.measure, metrics.binding) == ("amd", "sm_active", "label")
    assert "Measure: VALU busy (gpu_prof_sm_active)" in html and "AMD GPUs" in html
    assert "GFX clock busy" in html and ">XGMI<" in html
    assert "GFX clock per GPU" in html and "XGMI transmitted per GPU" in html
    assert "SM clock" not in html and "NVLink" not in html.replace("NVLink/PCIe", "")
    nvidia = pages["nvidia"][1]
    assert "Measure: SM active" in nvidia and "SM clock busy" in nvidia and ">NVLink<" in nvidia


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_the_hot_gpu_is_the_thermal_straggler_on_either_vendor(pages, vendor):
    metrics, _ = pages[vendor]
    assert metrics.status == JobMetrics.Status.COMPLETE
    assert metrics.straggler_status == "found"
    [named] = metrics.straggler_detail["stragglers"]
    host = "mi01" if vendor == "amd" else "gpu01"
    assert (named["gpu"], named["cause"]) == (f"{host}:5", "thermal")
    kinds = {e["kind"] for e in metrics.straggler_detail["evidence"] if e["gpu"] == f"{host}:5"}
    assert {"thermal", "clock", "temperature"} <= kinds
    assert "thermal throttling" in metrics.straggler_summary
    summaries = {s.gpu_index: s for s in metrics.job.metric_summaries.all()}
    assert summaries[5].thermal_share == 1.0 and summaries[0].thermal_share == 0.0
    assert summaries[0].nvlink_bps > 1e10  # XGMI: 7 links x 2.8 GB/s (NVLink: 20 GB/s)
    assert summaries[0].fb_used_mib == (150000 if vendor == "amd" else 70000)
