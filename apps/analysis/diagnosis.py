"""Diagnosis: what to check and whom to talk to, from rules that are data (pure).

A job's **facts** are numbers (and a few names) measured on it: the efficiency split, the
straggler verdict, GPU health, node traffic, trace phases. A **rule** is data an admin edits
(``jobs.DiagnosisRule`` in the admin): an area (data, network, hardware, code), conditions
over facts (all must hold), a text with ``{fact}`` placeholders and a hint. A condition on a
fact the job lacks (not measured) is false: a rule never fires on what was not seen.

Each finding carries its evidence: the facts its conditions read, with their values and the
section of the job page that shows them.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

Fact = float | str | None

AREAS = ("data", "network", "hardware", "code")
SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class FactSpec:
    """What a fact means, its unit (how it prints) and the job-page section that shows it."""

    label: str
    unit: str  # pct, count, bool, gbs, celsius, hours, ms, mhz, text
    anchor: str  # efficiency, gpus, health, network, stragglers, phases


FACTS: dict[str, FactSpec] = {
    # efficiency (job level, time-weighted over GPUs)
    "gpus": FactSpec("GPUs with telemetry", "count", "efficiency"),
    "run_hours": FactSpec("run time", "hours", "efficiency"),
    "sm_measured": FactSpec("SM activity measured", "bool", "efficiency"),
    "busy": FactSpec("GPU busy (utilisation)", "pct", "efficiency"),
    "computing": FactSpec("SM active (computing)", "pct", "efficiency"),
    "computing_share": FactSpec("computing share of busy time", "pct", "efficiency"),
    "waiting": FactSpec("busy but not computing", "pct", "efficiency"),
    "idle": FactSpec("idle (memory held or no process)", "pct", "efficiency"),
    "held_idle": FactSpec("idle with GPU memory held", "pct", "efficiency"),
    # the one reading of idleness (apps/analysis/idleness.py), which the alerts share
    "idle_job": FactSpec("idle over the run (the site's idle reading)", "bool", "efficiency"),
    "mostly_idle_held": FactSpec("mostly idle with GPU memory held (the site's idle reading)",
                                 "bool", "efficiency"),
    "tensor": FactSpec("tensor pipe active", "pct", "efficiency"),
    "occupancy": FactSpec("SM occupancy", "pct", "gpus"),
    "fp64": FactSpec("FP64 pipe active", "pct", "gpus"),
    "idle_gpu_share": FactSpec("share of GPUs left idle", "pct", "gpus"),
    "idle_gpus": FactSpec("idle GPUs", "text", "gpus"),
    "waiting_with_traffic": FactSpec("waiting time with NVLink/PCIe traffic", "pct", "gpus"),
    "pcie_rx_gbs": FactSpec("PCIe receive per GPU (host copies and GPUDirect network data)",
                            "gbs", "gpus"),
    # PCIe receive split by the nodes' InfiniBand/RoCE receive (apps/analysis/data_path.py)
    "host_rx_gbs": FactSpec("host-to-GPU copies per GPU (PCIe receive the network does not "
                            "explain)", "gbs", "gpus"),
    "network_rx_share": FactSpec("share of PCIe receive the network explains (GPUDirect)",
                                 "pct", "network"),
    "ib_rx_gbs": FactSpec("InfiniBand/RoCE receive per node", "gbs", "network"),
    # the straggler verdict from telemetry
    "straggler_found": FactSpec("straggler GPU named", "bool", "stragglers"),
    "straggler_gpu": FactSpec("straggler GPU", "text", "stragglers"),
    "straggler_slowdown": FactSpec("straggler's extra work per step", "pct", "stragglers"),
    "straggler_hardware": FactSpec("hardware evidence on the straggler", "bool", "stragglers"),
    "straggler_cause": FactSpec("straggler's likely cause", "text", "stragglers"),
    "waiting_gpu_count": FactSpec("GPUs that waited for it", "count", "stragglers"),
    # GPU health
    "xid_gpus": FactSpec("GPUs with hardware XIDs", "count", "health"),
    "xid_codes": FactSpec("XID codes", "text", "health"),
    "ecc_dbe": FactSpec("uncorrectable ECC errors", "count", "health"),
    "ecc_sbe": FactSpec("correctable ECC errors", "count", "health"),
    "thermal_share": FactSpec("worst GPU's time thermally throttled", "pct", "health"),
    "thermal_gpu": FactSpec("most throttled GPU", "text", "health"),
    "temp_max": FactSpec("hottest GPU temperature", "celsius", "health"),
    "gpu_slow_elsewhere": FactSpec("other recent jobs where this GPU was the straggler",
                                   "count", "health"),
    "slow_gpu": FactSpec("GPU slow across jobs", "text", "health"),
    "nvlink_low_gpus": FactSpec("GPUs that ran with far less NVLink traffic than their "
                                "running peers", "count", "network"),
    "nvlink_low_names": FactSpec("GPUs with far less NVLink traffic", "text", "network"),
    # nodes and network (node-shared)
    "multi_node": FactSpec("runs on several nodes", "bool", "network"),
    "nodes": FactSpec("nodes", "count", "network"),
    "ib_degraded_nodes": FactSpec("nodes with a downgraded InfiniBand link", "count", "network"),
    "ib_degraded_node": FactSpec("node with a downgraded link", "text", "network"),
    "ib_errors": FactSpec("InfiniBand link errors", "count", "network"),
    "ib_wait_per_s": FactSpec("InfiniBand transmit waits per second (worst node)", "count",
                              "network"),
    "node_cpu_share": FactSpec("share of its nodes' CPUs the job held", "pct", "network"),
    "cpu_busy": FactSpec("CPU busy (busiest node)", "pct", "network"),
    "cpu_iowait": FactSpec("CPU time in I/O wait (worst node)", "pct", "network"),
    "fs_read_gbs": FactSpec("network file-system reads per node", "gbs", "network"),
    # profiler traces
    "trace": FactSpec("profiler trace analysed", "bool", "phases"),
    "trace_data_share": FactSpec("data loading share of the step", "pct", "phases"),
    "trace_comm_share": FactSpec("communication share of the step", "pct", "phases"),
    "trace_comm_bound": FactSpec("communication-bound (balanced ranks)", "bool", "phases"),
    "trace_straggler_data": FactSpec("straggler rank slow in data loading", "bool", "phases"),
    "trace_straggler_compute": FactSpec("straggler rank slow in compute", "bool", "phases"),
    "trace_straggler_optimizer": FactSpec("straggler rank slow in the optimizer", "bool",
                                          "phases"),
    "trace_straggler_rank": FactSpec("straggler rank", "text", "phases"),
    "trace_straggler_phase": FactSpec("straggler rank's phase", "text", "phases"),
    "trace_excess_ms": FactSpec("straggler rank's extra work per step", "ms", "phases"),
    "trace_gpu_idle": FactSpec("GPU idle share of each step (trace)", "pct", "phases"),
    "trace_straggler_gpu": FactSpec("GPU the straggler rank ran on", "text", "phases"),
}

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
    "==": operator.eq, "!=": operator.ne,
}
_PLACEHOLDER = re.compile(r"\{([a-z0-9_]+)\}")


@dataclass(frozen=True)
class Condition:
    fact: str
    op: str
    value: float


@dataclass(frozen=True)
class Rule:
    """One rule as the engine sees it (the admin edits ``jobs.DiagnosisRule``)."""

    key: str
    area: str
    severity: str
    title: str
    text: str
    hint: str
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class EvidenceItem:
    """A fact a finding rests on: its value as printed and where the page shows it."""

    fact: str
    label: str
    value: float | str
    shown: str
    anchor: str


@dataclass(frozen=True)
class Finding:
    """A rule that fired on a job: the words, the hint and the evidence."""

    rule: str
    area: str
    severity: str
    title: str
    text: str
    hint: str
    evidence: tuple[EvidenceItem, ...]


def evaluate(rules: Sequence[Rule], facts: Mapping[str, Fact]) -> tuple[Finding, ...]:
    """Every rule whose conditions all hold on ``facts``, in the rules' order."""
    return tuple(_finding(rule, facts) for rule in rules if holds(rule, facts))


def holds(rule: Rule, facts: Mapping[str, Fact]) -> bool:
    """All conditions hold; a missing or non-numeric fact makes its condition false."""
    if not rule.conditions:
        return False
    for condition in rule.conditions:
        value = facts.get(condition.fact)
        if not isinstance(value, int | float) or math.isnan(value):
            return False
        if not OPERATORS[condition.op](float(value), condition.value):
            return False
    return True


def render(template: str, facts: Mapping[str, Fact]) -> str:
    """Fill ``{fact}`` placeholders with printed values ("unknown" when not measured)."""
    return _PLACEHOLDER.sub(lambda m: show(m.group(1), facts.get(m.group(1))), template)


def show(fact: str, value: Fact) -> str:
    """A fact's value as people read it: 45%, 2.5 GB/s, 89 °C, yes/no."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    if isinstance(value, str):
        return value
    unit = FACTS[fact].unit if fact in FACTS else "count"
    formats: dict[str, Callable[[float], str]] = {
        "pct": lambda v: f"{v * 100:.0f}%", "gbs": _rate,
        "celsius": lambda v: f"{v:.0f} °C", "hours": lambda v: f"{v:.1f} h",
        "ms": lambda v: f"{v:.1f} ms", "mhz": lambda v: f"{v:.0f} MHz",
        "bool": lambda v: "yes" if v else "no",
        "count": lambda v: f"{v:.0f}" if float(v).is_integer() or abs(v) >= 10 else f"{v:.2g}",
    }
    return formats.get(unit, formats["count"])(float(value))


def _rate(gbs: float) -> str:
    # Below 0.1 GB/s one decimal of GB/s would print a real file-system rate as "0.0".
    return f"{gbs:.1f} GB/s" if abs(gbs) >= 0.1 else f"{gbs * 1000:.0f} MB/s"


def problems(rule: Rule) -> list[str]:
    """What is wrong with a rule as an admin wrote it (an empty list: nothing)."""
    found = []
    if rule.area not in AREAS:
        found.append(f"area {rule.area!r} is not one of {', '.join(AREAS)}")
    if not rule.conditions:
        found.append("a rule needs at least one condition")
    for c in rule.conditions:
        if c.fact not in FACTS:
            found.append(f"condition on unknown fact {c.fact!r}")
        elif FACTS[c.fact].unit == "text":
            found.append(f"fact {c.fact!r} is a name, not a number: it cannot be compared")
        if c.op not in OPERATORS:
            found.append(f"operator {c.op!r} is not one of {' '.join(OPERATORS)}")
    for text in (rule.title, rule.text, rule.hint):
        found += [f"unknown placeholder {{{name}}}" for name in _PLACEHOLDER.findall(text)
                  if name not in FACTS]
    return found


def _finding(rule: Rule, facts: Mapping[str, Fact]) -> Finding:
    cited = list(dict.fromkeys([c.fact for c in rule.conditions] +
                               _PLACEHOLDER.findall(rule.text)))
    evidence = tuple(EvidenceItem(name, FACTS[name].label, value, show(name, value),
                                  FACTS[name].anchor)
                     for name in cited if name in FACTS and (value := facts.get(name)) is not None)
    return Finding(rule.key, rule.area, rule.severity, render(rule.title, facts),
                   render(rule.text, facts), render(rule.hint, facts), evidence)
