"""Several telemetry stores per cluster (issue 29 item 2), against real Prometheus servers.

Three private Prometheus 2.42 servers (``deploy/dev/prometheus.sh`` on free ports, data in
temporary folders; never the shared one on :9091): ``whole`` holds the known data set of
``telemetry_data`` for both nodes, ``a`` only gpu01's samples and ``b`` only gpu02's. A
cluster reading gpu01 from ``a`` (a ``TelemetryStore``) and every other node from ``b`` (its
own URL) must archive and detect exactly what the one-store cluster on ``whole`` does; with
``b`` stopped, gpu02 is "not checked" (named on the archive, the job page and the runs),
never clean.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.models import Cluster, Node, TelemetryStore
from apps.core.models import TaskRun
from apps.jobs import archive
from apps.jobs import services as job_services
from apps.jobs.models import Job, JobMetrics, JobMetricSummary
from apps.security import services as security
from apps.security.adapters.telemetry import RawTelemetry, from_prometheus
from apps.security.detection import Sources
from apps.security.frames import Grid, build_frame
from apps.security.telemetry_stores import from_stores
from tests.integration import telemetry_data as data
from tests.integration.exporters import PROM_SCRIPT, backfill, private_prometheus
from tests.integration.services import require

pytestmark = [pytest.mark.integration("prometheus"), pytest.mark.slow]
SPEC = data.JOBS[5001]  # gpu01:0-3 and gpu02:0-3: one job over both stores


@dataclass
class Servers:
    urls: dict[str, str]
    envs: dict[str, dict[str, str]]

    def stop(self, name: str) -> None:
        done = subprocess.run([str(PROM_SCRIPT), "down"], env=self.envs[name],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr


def _only(host: str | None, lines: Iterator[str]) -> Iterator[str]:
    """The data set's lines for ``host`` (every line when None): headers, the marker and
    the samples whose host or instance label is that host's."""
    names = None if host is None else (f'="{host}"', f'="{host}:9100"')
    for line in lines:
        if names is None or line.startswith("#") or data.NAME in line or \
                any(n in line for n in names):
            yield line


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    require(shutil.which("prometheus") is not None and shutil.which("promtool") is not None,
            "prometheus and promtool", "apt-get install prometheus (.ci/run installs it)")
    base = tmp_path_factory.mktemp("stores")
    found = Servers({}, {})
    with ExitStack() as stack:
        for name, host in (("whole", None), ("a", "gpu01"), ("b", "gpu02")):
            path = base / f"{name}.om"
            with path.open("w", encoding="utf-8") as out:
                out.writelines(_only(host, data.openmetrics()))
            url, env = stack.enter_context(private_prometheus(base / name))
            backfill(env, [path])
            found.urls[name], found.envs[name] = url, env
        yield found


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def _cluster(name: str, url: str) -> Cluster:
    cluster = Cluster.objects.create(name=name, prometheus_url=url)
    for host in data.NODES:
        Node.objects.create(cluster=cluster, name=host, gpu_count=8)
    return cluster


def _clusters(servers: Servers) -> tuple[Cluster, Cluster]:
    one = _cluster("one", servers.urls["whole"])
    split = _cluster("split", servers.urls["b"])
    TelemetryStore.objects.create(cluster=split, name="a", url=servers.urls["a"],
                                  hosts=["gpu01"])
    return one, split


def _job(cluster: Cluster) -> Job:
    return Job.objects.create(
        cluster=cluster, job_id=SPEC.job_id, display_id=str(SPEC.job_id), user_name="ops",
        state=Job.State.COMPLETED, submit_time=_dt(SPEC.start - 60),
        start_time=_dt(SPEC.start), end_time=_dt(SPEC.end), nodes="gpu[01-02]", node_count=2,
        gpus=len(SPEC.gpus), gpu_equivalent=len(SPEC.gpus))


def _archived(job: Job) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    gpus = list(JobMetricSummary.objects.filter(job=job).order_by("host", "gpu_index")
                .values_list("host", "gpu_index", "mean", "useful", "series"))
    nodes = list(job.node_metrics.order_by("host").values_list("host", "cpu_busy",
                                                               "mem_used_bytes"))
    return gpus, nodes


def _comparable(raw: RawTelemetry) -> tuple[Any, ...]:
    return raw.nodes, raw.ib_devices, raw.failures


@pytest.mark.django_db
def test_two_stores_archive_and_detect_what_one_store_does(servers):
    one, split = _clusters(servers)
    whole, merged = archive.archive_job(_job(one)), archive.archive_job(_job(split))
    assert whole.status == merged.status == JobMetrics.Status.COMPLETE
    assert not merged.warnings
    want, got = _archived(Job.objects.get(cluster=one)), _archived(Job.objects.get(cluster=split))
    assert len(want[0]) == len(SPEC.gpus) and {n[0] for n in want[1]} == set(data.NODES)
    assert got == want
    assert merged.allocated_gpu_hours == pytest.approx(data.expected(SPEC)["gpu_hours"])
    # detection's telemetry: every GPU and node of the window, merged over the two stores
    start, end, step = data.T0 + 3600, data.T0 + 5400, 60.0
    catalogue = archive.catalogue_for(split)
    grid = Grid.over(start, end, step)
    read = from_stores(split, catalogue, start, end, step, grid)
    assert read.coverage.complete and read.coverage.checked == ("gpu01", "gpu02")
    alone = from_prometheus(PrometheusClient(servers.urls["whole"], timeout=10), catalogue,
                            start, end, step)
    assert alone.gpus and set(alone.nodes) == {"gpu01", "gpu02"}
    assert not read.raw.gpus  # folded as they streamed in (issue 29), not kept
    assert _comparable(read.raw) == _comparable(alone)
    frame, _ = build_frame(read.raw, catalogue, grid, [], {}, set(), read.fold)
    assert {t.host for t in frame.gpus} == {"gpu01", "gpu02"}  # each from its own store
    assert frame == build_frame(alone, catalogue, grid, [], {}, set())[0]


@pytest.mark.django_db
def test_a_stopped_store_leaves_its_nodes_not_checked(servers):
    one, split = _clusters(servers)
    archive.archive_job(_job(one))
    servers.stop("b")
    job = _job(split)
    metrics = job_services.archive_job(job)
    assert metrics.status == JobMetrics.Status.PARTIAL  # not final: fetched again
    assert metrics.warnings[0].startswith("telemetry store default failed (cannot reach")
    assert metrics.warnings[0].endswith("1 node not checked: gpu02")
    run = TaskRun.objects.get(kind="archive_job")
    assert run.status == TaskRun.Status.PARTIAL and "gpu02" in run.error
    # gpu01's rows are the one-store cluster's; gpu02 has none (not zero: not there)
    want = _archived(Job.objects.get(cluster=one))
    got = _archived(job)
    assert got[0] == [row for row in want[0] if row[0] == "gpu01"]
    assert got[1] == [row for row in want[1] if row[0] == "gpu01"]
    client = Client()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    page = client.get(reverse("jobs-detail", args=["split", SPEC.job_id])).content.decode()
    assert "1 node not checked: gpu02" in page
    # detection: gpu02 not checked, the run partial, the Security page says so
    since = _dt(data.T0 + 3600)
    report = security.run_window(split, since, since + timedelta(minutes=30), Sources())
    assert report.telemetry_ok and not report.telemetry_complete
    assert any(f.startswith("telemetry store default failed") and
               f.endswith("1 node not checked: gpu02") for f in report.failures)
    detect = TaskRun.objects.filter(kind="security.detect").latest("pk")
    assert detect.status == TaskRun.Status.PARTIAL
    problem = security.detection_problem(split)
    assert problem is not None and "gpu02" in problem.reason


def test_the_data_split_keeps_each_hosts_samples_only():
    lines = list(_only("gpu01", iter(['x{Hostname="gpu01",gpu="0"} 1 1\n',
                                     'x{hostname="gpu02",gpu="0"} 1 1\n',
                                     'y{instance="gpu02:9100"} 1 1\n',
                                     'y{instance="gpu01:9100"} 1 1\n', "# TYPE x gauge\n"])))
    assert lines == ['x{Hostname="gpu01",gpu="0"} 1 1\n', 'y{instance="gpu01:9100"} 1 1\n',
                     "# TYPE x gauge\n"]

