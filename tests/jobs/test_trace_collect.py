"""Traces collected from a configured folder (TRACE_ROOT/<cluster>/<job id>/): new or changed
runs only, each imported once (TraceRun's fingerprint), failures reported and not retried
until they change; the periodic task, its beat entry and the command twin."""

from __future__ import annotations

import io
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from apps.core.models import TaskRun
from apps.jobs import traces
from apps.jobs.models import TraceRun
from tests.conftest import make_job
from tests.trace_builder import BASE_NS, Options, Step, simulate, to_chrome

pytestmark = pytest.mark.django_db
RECORDED = datetime.fromtimestamp(BASE_NS / 1e9 + Options().start_us / 1e6, tz=UTC)


def _write_run(folder: Path, slow: int | None = 1, world: int = 3, age_s: int = 3600) -> Path:
    """One rank file per rank, written ``age_s`` seconds ago (mtime)."""
    folder.mkdir(parents=True, exist_ok=True)
    plans = [[Step(data=31.0 if r == slow else 1.0)] * 6 for r in range(world)]
    for trace in simulate(plans):
        path = folder / f"{trace.source}.json"
        path.write_text(json.dumps(to_chrome(trace)))
        _age(path, age_s)
    return folder


def _age(path: Path, age_s: int) -> None:
    when = time.time() - age_s
    os.utime(path, (when, when))


@pytest.fixture
def root(tmp_path, world):
    """TRACE_ROOT with job 555 (bob's, traced) and its array sibling 4_2."""
    job = {"start_time": RECORDED - timedelta(minutes=30),
           "end_time": RECORDED + timedelta(minutes=30)}
    make_job(world.cluster, 555, world.users["bob"], world.team_a, **job)
    make_job(world.cluster, 9002, world.users["bob"], world.team_a, array_job_id=4,
             array_task_id=2, display_id="4_2", **job)
    return tmp_path / "traces"


def _collect(cluster, root, settle_s=0, **kw):
    return traces.collect_traces(cluster, root, settle_s=settle_s, **kw)


def test_a_job_folder_is_imported_once(world, root):
    _write_run(root / "testcluster" / "555")
    first = _collect(world.cluster, root)
    assert first.imported == ["testcluster/555"]
    run = TraceRun.objects.get(job__job_id=555)
    assert run.world_size == 3 and run.straggler_rank == 1
    again = _collect(world.cluster, root)  # no watermark: the fingerprint says "stored"
    assert again.imported == [] and again.unchanged == 1
    assert TraceRun.objects.count() == 1 and TraceRun.objects.get().pk == run.pk


def test_a_stored_fingerprint_is_not_analysed_again(world, root, monkeypatch):
    _write_run(root / "testcluster" / "555")
    _collect(world.cluster, root)
    calls = []
    monkeypatch.setattr(traces, "import_trace", lambda *a, **k: calls.append(a))
    _collect(world.cluster, root)
    assert calls == []


def test_display_ids_subfolders_and_unknown_jobs(world, root):
    _write_run(root / "testcluster" / "4_2")
    _write_run(root / "testcluster" / "555" / "run-a", slow=0)
    _write_run(root / "testcluster" / "555" / "run-b", slow=2)
    _write_run(root / "testcluster" / "777")  # no such job (not synced yet)
    stats = _collect(world.cluster, root)
    assert sorted(stats.imported) == ["testcluster/4_2", "testcluster/555/run-a",
                                      "testcluster/555/run-b"]
    assert stats.unknown_jobs == ["777"]
    assert sorted(TraceRun.objects.filter(job__job_id=555)
                  .values_list("straggler_rank", flat=True)) == [0, 2]
    assert TraceRun.objects.filter(job__display_id="4_2").count() == 1


def test_a_run_still_being_written_waits_for_the_next_collection(world, root):
    folder = _write_run(root / "testcluster" / "555")
    newest = sorted(folder.iterdir())[-1]
    _age(newest, 5)  # the profiler wrote it 5 s ago (settle: 60 s)
    stats = _collect(world.cluster, root, settle_s=60)
    assert stats.settling == ["testcluster/555"] and not TraceRun.objects.exists()
    # (the files' ctime is now and cannot be set back: "later" is judged a minute on)
    later = _collect(world.cluster, root, settle_s=60,
                     now=datetime.now(UTC) + timedelta(seconds=90))
    assert later.imported == ["testcluster/555"]


def test_a_bad_folder_is_reported_and_the_others_go_on(world, root):
    bad = root / "testcluster" / "4_2"
    bad.mkdir(parents=True)
    (bad / "rank0.json").write_text('{"traceEvents": [')
    _age(bad / "rank0.json", 3600)
    _write_run(root / "testcluster" / "555")
    stats = _collect(world.cluster, root)
    assert stats.imported == ["testcluster/555"]
    assert list(stats.failed) == ["testcluster/4_2"] and "rank0.json" in \
        stats.failed["testcluster/4_2"]


def test_the_watermark_skips_unchanged_folders_without_reading_them(world, root, monkeypatch):
    """Behind the last collection's start, a folder (imported or failed) is not opened."""
    _write_run(root / "testcluster" / "555")
    later = datetime.now(UTC) + timedelta(seconds=90)
    _collect(world.cluster, root, now=later)
    read = []
    monkeypatch.setattr(traces, "_file_sha256", lambda p: read.append(p) or "x")
    stats = _collect(world.cluster, root, since=later, now=later)
    assert stats.unchanged_since == 1 and read == []


@override_settings(TRACE_COLLECT_SETTLE_S=0)
def test_the_task_records_a_run_and_moves_the_watermark(world, root,
                                                        django_capture_on_commit_callbacks):
    from apps.jobs.tasks import collect_all_traces

    _write_run(root / "testcluster" / "555")
    with override_settings(TRACE_ROOT=str(root)):
        with django_capture_on_commit_callbacks(execute=True):
            collect_all_traces()  # eager here: fans out to collect_traces(cluster) on commit
        first = TaskRun.objects.get(kind="collect_traces")
        assert first.status == "succeeded" and first.stats["imported"] == ["testcluster/555"]
        assert traces.collect_since(world.cluster) is not None
        with django_capture_on_commit_callbacks(execute=True):
            collect_all_traces()
    second = TaskRun.objects.filter(kind="collect_traces").order_by("-started_at").first()
    assert second.stats["imported"] == [] and TraceRun.objects.count() == 1


def test_without_trace_root_the_task_does_nothing(world, django_capture_on_commit_callbacks):
    from apps.jobs.tasks import collect_all_traces

    with override_settings(TRACE_ROOT=""), django_capture_on_commit_callbacks(execute=True):
        collect_all_traces()
    assert not TaskRun.objects.filter(kind="collect_traces").exists()


def test_the_beat_schedule_runs_the_collection():
    from portal.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["traces-collect"]
    app.loader.import_default_modules()
    assert entry["task"] in app.tasks and entry["schedule"] >= 60


def test_the_command_twin_reports_and_imports_nothing_twice(world, root):
    _write_run(root / "testcluster" / "555")
    out = io.StringIO()
    with override_settings(TRACE_COLLECT_SETTLE_S=0):
        call_command("collect_traces", "--root", str(root), stdout=out, stderr=io.StringIO())
        assert "testcluster: 1 trace folders, 1 imported" in out.getvalue()
        out = io.StringIO()
        call_command("collect_traces", "testcluster", "--root", str(root), "--rescan",
                     stdout=out)
    assert "0 imported, 1 unchanged" in out.getvalue() and TraceRun.objects.count() == 1


def test_the_command_says_what_is_wrong(world, tmp_path):
    with override_settings(TRACE_ROOT=""), pytest.raises(CommandError, match="TRACE_ROOT"):
        call_command("collect_traces")
    with pytest.raises(CommandError, match="is not a folder"):
        call_command("collect_traces", "--root", str(tmp_path / "nope"))
    with pytest.raises(CommandError, match="no cluster named nope"):
        call_command("collect_traces", "nope", "--root", str(tmp_path))
