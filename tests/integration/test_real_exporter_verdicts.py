"""The verdicts at the edges of real jobs, read from real exporters by a real Prometheus and
a real VictoriaMetrics (issue 28, the NVIDIA cases of item 6; issue 29 item 1).

The shapes of ``test_real_exporters.py`` (``exporters.py``): Debian's node_exporter on
synthetic ``/sys`` and ``/proc`` trees, dcgm-exporter-shaped endpoints, a private Prometheus
and a private VictoriaMetrics scraping both every second; each test runs on each store.
Three jobs, each with the verdict it must get:

- **8101, communication-bound with GPUDirect RDMA** on ``gd01`` + ``gd02`` (2 GPUs each): the
  GPUs are busy waiting (utilisation 87 %, SMs 19 %) and receive 6.8 GB/s each over PCIe,
  and each node's InfiniBand ports receive the same 13.6 GB/s; CPUs 20 % busy. Not an input
  stall: ``communication-bound-gpudirect``, routed to the network contact.
- **8102, a pipeline imbalance** on ``pp01`` (4 GPUs): stage 2 computes 86 % of the time while
  the others wait (41 %); it runs at its software power limit (clock-event reason 0x4),
  its clocks lowered by it and 13 °C hotter, with no reason pointing at the device. The
  slowest stage (``straggler-no-hardware``, cause ``power_limit``), never the hardware's.
- **8103, two unused GPUs** on ``un01`` (4 GPUs, 2 run with NVLink traffic, 2 hold nothing
  and move nothing): ``idle-gpus`` only, no ``nvlink-degraded``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.test import override_settings

from apps.accounts.models import Contact
from apps.clusters.models import Cluster, Node
from apps.guardrails import services as guardrails
from apps.guardrails.live import StallRules, alert_config
from apps.guardrails.models import Alert
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
DURATION = 45
PCIE_RX = 6.8e9  # per GPU of job 8101, over PCIe: all of it from the network (GPUDirect)
PORT_RX = PCIE_RX  # per port: 2 ports per node receive what the node's 2 GPUs take


def _waiting(index: int, uuid: str, job: str) -> Gpu:
    """A GPU of the communication-bound job: busy in NCCL, SMs idle, data arriving."""
    return Gpu(index, uuid, util=87.0, fb_used=60000.0, power=420.0, tensor=0.09,
               jobs=[job], sm_active=0.19, pcie_rx=PCIE_RX, nvlink=2e10)


def _stage(index: int, heavy: bool) -> Gpu:
    """A pipeline stage of job 8102: the heavy one at its power limit, the others waiting."""
    if heavy:
        return Gpu(index, f"GPU-pp01-{index}", util=99.0, fb_used=70000.0, power=700.0,
                   tensor=0.45, jobs=["8102"], sm_active=0.86, sm_clock=1410.0, temp=81.0,
                   throttle=0x4, nvlink=1e10)
    return Gpu(index, f"GPU-pp01-{index}", util=98.0, fb_used=50000.0, power=450.0,
               tensor=0.22, jobs=["8102"], sm_active=0.41, temp=68.0, nvlink=1e10)


def _unused_pair(index: int) -> Gpu:
    if index < 2:
        return Gpu(index, f"GPU-un01-{index}", util=97.0, fb_used=60000.0, power=600.0,
                   tensor=0.4, jobs=["8103"], sm_active=0.76, nvlink=3e10)
    return Gpu(index, f"GPU-un01-{index}", jobs=["8103"])  # held, never used: nothing moves


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    work = tmp_path_factory.mktemp("verdicts")
    nodes = {host: SyntheticNode(work / host, cpu_busy=0.2) for host in ("gd01", "gd02")}
    for node in nodes.values():
        node.create()
        # GPUDirect RDMA: the ports receive what the GPUs take in, and send as much
        node.ib_bps.update({(d, "1"): (PORT_RX, PORT_RX) for d in ("mlx5_0", "mlx5_1")})
    dcgm = {"gd01": DcgmEndpoint("gd01", [_waiting(i, f"GPU-gd01-{i}", "8101")
                                          for i in range(2)]),
            "gd02": DcgmEndpoint("gd02", [_waiting(i, f"GPU-gd02-{i}", "8101")
                                          for i in range(2)]),
            "pp01": DcgmEndpoint("pp01", [_stage(i, heavy=i == 2) for i in range(4)]),
            "un01": DcgmEndpoint("un01", [_unused_pair(i) for i in range(4)])}
    with scraped_site(work, nodes, dcgm, DURATION) as scraped:
        yield scraped


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _cluster(site: Site) -> Cluster:
    cluster = Cluster.objects.create(name="edges", prometheus_url=site.url,
                                     metric_labels=site.metric_labels(scrape_interval=1))
    for host, gpus in (("gd01", 2), ("gd02", 2), ("pp01", 4), ("un01", 4)):
        Node.objects.create(cluster=cluster, name=host, gpu_type="h100", gpu_count=gpus, cpus=4)
    return cluster


def _job(cluster: Cluster, job_id: int, nodes: str, node_count: int, gpus: int, site: Site,
         running: bool = False) -> Job:
    start, end = site.t0 + 3, site.end - 2
    return Job.objects.create(
        cluster=cluster, job_id=job_id, display_id=str(job_id), name=f"job-{job_id}",
        user_name="ann", account="research", partition="gpu",
        state=Job.State.RUNNING if running else Job.State.COMPLETED,
        submit_time=_when(start - 60), start_time=_when(start),
        end_time=None if running else _when(end), time_limit_min=60, nodes=nodes,
        node_count=node_count, cpus=4 * node_count, memory_mb=64000, gpus=gpus,
        gpu_equivalent=float(gpus), gpu_types={"h100": gpus})


def _findings(job: Job, site: Site) -> dict[str, object]:
    metrics = archive_job(job, now=_when(site.end))
    assert metrics.status == JobMetrics.Status.COMPLETE and metrics.binding == "label", \
        (metrics.status, metrics.last_error, metrics.warnings)
    return {f.key: f for f in job.findings.all()}


@pytest.mark.django_db
def test_a_multi_node_job_with_gpudirect_traffic_is_communication_bound(site: Site) -> None:
    cluster = _cluster(site)
    Contact.objects.create(area="network", name="Fabric team")
    Contact.objects.create(area="data", name="Storage team")
    job = _job(cluster, 8101, "gd[01-02]", 2, 4, site)
    found = _findings(job, site)
    assert set(found) == {"communication-bound-gpudirect"}, {k: f.text for k, f in found.items()}
    verdict = found["communication-bound-gpudirect"]
    assert verdict.contact.name == "Fabric team"
    assert "received 6.8 GB/s per GPU over PCIe" in verdict.text
    facts = {e["fact"]: e["value"] for e in verdict.evidence}
    assert facts["ib_rx_gbs"] == pytest.approx(2 * PORT_RX / 1e9, rel=0.2)
    assert facts["network_rx_share"] >= 0.8 and facts["host_rx_gbs"] < 1.0
    # what the node_exporters gave: both nodes, each port's receive counted once
    rows = {n.host: n.ib_rx_bps for n in job.node_metrics.all()}
    assert rows == pytest.approx({"gd01": 2 * PORT_RX, "gd02": 2 * PORT_RX}, rel=0.2)


@pytest.mark.django_db
def test_the_busiest_stage_at_its_power_limit_is_the_slowest_stage(site: Site) -> None:
    cluster = _cluster(site)
    Contact.objects.create(area="hardware", name="HW on-call", email="hw@example.org")
    job = _job(cluster, 8102, "pp01", 1, 4, site)
    found = _findings(job, site)
    assert set(found) == {"straggler-no-hardware"}, {k: f.text for k, f in found.items()}
    finding = found["straggler-no-hardware"]
    assert finding.route == "researcher" and finding.contact is None
    assert finding.text.startswith("GPU pp01:2 is the slowest stage: 3 GPUs waited for it")
    stored = JobMetrics.objects.get(job=job).straggler_detail
    assert [(s["gpu"], s["cause"]) for s in stored["stragglers"]] == [("pp01:2", "power_limit")]
    kinds = {e["kind"] for e in stored["evidence"]}
    assert "power_cap" in kinds and not kinds & {"thermal", "hw_slowdown", "clock", "xid", "ecc"}


@pytest.mark.django_db
def test_unused_gpus_are_idle_not_a_degraded_nvlink(site: Site) -> None:
    cluster = _cluster(site)
    job = _job(cluster, 8103, "un01", 1, 4, site)
    found = _findings(job, site)
    assert set(found) == {"idle-gpus"}, {k: f.text for k, f in found.items()}
    assert "(un01:2, un01:3)" in found["idle-gpus"].text
    nvlink = {s.gpu_index: s.nvlink_bps for s in job.metric_summaries.all()}
    assert nvlink[2] == 0 and nvlink[0] == pytest.approx(6e10, rel=0.05)  # measured, both ways


@pytest.mark.django_db
@override_settings(GUARDRAILS_MIN_RUN_MINUTES=0)
def test_the_running_jobs_alerts_follow_the_same_verdicts(site: Site) -> None:
    """The beat's live path on the same exporters: no input-stall alert for the
    communication-bound job, and the slowest stage's straggler alert is the owner's only."""
    cluster = _cluster(site)
    Contact.objects.create(area="hardware", name="HW on-call", email="hw@example.org")
    comm = _job(cluster, 8101, "gd[01-02]", 2, 4, site, running=True)
    stage = _job(cluster, 8102, "pp01", 1, 4, site, running=True)
    rules, config = StallRules.load(), alert_config()
    for job in (comm, stage):
        guardrails.check_job(job, _when(site.end), rules, config, None)
    assert not Alert.objects.filter(job=comm).exists()
    [straggler] = Alert.objects.filter(job=stage)
    assert straggler.kind == "straggler" and straggler.gpus == ["pp01:2"]
    assert not straggler.hardware and straggler.detail["cause"] == "power_limit"
