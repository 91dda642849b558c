"""The one reading of idleness (issue 26): a table of jobs, and what each reader prints."""

from __future__ import annotations

import pytest

from apps.analysis import diagnosis
from apps.analysis.guardrails import AlertConfig, GpuTrack, LiveJob, evaluate
from apps.analysis.guardrails_sizing import FinishedJob, GpuUse, recommend
from apps.analysis.idleness import (
    IDLE,
    IN_USE,
    MOSTLY_IDLE,
    TOO_SHORT,
    IdleRules,
    facts,
    holds_memory,
    is_idle,
    read,
)

# (name, busy, held, hours, state, memory held, flagged, summary)
CASES = [
    ("issue 26: a notebook busy 8 %, memory held 92 % of 72 h", 0.08, 0.92, 72.0, MOSTLY_IDLE,
     True, True, "Mostly idle, GPU memory held: busy 8% of 72.0 h, idle with GPU memory held "
                 "92% of it"),
    ("idle and holding memory", 0.01, 0.99, 10.0, IDLE, True, True,
     "Idle, GPU memory held: busy 1% of 10.0 h, idle with GPU memory held 99% of it"),
    ("idle, memory freed", 0.01, 0.0, 10.0, IDLE, False, True,
     "GPUs held but unused: busy 1% of 10.0 h"),
    ("mostly idle, memory not held: the GPUs were free to take back", 0.08, 0.1, 10.0,
     MOSTLY_IDLE, False, False, "Mostly idle: busy 8% of 10.0 h"),
    ("exactly 5 % busy is not idle", 0.05, 0.95, 10.0, MOSTLY_IDLE, True, True,
     "Mostly idle, GPU memory held: busy 5% of 10.0 h, idle with GPU memory held 95% of it"),
    ("exactly 15 % busy is in use", 0.15, 0.85, 10.0, IN_USE, True, False, ""),
    ("too short to read", 0.0, 1.0, 3.9, TOO_SHORT, True, False, ""),
    ("exactly the minimum run", 0.0, 1.0, 4.0, IDLE, True, True,
     "Idle, GPU memory held: busy 0% of 4.0 h, idle with GPU memory held 100% of it"),
    ("half held is held", 0.1, 0.5, 8.0, MOSTLY_IDLE, True, True,
     "Mostly idle, GPU memory held: busy 10% of 8.0 h, idle with GPU memory held 50% of it"),
    ("a rounding error over 1 is clamped", 1.0 + 1e-9, 0.0, 5.0, IN_USE, False, False, ""),
]


@pytest.mark.parametrize(("name", "busy", "held", "hours", "state", "memory", "flagged",
                          "summary"), CASES, ids=[c[0] for c in CASES])
def test_the_reading(name, busy, held, hours, state, memory, flagged, summary):
    reading = read(busy, held, hours)
    assert (reading.state, reading.memory_held, reading.flagged) == (state, memory, flagged)
    assert reading.summary == summary


def test_the_site_may_move_the_lines():
    rules = IdleRules(idle_below=0.1, mostly_idle_below=0.3, held_share=0.9, min_hours=1)
    assert read(0.08, 0.92, 2.0, rules).state == IDLE
    assert read(0.2, 0.8, 2.0, rules).state == MOSTLY_IDLE
    assert not read(0.2, 0.8, 2.0, rules).memory_held
    assert is_idle(0.09, rules) and not is_idle(0.1, rules)
    assert holds_memory(1024) and not holds_memory(1023)


@pytest.mark.parametrize("kwargs", [
    {"idle_below": 0.2, "mostly_idle_below": 0.1}, {"idle_below": 0}, {"held_share": 1.5},
    {"memory_held_mib": 0}, {"min_hours": -1},
])
def test_rules_that_make_no_reading_are_refused(kwargs):
    with pytest.raises(ValueError, match="idle rules"):
        IdleRules(**kwargs)


@pytest.mark.parametrize(("busy", "held", "hours"), [(-0.1, 0, 5), (0.5, 1.2, 5), (0.5, 0.5, -1)])
def test_impossible_shares_are_refused(busy, held, hours):
    with pytest.raises(ValueError, match="idleness"):
        read(busy, held, hours)


def test_the_diagnosis_facts_are_the_reading():
    assert facts(read(0.08, 0.92, 72)) == {"idle_job": 0.0, "mostly_idle_held": 1.0}
    assert facts(read(0.01, 0.0, 72)) == {"idle_job": 1.0, "mostly_idle_held": 0.0}
    assert facts(read(0.08, 0.92, 2)) == {"idle_job": 0.0, "mostly_idle_held": 0.0}
    assert facts(None) == {}
    for name in ("idle_job", "mostly_idle_held"):
        assert diagnosis.FACTS[name].unit == "bool"


def _bursty(hours: float) -> LiveJob:
    """A notebook working 4 minutes in 40 at 80 %: never idle an hour in a row."""
    times = tuple(float(60 * i) for i in range(int(hours * 60)))
    busy = tuple(0.8 if i % 40 < 4 else 0.0 for i in range(len(times)))
    track = GpuTrack("n1:0", times, busy, tuple(18_000.0 for _ in times))
    return LiveJob(start=0.0, now=times[-1], gpus=(track,), idleness=read(0.08, 0.92, hours))


def test_the_alert_reads_the_same_reading_as_the_diagnosis():
    raised = {r.kind: r for r in evaluate(_bursty(72), AlertConfig())}
    assert set(raised) == {"memory_held"}  # no idle hour in a row: the run's reading says it
    assert raised["memory_held"].detail["summary"] == read(0.08, 0.92, 72).summary
    assert evaluate(_bursty(3), AlertConfig()) == []  # 3 h: too short for the reading


def test_the_digest_counts_idle_gpus_by_the_same_line():
    job = FinishedJob("COMPLETED", 7200, 180, 2, used=(GpuUse("n1:0", 0.9),
                                                       GpuUse("n1:1", 0.06)))
    assert [r.kind for r in recommend(job)] == []
    strict = IdleRules(idle_below=0.1, mostly_idle_below=0.2)
    [gpus] = recommend(job, strict)
    assert gpus.kind == "gpus" and "busy under 10%" in gpus.evidence
