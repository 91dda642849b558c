"""Faults (issue 10): the telemetry store, Prometheus or VictoriaMetrics (issue 29), stopped
for real in the middle of an archive run, then started again.

The test runs its OWN store (``deploy/dev/prometheus.sh`` on a free port, its data in a
temporary PROM_DIR), never the shared one other tests and CI use: stopping that one would
break them. The archive's session stops the server (the script's ``down``: SIGTERM to the
pid it started) once the GPU queries are done and before the node queries, so the fault
lands between two queries of one archive run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from apps.clusters.adapters.catalogue import JOB_MEASURES
from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.models import Cluster, Node
from apps.core.errors import TransientAdapterError
from apps.core.models import TaskRun
from apps.jobs import archive, tasks
from apps.jobs.models import Job, JobMetrics, JobMetricSummary
from tests.clusters.test_prometheus_adapter import _free_port
from tests.integration import telemetry_data as data
from tests.integration.services import require

pytestmark = [pytest.mark.integration("prometheus"), pytest.mark.slow]
DEV = Path(__file__).resolve().parents[2] / "deploy" / "dev"
# store kind -> (script, port variable, data dir variable, the command that loads files)
KINDS = {"prometheus": ("prometheus.sh", "PROM_PORT", "PROM_DIR", "backfill"),
         "victoriametrics": ("victoria-metrics.sh", "VM_PORT", "VM_DIR", "import")}


class PrivatePrometheus:
    """A store of this test alone, driven through its deploy/dev script."""

    def __init__(self, base: Path, kind: str = "prometheus") -> None:
        self.kind = kind
        name, port_var, dir_var, self.load = KINDS[kind]
        self.path = DEV / name
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, port_var: str(self.port), dir_var: str(base)}

    def script(self, *args: str) -> None:
        done = subprocess.run([str(self.path), *args], env=self.env, capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, f"{self.path.name} {' '.join(args)}: {done.stderr}"

    def answers(self) -> bool:
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False


@pytest.fixture(scope="module", params=sorted(KINDS))
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivatePrometheus]:
    if request.param == "prometheus":
        require(shutil.which("prometheus") is not None and shutil.which("promtool") is not None,
                "prometheus and promtool", "apt-get install prometheus (.ci/run installs it)")
    else:
        require(shutil.which("victoria-metrics") is not None, "victoria-metrics",
                "deploy/dev/victoria-metrics.sh install (.ci/run installs it)")
    base = tmp_path_factory.mktemp("prom-fault")
    server = PrivatePrometheus(base, request.param)
    data_file = base / "telemetry.om"
    with data_file.open("w", encoding="utf-8") as out:
        out.writelines(data.openmetrics())
    server.script("up")
    try:
        server.script(server.load, str(data_file))
        yield server
    finally:
        server.script("down")


class StopsMidRun(requests.Session):
    """A real session that runs ``fault`` just before its ``after + 1``-th POST."""

    def __init__(self, after: int, fault: Callable[[], None]) -> None:
        super().__init__()
        self.after, self.fault, self.posts = after, fault, 0

    def post(self, url: Any, data: Any = None, **kwargs: Any) -> requests.Response:
        self.posts += 1
        if self.posts == self.after + 1:
            self.fault()
        return super().post(url, data=data, **kwargs)


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def _summaries(job: Job) -> list[tuple[Any, ...]]:
    return list(JobMetricSummary.objects.filter(job=job).order_by("pk")
                .values_list("pk", "host", "gpu_index", "mean", "useful", "series"))


@pytest.mark.django_db
def test_prometheus_stopped_mid_archive_leaves_the_archive_whole_and_pages_up(server,
                                                                               monkeypatch):
    spec = data.JOBS[5001]  # two nodes: GPU queries, then node queries
    cluster = Cluster.objects.create(name="promfault", prometheus_url=server.url,
                                     metric_labels={"store": server.kind})
    for host in data.NODES:
        Node.objects.create(cluster=cluster, name=host, gpu_count=8)
    job = Job.objects.create(
        cluster=cluster, job_id=spec.job_id, display_id=str(spec.job_id), user_name="ops",
        state=Job.State.RUNNING, submit_time=_dt(spec.start - 60), start_time=_dt(spec.start),
        gpus=len(spec.gpus), gpu_equivalent=len(spec.gpus))
    # 1. While the job runs, a snapshot is stored (the page's archive to fall back to).
    live = archive.archive_job(job, now=_dt(spec.start + 3600))
    assert live.status == JobMetrics.Status.LIVE and live.has_data
    before = _summaries(job)
    assert len(before) == len(spec.gpus)
    # 2. The job ends; its archive run loses Prometheus between GPU and node queries.
    Job.objects.filter(pk=job.pk).update(state=Job.State.COMPLETED, end_time=_dt(spec.end))
    job.refresh_from_db()

    def stop() -> None:
        server.script("down")
        assert not server.answers()

    sessions: list[StopsMidRun] = []

    def source(job: Job) -> archive.PrometheusSource:
        cluster = job.cluster
        sessions.append(StopsMidRun(len(JOB_MEASURES), stop))
        return archive.PrometheusSource(PrometheusClient(cluster.prometheus_url, timeout=10,
                                                         session=sessions[-1]),
                                        archive.catalogue_for(cluster))

    monkeypatch.setattr(archive, "telemetry_source", source)
    # Called directly (as a worker runs it): the error a worker's autoretry retries.
    with pytest.raises(TransientAdapterError, match="cannot reach Prometheus") as raised:
        tasks.archive_job(job.pk)
    assert isinstance(raised.value, tasks.archive_job.autoretry_for)
    assert sessions[0].posts > len(JOB_MEASURES)  # it did stop mid-run, not before
    run = TaskRun.objects.get(kind="archive_job")
    assert run.status == TaskRun.Status.FAILED and "cannot reach Prometheus" in run.error
    # 3. Nothing half-written: the snapshot is still the stored answer, untouched.
    metrics = JobMetrics.objects.get(job=job)
    assert metrics.status == JobMetrics.Status.LIVE and not metrics.is_final
    assert "cannot reach Prometheus" in metrics.last_error
    assert _summaries(job) == before
    assert metrics.computed_at == live.computed_at
    # 4. The page keeps serving the stored archive, saying since when it is stale.
    client = Client()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    page = client.get(reverse("jobs-detail", args=[cluster.name, job.job_id]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "Metrics could not be refreshed" in html and "cannot reach Prometheus" in html
    assert f"stale since {live.computed_at:%Y-%m-%d %H:%M}" in html
    assert live.verdict in html
    # 5. Prometheus comes back; the retried run stores the final archive.
    server.script("up")
    monkeypatch.undo()
    tasks.archive_job(job.pk)
    metrics = JobMetrics.objects.get(job=job)
    want = data.expected(spec)
    assert metrics.status == JobMetrics.Status.COMPLETE and metrics.last_error == ""
    assert metrics.allocated_gpu_hours == pytest.approx(want["gpu_hours"])
    for field, key in (("useful_hours", "useful"), ("waiting_hours", "waiting"),
                       ("held_idle_hours", "held_idle"), ("no_process_hours", "no_process")):
        assert getattr(metrics, field) == pytest.approx(want["gpu_hours"] * want[key],
                                                        abs=0.01 * want["gpu_hours"]), field
    assert JobMetricSummary.objects.filter(job=job).count() == len(spec.gpus)
    nodes = {n.host: n for n in job.node_metrics.all()}
    assert set(nodes) == set(data.NODES)
    for host, node in nodes.items():
        assert node.cpu_busy == pytest.approx(data.expected_node(spec, host)["cpu_busy"])
        assert node.mem_used_bytes == data.expected_node(spec, host)["mem_used_peak"]
    html = client.get(reverse("jobs-detail", args=[cluster.name, job.job_id])).content.decode()
    assert "stale since" not in html and "could not be refreshed" not in html
