"""Job comparison: the aligned table and the differences it names, as tables of runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from apps.analysis.compare import (
    NO_TELEMETRY,
    NO_TRACE,
    RunFigures,
    Telemetry,
    TraceFigures,
    compare,
    gpu_words,
    hours_minutes,
)

PHASES = {"data_loading": 40.0, "forward": 300.0, "backward": 600.0, "communication": 560.0,
          "optimizer": 60.0, "other": 40.0}  # 1,600 ms


def trace(step: float = 1600.0, rank: int | None = None, gpu: str = "", phase: str = "",
          **moved: float) -> TraceFigures:
    """A trace whose phases are PHASES plus ``moved`` (ms), the step the sum."""
    phases = {p: ms + moved.get(p, 0.0) for p, ms in PHASES.items()}
    return TraceFigures(step_ms=step + sum(moved.values()), phases_ms=phases, ranks=8,
                        steps=6, straggler_rank=rank, straggler_phase=phase, straggler_gpu=gpu)


def tele(useful: float = 0.6, held: float = 0.02, stragglers: tuple[str, ...] = (),
         status: str = "none") -> Telemetry:
    return Telemetry(useful_share=useful, busy_share=0.9, held_share=held,
                     straggler_status="found" if stragglers else status,
                     straggler_words="no straggler", straggler_gpus=stragglers)


def run(ref: str = "hpc/1", state: str = "COMPLETED", ending: str = "completed",
        title: str = "Completed normally", **fields: object) -> RunFigures:
    values: dict[str, object] = {"gpus": 8.0, "gpu_model": "h100", "nodes": 1,
                                 "run_s": 3600.0 * 4, "gpu_hours": 32.0,
                                 "telemetry": tele(), "trace": trace()}
    values.update(fields)
    return RunFigures(ref=ref, state=state, ending=ending, ending_title=title,
                      **values)  # type: ignore[arg-type]


BASE = run()

# (case, later run, words of each difference named, in order)
CASES = [
    ("identical runs name nothing", run("hpc/2"), []),
    ("a 3% slower step is noise", run("hpc/2", trace=trace(communication=48.0)), []),
    ("a slower step names its phase", run("hpc/2", trace=trace(communication=340.0)),
     ["run 2's step time is 21% longer (1,940 ms against 1,600 ms in run 1); the time lost "
      "is in communication (AllReduce and other collectives) (+340 ms/step)."]),
    ("a faster step says where the time was saved",
     run("hpc/2", trace=trace(data_loading=-40.0, forward=-100.0)),
     ["run 2's step time is 9% shorter (1,460 ms against 1,600 ms in run 1); the time saved "
      "is in forward (-100 ms/step), data loading (-40 ms/step)."]),
    ("a small phase mover beside the main one is not named",
     run("hpc/2", trace=trace(backward=200.0, optimizer=20.0)),
     ["the time lost is in backward (+200 ms/step)."]),
    ("run time and GPU-hours 25% longer", run("hpc/2", run_s=5 * 3600.0, gpu_hours=40.0),
     ["run 2 ran 25% longer (5 h 00 min against 4 h 00 min), 40.0 GPU-h against 32.0 GPU-h."]),
    ("8% longer run time is noise", run("hpc/2", run_s=4.32 * 3600), []),
    ("computing share fell", run("hpc/2", telemetry=tele(useful=0.41)),
     ["run 2's GPUs computed 41% of their allocated time, against 60% in run 1."]),
    ("computing share moved 3 points: noise", run("hpc/2", telemetry=tele(useful=0.57)), []),
    ("idle with memory held rose", run("hpc/2", telemetry=tele(held=0.3)),
     ["run 2's GPUs sat idle with memory held 30% of the time, against 2% in run 1."]),
    ("a straggler in run 2 only", run("hpc/2", telemetry=tele(stragglers=("gpu03:5",))),
     ["GPU 5 on node gpu03 is the straggler in run 2 only."]),
    ("a trace straggler in run 2 only",
     run("hpc/2", trace=trace(rank=5, gpu="gpu03:5", phase="backward")),
     ["Rank 5 (GPU 5 on node gpu03) is the traces' straggler in run 2 only."]),
    ("a different ending", run("hpc/2", state="TIMEOUT", ending="timeout",
                               title="Stopped at its time limit"),
     ["run 1 ended COMPLETED, run 2 TIMEOUT (stopped at its time limit)."]),
    ("a running run is still running", run("hpc/2", state="RUNNING", ending="", title=""),
     ["run 1 ended COMPLETED, run 2 is still RUNNING."]),
    ("a finding in run 2 only", run("hpc/2", findings=(("input-starved", "Input starves"),)),
     ["The diagnosis found “Input starves” in run 2 only."]),
    ("a different size comes first",
     run("hpc/2", gpus=16.0, trace=trace(communication=340.0)),
     ["The runs differ in size (run 1 8 × h100, run 2 16 × h100): step times and GPU-hours "
      "are not like for like.", "run 2's step time is 21% longer"]),
]


@pytest.mark.parametrize(("case", "later", "expected"), CASES, ids=[c[0] for c in CASES])
def test_it_names_the_differences_big_enough_to_matter(case, later, expected):
    texts = [d.text for d in compare([BASE, later]).differences]
    assert len(texts) == len(expected), texts
    for text, words in zip(texts, expected, strict=True):
        assert words in text


# (case, later run, row key, the later run's cell: value or the missing reason)
CELLS = [
    ("no telemetry says so", run("hpc/2", telemetry=None), "useful", (None, NO_TELEMETRY)),
    ("metrics pending says why", run("hpc/2", telemetry=None, telemetry_missing="pending"),
     "busy", (None, "pending")),
    ("no trace says so", run("hpc/2", trace=None), "step", (None, NO_TRACE)),
    ("no trace: phases too", run("hpc/2", trace=None), "phase_communication", (None, NO_TRACE)),
    ("a phase's mean ms", run("hpc/2", trace=trace(communication=340.0)),
     "phase_communication", (900.0, "")),
    ("a telemetry straggler by GPU", run("hpc/2", telemetry=tele(stragglers=("gpu03:5",))),
     "straggler", ("GPU 5 on node gpu03", "")),
    ("a trace straggler by rank, GPU and phase",
     run("hpc/2", trace=trace(rank=5, gpu="gpu03:5", phase="communication")),
     "trace_straggler", ("rank 5 on GPU 5 on node gpu03 (communication)", "")),
    ("not started has no run time", run("hpc/2", state="PENDING", ending="", run_s=None),
     "run_time", (None, "not started")),
    ("nothing found", run("hpc/2"), "findings", ("nothing found", "")),
]


@pytest.mark.parametrize(("case", "later", "key", "cell"), CELLS, ids=[c[0] for c in CELLS])
def test_the_table_aligns_each_figure_and_says_why_one_is_missing(case, later, key, cell):
    rows = {row.key: row for row in compare([BASE, later]).rows}
    got = rows[key].cells[1]
    assert (got.value, got.missing) == cell
    assert rows[key].cells[0].missing == ""  # run 1 has all of them


def test_no_trace_in_one_run_is_a_note_not_a_difference():
    result = compare([BASE, run("hpc/2", trace=None)])
    assert result.differences == ()
    assert result.notes == ("run 2 has no trace analysis: its step time and phases cannot be "
                            "compared (upload its profiler traces on its job page).",)


def test_stragglers_across_three_runs_name_the_runs_that_have_it():
    gpu = ("gpu03:5",)
    runs = [BASE, run("hpc/2", telemetry=tele(stragglers=gpu)),
            run("hpc/3", telemetry=tele(stragglers=gpu))]
    texts = [d.text for d in compare(runs).differences]
    assert texts == ["GPU 5 on node gpu03 is the straggler in runs 2 and 3."]


def test_a_straggler_in_every_run_is_no_difference():
    gpu = ("gpu03:5",)
    runs = [run(telemetry=tele(stragglers=gpu)), run("hpc/2", telemetry=tele(stragglers=gpu))]
    assert compare(runs).differences == ()


def test_a_run_without_telemetry_is_left_out_of_the_straggler_verdict():
    runs = [BASE, run("hpc/2", telemetry=None), run("hpc/3", telemetry=tele(stragglers=(
        "gpu03:5",)))]
    result = compare(runs)
    assert [d.text for d in result.differences] == [
        "GPU 5 on node gpu03 is the straggler in run 3 only."]
    assert any("runs whose telemetry could judge them: run 1, run 3" in n for n in result.notes)


def test_each_later_run_is_held_against_run_one():
    runs = [BASE, run("hpc/2", run_s=5 * 3600.0), run("hpc/3", run_s=3 * 3600.0)]
    texts = [d.text for d in compare(runs).differences]
    assert texts[0].startswith("run 2 ran 25% longer") and texts[1].startswith(
        "run 3 ran 25% shorter")


def test_the_differences_point_at_their_rows():
    result = compare([BASE, replace(run("hpc/2"), trace=trace(communication=340.0))])
    assert result.differing_rows() == {"step", "phase_communication"}


def test_a_comparison_needs_two_runs():
    with pytest.raises(ValueError, match="two runs"):
        compare([BASE])


@pytest.mark.parametrize(("seconds", "text"), [(35, "35 s"), (42 * 60, "42 min"),
                                               (5 * 3600 + 600, "5 h 10 min"),
                                               (3600 * 26 + 59, "26 h 01 min")])
def test_run_times_read_in_hours_and_minutes(seconds, text):
    assert hours_minutes(seconds) == text


@pytest.mark.parametrize(("gpu", "words"), [("gpu03:5", "GPU 5 on node gpu03"),
                                            ("#5", "GPU #5")])
def test_gpus_read_as_index_and_node(gpu, words):
    assert gpu_words(gpu) == words
