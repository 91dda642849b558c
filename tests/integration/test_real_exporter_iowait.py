"""I/O wait as data-path evidence for an input stall, read from the real node_exporter by a
real Prometheus and a real VictoriaMetrics (issues 28 item 1, 29 item 1).

The shapes of ``test_real_exporter_verdicts.py``: Debian's node_exporter on a synthetic
``/proc/stat`` that carries iowait ticks, dcgm-exporter-shaped endpoints, a private
Prometheus and a private VictoriaMetrics scraping both every second; each test runs on each
store (the ``site`` fixture). Two single-node jobs whose GPUs wait for input alike
(utilisation 87 %, SMs 19 %, 2.5 GB/s of host-to-GPU copies each), on whole nodes:

- **8201** on ``io01``, whose CPUs spend 35 % of their time in I/O wait (20 % in user mode):
  ``input-stall`` and ``input-stall-iowait`` (reads block on disk or file-system latency).
- **8202** on ``io02``, the same but 1 % in I/O wait: ``input-stall`` only.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from apps.clusters.models import Cluster, Node
from apps.jobs.archive import archive_job
from apps.jobs.models import Job, JobMetrics
from tests.integration.exporters import (
    DcgmEndpoint,
    Gpu,
    Scrape,
    Site,
    SyntheticNode,
    scraped_site,
)

pytestmark = [pytest.mark.integration("exporters"), pytest.mark.slow]
DURATION = 40
IOWAIT = {"io01": 0.35, "io02": 0.01}  # share of each CPU's time in I/O wait
JOBS = {"io01": "8201", "io02": "8202"}


def _starved(host: str, index: int) -> Gpu:
    """A GPU waiting for its input batches: busy, SMs mostly idle, host copies arriving."""
    return Gpu(index, f"GPU-{host}-{index}", util=87.0, fb_used=60000.0, power=300.0,
               tensor=0.09, jobs=[JOBS[host]], sm_active=0.19, pcie_rx=2.5e9, nvlink=1e9)


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    work = tmp_path_factory.mktemp("iowait")
    nodes = {host: SyntheticNode(work / host, cpu_busy=0.2, cpu_iowait=share)
             for host, share in IOWAIT.items()}
    for node in nodes.values():
        node.create()
    dcgm = {host: DcgmEndpoint(host, [_starved(host, i) for i in range(2)]) for host in nodes}
    with scraped_site(work, nodes, dcgm, DURATION) as scraped:
        yield scraped


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _archived(site: Site, host: str) -> Job:
    cluster = Cluster.objects.create(name="iowait", prometheus_url=site.url,
                                     metric_labels=site.metric_labels(scrape_interval=1))
    Node.objects.create(cluster=cluster, name=host, gpu_type="h100", gpu_count=2, cpus=4)
    start, end = site.t0 + 3, site.end - 2
    job = Job.objects.create(
        cluster=cluster, job_id=int(JOBS[host]), display_id=JOBS[host], name="loader",
        user_name="ann", account="research", partition="gpu", state=Job.State.COMPLETED,
        submit_time=_when(start - 60), start_time=_when(start), end_time=_when(end),
        time_limit_min=60, nodes=host, node_count=1, cpus=4, memory_mb=64000, gpus=2,
        gpu_equivalent=2.0, gpu_types={"h100": 2})
    metrics = archive_job(job, now=_when(site.end))
    assert metrics.status == JobMetrics.Status.COMPLETE and metrics.binding == "label", \
        (metrics.status, metrics.last_error, metrics.warnings)
    return job


@pytest.mark.django_db
def test_an_input_stall_on_a_node_in_io_wait_names_disk_latency(site: Site) -> None:
    job = _archived(site, "io01")
    [node] = job.node_metrics.all()
    # what node_exporter's iowait mode gave, and that busy (1 - idle) counts it
    assert node.cpu_iowait == pytest.approx(0.35, abs=0.05)
    assert node.cpu_busy == pytest.approx(0.55, abs=0.06)
    found = {f.key: f for f in job.findings.all()}
    assert set(found) == {"input-stall", "input-stall-iowait"}, \
        {k: f.text for k, f in found.items()}
    verdict = found["input-stall-iowait"]
    assert verdict.area == "data" and "of their time in I/O wait" in verdict.text
    facts = {e["fact"]: e["value"] for e in verdict.evidence}
    assert facts["cpu_iowait"] == pytest.approx(0.35, abs=0.05)
    assert facts["node_cpu_share"] == 1.0


@pytest.mark.django_db
def test_the_same_stall_with_little_io_wait_gets_no_disk_verdict(site: Site) -> None:
    job = _archived(site, "io02")
    [node] = job.node_metrics.all()
    assert node.cpu_iowait == pytest.approx(0.01, abs=0.02)
    found = {f.key for f in job.findings.all()}
    assert found == {"input-stall"}, found
