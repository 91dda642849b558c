"""Beacon's live telemetry on real exporters, scraped by a real Prometheus and a real
VictoriaMetrics (issues 17 and 29).

Not a promtool backfill: Debian's node_exporter reads synthetic ``/sys`` and ``/proc`` trees
this module writes and updates (InfiniBand 2 devices x 2 ports with every counter file,
both directions; ``eth0``; 4 CPUs; memory), a dcgm-exporter-shaped endpoint serves the
exporter's exact text, and a private Prometheus (with the site's rules loaded) and a private
VictoriaMetrics scrape both every second from the same moment; each test reads each store
(the ``site`` fixture), and the rules are evaluated by Prometheus and by vmalert against
VictoriaMetrics. Two nodes:
``live01`` (node_exporter scraped by two jobs, ``Hostname``) and ``live02`` (``hostname``,
GPU 0 split into two MIG instances held by two users' jobs).

The scenario (``t0`` = first scrape, 1 s ticks):

- job 7001 holds live01 GPU 1 until ``t0 + 45``, then its memory stays behind, idle;
- live01 GPU 0, no job, runs flat out from ``t0 + 20`` (a leftover process or a miner);
- live02 moves 9 GB/s over InfiniBand from ``t0 + 20`` with no multi-node job there;
- live02 mlx5_0 port 1 counts 3 partition-key errors, in the transmit direction only,
  at ``t0 + 40``;
- live01 mlx5_0 port 1's received-bytes counter restarts from 0 at ``t0 + 30``.

Read through Beacon's adapters (security detection, job archive, running-job snapshot),
the rules fire on exactly these, and Prometheus and vmalert evaluate the shipped rules
without error.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import requests
from django.test import override_settings

from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.models import Cluster, Node
from apps.jobs.archive import archive_job
from apps.jobs.models import Job, JobMetrics
from apps.security.adapters import telemetry
from apps.security.detection import Sources, detect
from apps.security.models import Finding, SecurityRule
from tests.integration.exporters import (
    RULES,
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

# Its own stores and exporters on free ports: not the shared :9091 (any xdist lane)
# Every test a database test, those that need none too: pytest-django runs database-free
# tests after all others, which would split the module and scrape its site again.
pytestmark = [pytest.mark.integration("exporters"), pytest.mark.slow, pytest.mark.django_db]
DURATION = 80
IB_LIVE01 = (1e8, 2e8)  # rx, tx B/s on each of live01's 4 ports
IB_LIVE02 = 4.5e9  # each direction on live02 mlx5_1 port 2, from t0 + 20


def _scenario(t: float, nodes: dict[str, SyntheticNode], dcgm: dict[str, DcgmEndpoint],
              done: set[str]) -> None:
    """Advance the world to ``t`` seconds after the first scrape (each event once)."""
    def once(name: str, at: float) -> bool:
        if t >= at and name not in done:
            done.add(name)
            return True
        return False

    if once("busy", 20):
        dcgm["live01"].update(0, util=97.0, fb_used=24000.0, power=650.0)
        nodes["live02"].ib_bps[("mlx5_1", "2")] = (IB_LIVE02, IB_LIVE02)
    if once("reset", 30):
        nodes["live01"].reset("mlx5_0", "1", "port_rcv_data")
    if once("pkey", 40):
        nodes["live02"].bump("mlx5_0", "1", "port_xmit_constraint_errors", 3)
    if once("job-end", 45):
        dcgm["live01"].update(1, jobs=[], util=0.0, tensor=0.0, power=80.0)  # memory stays


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    work = tmp_path_factory.mktemp("exporters")
    nodes = {host: SyntheticNode(work / host) for host in ("live01", "live02")}
    for node in nodes.values():
        node.create()
    nodes["live01"].ib_bps.update({(d, p): IB_LIVE01 for d in ("mlx5_0", "mlx5_1")
                                   for p in ("1", "2")})
    dcgm = {"live01": DcgmEndpoint("live01", [
                Gpu(0, "GPU-live01-0"),
                Gpu(1, "GPU-live01-1", util=90.0, fb_used=30000.0, power=600.0, tensor=0.4,
                    jobs=["7001"])]),
            "live02": DcgmEndpoint("live02", [
                Gpu(0, "GPU-live02-0", util=60.0, fb_used=9000.0, tensor=0.3, jobs=["7002"],
                    mig=("3g.40gb", "1")),
                Gpu(0, "GPU-live02-0", util=60.0, fb_used=9000.0, tensor=0.3, jobs=["7003"],
                    mig=("3g.40gb", "2")),
                Gpu(1, "GPU-live02-1")], host_label="hostname")}
    with dcgm["live01"], dcgm["live02"], \
            node_exporter(nodes["live01"], work / "run") as ne1, \
            node_exporter(nodes["live02"], work / "run") as ne2:
        targets = [Target("node", ne1, "live01", 9100), Target("node", ne2, "live02", 9100),
                   Target("node-ib", ne1, "live01", 9100),  # one target scraped twice
                   Target("dcgm", dcgm["live01"].port, "live01", 9400),
                   Target("dcgm", dcgm["live02"].port, "live02", 9400)]
        rules = [RULES / "security.yml", RULES / "gpu_alerts.yml"]
        with scraping_stores(targets, work, rules, nodes.values()) as urls:
            done: set[str] = set()

            def step(t: float) -> None:
                for node in nodes.values():
                    node.tick()
                _scenario(t, nodes, dcgm, done)

            yield run_scenario(urls, DURATION, step)


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _cluster(site: Site) -> Cluster:
    cluster = Cluster.objects.create(name="live", prometheus_url=site.url,
                                     metric_labels=site.metric_labels(scrape_interval=1))
    for host in ("live01", "live02"):
        Node.objects.create(cluster=cluster, name=host, gpu_type="h100", gpu_count=2)
    return cluster


def _job(cluster: Cluster, job_id: int, user: str, host: str, start: float,
         end: float | None) -> Job:
    return Job.objects.create(
        cluster=cluster, job_id=job_id, display_id=str(job_id), name=f"job-{job_id}",
        user_name=user, account="research", partition="gpu",
        state=Job.State.COMPLETED if end else Job.State.RUNNING,
        submit_time=_when(start - 60), start_time=_when(start),
        end_time=_when(end) if end else None, time_limit_min=60, nodes=host, node_count=1,
        cpus=8, memory_mb=64000, gpus=1, gpu_equivalent=1.0, gpu_types={"h100": 1})


def _jobs(cluster: Cluster, site: Site) -> dict[int, Job]:
    return {7001: _job(cluster, 7001, "ann", "live01", site.t0 - 120, site.t0 + 45),
            7002: _job(cluster, 7002, "ann", "live02", site.t0 - 120, None),
            7003: _job(cluster, 7003, "bob", "live02", site.t0 - 120, None)}


# A site scraping every second tunes the rules' minimum durations down with it (data
# admins edit SecurityRule rows; the defaults assume minutes of 30 s scrapes).
SHORT = {"gpu_activity_without_job": {"min_minutes": 0.25},
         "ib_traffic_without_multinode_job": {"min_minutes": 0.25, "grace_minutes": 0},
         "gpu_memory_left_after_job": {"min_minutes": 0.25},
         "gpu_shared_between_users": {"min_minutes": 0.25}}


def _short_rules() -> None:
    from apps.analysis import security_rules

    for key, params in SHORT.items():
        spec = security_rules.RULES[key]
        SecurityRule.objects.update_or_create(key=key, defaults={
            "number": spec.number, "title": spec.title, "severity": spec.severity,
            "params": params})


@override_settings(SECURITY_TELEMETRY_MIN_STEP=5, SECURITY_LOOKBACK_MINUTES=0)
def test_detection_read_live_finds_exactly_the_planted_incidents(site: Site) -> None:
    cluster = _cluster(site)
    _jobs(cluster, site)
    _short_rules()
    report = detect(cluster, _when(site.t0), _when(site.end), Sources())
    assert report.telemetry_ok, report.skipped
    assert not [s for s in report.skipped if "failed" in s], report.skipped
    found = {(f.rule_key, f.node_name, f.gpu_index) for f in Finding.objects.all()}
    assert found == {
        ("gpu_activity_without_job", "live01", 0),
        ("gpu_memory_left_after_job", "live01", 1),
        ("ib_traffic_without_multinode_job", "live02", None),
        ("ib_partition_key_violation", "live02", None),
    }
    pkey = Finding.objects.get(rule_key="ib_partition_key_violation")
    assert pkey.evidence["errors"] >= 3  # the transmit direction counts
    busy = Finding.objects.get(rule_key="gpu_activity_without_job")
    assert abs(busy.first_seen.timestamp() - (site.t0 + 20)) <= 10


def test_node_telemetry_holds_on_a_target_scraped_twice_and_a_counter_reset(site: Site) -> None:
    client = PrometheusClient(site.url)
    catalogue = Catalogue.from_config(site.metric_labels(scrape_interval=1))
    raw = telemetry.from_prometheus(client, catalogue, site.t0 + 10, site.end - 2, 5)
    live01, live02 = raw.nodes["live01"], raw.nodes["live02"]
    assert {v for _, v in live01["cpu_cores"]} == {4.0}  # not 8: scraped by two jobs
    # 25 % busy; single 5 s buckets jitter with the writer's ticks on a loaded machine
    busy = sorted(v / 4 for _, v in live01["cpu_busy"])
    assert busy[len(busy) // 2] == pytest.approx(0.25, abs=0.05), busy
    expected = 4 * sum(IB_LIVE01)  # 4 ports, both directions, counted once
    assert max(v for _, v in live01["ib"]) < 1.5 * expected  # the restart is no spike
    assert sorted(v for _, v in live01["ib"])[len(live01["ib"]) // 2] == \
        pytest.approx(expected, rel=0.25)
    assert set(raw.ib_devices["live01"]) == {"mlx5_0", "mlx5_1"}
    busy02 = sorted(v for t, v in live02["ib"] if t > site.t0 + 30)
    assert busy02[len(busy02) // 2] == pytest.approx(2 * IB_LIVE02, rel=0.2)
    assert max(v for _, v in live02["pkey_errors"]) >= 3
    # The median holds the rate; no bucket reads it doubled (the writer's ticks jitter single
    # buckets by a tick on a loaded machine: 2.74e6 was seen once with several exporters up)
    egress = sorted(v for _, v in live01["egress"][1:])
    assert egress and egress[len(egress) // 2] == pytest.approx(2e6, rel=0.3), egress
    assert max(egress) < 1.75 * 2e6, egress
    gpus = {(s.label("Hostname", "hostname"), s.labels.get("gpu"), s.labels.get("GPU_I_ID"))
            for m, s in raw.gpus if m == "gpu_util"}
    assert gpus >= {("live01", "0", None), ("live01", "1", None), ("live02", "0", "1"),
                    ("live02", "0", "2"), ("live02", "1", None)}


def test_the_job_archive_and_a_running_jobs_snapshot_read_live(site: Site) -> None:
    cluster = _cluster(site)
    jobs = _jobs(cluster, site)
    done = archive_job(jobs[7001], now=_when(site.end))
    assert done.status == JobMetrics.Status.COMPLETE and done.binding == "label"
    assert not done.warnings and not done.last_error
    [gpu] = done.job.metric_summaries.all()
    assert (gpu.host, gpu.gpu_index, gpu.gpu_uuid) == ("live01", 1, "GPU-live01-1")
    assert gpu.util_mean == pytest.approx(0.9, abs=0.02)
    [node] = done.job.node_metrics.all()
    assert node.host == "live01"
    assert node.cpu_busy == pytest.approx(0.25, abs=0.08)
    assert node.ib_rx_bps == pytest.approx(4 * IB_LIVE01[0], rel=0.3)  # not doubled
    assert node.ib_tx_bps == pytest.approx(4 * IB_LIVE01[1], rel=0.3)
    assert node.net_tx_bps == pytest.approx(2e6, rel=0.3)
    assert node.mem_used_bytes == pytest.approx(56 << 30, rel=0.01)

    running = archive_job(jobs[7002], now=_when(site.end))
    assert running.status == JobMetrics.Status.LIVE and running.binding == "label"
    [mig] = running.job.metric_summaries.all()
    assert (mig.host, mig.gpu_index) == ("live02", 0)  # its MIG instance, not the other job's
    assert mig.util_mean == pytest.approx(0.6, abs=0.02)


@pytest.mark.parametrize("evaluator", ["prometheus", "vmalert"])
def test_the_shipped_rules_evaluate_on_real_exporters(scrape: Scrape, evaluator: str) -> None:
    """Every rule of security.yml and gpu_alerts.yml evaluates without error on the real
    series sets, and the partition-key alert fires for the transmit-only errors: in
    Prometheus, and in vmalert against VictoriaMetrics (which evaluates no rules itself)."""
    if evaluator == "vmalert":
        scrape.site("victoriametrics")  # its answers lag the scrape by VM_LATENCY_S
    url = scrape.urls[evaluator]
    groups = requests.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 14  # security.yml's 8 (AMD twins of rules 1 and 7 included) + 6
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    alerts = requests.get(f"{url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    by_name: dict[str, list[dict[str, str]]] = {}
    for alert in alerts:
        by_name.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
    [pkey] = by_name["BeaconSecurityInfiniBandPartitionKeyErrors"]
    assert (pkey["instance"], pkey["device"], pkey["port"]) == ("live02:9100", "mlx5_0", "1")
    # pending (its `for` is 5 minutes): the busy free GPU, and the memory job 7001 left
    free = by_name["BeaconSecurityGpuUseWithoutJob"]
    assert sorted((a["Hostname"], a["gpu"]) for a in free) == [("live01", "0"), ("live01", "1")]
    assert "BeaconSecurityGpuSharedByJobs" not in by_name  # MIG instances are not sharing


def test_the_exporters_speak_their_real_formats(site: Site) -> None:
    """What the scrape stored: node_exporter's names and labels, dcgm-exporter's labels."""
    def names(expr: str) -> list[dict[str, str]]:
        body = requests.get(f"{site.url}/api/v1/query", params={"query": expr},
                            timeout=10).json()
        return [r["metric"] for r in body["data"]["result"]]

    rx = names('node_infiniband_port_data_received_bytes_total{instance="live01:9100"}')
    assert {(m["device"], m["port"], m["job"]) for m in rx} == {
        (d, p, j) for d in ("mlx5_0", "mlx5_1") for p in ("1", "2") for j in ("node", "node-ib")}
    assert names("node_infiniband_port_constraint_errors_transmitted_total")
    dcgm = names('DCGM_FI_DEV_FB_USED{instance="live02:9400"}')
    assert {m.get("GPU_I_ID", "") for m in dcgm} == {"1", "2", ""}
    assert {m.get("hostname") for m in dcgm} == {"live02"}
    assert not names('DCGM_FI_DEV_GPU_UTIL{hpc_job="7001"}'), "job 7001 ended: no label now"
    assert set(dcgm[0]) >= {"gpu", "UUID", "pci_bus_id", "device", "modelName",
                            "DCGM_FI_DRIVER_VERSION", "instance", "job"}
    assert timedelta(seconds=DURATION) <= timedelta(seconds=site.end - site.t0)


class OldIbQuery(PrometheusClient):
    """The real client, sending the query issue 17 found for InfiniBand bytes: one regex
    over both directions under rate(), which a real node_exporter's series set refuses."""

    OLD = ('sum by (instance, device) (rate({__name__=~"node_infiniband_port_data_received_'
           'bytes_total|node_infiniband_port_data_transmitted_bytes_total"}[5s]))')

    def query_range(self, expr: str, *args: object, **kw: object):  # type: ignore[override]
        return super().query_range(self._old(expr), *args, **kw)  # type: ignore[arg-type]

    def stream_range(self, expr: str, *args: object, **kw: object):  # type: ignore[override]
        # detection's reads stream (issue 29)
        return super().stream_range(self._old(expr), *args, **kw)  # type: ignore[arg-type]

    def _old(self, expr: str) -> str:
        return self.OLD if "node_infiniband_port_data_received_bytes_total" in expr else expr


@override_settings(SECURITY_TELEMETRY_MIN_STEP=5, SECURITY_LOOKBACK_MINUTES=0)
def test_a_refused_family_costs_its_rule_only_and_the_run_says_so(scrape: Scrape) -> None:
    """Prometheus only: VictoriaMetrics answers the old query (the next test)."""
    from apps.core.models import TaskRun
    from apps.security import services

    site = scrape.site("prometheus")
    cluster = _cluster(site)
    _jobs(cluster, site)
    _short_rules()
    report = services.run_window(cluster, _when(site.t0), _when(site.end),
                                 Sources(prometheus=OldIbQuery(site.url)))
    found = {(f.rule_key, f.node_name) for f in Finding.objects.all()}
    assert ("gpu_activity_without_job", "live01") in found  # the other families were read
    assert ("ib_partition_key_violation", "live02") in found
    assert not any(rule == "ib_traffic_without_multinode_job" for rule, _ in found)
    run = TaskRun.objects.get(kind="security.detect")
    assert run.status == TaskRun.Status.PARTIAL and not report.telemetry_complete
    # Prometheus's own words, and the measure's query (as Beacon built it: the rewrite
    # to the old query happens below the adapter, in this test's client)
    assert "ib: HTTP 422 execution: vector cannot contain metrics with the same labelset" \
        in run.error
    assert "(query: sum by (instance, device)" in run.error
    problem = services.detection_problem(cluster)
    assert problem is not None and problem.telemetry and problem.since is None


def test_victoriametrics_answers_the_query_prometheus_refuses(scrape: Scrape) -> None:
    """Why the test above is Prometheus's alone: MetricsQL drops the names under rate() and
    sums what then shares a label set, both directions in one figure, without a word
    (docs/metrics.md, "Stores")."""
    site = scrape.site("victoriametrics")
    body = requests.get(f"{site.url}/api/v1/query", timeout=10, params={
        "query": OldIbQuery.OLD, "time": f"{site.end:.3f}"}).json()
    assert body["status"] == "success", body
    assert {(r["metric"]["instance"], r["metric"]["device"]) for r in body["data"]["result"]} \
        >= {("live01:9100", "mlx5_0"), ("live01:9100", "mlx5_1")}
