"""AMD Instinct telemetry end to end on a real Prometheus and a real VictoriaMetrics (issue 28
items 5 and 6, issue 29 item 1).

A mixed cluster scraped every second by a private Prometheus and a private VictoriaMetrics
at once (each test runs on each store, the ``site`` fixture): ``mi01`` serves AMD's
Device Metrics Exporter text (with the site prefix ``amd_``, its Slurm integration's job
labels) and Debian's node_exporter over a synthetic ``/sys``; ``live03`` serves
dcgm-exporter's. Read through Beacon's adapters (job archive, security detection), in
each exporter's own names. Its own module (its own stores): the dcgm-only scenario of
``test_real_exporters.py`` keeps its exact counts.

The scenario (``t0`` = first scrape, 1 s ticks):

- MI300X job 8101 on mi01 GPUs 0-3 until ``t0 + 55``: GPU 2 is hot (101 °C, GFX clock
  1200 MHz, thermally throttled all the time), computing while GPUs 0, 1 and 3 wait for it
  in collectives over XGMI: the thermal straggler;
- mi01 GPU 4, no job, runs flat out from ``t0 + 20``;
- MI300X job 8102 holds mi01 GPU 5 until ``t0 + 35``, then 90 GB of VRAM stay behind;
- H100 job 8103 on live03 GPU 0 runs throughout, GPU 1 is free and idle.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import requests
from django.test import override_settings

from apps.analysis import security_rules
from apps.clusters.models import Cluster, Node
from apps.jobs.archive import archive_job
from apps.jobs.models import Job, JobMetrics
from apps.security.detection import Sources, detect
from apps.security.models import Finding, SecurityRule
from tests.integration.exporters import (
    AmdEndpoint,
    AmdGpu,
    DcgmEndpoint,
    Gpu,
    Scrape,
    Site,
    SyntheticNode,
    Target,
    node_exporter,
    run_scenario,
    scraping_stores,
)

# Every test a database test, those that need none too: pytest-django runs database-free
# tests after all others, which would split the module and scrape its site again.
pytestmark = [pytest.mark.integration("exporters"), pytest.mark.slow, pytest.mark.django_db]
DURATION = 70
PREFIX = "amd_"
XGMI_KBPS = 2.8e6  # per link: 7 links, about 20 GB/s a GPU


def _job_gpu(index: int, hot: bool = False) -> AmdGpu:
    return AmdGpu(index, gfx=97.0, valu=86.0 if hot else 41.0, mfma=30.0, vram=150000.0,
                  power=700.0, temp=101.0 if hot else 78.0, sclk=1200.0 if hot else 2100.0,
                  thermal=100.0 if hot else 0.0, xgmi_kbps=XGMI_KBPS,
                  job=("8101", "ann", "mi300x"))


def _scenario(t: float, amd: AmdEndpoint, done: set[str]) -> None:
    def once(name: str, at: float) -> bool:
        if t >= at and name not in done:
            done.add(name)
            return True
        return False

    if once("busy", 20):
        amd.update(4, gfx=98.0, vram=40000.0, power=650.0, sclk=2100.0)
    if once("left", 35):
        amd.update(5, job=None, gfx=0.0, valu=0.0, vram=90000.0, power=150.0, sclk=132.0)
    if once("end", 55):
        for gpu in range(4):
            amd.update(gpu, job=None, gfx=0.0, valu=0.0, vram=300.0, xgmi_kbps=0.0,
                       thermal=0.0, sclk=132.0)


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    work = tmp_path_factory.mktemp("amd-exporters")
    node = SyntheticNode(work / "mi01")
    node.create()
    amd = AmdEndpoint("mi01", [*(_job_gpu(i, hot=i == 2) for i in range(4)), AmdGpu(4),
                               AmdGpu(5, gfx=95.0, valu=60.0, vram=150000.0, sclk=2100.0,
                                      job=("8102", "bob", "mi300x")),
                               AmdGpu(6), AmdGpu(7)], prefix=PREFIX)
    dcgm = DcgmEndpoint("live03", [Gpu(0, "GPU-live03-0", util=90.0, fb_used=30000.0,
                                       power=600.0, tensor=0.4, jobs=["8103"]),
                                   Gpu(1, "GPU-live03-1")])
    with amd, dcgm, node_exporter(node, work / "run") as ne:
        targets = [Target("node", ne, "mi01", 9100), Target("amd", amd.port, "mi01", 5000),
                   Target("dcgm", dcgm.port, "live03", 9400)]
        with scraping_stores(targets, work, nodes=[node]) as urls:
            done: set[str] = set()

            def step(t: float) -> None:
                node.tick()
                _scenario(t, amd, done)

            yield run_scenario(urls, DURATION, step)


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _cluster(site: Site) -> Cluster:
    cluster = Cluster.objects.create(name="mixed", prometheus_url=site.url,
                                     metric_labels=site.metric_labels(
                                         scrape_interval=1, exporters=["dcgm", "amd"],
                                         amd={"prefix": PREFIX}))
    Node.objects.create(cluster=cluster, name="mi01", gpu_type="mi300x", gpu_count=8)
    Node.objects.create(cluster=cluster, name="live03", gpu_type="h100", gpu_count=2)
    return cluster


def _job(cluster: Cluster, job_id: int, host: str, start: float, end: float | None,
         gpus: int, model: str) -> Job:
    return Job.objects.create(
        cluster=cluster, job_id=job_id, display_id=str(job_id), name=f"job-{job_id}",
        user_name="ann", account="research", partition="mi300x" if model == "mi300x" else "gpu",
        state=Job.State.COMPLETED if end else Job.State.RUNNING,
        submit_time=_when(start - 60), start_time=_when(start),
        end_time=_when(end) if end else None, time_limit_min=60, nodes=host, node_count=1,
        cpus=8, memory_mb=64000, gpus=gpus, gpu_equivalent=float(gpus), gpu_types={model: gpus})


def _jobs(cluster: Cluster, site: Site) -> dict[int, Job]:
    return {8101: _job(cluster, 8101, "mi01", site.t0 - 5, site.t0 + 55, 4, "mi300x"),
            8102: _job(cluster, 8102, "mi01", site.t0 - 120, site.t0 + 35, 1, "mi300x"),
            8103: _job(cluster, 8103, "live03", site.t0 - 120, None, 1, "h100")}


def test_the_mi300x_jobs_thermal_straggler_is_named_through_the_store(site: Site) -> None:
    cluster = _cluster(site)
    jobs = _jobs(cluster, site)
    metrics = archive_job(jobs[8101], now=_when(site.end))
    assert metrics.status == JobMetrics.Status.COMPLETE, metrics.last_error
    assert (metrics.binding, metrics.gpu_vendor, metrics.measure) == ("label", "amd",
                                                                     "sm_active")
    assert not metrics.warnings and not metrics.last_error
    assert metrics.straggler_status == "found", metrics.straggler_summary
    [named] = metrics.straggler_detail["stragglers"]
    assert (named["gpu"], named["cause"]) == ("mi01:2", "thermal")
    evidence = {e["kind"] for e in metrics.straggler_detail["evidence"] if e["gpu"] == "mi01:2"}
    assert {"thermal", "clock", "temperature"} <= evidence
    summaries = {s.gpu_index: s for s in metrics.job.metric_summaries.all()}
    assert sorted(summaries) == [0, 1, 2, 3]  # its GPUs only, by the job_id label
    assert summaries[2].thermal_share == pytest.approx(1.0)
    assert summaries[0].sm_clock_busy == pytest.approx(2100, rel=0.01)
    assert summaries[2].sm_clock_busy == pytest.approx(1200, rel=0.01)
    # XGMI: 7 links of kilobytes growing at 2.8e6 KB/s each way, read as bytes per second
    assert summaries[0].nvlink_bps == pytest.approx(2 * 7 * XGMI_KBPS * 1024, rel=0.25)
    assert summaries[0].fb_used_mib == pytest.approx(150000, rel=0.01)
    [node] = metrics.job.node_metrics.all()
    assert node.host == "mi01" and node.cpu_busy is not None


def test_the_h100_job_of_the_mixed_cluster_reads_dcgm_exporter(site: Site) -> None:
    cluster = _cluster(site)
    jobs = _jobs(cluster, site)
    metrics = archive_job(jobs[8103], now=_when(site.end))
    assert (metrics.status, metrics.binding, metrics.gpu_vendor) == (
        JobMetrics.Status.LIVE, "label", "nvidia")
    [gpu] = metrics.job.metric_summaries.all()
    assert (gpu.host, gpu.gpu_index, gpu.gpu_uuid) == ("live03", 0, "GPU-live03-0")
    assert gpu.util_mean == pytest.approx(0.9, abs=0.02)


SHORT = {"gpu_activity_without_job": {"min_minutes": 0.25},
         "gpu_memory_left_after_job": {"min_minutes": 0.25},
         "gpu_shared_between_users": {"min_minutes": 0.25}}


@override_settings(SECURITY_TELEMETRY_MIN_STEP=5, SECURITY_LOOKBACK_MINUTES=0)
def test_security_finds_the_amd_incidents_and_nothing_else(site: Site) -> None:
    cluster = _cluster(site)
    _jobs(cluster, site)
    for key, params in SHORT.items():
        spec = security_rules.RULES[key]
        SecurityRule.objects.update_or_create(key=key, defaults={
            "number": spec.number, "title": spec.title, "severity": spec.severity,
            "params": params})
    report = detect(cluster, _when(site.t0), _when(site.end), Sources())
    assert report.telemetry_ok, report.skipped
    assert not [s for s in report.skipped if "failed" in s], report.skipped
    found = {(f.rule_key, f.node_name, f.gpu_index) for f in Finding.objects.all()}
    assert found == {("gpu_activity_without_job", "mi01", 4),
                     ("gpu_memory_left_after_job", "mi01", 5)}
    left = Finding.objects.get(rule_key="gpu_memory_left_after_job")
    assert left.job_id_raw == 8102 and left.evidence["min_fb_mib"] >= 89000
    busy = Finding.objects.get(rule_key="gpu_activity_without_job")
    assert abs(busy.first_seen.timestamp() - (site.t0 + 20)) <= 10


def test_the_store_kept_the_amd_exporters_names_and_labels(site: Site) -> None:
    def series(expr: str) -> list[dict[str, str]]:
        body = requests.get(f"{site.url}/api/v1/query", params={"query": expr},
                            timeout=10).json()
        return [r["metric"] for r in body["data"]["result"]]

    assert not series("gpu_gfx_activity")  # the site's prefix is the name
    [labels] = series(f'{PREFIX}gpu_gfx_activity{{gpu_id="5"}}')
    assert "job_id" not in labels  # an empty label is no label: job 8102 ended
    assert set(labels) >= {"hostname", "gpu_id", "serial_number", "card_model", "instance"}
    held = series(f'{PREFIX}gpu_gfx_activity{{job_id="8101"}}[1m]')
    assert {m["job_user"] for m in held} == {"ann"} and len(held) == 4
    links = series(f'{PREFIX}gpu_xgmi_link_tx{{gpu_id="0"}}')
    assert sorted(m["link_index"] for m in links) == [str(i) for i in range(8)]
