"""Phase breakdown and straggler verdict: table tests on simulated synchronous runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from apps.analysis.intervals import partition, subtract, union
from apps.analysis.phases import PHASES, PhaseConfig, analyze, report
from apps.analysis.step_phases import is_collective, normalise
from apps.analysis.trace_types import Kind, TraceEvent
from tests.trace_builder import NEW_NCCL, OLD_NCCL, Options, Step, simulate, with_rank

JITTER = [0.0, 0.3, -0.2, 0.1, -0.3, 0.2, 0.0]  # ms, per step: balanced ranks never match


def _run(world: int, slow_rank: int | None = None, phase: str = "", by: float = 0.0,
         steps: int = 7, slow_steps: set[int] | None = None, base: Step | None = None,
         options: Options | None = None):
    """``world`` jittery ranks; ``slow_rank`` does ``by`` ms more ``phase`` in ``slow_steps``."""
    return simulate(_plans(world, slow_rank, phase, by, slow_steps, steps, base), options)


def _plans(world: int, slow_rank: int | None, phase: str, by: float,
           slow_steps: set[int] | None, steps: int = 7, base: Step | None = None):
    base = base or Step()
    plans = []
    for rank in range(world):
        plan = []
        for i in range(steps):
            step = replace(base, backward=base.backward + JITTER[(i + rank) % len(JITTER)])
            if rank == slow_rank and (slow_steps is None or i in slow_steps):
                step = replace(step, **{phase: getattr(step, phase) + by})
            plan.append(step)
        plans.append(plan)
    return plans


# --- The verdict ---------------------------------------------------------------------------

CASES = [
    # (id, world, slow rank, phase, extra ms, expected straggler)
    ("balanced-4", 4, None, "data", 0.0, None),
    ("balanced-2", 2, None, "data", 0.0, None),
    ("data-4", 4, 2, "data", 30.0, (2, "data_loading")),
    ("forward-2", 2, 0, "forward", 20.0, (0, "forward")),
    ("backward-3", 3, 1, "backward", 20.0, (1, "backward")),
    ("optimizer-3", 3, 1, "optimizer", 20.0, (1, "optimizer")),
    ("other-8", 8, 5, "other", 25.0, (5, "other")),
    ("under-absolute-floor", 3, 1, "data", 3.0, None),  # 3 ms < 5 ms
]


@pytest.mark.parametrize(("world", "slow", "phase", "by", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_it_names_the_straggler_and_its_phase(world, slow, phase, by, expected):
    analysis = analyze(_run(world, slow, phase, by), PhaseConfig(min_excess_ms=5.0,
                                                                  min_excess_fraction=0.15))
    got = analysis.straggler and (analysis.straggler.rank, analysis.straggler.phase)
    assert got == expected
    if expected:
        assert analysis.straggler.excess_ms == pytest.approx(by, abs=1.0)
        assert analysis.waiting_ranks == tuple(r for r in range(world) if r != slow)
    else:
        assert analysis.waiting_ranks == ()


def test_an_excess_under_the_relative_threshold_is_no_straggler():
    long_steps = Step(forward=100.0, backward=200.0)  # ~320 ms steps: 20 ms is ~6 %
    config = PhaseConfig(min_excess_ms=5.0, min_excess_fraction=0.15)
    assert analyze(_run(4, 1, "forward", 20.0, base=long_steps), config).straggler is None
    assert analyze(_run(4, 1, "forward", 80.0, base=long_steps), config).straggler is not None


def test_one_slow_step_is_not_a_straggler():
    analysis = analyze(_run(4, 3, "data", 50.0, slow_steps={2}))
    assert analysis.straggler is None


def test_a_straggler_in_most_steps_is_found():
    analysis = analyze(_run(4, 3, "data", 50.0, slow_steps={0, 1, 2, 4, 5, 6}))
    assert analysis.straggler is not None and analysis.straggler.rank == 3
    assert not analysis.straggler.intermittent
    assert analysis.straggler.steps == (2, 3, 4, 6, 7, 8)  # step numbers start at 2


# (id, world, slow rank, phase, ms, slowed step indexes, noise: {(rank, index): ms}, expected)
INTERMITTENT = [
    ("one-in-three", 3, 2, "backward", 50.0, {0, 3, 6}, {}, (2, "backward", (2, 5, 8))),
    ("one-in-three-2-ranks", 2, 0, "optimizer", 40.0, {1, 4}, {}, (0, "optimizer", (3, 6))),
    ("with-a-one-off-elsewhere", 4, 1, "data", 50.0, {0, 3, 6}, {(3, 4): 40.0},
     (1, "data_loading", (2, 5, 8))),
    ("one-slow-step-is-noise", 4, 1, "data", 50.0, {3}, {}, None),
    ("two-ranks-each-slow-twice", 3, 1, "data", 50.0, {0, 4}, {(2, 2): 50.0, (2, 6): 50.0},
     None),
    ("under-twice-the-threshold", 3, 2, "backward", 8.0, {0, 3, 6}, {}, None),
]


@pytest.mark.parametrize(("world", "slow", "phase", "by", "steps", "noise", "expected"),
                         [c[1:] for c in INTERMITTENT], ids=[c[0] for c in INTERMITTENT])
def test_an_intermittent_straggler_is_found_with_its_steps(world, slow, phase, by, steps,
                                                           noise, expected):
    plans = _plans(world, slow, phase, by, steps)
    for (rank, index), ms in noise.items():
        plans[rank][index] = replace(plans[rank][index], data=plans[rank][index].data + ms)
    analysis = analyze(simulate(plans))
    got = analysis.straggler and (analysis.straggler.rank, analysis.straggler.phase,
                                  analysis.straggler.steps)
    assert got == expected
    if expected:
        assert analysis.straggler.intermittent
        assert analysis.straggler.excess_ms == pytest.approx(by, abs=1.5)
        assert analysis.waiting_ranks == tuple(r for r in range(world) if r != slow)
        assert "intermittent" in analysis.summary
        assert f"on steps #{expected[2][0]}, #{expected[2][1]}" in analysis.summary


def test_a_balanced_run_dominated_by_collectives_is_communication_bound():
    analysis = analyze(_run(4, options=Options(comm_ms=40.0)))
    assert analysis.straggler is None
    assert analysis.communication_bound
    assert analysis.dominant_phase == "communication"
    assert "communication-bound" in analysis.summary


def test_waiting_ranks_show_the_inflated_communication_not_the_straggler():
    analysis = analyze(_run(3, 0, "data", 30.0))
    comm = {r.rank: r.phases_ms["communication"] for r in analysis.ranks}
    assert max(comm, key=comm.get) != 0  # "most communication" would blame a victim
    assert analysis.straggler.rank == 0


def test_phases_add_up_to_the_step_and_the_report_has_the_issue_shape():
    result = report(analyze(_run(2, 1, "data", 30.0)))
    assert list(result) == ["world_size", "steps", "ranks", "dominant_phase", "straggler",
                            "waiting_ranks", "timeline", "verdict"]
    assert result["steps"] == 7 and result["world_size"] == 2
    for rank in result["ranks"]:
        assert list(rank) == ["rank", "step_ms", "phases_ms", "gpu", "device"]
        assert list(rank["phases_ms"]) == list(PHASES)
        assert sum(rank["phases_ms"].values()) == pytest.approx(rank["step_ms"], abs=0.01)
        assert rank["gpu"] is None  # a CPU run has no GPU timeline
    assert result["straggler"] == {"rank": 1, "phase": "data_loading",
                                   "excess_ms": pytest.approx(30.0, abs=1.0),
                                   "steps": [2, 3, 4, 5, 6, 7, 8], "intermittent": False,
                                   "device": None}
    assert result["timeline"] == "cpu"
    assert result["verdict"].startswith("rank 1 is the straggler")


def test_the_phases_of_one_step_are_what_the_rank_did():
    # rank 0 arrives 10 ms late; rank 1 waits those 10 ms in the allreduce
    analysis = analyze(_run(2, 0, "data", 10.0, steps=3), PhaseConfig())
    fast = analysis.ranks[1].steps[1].phases_ms
    slow = analysis.ranks[0].steps[1].phases_ms
    assert slow["data_loading"] == pytest.approx(11.0, abs=0.01)
    assert fast["data_loading"] == pytest.approx(1.0, abs=0.01)
    assert fast["communication"] - slow["communication"] == pytest.approx(10.0, abs=0.5)
    assert fast["forward"] == pytest.approx(4.0, abs=0.01)
    assert fast["optimizer"] == pytest.approx(2.0, abs=0.01)


# --- Annotations ----------------------------------------------------------------------------


def test_without_a_forward_annotation_forward_is_the_rest_before_backward():
    analysis = analyze(_run(2, options=Options(annotate_forward=False)))
    assert analysis.ranks[0].phases_ms["forward"] == pytest.approx(4.0, abs=0.01)


def test_user_annotations_refine_the_phases_through_the_mapping():
    options = Options(user_annotations={"forward": "## my fwd ##"})
    traces = _run(2, 1, "forward", 20.0, options=options)
    assert analyze(traces).straggler.phase == "forward"
    # the mapping is data: say the annotated region is input work, and the verdict follows
    config = PhaseConfig(annotation_phases={"My_Fwd": "data_loading"})
    assert analyze(traces, config).straggler.phase == "data_loading"


def test_the_mapping_refuses_an_unknown_phase():
    with pytest.raises(ValueError, match="unknown phase"):
        PhaseConfig(annotation_phases={"fwd": "forwards"})


@pytest.mark.parametrize(("raw", "normal"), [
    ("## forward ##", "forward"), ("Data_Loading", "dataloading"),
    ("optimizer-step", "optimizerstep"),
])
def test_annotation_names_are_normalised(raw, normal):
    assert normalise(raw) == normal


# --- Collectives ----------------------------------------------------------------------------

COLLECTIVES = [
    (Kind.KERNEL, NEW_NCCL, "", True),
    (Kind.KERNEL, OLD_NCCL, "", True),
    (Kind.KERNEL, "fused_allreduce_kernel", "allreduce", True),  # Collective name arg first
    (Kind.KERNEL, "volta_sgemm_128x64_nn", "", False),
    (Kind.KERNEL, "myncclKernel_copy", "", False),
    (Kind.ANNOTATION, "nccl:all_reduce", "", True),
    (Kind.ANNOTATION, "gloo:all_reduce", "", True),
    (Kind.CPU_OP, "c10d::allreduce_", "", True),
    (Kind.CPU_OP, "record_param_comms", "allgather", True),
    (Kind.CPU_OP, "autograd::engine::evaluate_function: AddmmBackward0", "", False),
    (Kind.ANNOTATION, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "", False),
]


@pytest.mark.parametrize(("kind", "name", "collective", "expected"), COLLECTIVES)
def test_it_recognises_collectives(kind, name, collective, expected):
    event = TraceEvent(kind, name, 0.0, 1.0, collective=collective)
    assert is_collective(event) is expected


# --- GPU (NCCL) timelines -------------------------------------------------------------------

GPU_CASES = [
    ("new-nccl-names", Options(gpu=True, nccl_name=NEW_NCCL, collective_arg=False)),
    ("old-nccl-names", Options(gpu=True, nccl_name=OLD_NCCL, collective_arg=False)),
    ("collective-arg", Options(gpu=True, nccl_name="some_kernel", collective_arg=True)),
]


@pytest.mark.parametrize("options", [c[1] for c in GPU_CASES], ids=[c[0] for c in GPU_CASES])
def test_gpu_traces_are_cut_on_the_gpu_timeline(options):
    analysis = analyze(_run(4, 2, "backward", 30.0, options=options))
    assert analysis.timeline == "gpu"
    assert (analysis.straggler.rank, analysis.straggler.phase) == (2, "backward")
    assert analysis.waiting_ranks == (0, 1, 3)
    waiting = analysis.ranks[0].phases_ms
    assert waiting["communication"] == pytest.approx(32.0, abs=1.0)


def test_an_input_stall_shows_as_idle_gpu_during_data_loading():
    analysis = analyze(_run(2, 1, "data", 30.0, options=Options(gpu=True)))
    assert (analysis.straggler.rank, analysis.straggler.phase) == (1, "data_loading")


def test_a_gpu_rank_without_nccl_kernels_recognised_has_no_communication():
    # a kernel name that is neither nccl nor tagged: counted as compute, as it must be
    options = Options(gpu=True, nccl_name="mystery_kernel", collective_arg=False)
    analysis = analyze(_run(2, options=options))
    assert all(r.phases_ms["communication"] == 0 for r in analysis.ranks)


# --- Ranks and steps that do not line up ----------------------------------------------------


def test_duplicate_ranks_are_reported_and_read_once():
    traces = _run(3, 1, "data", 30.0)
    analysis = analyze([*traces, replace(traces[1], source="copy-of-rank1.json")])
    assert any("duplicate rank 1" in w for w in analysis.warnings)
    assert [r.rank for r in analysis.ranks] == [0, 1, 2]
    assert analysis.straggler.rank == 1


def test_mismatched_steps_are_compared_on_the_common_ones():
    traces = _run(3, 2, "data", 30.0)
    shorter = replace(traces[0], events=tuple(e for e in traces[0].events
                                              if e.name != "ProfilerStep#3"))
    analysis = analyze([shorter, traces[1], traces[2]])
    assert analysis.steps == 6
    assert any("mismatched steps: rank 0 has no step 3" in w for w in analysis.warnings)
    assert analysis.straggler.rank == 2


def test_ranks_sharing_no_step_give_a_labelled_partial_result():
    traces = _run(2)
    later = replace(traces[1], events=tuple(
        replace(e, name=f"ProfilerStep#{int(e.name.split('#')[1]) + 100}")
        if e.kind is Kind.STEP else e for e in traces[1].events))
    analysis = analyze([traces[0], later])
    assert analysis.partial and analysis.straggler is None and analysis.steps == 0
    assert any("share no step" in w for w in analysis.warnings)
    assert len(analysis.ranks) == 2


def test_a_file_from_another_world_size_is_left_out():
    traces = _run(3)
    stray = with_rank(_run(4)[3], 3, world=4)
    analysis = analyze([*traces, stray])
    assert analysis.world_size == 3 and [r.rank for r in analysis.ranks] == [0, 1, 2]
    assert any("world size 4 differs" in w for w in analysis.warnings)


def test_a_trace_without_distributed_info_is_rank_zero_of_one():
    trace = replace(_run(2)[0], distributed=None)
    analysis = analyze([trace])
    assert analysis.world_size == 1 and analysis.straggler is None
    assert any("no distributedInfo" in w for w in analysis.warnings)
    assert "single rank" in analysis.summary


def test_zero_length_steps_are_skipped_with_a_warning():
    traces = _run(2)
    zero = tuple(replace(e, dur=0.0) if e.name == "ProfilerStep#4" else e
                 for e in traces[0].events)
    analysis = analyze([replace(traces[0], events=zero), traces[1]])
    assert any("ProfilerStep#4 has no duration" in w for w in analysis.warnings)
    assert analysis.steps == 6


# --- Intervals --------------------------------------------------------------------------------

INTERVALS = [
    ([(0, 2), (1, 3), (5, 6), (6, 7), (9, 8)], [(0, 3), (5, 7)]),
    ([], []),
    ([(4, 4)], []),
]


@pytest.mark.parametrize(("given", "merged"), INTERVALS)
def test_union_merges_overlaps_and_drops_empty_intervals(given, merged):
    assert union(given) == merged


def test_subtract_and_partition_give_every_instant_one_label():
    assert subtract([(0, 10)], [(2, 3), (5, 7)]) == [(0, 2), (3, 5), (7, 10)]
    segments = partition((0, 10), [("comm", [(4, 6)]), ("fwd", [(0, 5)]), ("bwd", [(5, 12)])])
    assert segments == [(0, 4, "fwd"), (4, 6, "comm"), (6, 10, "bwd")]


# --- Traces of different runs ------------------------------------------------------------------

A100, V100 = "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB"


def _with_origin(trace, **origin):
    from apps.analysis.trace_types import Origin

    return replace(trace, origin=Origin(**{"device": trace.distributed.rank, **origin}))


MIXED = [
    # (id, how rank 1's file differs, the reason named)
    ("another GPU model", lambda t: _with_origin(t, device_name=V100), "GPU model"),
    ("another NCCL version",
     lambda t: replace(t, distributed=replace(t.distributed, nccl_version="2.18.3")),
     "NCCL version"),
    ("the same process as rank 0",
     lambda t: _with_origin(t, device_name=A100, host="gpu01", pid=4242),
     "one process is one rank"),
    ("epoch times a day later, no baseTimeNanoseconds",
     lambda t: replace(t, base_time_ns=None, events=tuple(
         replace(e, ts=e.ts + 1.7e15 + 86_400e6) for e in t.events)),
     "recorded at a time no other file covers"),
]


@pytest.mark.parametrize(("change", "reason"), [c[1:] for c in MIXED], ids=[c[0] for c in MIXED])
def test_traces_of_different_runs_name_no_straggler(change, reason):
    traces = _run(3, 1, "data", 30.0, options=Options(gpu=True))
    traces = [_with_origin(t, device_name=A100, host="gpu01", pid=4242 + t.rank)
              for t in traces]
    traces = [replace(t, distributed=replace(t.distributed, nccl_version="2.17.1"))
              for t in traces]
    if reason.startswith("recorded"):  # all files epoch-timed, rank 1's on another day
        traces = [replace(t, base_time_ns=None, events=tuple(
            replace(e, ts=e.ts + 1.7e15) for e in t.events)) for t in traces]
    assert analyze(traces).straggler.rank == 1  # the same run: named
    traces[1] = change(traces[1])
    if reason == "one process is one rank":
        traces[1] = replace(traces[1], origin=replace(traces[1].origin, pid=traces[0].origin.pid))
    analysis = analyze(traces)
    assert analysis.straggler is None and analysis.mixed_runs and analysis.partial
    assert any(reason in w for w in analysis.warnings)
    assert "no straggler is named" in analysis.warnings[-1] or any(
        "no straggler is named" in w for w in analysis.warnings)
    assert "different runs" in analysis.summary


def test_a_rank_without_world_size_counts_the_ranks_given():
    traces = [replace(t, distributed=replace(t.distributed, world_size=None))
              for t in _run(3, 2, "data", 30.0)]
    analysis = analyze(traces)
    assert analysis.world_size == 3 and analysis.straggler.rank == 2 and not analysis.partial
