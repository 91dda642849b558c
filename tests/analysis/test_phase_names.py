"""Phases from what the trace says: annotations on the training thread, framework names."""

from __future__ import annotations

import pytest

from apps.analysis.phases import PHASES, analyze
from apps.analysis.step_phases import DEFAULT_ANNOTATION_PHASES, PhaseConfig
from apps.analysis.trace_types import DistributedInfo, Kind, RankTrace, TraceEvent

MAIN, WORKER, GLOO = 100, 200, 300
STEP_US = 100_000.0  # 100 ms steps


def _trace(annotations: list[tuple[str, float, float]], thread: int = MAIN,
           steps: int = 3, comm_ms: float = 5.0) -> RankTrace:
    """``steps`` + 1 steps of 100 ms: backward (autograd ops) 60-80 ms, an allreduce from
    80 ms (``comm_ms`` long) on the gloo thread, and the given annotations (name, start ms,
    end ms) in every step."""
    events = []
    for n in range(steps + 1):
        t0 = 1_000_000.0 + n * STEP_US
        events += [
            TraceEvent(Kind.STEP, f"ProfilerStep#{n + 2}", t0, STEP_US, MAIN),
            TraceEvent(Kind.CPU_OP, "autograd::engine::evaluate_function: AddmmBackward0",
                       t0 + 60_000, 10_000, MAIN),
            TraceEvent(Kind.CPU_OP, "torch::autograd::AccumulateGrad", t0 + 79_000, 1_000,
                       MAIN),
            TraceEvent(Kind.ANNOTATION, "gloo:all_reduce", t0 + 80_000, comm_ms * 1000, GLOO),
        ]
        events += [TraceEvent(Kind.ANNOTATION, name, t0 + lo * 1000, (hi - lo) * 1000, thread)
                   for name, lo, hi in annotations]
    return RankTrace("rank0.json", DistributedInfo(0, 1, "gloo"), tuple(events))


def _phases(annotations: list[tuple[str, float, float]], config: PhaseConfig | None = None,
            thread: int = MAIN) -> dict[str, float]:
    (rank,) = analyze([_trace(annotations, thread)], config).ranks
    return {k: round(v, 3) for k, v in rank.phases_ms.items() if v}


CASES = [
    # (id, annotations, expected ms per step; backward 60-80 and communication 80-85 are fixed)
    ("nothing-marked: forward is the rest before backward", [],
     {"forward": 60, "backward": 20, "communication": 5, "other": 15}),
    ("a blocked input stage is not swallowed by the forward fill",
     [("## data_load ##", 0, 50)],
     {"data_loading": 50, "forward": 10, "backward": 20, "communication": 5, "other": 15}),
    ("## forward ## / ## backward ## / ## optimizer ##",
     [("## forward ##", 5, 55), ("## backward ##", 58, 85), ("## optimizer ##", 85, 97)],
     # the fill runs from the first forward mark up to backward (55-58 ms)
     {"forward": 53, "backward": 22, "communication": 5, "optimizer": 12, "other": 8}),
    ("Lightning: training_step and backward inside optimizer_step",
     [("[LightningModule]Net.optimizer_step", 0, 95),
      ("[LightningModule]Net.training_step", 0, 58),
      ("[Strategy]DDPStrategy.backward", 58, 80)],
     {"forward": 58, "backward": 22, "communication": 5, "optimizer": 10, "other": 5}),
    ("Lightning: the data loader's next batch",
     [("[_TrainingEpochLoop].train_dataloader_next", 0, 20)],
     {"data_loading": 20, "forward": 40, "backward": 20, "communication": 5, "other": 15}),
    ("Hugging Face Trainer: compute_loss",
     [("compute_loss", 10, 60)],
     {"forward": 50, "backward": 20, "communication": 5, "other": 25}),
    ("DeepSpeed timers",
     [("fwd_microstep", 0, 58), ("bwd_microstep", 58, 80), ("step_microstep", 85, 99)],
     {"forward": 58, "backward": 22, "communication": 5, "optimizer": 14, "other": 1}),
    ("Megatron timers",
     [("batch-generator", 0, 10), ("forward-compute", 10, 60), ("backward-compute", 60, 80),
      ("optimizer", 85, 100)],
     {"data_loading": 10, "forward": 50, "backward": 20, "communication": 5,
      "optimizer": 15}),
    ("TorchRec: sparse_data_dist and sub-stages named stage:part",
     [("## sparse_data_dist ##", 0, 15), ("## forward ##", 15, 60),
      ("## forward:bottom_mlp ##", 20, 30)],
     {"data_loading": 15, "forward": 45, "backward": 20, "communication": 5, "other": 15}),
    ("an unmapped annotation shows under its own name",
     [("## metrics:publish ##", 88, 98)],
     {"forward": 60, "backward": 20, "communication": 5, "## metrics:publish ##": 10,
      "other": 5}),
    ("an unmapped annotation wins over the forward fill",
     [("## embedding_lookup ##", 0, 30)],
     {"## embedding_lookup ##": 30, "forward": 30, "backward": 20, "communication": 5,
      "other": 15}),
    ("an unmapped wrapper of the whole step is passed over",
     [("## train_step ##", 0, 100)],
     {"forward": 60, "backward": 20, "communication": 5, "other": 15}),
    ("a mapped annotation wins over an unmapped one inside it",
     [("## forward ##", 0, 60), ("## mystery ##", 10, 20)],
     {"forward": 60, "backward": 20, "communication": 5, "other": 15}),
]


@pytest.mark.parametrize(("annotations", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_phases_follow_the_annotations(annotations, expected):
    phases = _phases(annotations)
    assert phases == pytest.approx(expected)
    assert list(phases)[:1] != ["other"] or not expected  # PHASES order first, names after


def test_annotations_off_the_training_thread_do_not_decide_phases():
    # a DataLoader worker's or a hook thread's spans are not the step's stages
    assert _phases([("## data_load ##", 0, 50)], thread=WORKER) == pytest.approx(
        {"forward": 60, "backward": 20, "communication": 5, "other": 15})


def test_the_site_maps_its_own_names_and_overrides_the_defaults():
    config = PhaseConfig(annotation_phases={**DEFAULT_ANNOTATION_PHASES,
                                            "## metrics:publish ##": "optimizer"})
    phases = _phases([("## metrics:publish ##", 88, 98)], config)
    assert phases["optimizer"] == pytest.approx(10) and "## metrics:publish ##" not in phases


def test_unmapped_names_compete_for_the_straggler_phase():
    # rank 0 spends 12 ms more in a checkpoint hook each step; rank 1 waits those 12 ms in
    # the allreduce
    slow = _trace([("## checkpoint ##", 86, 99)])
    fast = _trace([("## checkpoint ##", 98, 99)], comm_ms=17.0)
    fast = RankTrace("rank1.json", DistributedInfo(1, 2, "gloo"), fast.events)
    slow = RankTrace("rank0.json", DistributedInfo(0, 2, "gloo"), slow.events)
    analysis = analyze([slow, fast], PhaseConfig(min_excess_ms=5, min_excess_fraction=0.05))
    assert analysis.straggler is not None
    assert (analysis.straggler.rank, analysis.straggler.phase) == (0, "## checkpoint ##")


@pytest.mark.parametrize(("name", "phase"), [
    ("## forward ##", "forward"), ("## data_load ##", "data_loading"),
    ("## load_batch ##", "data_loading"), ("## wait_for_batch ##", "data_loading"),
    ("## zero_grad ##", "optimizer"), ("[LightningModule]BoringModel.optimizer_zero_grad",
                                       "optimizer"),
    ("[Strategy]SingleDeviceStrategy.batch_to_device", "data_loading"),
    ("bwd_allreduce", "communication"), ("all-grads-sync", "communication"),
    ("optimizer-copy-to-main-grad", "optimizer"), ("## forward:over_arch ##", "forward"),
    ("## all2all_data:lengths ##", None), ("forward-backward", None),
    ("[param|pytorch.model.alex_net|0|0|0|measure|forward]", None),
])
def test_the_default_mapping(name, phase):
    assert PhaseConfig().phase_of(name) == phase


def test_phases_keep_their_order_and_add_up():
    (rank,) = analyze([_trace([("## metrics:publish ##", 88, 98)])]).ranks
    assert list(rank.phases_ms)[:len(PHASES)] == list(PHASES)
    assert sum(rank.phases_ms.values()) == pytest.approx(rank.step_ms)
