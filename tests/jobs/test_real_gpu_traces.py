"""The trace analysis on REAL GPU profiler traces recorded elsewhere (HTA's test data).

Each figure is pinned to what a reading of the raw kernels shows (the fixtures' README and
/work/shared/data/real-gpu-traces/README.md), within the issue's tolerance: 5 percentage
points of the step, or 2 ms. The overlap figures are HTA 0.5.0's ``get_comm_comp_overlap``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from apps.analysis.phases import TraceAnalysis, TraceAnalysisError, analyze, report
from apps.analysis.trace_types import RankTrace
from apps.jobs.adapters.kineto import KinetoReader, find_trace_files

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "traces" / "real-gpu"
PP, MS = 5.0, 2.0  # the tolerance


@cache
def _read(folder: str) -> tuple[RankTrace, ...]:
    reader = KinetoReader()
    return tuple(reader.read(p) for p in find_trace_files([REAL / folder]))


@cache
def _analysis(folder: str) -> TraceAnalysis:
    return analyze(list(_read(folder)))


def _pct(part: float, whole: float) -> float:
    return 100 * part / whole


# (folder, figure, raw-kernel value, unit): per-step means of the one traced rank
RAW_KERNELS = [
    ("trace_diff_control", "communication", 35.0, "%"),
    ("trace_diff_control", "exposed_communication", 18.0, "%"),
    ("trace_diff_control", "overlap", 47.0, "%"),  # HTA get_comm_comp_overlap
    ("trace_diff_test", "communication", 33.0, "%"),
    ("trace_diff_test", "exposed_communication", 10.0, "%"),
    ("trace_diff_test", "overlap", 69.0, "%"),  # HTA get_comm_comp_overlap
    ("df_index_resolver", "communication", 59.6, "ms"),
    ("df_index_resolver", "idle", 46.0, "%"),
    ("ns_resolution_trace", "busy", 97.0, "%"),
    ("amd_trace", "idle", 98.0, "%"),
]


@pytest.mark.parametrize(("folder", "figure", "raw", "unit"), RAW_KERNELS,
                         ids=[f"{c[0]}-{c[1]}" for c in RAW_KERNELS])
def test_gpu_figures_agree_with_the_raw_kernels(folder, figure, raw, unit):
    (rank,) = report(_analysis(folder))["ranks"]
    gpu, step = rank["gpu"], rank["step_ms"]
    values = {
        "communication": gpu["communication_ms"], "idle": gpu["idle_ms"],
        "exposed_communication": gpu["exposed_communication_ms"],
        "busy": step - gpu["idle_ms"],
    }
    if figure == "overlap":
        got = 100 * (1 - gpu["exposed_communication_ms"] / gpu["communication_ms"])
    elif unit == "%":
        got = _pct(values[figure], step)
    else:
        got = values[figure]
    assert got == pytest.approx(raw, abs=PP if unit == "%" else MS)


def test_communication_is_the_kernels_not_the_longer_cpu_spans():
    (rank,) = _analysis("df_index_resolver").ranks
    # the CPU's nccl:all_reduce spans add up to about 77 ms a step; the kernels to 59.6
    assert rank.phases_ms["communication"] == pytest.approx(59.6, abs=MS)
    assert rank.gpu.exposed_communication_ms == pytest.approx(rank.gpu.communication_ms)


def test_hidden_communication_is_not_counted_as_cost():
    (rank,) = _analysis("trace_diff_control").ranks
    # the phases count exposed communication only: the rest ran under compute kernels
    assert rank.phases_ms["communication"] == pytest.approx(rank.gpu.exposed_communication_ms)
    assert rank.gpu.communication_ms > 1.8 * rank.gpu.exposed_communication_ms


@pytest.mark.parametrize(("folder", "idle"), [("df_index_resolver", "46%"),
                                               ("amd_trace", "98%")])
def test_a_starved_gpu_is_the_verdict_with_what_to_check(folder, idle):
    analysis = _analysis(folder)
    assert analysis.gpu_starved
    assert f"the GPU is idle {idle} of each step: the CPU side cannot feed it" in \
        analysis.summary
    assert any("CUDA graphs" in c for c in analysis.checks)


@pytest.mark.parametrize("folder", ["trace_diff_control", "trace_diff_test",
                                    "ns_resolution_trace"])
def test_a_fed_gpu_gets_no_idle_verdict(folder):
    analysis = _analysis(folder)
    assert not analysis.gpu_starved and "idle" not in analysis.summary


def test_rocm_traces_are_read_like_cuda_ones():
    (trace,) = _read("amd_trace")
    (rank,) = _analysis("amd_trace").ranks
    assert rank.gpu is not None and rank.gpu.compute_ms > 0  # hipLaunchKernel correlated
    assert trace.origin.device_name == "AMD Radeon Graphics"


def test_ranks_are_mapped_to_their_gpu_and_host():
    (trace,) = _read("ns_resolution_trace")
    assert (trace.origin.host, trace.origin.device, trace.origin.device_name) == (
        "twshared39868.02.pnb3.facebook.com", 0, "Tesla V100-SXM2-32GB")
    (rank,) = report(_analysis("trace_diff_control"))["ranks"]
    assert rank["device"] == {"host": None, "index": 3, "name": "NVIDIA A100-PG509-200"}


def test_annotated_stages_get_their_phase_or_their_own_name():
    (rank,) = _analysis("trace_diff_control").ranks
    phases = rank.phases_ms
    # TorchRec's ## load_batch ## / ## wait_for_batch ## / ## sparse_data_dist ## are input
    assert phases["data_loading"] > 1.0
    # ## metrics:add ## maps to nothing: shown by its own name, not lumped into a phase
    assert phases["## metrics:add ##"] > 0
    assert sum(phases.values()) == pytest.approx(rank.step_ms, abs=0.01)


# --- Refusals name the real reason -----------------------------------------------------------


def test_a_rank_without_world_size_is_accepted_and_no_steps_is_the_reason_given():
    (trace,) = _read("critical_path_simple_add")
    assert trace.rank == 0 and trace.distributed.world_size is None
    with pytest.raises(TraceAnalysisError, match="no ProfilerStep#N events") as refused:
        analyze([trace])
    assert "unusable distributedInfo" not in str(refused.value)


def test_one_traced_step_is_refused_naming_it():
    with pytest.raises(TraceAnalysisError, match=r"only one traced step \(ProfilerStep#551\)"):
        analyze(list(_read("cpu_only")))


# --- Traces of different runs -----------------------------------------------------------------


@pytest.mark.parametrize(("first", "second", "reason"), [
    ("trace_diff_test", "df_index_resolver", "GPU model"),  # V100 16 GB and V100 32 GB
    ("trace_diff_control", "trace_diff_test", "world size"),  # A100 rank 3/8, V100 rank 1/2
])
def test_traces_of_different_runs_name_no_straggler(first, second, reason):
    traces = [*_read(first), *_read(second)]
    analysis = analyze(traces)
    assert analysis.straggler is None and analysis.partial and analysis.mixed_runs
    assert any(f"disagree on the {reason}" in w for w in analysis.warnings)
    # neither file carries baseTimeNanoseconds: their epoch times never overlap either
    assert any("recorded at a time no other file covers" in w for w in analysis.warnings)
