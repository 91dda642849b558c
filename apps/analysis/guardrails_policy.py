"""The idle-job policy's decision for one running job (pure).

Off by default; an admin turns it on (``GUARDRAILS_POLICY``: ``dry-run`` or ``enforce``).
A job whose **every** GPU stayed idle for ``idle_hours`` is warned; if it is still idle
``grace_minutes`` after the warning, it is cancelled. A GPU that gets busy again withdraws
the warning (the clock starts over). Exempt jobs (service accounts, partitions such as
interactive ones, a per-job opt-out an admin granted) are never warned or cancelled.
In dry-run the same decisions are taken and recorded, but nothing is sent and nothing is
cancelled: the admin sees what the policy would have done.
"""

from __future__ import annotations

from dataclasses import dataclass

NONE, WARN, CANCEL, CLEAR, EXEMPT = "none", "warn", "cancel", "clear", "exempt"


@dataclass(frozen=True)
class PolicyConfig:
    idle_hours: float = 2.0
    grace_minutes: int = 60


@dataclass(frozen=True)
class PolicyState:
    """What the service knows of one running job at ``now`` (epoch seconds)."""

    now: float
    all_idle_since: float | None  # every GPU idle since then; None: one is busy
    warned_at: float | None = None  # the standing warning, if any
    exemption: str = ""  # why the job is exempt ("" when it is not)


@dataclass(frozen=True)
class Decision:
    action: str  # none, warn, cancel, clear, exempt
    reason: str
    cancel_at: float | None = None  # when a warned job is cancelled if it stays idle


def decide(state: PolicyState, config: PolicyConfig = PolicyConfig()) -> Decision:
    """The one next step for a job (see the module docstring)."""
    if state.exemption:
        return Decision(EXEMPT, f"exempt: {state.exemption}")
    idle_for = (state.now - state.all_idle_since) if state.all_idle_since is not None else None
    if idle_for is None or idle_for < config.idle_hours * 3600:
        if state.warned_at is not None:  # the idle run broke since the warning
            return Decision(CLEAR, "a GPU is busy again: the warning is withdrawn")
        return Decision(NONE, "not idle long enough" if idle_for is not None else "GPUs busy")
    hours = idle_for / 3600
    if state.warned_at is None:
        return Decision(WARN, f"every GPU idle for {hours:.1f} h",
                        cancel_at=state.now + config.grace_minutes * 60)
    due = state.warned_at + config.grace_minutes * 60
    if state.now >= due:
        return Decision(CANCEL, f"every GPU idle for {hours:.1f} h, warned "
                                f"{(state.now - state.warned_at) / 60:.0f} min ago")
    return Decision(NONE, "warned: within the grace period", cancel_at=due)
