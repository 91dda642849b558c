"""Straggler GPUs from telemetry alone: tables of jobs, the verdict each must get."""

from __future__ import annotations

import random

import pytest

from apps.analysis.stragglers import (
    FOUND,
    HARDWARE_KINDS,
    HIGH,
    LOW,
    MEDIUM,
    NONE,
    NOT_APPLICABLE,
    UNDETERMINED,
    GpuSignals,
    detect,
    slowdown,
)
from apps.analysis.timeseries import GpuKey


def gpu(index: int, busy: float, computing: float, host: str = "gpu01",
        **extra: object) -> GpuSignals:
    values: dict[str, object] = {"traffic_share": 1.0, "sm_clock": 1980.0,
                                 "temperature": 68.0, "thermal_share": 0.0}
    values.update(extra)
    return GpuSignals(GpuKey(host, index), busy, computing, max(busy, computing) - computing,
                      **values)  # type: ignore[arg-type]


def job(n: int, peer: tuple[float, float], odd: dict[int, GpuSignals] | None = None,
        jitter: float = 0.0, seed: int = 0) -> list[GpuSignals]:
    """``n`` GPUs doing ``peer`` (util, SM active), with some replaced by ``odd``."""
    rng = random.Random(seed)
    gpus = [gpu(i % 8, peer[0], peer[1] + rng.uniform(-jitter, jitter), host=f"gpu0{i // 8 + 1}")
            for i in range(n)]
    for index, replacement in (odd or {}).items():
        gpus[index] = replacement
    return gpus


THERMAL = gpu(5, 0.98, 0.86, sm_clock=1148.0, temperature=89.0, thermal_share=0.97)
XID = gpu(5, 0.64, 0.31, host="gpu02", xids=(63,))
WAITING = (0.98, 0.41)  # the peers of a straggler: busy, SMs mostly idle
HEALTHY = (0.97, 0.76)
STALLED = (0.87, 0.19)  # every GPU waits alike: input pipeline


@pytest.mark.parametrize(("name", "gpus", "status", "named", "confidence"), [
    ("thermal straggler among 8", job(8, WAITING, {5: THERMAL}), FOUND, ["gpu01:5"], HIGH),
    ("XID straggler among 16", job(16, WAITING, {13: XID}), FOUND, ["gpu02:5"], HIGH),
    ("silent straggler among 8", job(8, WAITING, {2: gpu(2, 0.98, 0.80)}), FOUND, ["gpu01:2"],
     HIGH),
    ("healthy training", job(8, HEALTHY, jitter=0.03), NONE, [], HIGH),
    ("input stall on every GPU", job(8, STALLED, jitter=0.02), NONE, [], MEDIUM),
    ("two GPUs, clear pattern", [gpu(0, 0.98, 0.41), gpu(1, 0.98, 0.86)], FOUND, ["gpu01:1"],
     MEDIUM),
    ("two GPUs, clear pattern, other order", [gpu(1, 0.98, 0.86), gpu(0, 0.98, 0.41)], FOUND,
     ["gpu01:1"], MEDIUM),
    ("two balanced GPUs", [gpu(0, 0.97, 0.75), gpu(1, 0.97, 0.77)], NONE, [], MEDIUM),
    ("two GPUs, unclear", [gpu(0, 0.95, 0.65), gpu(1, 0.95, 0.75)], UNDETERMINED, [], ""),
    ("two GPUs, unclear, hardware breaks the tie",
     [gpu(0, 0.95, 0.65), gpu(1, 0.95, 0.75, thermal_share=0.9, sm_clock=1200.0)], FOUND,
     ["gpu01:1"], LOW),
    ("two GPUs, unclear, hardware on the waiter only",
     [gpu(0, 0.95, 0.65, thermal_share=0.9), gpu(1, 0.95, 0.75)], UNDETERMINED, [], ""),
    ("three GPUs, a small gap", job(3, (0.98, 0.40), {0: gpu(0, 0.98, 0.52)}), UNDETERMINED,
     [], ""),
    ("half the GPUs idle", job(8, HEALTHY, {i: gpu(i, 0.0, 0.0) for i in range(4)}), NONE,
     [], HIGH),
    ("one GPU", [gpu(0, 0.98, 0.4)], NOT_APPLICABLE, [], ""),
    ("no telemetry", [], NOT_APPLICABLE, [], ""),
    ("one busy GPU, one idle", [gpu(0, 0.98, 0.4), gpu(1, 0.0, 0.0)], NOT_APPLICABLE, [], ""),
])
def test_it_names_the_straggler_or_says_why_not(name, gpus, status, named, confidence):
    verdict = detect(gpus, "sm_active")
    assert verdict.status == status, verdict.summary
    assert [str(s.key) for s in verdict.stragglers] == named
    assert verdict.confidence == confidence, verdict.reasons
    assert verdict.summary


def test_the_waiting_gpus_are_the_peers_that_waited():
    verdict = detect(job(8, WAITING, {5: THERMAL}), "sm_active")
    assert [str(k) for k in verdict.waiting_gpus] == [f"gpu01:{i}" for i in (0, 1, 2, 3, 4, 6, 7)]


@pytest.mark.parametrize(("straggler", "cause", "kinds"), [
    (THERMAL, "thermal", {"waiting", "thermal", "clock", "temperature"}),
    (XID, "xid", {"waiting", "xid"}),
    (gpu(5, 0.98, 0.86, hw_slowdown_share=0.6), "hw_slowdown", {"waiting", "hw_slowdown"}),
    (gpu(5, 0.98, 0.86, ecc_dbe=2), "ecc", {"waiting", "ecc"}),
    # the busiest GPU at its software power limit: the slowest stage, not a fault (issue 28)
    (gpu(5, 0.98, 0.86, power_share=0.8), "power_limit", {"waiting", "power_cap"}),
    (gpu(5, 0.98, 0.86, power_share=0.8, sm_clock=1500.0), "power_limit",
     {"waiting", "power_cap"}),
    (gpu(5, 0.98, 0.86, temperature=84.0), "unknown", {"waiting", "temperature"}),
    (gpu(5, 0.98, 0.86), "unknown", {"waiting"}),
])
def test_it_names_the_cause_from_the_hardware_evidence(straggler, cause, kinds):
    verdict = detect(job(8, WAITING, {5: straggler}), "sm_active")
    [found] = verdict.stragglers
    assert found.cause == cause
    assert {e.kind for e in found.evidence} == kinds
    assert all(e.gpu == str(straggler.key) for e in found.evidence)


def test_peers_waiting_without_traffic_lower_the_confidence():
    quiet = [gpu(i, 0.98, 0.41, traffic_share=0.0) for i in range(8)]
    quiet[3] = gpu(3, 0.98, 0.80, traffic_share=0.0)
    verdict = detect(quiet, "sm_active")
    assert verdict.status == FOUND and verdict.confidence == MEDIUM
    assert any("without NVLink/PCIe traffic" in r for r in verdict.reasons)


def test_two_stragglers_among_eight_are_both_named():
    gpus = job(8, WAITING, {2: gpu(2, 0.98, 0.85), 6: gpu(6, 0.98, 0.80)})
    verdict = detect(gpus, "sm_active")
    assert sorted(str(s.key) for s in verdict.stragglers) == ["gpu01:2", "gpu01:6"]


@pytest.mark.parametrize("measure", ["gpu_util", "gr_engine_active", ""])
def test_without_sm_activity_it_cannot_be_determined(measure):
    gpus = job(8, (0.98, 0.98), {5: gpu(5, 0.98, 0.98, thermal_share=0.9)})
    verdict = detect(gpus, measure)
    assert verdict.status == UNDETERMINED and not verdict.stragglers
    assert "thermally throttled" in verdict.summary


@pytest.mark.parametrize("seed", range(40))
def test_two_gpu_jobs_are_never_a_coin_flip(seed):
    """The planted straggler is named whichever order the GPUs come in, and a balanced
    pair never gets a name: the rule follows the waiting signature, not a median."""
    rng = random.Random(seed)
    peer = gpu(0, rng.uniform(0.9, 1.0), rng.uniform(0.3, 0.5))
    slow = gpu(1, rng.uniform(0.9, 1.0), rng.uniform(0.75, 0.9))
    pair = [peer, slow] if rng.random() < 0.5 else [slow, peer]
    verdict = detect(pair, "sm_active")
    assert [s.key for s in verdict.stragglers] == [slow.key]
    twin = gpu(1, peer.busy, peer.computing + rng.uniform(-0.02, 0.02))
    assert detect([peer, twin], "sm_active").status in (NONE, UNDETERMINED)
    assert not detect([peer, twin], "sm_active").stragglers


@pytest.mark.parametrize(("waiting", "peer", "expected"), [
    (0.12, 0.57, 0.45 / 0.43),
    (0.33, 0.57, 0.24 / 0.43),
    (0.2, 0.2, 0.0),
    (0.5, 0.3, 0.0),  # waiting more than the peers is not a slowdown
    (0.0, 0.99, 10.0),  # capped
])
def test_slowdown_is_own_work_against_the_peers(waiting, peer, expected):
    assert slowdown(waiting, peer) == pytest.approx(expected)


def pipeline(stage: GpuSignals, peers: tuple[float, float] = WAITING) -> list[GpuSignals]:
    """A 4-stage pipeline on 4 GPUs: stage 2 holds too many layers, the others wait."""
    return job(4, peers, {2: stage})


# The heaviest stage: computing 86 % against its peers' 41 %, and so at its power limit and
# its clocks lowered by it, hotter than the waiting peers. Hardware only when the device says.
HEAVY = {"power_share": 0.9, "sm_clock": 1410.0, "temperature": 81.0}


@pytest.mark.parametrize(("stage", "hardware", "cause"), [
    (gpu(2, 0.99, 0.86, **HEAVY), False, "power_limit"),
    (gpu(2, 0.99, 0.86, **HEAVY, thermal_share=0.5), True, "thermal"),
    (gpu(2, 0.99, 0.86, **HEAVY, hw_slowdown_share=0.4), True, "hw_slowdown"),
    (gpu(2, 0.99, 0.86, **HEAVY, xids=(79,)), True, "xid"),
    (gpu(2, 0.99, 0.86, **HEAVY, ecc_dbe=1), True, "ecc"),
    # clocks low with no power limit reached: the device holds itself back
    (gpu(2, 0.99, 0.86, sm_clock=1410.0), True, "clock"),
])
def test_a_gpu_at_its_power_limit_because_it_works_hardest_is_the_slowest_stage(
        stage, hardware, cause):
    verdict = detect(pipeline(stage), "sm_active")
    [found] = verdict.stragglers
    assert found.cause == cause
    kinds = {e.kind for e in found.evidence}
    assert bool(kinds & HARDWARE_KINDS) is hardware
    if cause == "power_limit":
        assert "slowest stage" in verdict.summary and "not a fault" in verdict.summary
        [cap] = [e for e in found.evidence if e.kind == "power_cap"]
        assert "while computing 86% of the time against 41% on its peers" in cap.text


def test_clocks_are_compared_with_peers_working_as_hard():
    """Every GPU computes alike and at its power limit; one runs slower clocks at that load:
    the same load, so the clock is the device's."""
    gpus = [gpu(i, 0.99, 0.86, power_share=0.9, sm_clock=1700.0) for i in range(8)]
    gpus[4] = gpu(4, 0.99, 0.86, power_share=0.9, sm_clock=1300.0)
    verdict = detect(gpus, "sm_active")
    assert verdict.status == NONE  # nobody waits: no straggler, but the evidence is kept
    assert [(e.kind, e.gpu) for e in verdict.evidence if e.kind == "clock"] == [("clock",
                                                                                  "gpu01:4")]
