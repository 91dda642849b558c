"""The live cluster view's readings (issue 30), pure: what state each GPU is in, and what a
partition has free, from the stored nodes, reservations, GPU bindings and telemetry.

A GPU is, in this order of precedence:

1. **down** when its node is down, drained, draining, failed or not responding (Slurm's
   reason is the node's);
2. held by a job: **busy** when its activity is not idle (``idleness.is_idle``), **idle,
   memory held** when idle with its memory held (``idleness.holds_memory``), **allocated,
   idle** when idle without, **allocated** when no telemetry reads it;
3. **reserved** when a reservation in force covers its node;
4. **idle** (free) otherwise.

The idle and memory thresholds are the site's (``IdleRules``), the same every page uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from apps.analysis.idleness import RULES, IdleRules, holds_memory, is_idle


class GpuState(StrEnum):
    BUSY = "busy"
    IDLE_MEMORY = "idle_memory"
    ALLOCATED_IDLE = "allocated_idle"
    ALLOCATED = "allocated"
    RESERVED = "reserved"
    DOWN = "down"
    FREE = "idle"


LABELS = {
    GpuState.BUSY: "busy",
    GpuState.IDLE_MEMORY: "idle, memory held",
    GpuState.ALLOCATED_IDLE: "allocated, idle",
    GpuState.ALLOCATED: "allocated (no telemetry)",
    GpuState.RESERVED: "reserved",
    GpuState.DOWN: "down or drained",
    GpuState.FREE: "idle (free)",
}

# Slurm node state words (sinfo/scontrol, lower-cased) under which no job can start there
_UNAVAILABLE = frozenset({
    "down", "drain", "drained", "draining", "drng", "fail", "failing", "not_responding",
    "no_respond", "power_down", "powered_down", "powering_down", "inval", "invalid", "future",
    "gone"})
_WORDS = re.compile(r"[+ ,]+")


def node_unavailable(state: str) -> bool:
    """True when a node in Slurm ``state`` (``idle+drain``, ``down*``, ``mixed``) takes no
    new job. Suffix marks (``*`` not responding, ``~`` powered off) are read as words."""
    words = {w.strip("*~#!%$@^-") for w in _WORDS.split(state.lower()) if w}
    if "*" in state:
        words.add("not_responding")
    return bool(words & _UNAVAILABLE)


@dataclass(frozen=True)
class Reading:
    """A held GPU's telemetry: activity (0..1) and memory used (MiB); None = not measured."""

    activity: float | None = None
    memory_mib: float | None = None


def gpu_state(*, unavailable: bool, reserved: bool, held: bool, reading: Reading | None,
              rules: IdleRules = RULES) -> GpuState:
    """One GPU's state (the module docstring's order)."""
    if unavailable:
        return GpuState.DOWN
    if held:
        if reading is None or reading.activity is None:
            return GpuState.ALLOCATED
        if not is_idle(reading.activity, rules):
            return GpuState.BUSY
        if reading.memory_mib is not None and holds_memory(reading.memory_mib, rules):
            return GpuState.IDLE_MEMORY
        return GpuState.ALLOCATED_IDLE
    return GpuState.RESERVED if reserved else GpuState.FREE


@dataclass(frozen=True)
class NodeFree:
    """What one node can give a new job: free GPUs per model (a reserved or unavailable
    node gives none)."""

    name: str
    free: Mapping[str, int]


@dataclass(frozen=True)
class Free:
    """A partition's free GPUs per model, and the most on one node (where an N-GPU job on
    one node could start now)."""

    by_model: Mapping[str, int]
    largest_on_one_node: int

    @property
    def total(self) -> int:
        return sum(self.by_model.values())


def node_free(name: str, models: Mapping[str, int], gpu_type: str, total: int, used: int,
              usable: bool) -> NodeFree:
    """A node's free GPUs per model. A node of one model frees ``total - used`` of it; a node
    of several whose split of ``used`` is not known counts its free GPUs under the models
    joined ("h100+h200"), never guessed per model."""
    if not usable or total <= 0:
        return NodeFree(name, {})
    free = max(0, total - used)
    named = [m for m, n in models.items() if n > 0] or [gpu_type or "untyped"]
    if len(named) == 1 or used == 0:
        split = dict(models) if used == 0 and models else {named[0]: free}
        return NodeFree(name, {m: n for m, n in split.items() if n > 0})
    return NodeFree(name, {"+".join(sorted(named)): free} if free else {})


def partition_free(nodes: Iterable[NodeFree]) -> Free:
    """Sum of the nodes' free GPUs per model, and the most free on one node."""
    by_model: dict[str, int] = {}
    largest = 0
    for node in nodes:
        for model, count in node.free.items():
            by_model[model] = by_model.get(model, 0) + count
        largest = max(largest, sum(node.free.values()))
    return Free(dict(sorted(by_model.items())), largest)
