"""The job archive service, task and command (telemetry faked at the adapter boundary)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from apps.analysis import compact
from apps.analysis.timeseries import GpuKey
from apps.clusters.models import Node
from apps.core.errors import AdapterError, TransientAdapterError
from apps.core.models import TaskRun
from apps.jobs import archive, services, tasks
from apps.jobs.models import Job, JobGpu, JobMetrics, JobMetricSummary
from tests.conftest import make_job

BUSY = {"gpu_util": 0.9, "sm_active": 0.2, "tensor_active": 0.1, "fb_used": 60000.0,
        "power": 300.0}


@pytest.fixture
def job(world) -> Job:
    world.cluster.prometheus_url = "http://127.0.0.1:9"  # a source to queue archives for
    world.cluster.save()
    return world.jobs["bob"]  # 8 GPUs, 60 minutes, finished


def source_for(job: Job, n: int = 8, **overrides: float) -> archive.Source:
    from tests.jobs.fake_telemetry import FakeSource

    return FakeSource({GpuKey("gpu01", i): {**BUSY, **overrides} for i in range(n)})


def test_it_archives_a_finished_job_with_slurm_hours(job):
    metrics = archive.archive_job(job, source_for(job))
    assert metrics.status == JobMetrics.Status.COMPLETE and metrics.measure == "sm_active"
    assert metrics.allocated_gpu_hours == pytest.approx(8.0)
    total = (metrics.useful_hours + metrics.waiting_hours + metrics.held_idle_hours
             + metrics.no_process_hours)
    assert total == pytest.approx(8.0)
    assert metrics.useful_hours == pytest.approx(8.0 * 0.2)
    assert metrics.waiting_hours == pytest.approx(8.0 * 0.7)
    assert metrics.verdict.startswith("GPUs were busy 90% of the time but computing 20%")
    rows = list(job.metric_summaries.all())
    assert len(rows) == 8 and rows[0].gpu_uuid == "GPU-gpu01-0"
    series = compact.decode(bytes(rows[0].series))
    assert set(series) == {"gpu_util", "activity", "tensor_active", "fb_used", "power"}
    assert len(series["activity"]) == metrics.points <= 300
    assert series["activity"][0] == pytest.approx(0.2, abs=0.004)


def test_a_final_archive_is_not_fetched_again_unless_forced(job):
    source = source_for(job)
    archive.archive_job(job, source)
    archive.archive_job(job, source)
    assert source.calls == 1
    archive.archive_job(job, source, force=True)
    assert source.calls == 2 and JobMetricSummary.objects.filter(job=job).count() == 8


def test_a_failure_keeps_the_stored_data_and_records_the_error(world):
    running = make_job(world.cluster, 777, world.users["bob"], world.team_a,
                       state=Job.State.RUNNING, end_time=None)
    archive.archive_job(running, source_for(running), now=running.start_time + timedelta(hours=1))
    from tests.jobs.fake_telemetry import FakeSource

    down = FakeSource(error=TransientAdapterError("cannot reach Prometheus"))
    with pytest.raises(TransientAdapterError):
        archive.archive_job(running, down, now=running.start_time + timedelta(hours=2))
    metrics = JobMetrics.objects.get(job=running)
    assert metrics.status == JobMetrics.Status.LIVE
    assert JobMetricSummary.objects.filter(job=running).count() == 8
    assert "cannot reach Prometheus" in metrics.last_error and metrics.last_error_at


def test_a_failed_first_attempt_stores_nothing_as_complete(job):
    from tests.jobs.fake_telemetry import FakeSource

    with pytest.raises(AdapterError):
        archive.archive_job(job, FakeSource(error=AdapterError("bad query")))
    metrics = JobMetrics.objects.get(job=job)
    assert metrics.status == JobMetrics.Status.PENDING and not metrics.has_data
    assert not JobMetricSummary.objects.filter(job=job).exists()


def test_a_job_whose_gpus_have_no_series_says_so(job):
    from tests.jobs.fake_telemetry import FakeSource

    metrics = archive.archive_job(job, FakeSource({}))
    assert metrics.status == JobMetrics.Status.NO_DATA and not metrics.has_data
    assert metrics.useful_hours == 0 and "unknown" in metrics.verdict
    assert not job.metric_summaries.exists()


def test_missing_gpus_are_named_from_the_held_intervals(world, job):
    node = Node.objects.get(cluster=world.cluster, name="gpu01")
    for i in range(8):
        JobGpu.objects.create(job=job, node=node, gpu_index=i, start=job.start_time,
                              end=job.end_time)
    metrics = archive.archive_job(job, source_for(job, n=6))
    assert metrics.gpus_missing == ["gpu01:6", "gpu01:7"]
    assert metrics.verdict.endswith("Telemetry covers 6 of 8 GPUs.")


def test_a_running_job_is_a_live_snapshot_until_it_ends(world):
    running = make_job(world.cluster, 778, world.users["bob"], world.team_a,
                       state=Job.State.RUNNING, end_time=None)
    metrics = archive.archive_job(running, source_for(running), now=running.start_time
                                  + timedelta(minutes=30))
    assert metrics.status == JobMetrics.Status.LIVE
    assert metrics.allocated_gpu_hours == pytest.approx(4.0)
    assert services.needs_refresh(running, metrics)


def test_the_task_records_a_run_and_does_not_retry_inline_under_eager(job, monkeypatch):
    from tests.jobs.fake_telemetry import FakeSource

    down = FakeSource(error=TransientAdapterError("cannot reach Prometheus"))
    monkeypatch.setattr(archive, "telemetry_source", lambda job: down)
    tasks.archive_job.delay(job.pk)  # eager: must not raise into the caller
    assert down.calls == 1
    run = TaskRun.objects.get(kind="archive_job")
    assert run.status == TaskRun.Status.FAILED and "cannot reach" in run.error


def test_a_refresh_is_enqueued_once_per_interval(job, monkeypatch,
                                                django_capture_on_commit_callbacks):
    calls = []
    monkeypatch.setattr(tasks.archive_job, "apply_async", lambda args, **kw: calls.append(args))
    with django_capture_on_commit_callbacks(execute=True):
        assert services.request_refresh(job) == services.Refresh.QUEUED
        assert services.request_refresh(job) == services.Refresh.ASKED
    assert calls == [(job.pk,)]


def test_pending_lists_finished_unarchived_jobs(world, job, settings):
    recent = make_job(world.cluster, 900, world.users["bob"], world.team_a)
    settings.PROMETHEUS_URL = ""
    world.cluster.prometheus_url = ""
    world.cluster.save()
    # a cluster without Prometheus: its task could only fail, so none is queued
    assert recent.pk not in archive.pending_job_pks(lookback_days=3650)
    world.cluster.prometheus_url = "http://127.0.0.1:9"
    world.cluster.save()
    pks = archive.pending_job_pks(lookback_days=3650)
    assert recent.pk in pks
    archive.archive_job(recent, source_for(recent))
    assert recent.pk not in archive.pending_job_pks(lookback_days=3650)


def test_the_command_needs_a_cluster_and_ids(world):
    with pytest.raises(CommandError, match="--cluster"):
        call_command("archive_jobs")
    with pytest.raises(CommandError, match="no such job"):
        call_command("archive_jobs", "4242", cluster=world.cluster.name)


# --- Health, node traffic and the straggler verdict ----------------------------------------


def test_it_stores_the_straggler_verdict_and_marks_the_gpu(job):
    from tests.jobs.fake_telemetry import FakeSource

    peers = {"gpu_util": 0.98, "sm_active": 0.41, "nvlink_tx": 5e10, "temperature": 68.0,
             "sm_clock": 1980.0, "throttle_reasons": 0.0}
    values = {GpuKey("gpu01", i): dict(peers) for i in range(8)}
    values[GpuKey("gpu01", 5)].update(sm_active=0.86, temperature=89.0, sm_clock=1148.0,
                                      throttle_reasons=0x60)
    metrics = archive.archive_job(job, FakeSource(values))
    assert metrics.straggler_status == "found" and metrics.straggler_confidence == "high"
    assert metrics.straggler_summary.startswith("GPU gpu01:5 is the straggler")
    detail = metrics.straggler_detail
    assert [s["gpu"] for s in detail["stragglers"]] == ["gpu01:5"]
    assert detail["stragglers"][0]["cause"] == "thermal" and len(detail["waiting_gpus"]) == 7
    assert {e["kind"] for e in detail["evidence"]} >= {"waiting", "thermal", "clock"}
    slow = JobMetricSummary.objects.get(job=job, gpu_index=5)
    assert slow.straggler and slow.slowdown == pytest.approx(0.45 / 0.43, rel=0.05)
    assert slow.thermal_share == 1.0 and slow.temp_max == 89.0
    assert not JobMetricSummary.objects.filter(job=job, straggler=True).exclude(gpu_index=5)
    series = compact.decode(bytes(slow.series))
    assert series["throttle"][0] == 0x60 and series["temperature"][0] == 89.0


def test_a_job_without_telemetry_has_no_straggler_claim(job):
    from tests.jobs.fake_telemetry import FakeSource

    metrics = archive.archive_job(job, FakeSource({}))
    assert metrics.status == "no_data" and metrics.straggler_status == "not_applicable"
    assert metrics.useful_fraction is None


def test_the_useful_fraction_feeds_the_efficiency_band(job):
    metrics = archive.archive_job(job, source_for(job))
    assert metrics.useful_fraction == pytest.approx(0.2)


# --- Partial answers (Prometheus warnings) --------------------------------------------------

PARTIAL = "remote_read: connection refused: data may be partial"


def _warned(job: Job) -> archive.Source:
    from tests.jobs.fake_telemetry import FakeSource

    return FakeSource({GpuKey("gpu01", i): dict(BUSY) for i in range(8)}, warnings=[PARTIAL])


def _age(job: Job, by: timedelta) -> None:
    JobMetrics.objects.filter(job=job).update(computed_at=JobMetrics.objects.get(
        job=job).computed_at - by)


def test_a_partial_answer_is_stored_but_not_final_and_is_retried_later(job):
    metrics = archive.archive_job(job, _warned(job))
    assert metrics.status == JobMetrics.Status.PARTIAL and not metrics.is_final
    assert metrics.has_data and metrics.warnings == [PARTIAL] and metrics.partial_attempts == 1
    assert job.pk not in archive.pending_job_pks(lookback_days=3650)  # not at once ...
    _age(job, archive.PARTIAL_RETRY_AFTER + timedelta(seconds=1))
    assert job.pk in archive.pending_job_pks(lookback_days=3650)  # ... but later
    source = _warned(job)
    assert archive.archive_job(job, source).partial_attempts == 2 and source.calls == 1


def test_after_the_last_attempt_a_partial_answer_is_final_with_its_warnings(job):
    for _ in range(1, archive.PARTIAL_ATTEMPTS):
        assert archive.archive_job(job, _warned(job)).status == JobMetrics.Status.PARTIAL
    metrics = archive.archive_job(job, _warned(job))
    assert metrics.status == JobMetrics.Status.COMPLETE and metrics.is_final
    assert metrics.warnings == [PARTIAL]
    assert metrics.partial_attempts == archive.PARTIAL_ATTEMPTS
    _age(job, archive.PARTIAL_RETRY_AFTER * 10)
    assert job.pk not in archive.pending_job_pks(lookback_days=3650)


def test_a_clean_answer_after_a_partial_one_is_complete_and_clears_the_warnings(job):
    archive.archive_job(job, _warned(job))
    metrics = archive.archive_job(job, source_for(job))
    assert metrics.status == JobMetrics.Status.COMPLETE
    assert metrics.warnings == [] and metrics.partial_attempts == 0


def test_a_running_job_with_warnings_is_a_live_snapshot(world):
    running = make_job(world.cluster, 779, world.users["bob"], world.team_a,
                       state=Job.State.RUNNING, end_time=None)
    metrics = archive.archive_job(running, _warned(running),
                                  now=running.start_time + timedelta(minutes=30))
    assert metrics.status == JobMetrics.Status.LIVE and metrics.warnings == [PARTIAL]
    assert metrics.partial_attempts == 0


def test_a_partial_answer_without_data_is_not_stored_as_no_data(job):
    from tests.jobs.fake_telemetry import FakeSource

    metrics = archive.archive_job(job, FakeSource({}, warnings=[PARTIAL]))
    assert metrics.status == JobMetrics.Status.PARTIAL and not metrics.has_data


# --- Node CPU and memory ----------------------------------------------------------------------


def test_it_keeps_node_cpu_and_memory_with_their_series(job):
    from tests.jobs.fake_telemetry import FakeSource

    source = FakeSource({GpuKey("gpu01", i): dict(BUSY) for i in range(8)},
                        nodes={"gpu01": {"cpu_busy": 0.35, "cpu_iowait": 0.12,
                                         "mem_used": 300 * 2**30, "ib_tx": 2e9}})
    metrics = archive.archive_job(job, source)
    [node] = metrics.job.node_metrics.all()
    assert node.cpu_busy == pytest.approx(0.35) and node.mem_used_bytes == 300 * 2**30
    assert node.cpu_iowait == pytest.approx(0.12)
    channels = compact.decode(bytes(node.series))
    assert set(channels) == {"cpu_busy", "cpu_iowait", "mem_used", "ib_tx"}
    assert channels["cpu_busy"][0] == pytest.approx(0.35, abs=0.004)
    assert channels["cpu_iowait"][0] == pytest.approx(0.12, abs=0.004)
    assert channels["mem_used"][0] == 300 * 2**30  # whole GiB survive the compact form


class RefusingProm:
    """Prometheus at the adapter boundary: gpu01 GPU 0 busy for every measure, except the
    queries naming ``refuse``, which fail as Prometheus 2.42 fails them (HTTP 422)."""

    base_url = "http://prom.test"

    def __init__(self, refuse: str) -> None:
        self.refuse, self.asked = refuse, []

    def query_range(self, expr, start, end, step, **kw):
        from apps.analysis.timeseries import Series
        from apps.clusters.adapters.prometheus import QueryResult, _error_for

        self.asked.append(expr)
        if self.refuse in expr:
            raise _error_for(422, "execution", "vector cannot contain metrics with the same "
                                               "labelset", expr)
        times = [start + i * step for i in range(int((end - start) / step) + 1)]
        labels = {"Hostname": "gpu01", "gpu": "0", "UUID": "GPU-0", "hpc_job": "101"}
        return QueryResult("matrix", [Series("", labels, tuple((t, 50.0) for t in times))])


def test_a_refused_measure_is_a_partial_archive_naming_the_query_and_the_error(job):
    """One refused query (issue 17) costs its measure only: the others are stored, and the
    finished job is partial (fetched again later) with the query and Prometheus's error."""
    from apps.clusters.adapters.catalogue import Catalogue

    prom = RefusingProm("node_infiniband_port_data_received_bytes_total")
    metrics = archive.archive_job(job, archive.PrometheusSource(prom, Catalogue()))
    assert metrics.status == JobMetrics.Status.PARTIAL and metrics.has_data
    [warning] = metrics.warnings
    assert warning.startswith("query failed: ib_rx: HTTP 422 execution: vector cannot contain")
    assert "(query: sum by (instance)" in warning
    from apps.clusters.adapters.catalogue import JOB_MEASURES

    # every GPU measure dcgm-exporter has (not the AMD exporter's throttle residencies nor
    # its VALU) and every node measure asked
    assert len(prom.asked) == len(Catalogue().pairs(JOB_MEASURES)) + 13 == \
        len(JOB_MEASURES) - 4 + 13
    [node] = job.node_metrics.all()
    assert node.cpu_busy is not None and node.ib_rx_bps is None  # only its own measure lost


def test_every_gpu_measure_refused_is_a_failed_archive_not_an_empty_one(job):
    from apps.clusters.adapters.catalogue import Catalogue

    with pytest.raises(AdapterError, match="every GPU metric query failed"):
        archive.archive_job(job, archive.PrometheusSource(RefusingProm("DCGM"), Catalogue()))
    assert "every GPU metric query failed" in JobMetrics.objects.get(job=job).last_error


def test_the_task_run_of_a_refused_measure_is_partial(job, monkeypatch):
    from apps.clusters.adapters.catalogue import Catalogue

    prom = RefusingProm("node_infiniband_port_data_received_bytes_total")
    monkeypatch.setattr(archive, "telemetry_source",
                        lambda job: archive.PrometheusSource(prom, Catalogue()))
    tasks.archive_job.delay(job.pk)
    run = TaskRun.objects.get(kind="archive_job")
    assert run.status == TaskRun.Status.PARTIAL
    assert "ib_rx: HTTP 422 execution" in run.error and run.stats["status"] == "partial"
