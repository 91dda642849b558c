"""The job archive end to end: real Prometheus or VictoriaMetrics (and the real OpenMetrics
file) into the DB."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from apps.analysis import compact
from apps.clusters.models import Cluster, Node
from apps.core.errors import TransientAdapterError
from apps.jobs import archive
from apps.jobs.models import Job, JobGpu, JobMetrics
from tests.clusters.test_prometheus_adapter import _free_port
from tests.integration import prom
from tests.integration import telemetry_data as data

pytestmark = [pytest.mark.integration("prometheus"), pytest.mark.django_db]


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


@pytest.fixture
def cluster(store: prom.Store) -> Cluster:
    store.ensure_loaded(data.NAME, data.T0, "".join(data.openmetrics()))
    cluster = Cluster.objects.create(name="promtest", prometheus_url=store.url,
                                     metric_labels={"store": store.kind})
    for host in data.NODES:
        Node.objects.create(cluster=cluster, name=host, gpu_count=8)
    return cluster


def _job(cluster: Cluster, spec: data.JobSpec, job_id: int | None = None,
         held: bool = False) -> Job:
    job = Job.objects.create(
        cluster=cluster, job_id=job_id or spec.job_id, display_id=str(job_id or spec.job_id),
        user_name="bob", state=Job.State.COMPLETED, submit_time=_dt(spec.start - 60),
        start_time=_dt(spec.start), end_time=_dt(spec.end), gpus=len(spec.gpus),
        gpu_equivalent=len(spec.gpus))
    if held:
        for host, gpu, start, end in spec.intervals:
            JobGpu.objects.create(job=job, node=Node.objects.get(cluster=cluster, name=host),
                                  gpu_index=gpu, start=_dt(start), end=_dt(end))
    return job


def _check(metrics: JobMetrics, spec: data.JobSpec) -> None:
    want = data.expected(spec)
    assert metrics.status == JobMetrics.Status.COMPLETE
    assert metrics.allocated_gpu_hours == pytest.approx(want["gpu_hours"])
    for field, key in (("useful_hours", "useful"), ("waiting_hours", "waiting"),
                       ("held_idle_hours", "held_idle"), ("no_process_hours", "no_process")):
        assert getattr(metrics, field) == pytest.approx(want["gpu_hours"] * want[key],
                                                        abs=0.01 * want["gpu_hours"]), field


@pytest.mark.parametrize("job_id", sorted(data.JOBS))
def test_it_archives_each_job_from_prometheus_by_label(cluster, job_id):
    spec = data.JOBS[job_id]
    metrics = archive.archive_job(_job(cluster, spec))
    _check(metrics, spec)
    assert metrics.binding == "label" and metrics.source == "prometheus"
    assert metrics.job.metric_summaries.count() == len(spec.gpus)


@pytest.mark.parametrize("job_id", [5002, 5004])  # 5004: one GPU held for part of it
def test_a_job_without_the_label_is_bound_by_its_held_gpus(cluster, job_id):
    spec = data.JOBS[job_id]
    labelled = archive.archive_job(_job(cluster, spec))
    unlabelled = archive.archive_job(_job(cluster, spec, job_id=job_id + 1000, held=True))
    assert unlabelled.binding == "host"
    _check(unlabelled, spec)
    assert unlabelled.useful_hours == pytest.approx(labelled.useful_hours, rel=1e-9)
    assert unlabelled.coverage == pytest.approx(labelled.coverage, rel=1e-9)


def test_the_archive_keeps_node_cpu_and_memory(cluster):
    spec = data.JOBS[5001]
    metrics = archive.archive_job(_job(cluster, spec))
    nodes = {n.host: n for n in metrics.job.node_metrics.all()}
    assert set(nodes) == set(data.NODES)
    for host, node in nodes.items():
        want = data.expected_node(spec, host)
        assert node.cpu_busy == pytest.approx(want["cpu_busy"], rel=1e-6)
        assert node.mem_used_bytes == want["mem_used_peak"]
        channels = compact.decode(bytes(node.series))
        assert channels["cpu_busy"][0] == pytest.approx(0.75, abs=0.004)
        assert max(v for v in channels["mem_used"] if v is not None) == \
            pytest.approx(want["mem_used_peak"], abs=2**30)


def test_prometheus_down_is_transient_and_recorded(cluster):
    cluster.prometheus_url = f"http://127.0.0.1:{_free_port()}"
    cluster.save()
    job = _job(cluster, data.JOBS[5001])
    with pytest.raises(TransientAdapterError):
        archive.archive_job(job)
    metrics = JobMetrics.objects.get(job=job)
    assert metrics.status == JobMetrics.Status.PENDING and "cannot reach" in metrics.last_error


def test_the_command_archives_from_an_openmetrics_file(cluster, tmp_path):
    path = tmp_path / "telemetry.om"
    with path.open("w", encoding="utf-8") as fh:
        fh.writelines(data.openmetrics())
    spec = data.JOBS[5003]
    job = _job(cluster, spec)
    call_command("archive_jobs", str(spec.job_id), cluster=cluster.name, openmetrics=path)
    metrics = JobMetrics.objects.get(job=job)
    assert metrics.source == "openmetrics"
    _check(metrics, spec)
