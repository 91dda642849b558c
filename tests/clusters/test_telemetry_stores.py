"""Several telemetry stores per cluster (issue 29 item 2), with the stores faked at the
adapter boundary (``PrometheusClient``): routing, merging, and a store that is down.

The real thing, two Prometheus servers each holding half the nodes, is
tests/integration/test_telemetry_stores.py.
"""

from __future__ import annotations

import io
import threading
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import reverse

from apps.analysis.timeseries import Series
from apps.clusters import services
from apps.clusters import stores as cluster_stores
from apps.clusters.adapters.prometheus import QueryResult
from apps.clusters.models import Node, TelemetryStore
from apps.core.errors import AdapterError, TransientAdapterError
from apps.core.models import TaskRun
from apps.guardrails import services as guardrails
from apps.guardrails.models import Alert
from apps.jobs import archive
from apps.jobs import services as job_services
from apps.jobs.archive_sources import PrometheusSource, StoresSource, telemetry_source
from apps.jobs.models import Job, JobMetrics, JobMetricSummary
from apps.security import services as security
from apps.security.detection import Sources
from tests.conftest import make_job
from tests.fake import StreamedRange

A, B = "http://store-a.test:9090", "http://store-b.test:9090"


class FakeStore(StreamedRange):
    """A store holding ``hosts``: GPUs 0-1 of each at ``value`` % for every measure, the
    job's label on them, node series by ``instance``; or down (connection refused)."""

    def __init__(self, url: str, hosts: tuple[str, ...], value: float, job: str) -> None:
        self.base_url, self.hosts, self.value, self.job = url, hosts, value, job
        self.down, self.asked, self.queries = False, 0, []

    def query_range(self, expr: str, start: float, end: float, step: float,
                    **kw: object) -> QueryResult:
        self.asked += 1
        self.queries.append(expr)
        if self.down:
            raise TransientAdapterError(f"cannot reach Prometheus at {self.base_url}",
                                        service="prometheus")
        times = [start + i * step for i in range(int((end - start) / step) + 1)]
        series = [Series("", {"Hostname": h, "gpu": str(g), "UUID": f"GPU-{h}-{g}",
                              "hpc_job": self.job, "instance": f"{h}:9100",
                              "device": "mlx5_0"}, tuple((t, self.value) for t in times))
                  for h in self.hosts for g in (0, 1)]
        return QueryResult("matrix", series)


@pytest.fixture
def split(world, monkeypatch):
    """testcluster with gpu01 and gpu02: store ``a`` claims gpu01 (at 50 %); the cluster's
    own Prometheus, B, holds both nodes (at 10 %), as a global view would."""
    Node.objects.create(cluster=world.cluster, name="gpu02", gpu_type="h100", gpu_count=8)
    world.cluster.prometheus_url = B
    world.cluster.save()
    TelemetryStore.objects.create(cluster=world.cluster, name="a", url=A, hosts=["gpu01"])
    fakes = {A: FakeStore(A, ("gpu01",), 50.0, "777"),
             B: FakeStore(B, ("gpu01", "gpu02"), 10.0, "777")}
    monkeypatch.setattr(cluster_stores, "PrometheusClient", lambda url, **kw: fakes[url])
    monkeypatch.setattr(services, "PrometheusClient", lambda url, **kw: fakes[url])
    return fakes


@pytest.fixture
def two_node_job(world) -> Job:
    return make_job(world.cluster, 777, world.users["bob"], world.team_a,
                    nodes="gpu[01-02]", node_count=2, gpus=4, gpu_equivalent=4.0)


def _means(job: Job) -> dict[tuple[str, int], float]:
    return {(s.host, s.gpu_index): s.mean for s in JobMetricSummary.objects.filter(job=job)}


# --- The model and the command -------------------------------------------------------


@pytest.mark.parametrize(("fields", "error"), [
    ({"hosts": [], "partitions": []}, "must claim some nodes"),
    ({"name": "default"}, "Prometheus URL of the cluster itself"),
    ({"url": "store-a:9090"}, "scheme"),
    ({"hosts": "gpu*"}, "list of names"),
    ({"hosts": ["gpu*", ""]}, "list of names"),
    ({"headers": {"bad name": "x"}}, "not an HTTP header name"),
])
def test_a_store_that_claims_nothing_or_is_malformed_is_refused(world, fields, error):
    store = TelemetryStore(cluster=world.cluster, **{"name": "a", "url": A, "hosts": ["g*"],
                                                     **fields})
    with pytest.raises(ValidationError, match=error):
        store.full_clean()


def test_the_command_adds_updates_lists_and_removes_stores(world):
    out = io.StringIO()
    call_command("telemetry_store", "testcluster", "a", "--url", A, "--hosts", "gpu0*",
                 "--kind", "victoriametrics", "--header", "X-Scope-OrgID=t1", stdout=out)
    store = TelemetryStore.objects.get()
    assert (store.hosts, store.kind, store.headers) == (["gpu0*"], "victoriametrics",
                                                        {"X-Scope-OrgID": "t1"})
    call_command("telemetry_store", "testcluster", "a", "--partitions", "inference",
                 stdout=out)
    store.refresh_from_db()
    assert store.partitions == ["inference"] and store.hosts == ["gpu0*"]
    call_command("telemetry_store", "testcluster", "--list", stdout=out)
    assert "a victoriametrics http://store-a.test:9090" in out.getvalue()
    with pytest.raises(CommandError, match="--url is required"):
        call_command("telemetry_store", "testcluster", "b", "--hosts", "x*")
    with pytest.raises(CommandError, match="must claim some nodes"):
        call_command("telemetry_store", "testcluster", "c", "--url", A)
    call_command("telemetry_store", "testcluster", "a", "--remove", stdout=out)
    assert not TelemetryStore.objects.exists()


# --- The fan-out ---------------------------------------------------------------------


def test_stores_are_asked_at_the_same_time():
    both = threading.Barrier(2, timeout=5)  # passes only when both calls are in flight

    def call() -> str:
        both.wait()
        return threading.current_thread().name

    answers, failed = cluster_stores.fan_out({"a": call, "b": call})
    assert failed == {} and answers["a"] != answers["b"]


def test_an_adapter_error_is_a_failed_store_and_a_bug_is_raised():
    def down() -> None:
        raise TransientAdapterError("cannot reach Prometheus", service="prometheus")

    answers, failed = cluster_stores.fan_out({"a": down, "b": lambda: 1})
    assert answers == {"b": 1} and failed == {"a": "cannot reach Prometheus"}
    with pytest.raises(ZeroDivisionError):
        cluster_stores.fan_out({"a": lambda: 1 / 0, "b": lambda: 1})


# --- The archive, the job page and its runs -----------------------------------------


def test_a_cluster_without_stores_reads_its_one_prometheus(world, two_node_job):
    world.cluster.prometheus_url = B
    world.cluster.save()
    assert isinstance(telemetry_source(two_node_job), PrometheusSource)


def test_each_node_is_read_from_its_own_store_and_merged(split, two_node_job):
    assert isinstance(telemetry_source(two_node_job), StoresSource)
    metrics = archive.archive_job(two_node_job)
    means = _means(two_node_job)
    assert set(means) == {("gpu01", 0), ("gpu01", 1), ("gpu02", 0), ("gpu02", 1)}
    # gpu01 is store a's (50 %), though B holds it too (10 %): read once, from a
    assert means[("gpu01", 0)] == pytest.approx(50) and means[("gpu02", 0)] == pytest.approx(10)
    assert metrics.status == JobMetrics.Status.COMPLETE and not metrics.warnings
    assert set(two_node_job.node_metrics.values_list("host", flat=True)) == {"gpu01", "gpu02"}
    assert split[A].asked and split[B].asked


def test_a_store_down_leaves_its_nodes_not_checked_and_the_run_partial(split, two_node_job,
                                                                       client, world):
    split[A].down = True
    metrics = job_services.archive_job(two_node_job)
    assert set(_means(two_node_job)) == {("gpu02", 0), ("gpu02", 1)}
    assert metrics.status == JobMetrics.Status.PARTIAL  # not final: fetched again
    note = metrics.warnings[0]
    assert note.startswith("telemetry store a failed (cannot reach Prometheus")
    assert note.endswith("1 node not checked: gpu01")
    run = TaskRun.objects.get(kind="archive_job")
    assert run.status == TaskRun.Status.PARTIAL and "1 node not checked: gpu01" in run.error
    client.force_login(world.users["bob"])
    page = client.get(reverse("jobs-detail", args=["testcluster", 777])).content.decode()
    assert "1 node not checked: gpu01" in page


def test_a_job_whose_nodes_are_not_known_is_asked_of_every_store(split, two_node_job):
    Job.objects.filter(pk=two_node_job.pk).update(nodes="")
    two_node_job.refresh_from_db()
    metrics = archive.archive_job(two_node_job)
    assert set(_means(two_node_job)) == {("gpu01", 0), ("gpu01", 1), ("gpu02", 0), ("gpu02", 1)}
    assert _means(two_node_job)[("gpu01", 0)] == pytest.approx(50) and not metrics.warnings


def test_every_store_down_fails_the_archive(split, two_node_job):
    split[A].down = split[B].down = True
    with pytest.raises(AdapterError, match=r"telemetry store a failed.*default failed"):
        job_services.archive_job(two_node_job)
    assert TaskRun.objects.get(kind="archive_job").status == TaskRun.Status.FAILED


def test_nodes_no_store_claims_without_a_default_are_not_checked(split, two_node_job, world):
    world.cluster.prometheus_url = ""
    world.cluster.save()
    metrics = archive.archive_job(two_node_job)
    assert set(_means(two_node_job)) == {("gpu01", 0), ("gpu01", 1)}
    assert "no store claims these nodes" in metrics.warnings[0]
    assert metrics.warnings[0].endswith("1 node not checked: gpu02")


def test_each_store_is_asked_in_its_own_query_engine(split, two_node_job):
    TelemetryStore.objects.filter(name="a").update(kind="victoriametrics")
    archive.archive_job(two_node_job)
    # counters read as Prometheus reads them, written for VictoriaMetrics (promql.counter_call)
    assert any("increase_prometheus" in q for q in split[A].queries)
    assert not any("increase_prometheus" in q for q in split[B].queries)


def test_a_store_claims_nodes_by_partition(split, two_node_job, world):
    from apps.clusters.models import Partition

    inference = Partition.objects.create(cluster=world.cluster, name="inference")
    Node.objects.get(name="gpu02").partitions.add(inference)
    TelemetryStore.objects.filter(name="a").update(hosts=[], partitions=["inference"])
    split[A].hosts = ("gpu01", "gpu02")  # a holds both; it answers for gpu02 only
    archive.archive_job(two_node_job)
    means = _means(two_node_job)
    assert means[("gpu02", 0)] == pytest.approx(50) and means[("gpu01", 0)] == pytest.approx(10)


def test_the_cluster_page_names_each_nodes_store(world, login):
    page = reverse("clusters-detail", args=["testcluster"])
    assert "Telemetry store" not in login("bob").get(page).content.decode()  # one Prometheus
    Node.objects.create(cluster=world.cluster, name="gpu02", gpu_type="h100", gpu_count=8)
    TelemetryStore.objects.create(cluster=world.cluster, name="vm", url=A, hosts=["gpu02"],
                                  kind="victoriametrics")
    html = login("bob").get(page).content.decode()
    rows = {name: html.split(f">{name}</a>", 1)[1].split("</tr>", 1)[0]
            for name in ("gpu01", "gpu02")}
    assert "Telemetry store" in html and "store-a.test" not in html  # names, never URLs
    assert "vm <span class=\"muted\">(VictoriaMetrics)" in rows["gpu02"]
    assert "default" in rows["gpu01"] and "VictoriaMetrics" not in rows["gpu01"]


# --- Guardrails ----------------------------------------------------------------------


def test_guardrails_do_not_judge_a_job_whose_store_is_down(split, world):
    from tests.guardrails.conftest import START

    job = make_job(world.cluster, 777, world.users["bob"], world.team_a,
                   state=Job.State.RUNNING, end_time=None, start_time=START,
                   submit_time=START - timedelta(minutes=5), nodes="gpu[01-02]",
                   node_count=2, gpus=4, gpu_equivalent=4.0)
    for fake in split.values():
        fake.value = 0.0  # idle: an alert, were the job judged
    split[A].down = True
    stats = guardrails.run_checks(now=START + timedelta(hours=2),
                                  jobs=Job.objects.filter(pk=job.pk))
    assert stats["not_checked"] == 1 and stats["alerts"] == 0 and stats["measured"] == 0
    assert not Alert.objects.exists()
    run = TaskRun.objects.get(kind="guardrails_check")
    assert run.status == TaskRun.Status.PARTIAL and "1 node not checked: gpu01" in run.error
    split[A].down = False
    stats = guardrails.run_checks(now=START + timedelta(hours=2),
                                  jobs=Job.objects.filter(pk=job.pk))
    assert stats["not_checked"] == 0 and stats["measured"] == 1


# --- Detection -----------------------------------------------------------------------


def test_detection_says_which_nodes_a_dead_store_left_not_checked(split):
    from datetime import UTC, datetime

    start = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    split[A].job = split[B].job = ""  # busy GPUs nobody holds: a finding per GPU
    report = security.run_window(Node.objects.first().cluster, start,
                                 start + timedelta(minutes=30), Sources())
    assert report.telemetry_complete and "store-a.test" in report.sources["telemetry"]
    split[A].down = True
    report = security.run_window(Node.objects.first().cluster, start,
                                 start + timedelta(minutes=30), Sources())
    assert report.telemetry_ok and not report.telemetry_complete
    [note] = [f for f in report.failures if f.startswith("telemetry store")]
    assert note.startswith("telemetry store a failed") and note.endswith(
        "1 node not checked: gpu01")
    run = TaskRun.objects.filter(kind="security.detect").latest("pk")
    assert run.status == TaskRun.Status.PARTIAL and "gpu01" in run.error
