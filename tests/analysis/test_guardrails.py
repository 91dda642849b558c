"""Guardrail rules, policy and right-sizing: tables of cases (pure, no database)."""

from __future__ import annotations

import pytest

from apps.analysis.guardrails import (
    AlertConfig,
    GpuTrack,
    LiveJob,
    Stall,
    Straggler,
    all_idle_since,
    describe,
    evaluate,
    idle_run,
)
from apps.analysis.guardrails_policy import PolicyConfig, PolicyState, decide
from apps.analysis.guardrails_sizing import (
    FinishedJob,
    GpuUse,
    recommend,
    slurm_time,
    waste_by_kind,
)

H = 3600.0
T0 = 1_800_000_000.0


def track(gpu: str, busy: list[float | None], step: float = 600, memory: float | None = 0.0,
          start: float = T0) -> GpuTrack:
    times = tuple(start + i * step for i in range(len(busy)))
    return GpuTrack(gpu, times, tuple(busy), tuple(memory for _ in busy))


def view(*tracks: GpuTrack, hours: float = 3.0, **kw) -> LiveJob:
    return LiveJob(start=T0, now=T0 + hours * H, gpus=tracks, **kw)


BUSY, IDLE = 0.9, 0.0

# --- alerts: (name, view, expected kinds, expected GPUs of the first alert) ------------------
CASES = [
    ("busy job: nothing", view(track("n1:0", [BUSY] * 18), track("n1:1", [BUSY] * 18)), [], ()),
    ("half the GPUs idle for 2 h 50 min", view(track("n1:0", [BUSY] * 18),
                                              track("n1:1", [IDLE] * 18, memory=300)),
     ["gpus_idle"], ("n1:1",)),
    ("idle only 50 minutes: not yet", view(track("n1:0", [BUSY] * 12 + [IDLE] * 6)), [], ()),
    ("idle exactly 60 minutes (7 samples 10 min apart)",
     view(track("n1:0", [BUSY] * 11 + [IDLE] * 7)), ["gpus_idle"], ("n1:0",)),
    ("a busy sample breaks the run", view(track("n1:0", [IDLE] * 8 + [BUSY] + [IDLE] * 5)),
     [], ()),
    ("unmeasured samples neither start nor break a run",
     view(track("n1:0", [IDLE] * 4 + [None] * 3 + [IDLE] * 4)), ["gpus_idle"], ("n1:0",)),
    ("nothing measured: nothing said", view(track("n1:0", [None] * 18)), [], ()),
    ("idle with 17 GiB held: idle and memory",
     view(track("n1:0", [IDLE] * 18, memory=17_000)), ["gpus_idle", "memory_held"], ("n1:0",)),
    ("interactive partition waits 4 h: a notebook idle 3 h is fine",
     view(track("n1:0", [IDLE] * 19, memory=17_000), hours=3.5, interactive=True), [], ()),
    ("interactive notebook idle 4 h",
     view(track("n1:0", [IDLE] * 25, memory=17_000), hours=4.5, interactive=True),
     ["gpus_idle", "memory_held"], ("n1:0",)),
    ("one sample is a point, not an hour", view(track("n1:0", [IDLE], step=3600)), [], ()),
    ("straggler after the minimum run", view(track("n1:0", [BUSY] * 18),
                                            straggler=Straggler("n1:0", "thermal", 0.4, 7)),
     ["straggler"], ("n1:0",)),
    ("straggler too early", view(track("n1:0", [BUSY] * 2), hours=0.3,
                                 straggler=Straggler("n1:0", "thermal", 0.4, 7)), [], ()),
    ("straggler on one hourly sample per GPU: not yet (one window's shares are noise)",
     view(track("n1:0", [BUSY], step=3600), track("n1:1", [BUSY], step=3600), hours=1.0,
          straggler=Straggler("n1:1", "unknown", 0.25, 1)), [], ()),
    ("straggler on the second hourly sample",
     view(track("n1:0", [BUSY] * 2, step=3600), track("n1:1", [BUSY] * 2, step=3600),
          hours=2.0, straggler=Straggler("n1:1", "unknown", 0.25, 1)),
     ["straggler"], ("n1:1",)),
    ("input stall on one hourly sample: not yet",
     view(track("n1:0", [BUSY], step=3600), hours=1.0,
          stall=Stall("input-stall", "Input pipeline stall", "t", "h")), [], ()),
    ("input stall", view(track("n1:0", [BUSY] * 18),
                         stall=Stall("input-stall", "Input pipeline stall", "t", "h")),
     ["input_stall"], ("n1:0",)),
]


@pytest.mark.parametrize(("name", "live", "kinds", "gpus"), CASES, ids=[c[0] for c in CASES])
def test_alert_rules(name, live, kinds, gpus):
    raised = evaluate(live, AlertConfig())
    assert [r.kind for r in raised] == kinds
    if kinds:
        assert raised[0].gpus == gpus


def test_an_idle_alert_says_since_when_and_how_long():
    live = view(track("n1:0", [BUSY] * 6 + [IDLE] * 12), track("n1:1", [BUSY] * 18))
    [alert] = evaluate(live)
    assert alert.since == T0 + 6 * 600
    assert alert.detail["idle_hours"] == pytest.approx(11 * 600 / H, abs=0.01)
    text = describe(alert, "started", "10:00")
    assert "1 of the job's 2 GPUs (n1:0)" in text and "since 10:00" in text


def test_a_straggler_with_a_hardware_cause_goes_to_hardware_too():
    hot = evaluate(view(track("a:0", [BUSY] * 18), straggler=Straggler("a:0", "xid", 0.3, 3)))
    code = evaluate(view(track("a:0", [BUSY] * 18),
                         straggler=Straggler("a:0", "unknown", 0.3, 3)))
    assert hot[0].hardware and not code[0].hardware
    assert "XID" in describe(hot[0], "09:00", "09:00")


def test_a_small_context_is_not_memory_held():
    live = view(track("n1:0", [IDLE] * 18, memory=500))
    assert [r.kind for r in evaluate(live)] == ["gpus_idle"]


def test_idle_run_reads_back_from_the_last_sample():
    run = idle_run(track("g", [BUSY, IDLE, IDLE, IDLE], memory=2048), 0.05)
    assert run is not None and run.samples == 3 and run.seconds == 1200
    assert run.memory_mib == 2048
    assert idle_run(track("g", [IDLE, BUSY]), 0.05) is None


def test_all_idle_since_needs_every_gpu_idle():
    both = view(track("a", [BUSY] * 3 + [IDLE] * 9), track("b", [BUSY] * 6 + [IDLE] * 6))
    assert all_idle_since(both, 0.05) == T0 + 6 * 600
    one = view(track("a", [IDLE] * 12), track("b", [BUSY] * 12))
    assert all_idle_since(one, 0.05) is None


# --- the idle-job policy: (name, state, expected action) ---------------------------------------
NOW = T0 + 10 * H
POLICY = [
    ("busy", PolicyState(NOW, None), "none"),
    ("idle 1 h of 2", PolicyState(NOW, NOW - H), "none"),
    ("idle 2 h: warn", PolicyState(NOW, NOW - 2 * H), "warn"),
    ("warned 30 min ago: grace", PolicyState(NOW, NOW - 3 * H, NOW - 1800), "none"),
    ("warned 60 min ago, still idle: cancel", PolicyState(NOW, NOW - 3 * H, NOW - H), "cancel"),
    ("warned, a GPU busy again: clear", PolicyState(NOW, None, NOW - H), "clear"),
    ("warned, idle again but only 10 min: clear", PolicyState(NOW, NOW - 600, NOW - H), "clear"),
    ("exempt", PolicyState(NOW, NOW - 5 * H, exemption="service account svc-ci"), "exempt"),
]


@pytest.mark.parametrize(("name", "state", "action"), POLICY, ids=[c[0] for c in POLICY])
def test_policy(name, state, action):
    assert decide(state, PolicyConfig(idle_hours=2, grace_minutes=60)).action == action


def test_a_warning_says_when_the_job_will_be_cancelled():
    decision = decide(PolicyState(NOW, NOW - 2 * H), PolicyConfig(grace_minutes=45))
    assert decision.cancel_at == NOW + 45 * 60


# --- right-sizing: (name, job, expected [(kind, line)]) -----------------------------------------
def used(*busy: float, activity: float | None = None, peak: float | None = None):
    return tuple(GpuUse(f"n1:{i}", b, activity, peak) for i, b in enumerate(busy))


SIZING = [
    ("completed in 1 h of 24 h", FinishedJob("COMPLETED", H, 24 * 60, 1),
     [("time", "#SBATCH --time=01:30:00")]),
    ("used 60% of its limit: fine", FinishedJob("COMPLETED", 0.6 * 10 * H, 600, 1), []),
    ("failed early: says nothing about time", FinishedJob("FAILED", 600, 24 * 60, 1), []),
    ("30 min of 1 h 20: less than an hour spare", FinishedJob("COMPLETED", 1800, 80, 1), []),
    ("a 3-day limit prints days", FinishedJob("COMPLETED", 20 * H, 3 * 24 * 60, 1),
     [("time", "#SBATCH --time=1-06:00:00")]),
    ("4 GPUs, 2 idle, typed gres", FinishedJob("RUNNING", 5 * H, None, 4, "h100",
                                               used(0.9, 0.9, 0.0, 0.01)),
     [("gpus", "#SBATCH --gres=gpu:h100:2")]),
    ("one GPU that did nothing", FinishedJob("CANCELLED", 30 * H, None, 1, "a100", used(0.01)),
     [("gpus", "no --gres=gpu line: the job did no GPU work (run it without GPUs, or end the "
               "session when the work stops)")]),
    ("not every GPU measured: no gpus advice", FinishedJob("FAILED", 5 * H, None, 4, "",
                                                           used(0.9, 0.0)), []),
    ("one light GPU fits a 1g.10gb slice", FinishedJob("FAILED", 4 * H, None, 1, "h100",
                                                        used(0.3, activity=0.1, peak=6000)),
     [("mig", "#SBATCH --gres=gpu:1g.10gb:1")]),
    ("30 GiB peak needs 3g.40gb", FinishedJob("FAILED", 4 * H, None, 1, "a100",
                                             used(0.3, activity=0.1, peak=30_000)),
     [("mig", "#SBATCH --gres=gpu:3g.40gb:1")]),
    ("busy GPU: no slice", FinishedJob("FAILED", 4 * H, None, 1, "h100",
                                      used(0.95, activity=0.7, peak=6000)), []),
    ("unknown GPU model: no slice", FinishedJob("FAILED", 4 * H, None, 1, "l4",
                                               used(0.3, activity=0.1, peak=6000)), []),
    ("asked 256 GiB, peak 40", FinishedJob("FAILED", H, None, 0, mem_requested_mb=256 * 1024,
                                           mem_peaks_bytes=(40 * 1024**3,)),
     [("mem", "#SBATCH --mem=50G")]),
    # issue 26: --mem is per node; Slurm's TRES mem counts both nodes; the busiest node rules
    ("2 nodes asked 1875 GiB in all (938 each), peaks 300 and 344: per node",
     FinishedJob("COMPLETED", H, None, 0, mem_requested_mb=1_920_000, nodes=2,
                 mem_peaks_bytes=(300 * 1024**3, 344 * 1024**3)),
     [("mem", "#SBATCH --mem=430G")]),
    ("2 nodes asking 512 GiB each, one peaking at 300: more than half of a node's request",
     FinishedJob("COMPLETED", H, None, 0, mem_requested_mb=2 * 512 * 1024, nodes=2,
                 mem_peaks_bytes=(300 * 1024**3, 100 * 1024**3)), []),
    ("2 nodes, one at the per-node request: no advice",
     FinishedJob("COMPLETED", H, None, 0, mem_requested_mb=2 * 512 * 1024, nodes=2,
                 mem_peaks_bytes=(20 * 1024**3, 400 * 1024**3)), []),
    ("node memory unknown (shared nodes)", FinishedJob("FAILED", H, None, 0,
                                                       mem_requested_mb=256 * 1024), []),
]


@pytest.mark.parametrize(("name", "job", "expected"), SIZING, ids=[c[0] for c in SIZING])
def test_right_sizing(name, job, expected):
    assert [(r.kind, r.line) for r in recommend(job)] == expected


def test_memory_advice_names_the_per_node_request_and_the_busiest_node():
    [mem] = recommend(FinishedJob("COMPLETED", H, None, 0, mem_requested_mb=1_920_000, nodes=2,
                                  mem_peaks_bytes=(300 * 1024**3, 344 * 1024**3)))
    assert mem.asked == "--mem=938G"  # not the 1875 G Slurm's accounting sums
    assert mem.evidence == ("peak CPU memory in use 344.0 GiB on the busiest of its 2 nodes, "
                            "of the 938 GiB asked per node")
    assert mem.waste_gib == pytest.approx(2 * (937.5 - 430))


def test_waste_is_counted_in_gpu_hours_by_kind():
    recs = recommend(FinishedJob("COMPLETED", 2 * H, 24 * 60, 4, "h100",
                                 used(0.9, 0.9, 0.0, 0.0)))
    waste = waste_by_kind(recs)
    assert waste["gpus"] == pytest.approx(4.0)  # 2 idle GPUs x 2 h
    assert waste["time"] == pytest.approx(4 * 22.0)


@pytest.mark.parametrize(("seconds", "text"), [(60, "00:01:00"), (5400, "01:30:00"),
                                               (86400, "1-00:00:00"), (61, "00:02:00")])
def test_slurm_time(seconds, text):
    assert slurm_time(seconds) == text
