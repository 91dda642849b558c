"""Idleness: the one reading of "idle" and "memory held" every page, alert and digest uses (pure).

Before issue 26 the diagnosis called a job "mostly idle" at 3-15 % busy over its run while
the guardrails alerted only on a GPU under 5 % for 60 minutes in a row, the efficiency split
counted memory as held from 256 MiB and the alert from 1024 MiB: a notebook busy 8 % with
its memory held 92 % of 72 hours had a finding and no alert. Every reader now asks this
module, with the site's ``IdleRules`` (settings ``IDLE_*``, ``MOSTLY_IDLE_BELOW_PERCENT``,
``MEMORY_HELD_MIB``; ``apps/jobs/idleness.py`` builds them):

- a **sample**, a GPU over a run, or a job over its run is *idle* under ``idle_below`` busy
  (``is_idle``);
- an idle GPU *holds memory* from ``memory_held_mib`` (a bare CUDA context, a few hundred
  MiB, does not: ``holds_memory``);
- a **job** read over at least ``min_hours`` of its run (``read``) is ``idle`` under
  ``idle_below`` busy, ``mostly_idle`` under ``mostly_idle_below``, else ``in_use``; it *held
  its memory* when it sat idle with memory held at least ``held_share`` of the run. A job
  is **flagged** (a diagnosis finding and an alert) when it is idle, or mostly idle with its
  memory held.

Shares print as whole percents and hours with one decimal (``percent``, ``hours``), so the
job list, the job page, the finding, the alert and the digest say the same number.
"""

from __future__ import annotations

from dataclasses import dataclass

from apps.analysis.figures import share_text

IDLE, MOSTLY_IDLE, IN_USE, TOO_SHORT = "idle", "mostly_idle", "in_use", "too_short"
_EPS = 1e-6  # shares summed from hours may pass 1 by a rounding error, never by more


@dataclass(frozen=True)
class IdleRules:
    """Where idle and memory held start (shares 0..1); the site may tune them."""

    idle_below: float = 0.05
    mostly_idle_below: float = 0.15
    memory_held_mib: float = 1024.0
    held_share: float = 0.5
    min_hours: float = 4.0

    def __post_init__(self) -> None:
        if not 0 < self.idle_below <= self.mostly_idle_below <= 1:
            raise ValueError("idle rules: need 0 < idle_below <= mostly_idle_below <= 1, got "
                             f"{self.idle_below} and {self.mostly_idle_below}")
        if not 0 < self.held_share <= 1:
            raise ValueError(f"idle rules: held_share must be in (0, 1], got {self.held_share}")
        if self.memory_held_mib <= 0 or self.min_hours < 0:
            raise ValueError("idle rules: memory_held_mib must be > 0 and min_hours >= 0")


RULES = IdleRules()


def is_idle(busy: float, rules: IdleRules = RULES) -> bool:
    """A sample, a GPU or a job busy less than ``idle_below`` did no work."""
    return busy < rules.idle_below


def holds_memory(mib: float, rules: IdleRules = RULES) -> bool:
    """A GPU holding at least ``memory_held_mib`` holds memory another job's work would need."""
    return mib >= rules.memory_held_mib


def percent(share: float) -> str:
    """A share as every page prints it: a whole percent (``figures.share_text``)."""
    return share_text(share)


def hours(value: float) -> str:
    """Hours as every page prints them: one decimal."""
    return f"{value:.1f} h"


@dataclass(frozen=True)
class Idleness:
    """A job's reading over ``hours`` of run: how busy, how long idle with memory held."""

    state: str  # IDLE, MOSTLY_IDLE, IN_USE, TOO_SHORT
    busy: float
    held: float  # share of the run idle with GPU memory held
    hours: float
    memory_held: bool

    @property
    def flagged(self) -> bool:
        """Worth a finding and an alert: idle, or mostly idle with the memory held."""
        return self.state == IDLE or (self.state == MOSTLY_IDLE and self.memory_held)

    @property
    def title(self) -> str:
        """The reading in a few words ("" when there is nothing to say)."""
        if self.state == IDLE:
            return "Idle, GPU memory held" if self.memory_held else "GPUs held but unused"
        if self.state == MOSTLY_IDLE:
            return "Mostly idle, GPU memory held" if self.memory_held else "Mostly idle"
        return ""

    @property
    def sentence(self) -> str:
        """The evidence in words, with the shares and hours printed as everywhere."""
        text = f"busy {percent(self.busy)} of {hours(self.hours)}"
        if self.memory_held:
            text += f", idle with GPU memory held {percent(self.held)} of it"
        return text

    @property
    def summary(self) -> str:
        """Title and evidence: "Mostly idle, GPU memory held: busy 8% of 72.0 h, ..."."""
        return f"{self.title}: {self.sentence}" if self.title else ""


def read(busy: float, held: float, run_hours: float, rules: IdleRules = RULES) -> Idleness:
    """The reading of a job busy ``busy`` and idle with memory held ``held`` (shares of its
    measured time) over ``run_hours`` of run."""
    if not (-_EPS <= busy <= 1 + _EPS and -_EPS <= held <= 1 + _EPS) or run_hours < 0:
        raise ValueError(f"idleness: shares must be in [0, 1] and hours >= 0, got busy={busy}, "
                         f"held={held}, hours={run_hours}")
    busy, held = min(1.0, max(0.0, busy)), min(1.0, max(0.0, held))  # sums of floats
    if run_hours < rules.min_hours:
        state = TOO_SHORT
    elif is_idle(busy, rules):
        state = IDLE
    elif busy < rules.mostly_idle_below:
        state = MOSTLY_IDLE
    else:
        state = IN_USE
    return Idleness(state, busy, held, run_hours, held >= rules.held_share)


def facts(reading: Idleness | None) -> dict[str, float]:
    """The diagnosis facts of a reading (absent when not measured): the shipped idle rules
    read these, so a finding fires exactly when the alert does."""
    if reading is None:
        return {}
    return {"idle_job": float(reading.state == IDLE),
            "mostly_idle_held": float(reading.state == MOSTLY_IDLE and reading.memory_held)}
