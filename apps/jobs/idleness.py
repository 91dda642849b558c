"""A job's idleness as every page, finding, alert and digest reads it (issue 26).

The rules are the site's (``idle_rules``, from ``apps/core/idle_rules.py``: settings
``IDLE_BELOW_PERCENT``, ``MOSTLY_IDLE_BELOW_PERCENT``, ``MEMORY_HELD_MIB``,
``IDLE_HELD_PERCENT``, ``IDLE_MIN_HOURS``); the reading is ``apps.analysis.idleness.read``
over the stored split (``JobMetrics`` hours: what the efficiency card draws) and the run
time the diagnosis counts (``run_hours``). The job list, the job page, the diagnosis
facts and the guardrails' live view all call ``job_idleness``, so one job never gets two
answers.
"""

from __future__ import annotations

from typing import Any

from apps.analysis.efficiency import Thresholds
from apps.analysis.idleness import Idleness, IdleRules, read
from apps.core.idle_rules import idle_rules

__all__ = ["efficiency_thresholds", "idle_rules", "job_idleness", "run_hours", "shares"]


def efficiency_thresholds() -> Thresholds:
    """The efficiency split's thresholds: a sample is idle, and memory held, by the same rules."""
    rules = idle_rules()
    return Thresholds(idle_activity=rules.idle_below, memory_held_mib=rules.memory_held_mib)


def shares(metrics: Any) -> tuple[float, float] | None:
    """(busy, idle with memory held) as shares of the measured time, from the stored split
    (None: nothing split). ``metrics`` is a ``JobMetrics`` or a row with its hour fields."""
    useful, waiting = metrics.useful_hours or 0.0, metrics.waiting_hours or 0.0
    held, empty = metrics.held_idle_hours or 0.0, metrics.no_process_hours or 0.0
    total = useful + waiting + held + empty
    if total <= 0:
        return None
    return (useful + waiting) / total, held / total


def run_hours(job: Any, metrics: Any = None, now: Any = None) -> float | None:
    """The run the reading covers: the job's run time; a running job's, up to ``now`` and
    no longer than its stored telemetry spans (``measured_s``: what "busy over N hours"
    was measured on; a snapshot's window may run past the last sample)."""
    if job.start_time is None:
        return None
    if job.end_time is not None:
        return max(0.0, (job.end_time - job.start_time).total_seconds() / 3600)
    ends = [t for t in (now, getattr(metrics, "window_end", None)) if t is not None]
    if ends:
        hours = max(0.0, (min(ends) - job.start_time).total_seconds() / 3600)
    else:
        run = job.run_time
        hours = run.total_seconds() / 3600 if run is not None else 0.0
    measured = getattr(metrics, "measured_s", 0.0) or 0.0
    return min(hours, measured / 3600) if measured > 0 else hours


def job_idleness(job: Any, metrics: Any, rules: IdleRules | None = None,
                 now: Any = None) -> Idleness | None:
    """The one reading of ``job`` (None: no stored split or no run time)."""
    if metrics is None:
        return None
    split = shares(metrics)
    hours = run_hours(job, metrics, now)
    if split is None or hours is None:
        return None
    return read(split[0], split[1], hours, rules or idle_rules())
