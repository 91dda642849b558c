"""archive_many over per-window telemetry files gives the same answers as one job at a time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apps.clusters.models import Node
from apps.jobs import archive
from apps.jobs.models import Job, JobGpu, JobMetrics
from tests.conftest import make_job
from tests.integration import telemetry_data as data

pytestmark = pytest.mark.django_db
FIELDS = ("status", "measure", "useful_hours", "waiting_hours", "held_idle_hours",
          "no_process_hours", "coverage")


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


@pytest.fixture
def files(tmp_path, world):
    """The known-answer data set split in two files; job 5003's series lose their label."""
    text = "".join(data.openmetrics())
    body, eof = text.rsplit("# EOF\n", 1)
    # drop hpc_job="5003": that job must be bound through its held GPUs instead
    body = body.replace(',hpc_job="5003"', "").replace('hpc_job="5003",', "")
    lines = body.splitlines(keepends=True)
    def early(line: str) -> bool:
        return float(line.rsplit(" ", 1)[1]) <= data.T0 + 7200

    half = [ln for ln in lines if ln.startswith("#") or early(ln)]
    rest = [ln for ln in lines if ln.startswith("#") or not early(ln)]
    (tmp_path / "a.om").write_text("".join(half) + "# EOF\n")
    (tmp_path / "b.om").write_text("".join(rest) + "# EOF\n")
    (tmp_path / "all.om").write_text(body + "# EOF\n" + eof)
    for host in data.NODES:
        Node.objects.get_or_create(cluster=world.cluster, name=host)
    for spec in data.JOBS.values():
        job = make_job(world.cluster, spec.job_id, world.users["bob"], world.team_a,
                       start_time=_dt(spec.start), end_time=_dt(spec.end),
                       submit_time=_dt(spec.start - 60), gpus=len(spec.gpus),
                       gpu_equivalent=float(len(spec.gpus)))
        if spec.job_id == 5003:
            for host, gpu in spec.gpus:
                JobGpu.objects.create(job=job, node=Node.objects.get(name=host), gpu_index=gpu,
                                      start=_dt(spec.start), end=_dt(spec.end))
    return tmp_path


def _snapshot(job_id: int) -> dict[str, object]:
    m = JobMetrics.objects.get(job__job_id=job_id)
    return {f: (round(v, 6) if isinstance(v, float) else v)
            for f in FIELDS for v in [getattr(m, f)]}


def _archive_many(world, files, *names):
    source = archive.OpenMetricsSource([files / n for n in names],
                                       archive.catalogue_for(world.cluster))
    return archive.archive_many(list(Job.objects.filter(job_id__in=data.JOBS)), source)


def test_many_at_once_equals_one_job_at_a_time(world, files):
    stored = _archive_many(world, files, "b.om", "a.om")
    assert [m.status for m in stored] == ["complete"] * len(data.JOBS)
    batch = {j: _snapshot(j) for j in data.JOBS}
    cat = archive.catalogue_for(world.cluster)
    for job_id in data.JOBS:
        job = Job.objects.get(job_id=job_id)
        archive.archive_job(job, archive.OpenMetricsSource(files / "all.om", cat), force=True)
        assert _snapshot(job_id) == batch[job_id], job_id
    assert JobMetrics.objects.get(job__job_id=5003).binding == "host"


def _stored(job_id: int) -> dict[str, object]:
    """Every stored column of the job's archive and findings (not ids and clocks)."""
    def fields(row, drop=("id", "job_id", "computed_at", "last_error_at", "created_at")):
        return {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields
                if f.attname not in drop}

    job = Job.objects.get(job_id=job_id)
    return {"metrics": fields(job.metrics),
            "gpus": [fields(r) for r in job.metric_summaries.all()],
            "nodes": [fields(r) for r in job.node_metrics.all()],
            "findings": [fields(r) for r in job.findings.all()]}


def test_the_batched_pass_stores_every_column_as_one_job_at_a_time(world, files, monkeypatch):
    monkeypatch.setattr(archive, "STORE_BATCH", 2)  # several batches, a partial last one
    _archive_many(world, files, "all.om")  # one file: node rates across a file edge differ
    batch = {j: _stored(j) for j in data.JOBS}
    assert any(b["gpus"] for b in batch.values())
    cat = archive.catalogue_for(world.cluster)
    for job_id in data.JOBS:
        job = Job.objects.get(job_id=job_id)
        archive.archive_job(job, archive.OpenMetricsSource(files / "all.om", cat), force=True)
        assert _stored(job_id) == batch[job_id], job_id


def test_the_figures_match_the_independent_answers(world, files):
    _archive_many(world, files, "a.om", "b.om")
    for job_id, spec in data.JOBS.items():
        want, m = data.expected(spec), JobMetrics.objects.get(job__job_id=job_id)
        hours = want["gpu_hours"]
        assert m.useful_hours == pytest.approx(want["useful"] * hours, rel=0.02), job_id
        assert m.held_idle_hours == pytest.approx(want["held_idle"] * hours, abs=0.02), job_id


def test_a_second_pass_changes_nothing(world, files):
    _archive_many(world, files, "a.om", "b.om")
    before = {j: _snapshot(j) for j in data.JOBS}
    computed = {m.job_id: m.computed_at for m in JobMetrics.objects.all()}
    _archive_many(world, files, "a.om", "b.om")
    assert {j: _snapshot(j) for j in data.JOBS} == before
    assert {m.job_id: m.computed_at for m in JobMetrics.objects.all()} == computed


def test_a_truncated_file_fails_loudly_and_stores_nothing_as_complete(world, files):
    from apps.core.errors import AdapterError

    (files / "b.om").write_text((files / "b.om").read_text().replace("# EOF\n", ""))
    with pytest.raises(AdapterError, match="truncated"):
        _archive_many(world, files, "a.om", "b.om")
    assert not JobMetrics.objects.filter(status="complete").exists()
    assert all("truncated" in m.last_error for m in JobMetrics.objects.all())
