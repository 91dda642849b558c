"""import_trace and analyze_trace: the service, the stored analysis and the commands."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from apps.analysis.phases import analyze, report
from apps.core.models import TaskRun
from apps.jobs.adapters.kineto import KinetoReader
from apps.jobs.models import TraceRun
from apps.jobs.traces import import_trace, trace_config
from tests.conftest import make_job
from tests.trace_builder import BASE_NS, Options, Step, simulate, to_chrome

RECORDED = datetime.fromtimestamp(BASE_NS / 1e9 + Options().start_us / 1e6, tz=UTC)


def _straggling_run(folder: Path, world: int = 3, slow: int = 1) -> Path:
    """Per-rank trace files of a run where ``slow`` loads its data 30 ms slower."""
    folder.mkdir(exist_ok=True)
    plans = [[Step(data=31.0 if r == slow else 1.0)] * 6 for r in range(world)]
    for trace in simulate(plans):
        (folder / trace.source).write_text(json.dumps(to_chrome(trace)))
    return folder


@pytest.fixture
def traced_job(world):
    """bob's job, running while the traces were recorded."""
    return make_job(world.cluster, 555, world.users["bob"], world.team_a,
                    start_time=RECORDED - timedelta(minutes=30),
                    end_time=RECORDED + timedelta(minutes=30))


def test_it_stores_the_analysis_on_the_job(traced_job, tmp_path):
    folder = _straggling_run(tmp_path / "t")
    run = import_trace(traced_job, [folder])
    assert (run.straggler_rank, run.straggler_phase) == (1, "data_loading")
    assert run.waiting_ranks == [0, 2] and run.world_size == 3 and run.steps == 6
    assert run.warnings == [] and not run.partial
    assert run.recorded_start <= run.recorded_end
    assert [f["rank"] for f in run.files] == [0, 1, 2]
    # the stored report is the report analyze_trace prints, to the rounding
    expected = report(analyze([KinetoReader().read(p) for p in sorted(folder.iterdir())],
                              trace_config()))
    assert run.report() == expected


def test_importing_the_same_files_twice_keeps_one_analysis(traced_job, tmp_path):
    folder = _straggling_run(tmp_path / "t")
    first = import_trace(traced_job, [folder])
    second = import_trace(traced_job, [folder])
    assert first.pk == second.pk
    assert TraceRun.objects.count() == 1 and second.ranks.count() == 3


def test_it_warns_when_the_traces_are_not_from_this_job(world, tmp_path):
    folder = _straggling_run(tmp_path / "t")
    run = import_trace(world.jobs["bob"], [folder])  # that job ran in 2026-11 at 09:00
    assert any("traces from a different job?" in w for w in run.warnings)


def test_a_bad_file_among_good_ones_gives_a_labelled_partial_result(traced_job, tmp_path):
    folder = _straggling_run(tmp_path / "t", world=4, slow=2)
    (folder / "rank3.pt.trace.json").write_text('{"traceEvents": [')  # cut short
    run = import_trace(traced_job, [folder])
    assert run.partial and run.straggler_rank == 2
    assert any(w.startswith("skipped: trace file") and "rank3.pt.trace.json" in w
               for w in run.warnings)
    assert any("missing ranks [3]" in w for w in run.warnings)


def test_trace_runs_are_visible_to_whoever_sees_the_job(traced_job, world, tmp_path):
    import_trace(traced_job, [_straggling_run(tmp_path / "t")])
    for persona, count in (("bob", 1), ("alice", 1), ("staff", 1), ("tom", 0), ("carol", 0)):
        assert TraceRun.objects.visible_to(world.users[persona]).count() == count, persona


@override_settings(TRACE_STRAGGLER_MIN_EXCESS_MS=50, TRACE_STRAGGLER_MIN_EXCESS_PCT=0)
def test_the_thresholds_come_from_settings(traced_job, tmp_path):
    run = import_trace(traced_job, [_straggling_run(tmp_path / "t")])
    assert run.straggler_rank is None  # 30 ms < 50 ms


# --- Commands -------------------------------------------------------------------------------


def test_import_trace_command_records_a_task_run(traced_job, tmp_path):
    out = StringIO()
    call_command("import_trace", "testcluster", "555", str(_straggling_run(tmp_path / "t")),
                 stdout=out, stderr=StringIO())
    assert "straggler rank 1 (data_loading)" in out.getvalue()
    task = TaskRun.objects.get(kind="import_trace")
    assert task.status == TaskRun.Status.SUCCEEDED and task.stats["ranks"] == 3


def test_import_trace_command_names_an_unknown_job(world, tmp_path):
    with pytest.raises(CommandError, match="no job 999 on cluster 'testcluster'"):
        call_command("import_trace", "testcluster", "999", str(tmp_path))


def test_import_trace_command_fails_cleanly_on_unreadable_traces(traced_job, tmp_path):
    (tmp_path / "a.json").write_text("not json")
    with pytest.raises(CommandError, match="no readable trace file"):
        call_command("import_trace", "testcluster", "555", str(tmp_path))
    assert TaskRun.objects.get(kind="import_trace").status == TaskRun.Status.FAILED


def test_analyze_trace_prints_a_readable_report(tmp_path):
    out, err = StringIO(), StringIO()
    call_command("analyze_trace", str(_straggling_run(tmp_path / "t")), stdout=out, stderr=err)
    text = out.getvalue()
    assert "verdict: rank 1 is the straggler" in text and "data_loading" in text
    assert err.getvalue() == ""


def test_analyze_trace_json_keeps_warnings_on_stderr(tmp_path):
    folder = _straggling_run(tmp_path / "t")
    (folder / "rank2.pt.trace.json").unlink()
    out, err = StringIO(), StringIO()
    call_command("analyze_trace", str(folder), "--json", stdout=out, stderr=err)
    assert json.loads(out.getvalue())["world_size"] == 3
    assert "missing ranks [2]" in err.getvalue()


def test_analyze_trace_accepts_a_phase_mapping_and_thresholds(tmp_path):
    folder = _straggling_run(tmp_path / "t")
    out = StringIO()
    call_command("analyze_trace", str(folder), "--json", "--min-excess-ms", "100",
                 "--phase", "load batch=data_loading", stdout=out, stderr=StringIO())
    assert json.loads(out.getvalue())["straggler"] is None
    with pytest.raises(CommandError, match="unknown phase"):
        call_command("analyze_trace", str(folder), "--phase", "x=lunch")
    with pytest.raises(CommandError, match="expected NAME=PHASE"):
        call_command("analyze_trace", str(folder), "--phase", "x")


def test_analyze_trace_names_a_missing_path(tmp_path):
    with pytest.raises(CommandError, match="does not exist"):
        call_command("analyze_trace", str(tmp_path / "nope"))
