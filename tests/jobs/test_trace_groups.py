"""A collected run of many trace files read in groups by several tasks, then analysed once
(issue 29 item 4): the same stored analysis as one task reading every file, each group read
once however often the run is collected, a half-read run resumed, one analysis queued."""

from __future__ import annotations

import io
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from apps.core.errors import AdapterError
from apps.core.models import TaskRun
from apps.jobs import trace_groups, traces
from apps.jobs.models import Job, TraceDigestGroup, TraceFanOut, TraceRun
from tests.conftest import make_job
from tests.trace_builder import BASE_NS, Options, Step, simulate, to_chrome

pytestmark = pytest.mark.django_db
RECORDED = datetime.fromtimestamp(BASE_NS / 1e9 + Options().start_us / 1e6, tz=UTC)
# what a TraceRun stores, its identity and times of writing left out
FIELDS = ("fingerprint", "files", "world_size", "steps", "timeline", "dominant_phase",
          "straggler_rank", "straggler_phase", "straggler_excess_ms", "straggler_steps",
          "straggler_intermittent", "waiting_ranks", "communication_bound", "gpu_idle_share",
          "mixed_runs", "verdict", "partial", "warnings", "recorded_start", "recorded_end")


def _write_run(folder: Path, world: int = 5, slow: int = 3, bad: bool = True) -> list[Path]:
    """One file per rank (GPU traces, rank ``slow`` slow to load data), an hour old, and a
    corrupt file last when ``bad``."""
    folder.mkdir(parents=True, exist_ok=True)
    plans = [[Step(data=31.0 if r == slow else 1.0, forward=4.0 + r)] * 6 for r in range(world)]
    for trace in simulate(plans, Options(gpu=True)):
        (folder / f"{trace.source}.json").write_text(json.dumps(to_chrome(trace)))
    if bad:
        (folder / "zz-rank.json").write_text('{"traceEvents": [')
    when = time.time() - 3600
    for path in folder.iterdir():
        os.utime(path, (when, when))
    return sorted(folder.iterdir())


@pytest.fixture
def root(tmp_path, world):
    make_job(world.cluster, 555, world.users["bob"], world.team_a,
             start_time=RECORDED - timedelta(minutes=30), end_time=RECORDED + timedelta(minutes=30))
    return tmp_path / "traces"


def _stored(run: TraceRun) -> dict[str, object]:
    return {**{f: getattr(run, f) for f in FIELDS}, "report": run.report()}


def _collect(world, root, capture):
    with override_settings(TRACE_GROUP_FILES=2), capture(execute=True):
        return traces.collect_traces(world.cluster, root, settle_s=0)


@pytest.mark.parametrize(("files", "size", "lengths"), [
    (6, 2, [2, 2, 2]), (7, 2, [2, 2, 1, 2]), (10, 4, [3, 4, 3]), (3, 4, [3]), (64, 4, [4] * 16),
])
def test_files_are_cut_into_even_groups_in_order(files, size, lengths):
    paths = [Path(f"r{i:02d}") for i in range(files)]
    groups = trace_groups.groups_of(paths, size)
    assert [len(g) for g in groups] == lengths
    assert [p for g in groups for p in g] == paths


def test_the_groups_store_what_one_task_reading_every_file_stores(world, root,
                                                                   django_capture_on_commit_callbacks):
    files = _write_run(root / "testcluster" / "555")
    stats = _collect(world, root, django_capture_on_commit_callbacks)
    assert stats.grouped == ["testcluster/555"] and not stats.failed  # queued, then run
    fan_out = TraceFanOut.objects.get()
    assert [len(g.files) for g in fan_out.groups.all()] == [2, 2, 2]
    grouped = _stored(TraceRun.objects.get())
    assert fan_out.trace_run_id == TraceRun.objects.get().pk

    TraceRun.objects.all().delete()
    one = _stored(traces.import_trace(fan_out.job, [files[0].parent]))
    assert grouped == one
    assert one["straggler_rank"] == 3 and one["partial"] and one["timeline"] == "gpu"
    assert any("zz-rank.json" in w for w in one["warnings"])  # the corrupt file, by name
    assert not any(str(root) in w for w in one["warnings"])


def test_each_task_is_a_run_and_the_analysis_is_queued_once(world, root,
                                                            django_capture_on_commit_callbacks):
    _write_run(root / "testcluster" / "555")
    _collect(world, root, django_capture_on_commit_callbacks)
    runs = TaskRun.objects.filter(kind__in=["digest_traces", "analyse_traces"])
    assert sorted(runs.values_list("kind", "status")) == \
        [("analyse_traces", "succeeded")] + [("digest_traces", "succeeded")] * 3
    assert sorted(r.stats["digested"] for r in runs if r.kind == "digest_traces") == [1, 2, 2]
    fan_out = TraceFanOut.objects.get()
    with django_capture_on_commit_callbacks(execute=True) as queued:
        assert trace_groups.start(fan_out) == 0  # all digested, analysed: nothing to do
    assert queued == [] and runs.count() == 4


def test_a_run_stopped_half_way_is_resumed_without_reading_a_group_twice(
        world, root, monkeypatch, django_capture_on_commit_callbacks):
    files = _write_run(root / "testcluster" / "555")
    job = Job.objects.get(job_id=555)
    with override_settings(TRACE_GROUP_FILES=2):
        fan_out = trace_groups.plan(job, files[0].parent, files, "f" * 64, "testcluster/555")
    first = fan_out.groups.get(index=0)
    trace_groups.digest_group(first)  # the worker then dies: groups 2 and 3 never ran
    assert not TraceRun.objects.exists()
    read: list[str] = []
    real = trace_groups.read_trace_files
    monkeypatch.setattr(trace_groups, "read_trace_files",
                        lambda paths, *a: read.extend(p.name for p in paths) or real(paths, *a))
    with django_capture_on_commit_callbacks(execute=True):
        trace_groups.start(TraceFanOut.objects.get())
    assert read == [f.name for f in files[2:]]  # not the first group's files again
    assert TraceRun.objects.get().straggler_rank == 3


def test_a_fresh_claim_is_left_to_its_task_and_a_stale_one_taken_over(world, root):
    files = _write_run(root / "testcluster" / "555", bad=False)
    job = Job.objects.get(job_id=555)
    with override_settings(TRACE_GROUP_FILES=2):
        fan_out = trace_groups.plan(job, files[0].parent, files, "f" * 64, "testcluster/555")
    group = fan_out.groups.get(index=0)
    TraceDigestGroup.objects.filter(pk=group.pk).update(claimed_at=timezone.now())
    trace_groups.digest_group(group)
    group.refresh_from_db()
    assert group.digested_at is None
    assert TaskRun.objects.get(kind="digest_traces").stats["skipped"].startswith("digested")
    stale = timezone.now() - trace_groups.lease() - timedelta(seconds=1)
    TraceDigestGroup.objects.filter(pk=group.pk).update(claimed_at=stale)
    trace_groups.digest_group(group)
    group.refresh_from_db()
    assert group.digested_at is not None and len(group.digests) == 2


def test_a_run_with_no_readable_file_fails_as_one_task_would_and_can_be_tried_again(
        world, root, django_capture_on_commit_callbacks):
    folder = root / "testcluster" / "555"
    folder.mkdir(parents=True)
    for n in range(3):
        (folder / f"rank{n}.json").write_text("{")
        os.utime(folder / f"rank{n}.json", (time.time() - 3600,) * 2)
    with pytest.raises(AdapterError) as one:
        traces.import_trace(Job.objects.get(
            job_id=555), [folder])
    with override_settings(TRACE_GROUP_FILES=2), pytest.raises(AdapterError) as grouped, \
            django_capture_on_commit_callbacks(execute=True):
        traces.collect_traces(world.cluster, root, settle_s=0)
    assert str(grouped.value) == str(one.value) and "rank2.json" in str(one.value)
    assert TaskRun.objects.get(kind="analyse_traces").status == "failed"
    assert TraceFanOut.objects.get().analysing_since is None  # free for the next collection


def test_the_command_twin_reads_the_groups_itself(world, root):
    _write_run(root / "testcluster" / "555")
    out = io.StringIO()
    with override_settings(TRACE_COLLECT_SETTLE_S=0, TRACE_GROUP_FILES=2):
        call_command("collect_traces", "--root", str(root), stdout=out, stderr=io.StringIO())
    assert "1 imported" in out.getvalue()
    assert TraceRun.objects.get().straggler_rank == 3
    assert TaskRun.objects.filter(kind="digest_traces").count() == 3
