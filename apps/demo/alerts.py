"""Replayed alerts against the simulator's ground truth: precision and recall per kind.

``manage.py guardrail_report GROUND_TRUTH --telemetry DIR`` prints this. The ground truth is
read only here and in tests (STYLE.md §2.5). Which planted pathology each alert kind should
find:

- ``gpus_idle``: ``idle_allocated_gpus`` (the alert names as many GPUs as were left idle)
  and ``idle_notebook``;
- ``memory_held``: ``idle_notebook`` and ``mostly_idle_notebook`` (notebooks keep their
  kernel's memory; the jobs with idle allocated GPUs never touched theirs), the latter by
  the idleness reading the diagnosis shares (issue 26);
- ``straggler``: ``straggler_gpu`` (the alert names the planted GPU);
- ``input_stall``: ``input_pipeline_stall``.

Only jobs the telemetry covers count ("measured"). An alert is a **true positive** when its
job carries the kind's pathology and the alert names it right, otherwise a **false
positive**: on a healthy job (``verdicts.healthy_jobs``: no pathology, incident or
infrastructure failure) it is also listed as a false alarm. Recall is over the measured
planted jobs. The delay is from the pathology's start (its window, clipped to the job's
start) to the first check that raised it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from apps.analysis.guardrails import KINDS
from apps.demo.verdicts import healthy_jobs
from apps.guardrails.replay import Replayed

TRUTH_KINDS: dict[str, tuple[str, ...]] = {
    "gpus_idle": ("idle_allocated_gpus", "idle_notebook"),
    "memory_held": ("idle_notebook", "mostly_idle_notebook"),
    "straggler": ("straggler_gpu",),
    "input_stall": ("input_pipeline_stall",),
}


@dataclass
class KindScore:
    kind: str
    planted: int = 0  # measured jobs carrying the kind's pathology
    raised: int = 0  # jobs the replay raised the kind on
    true_positives: int = 0
    missed: list[int] = field(default_factory=list)
    wrong: list[tuple[int, str]] = field(default_factory=list)  # (job, why)
    delays_h: list[float] = field(default_factory=list)
    delays_by_truth: dict[str, list[float]] = field(default_factory=dict)

    @property
    def precision(self) -> float | None:
        return self.true_positives / self.raised if self.raised else None

    @property
    def recall(self) -> float | None:
        return self.true_positives / self.planted if self.planted else None


@dataclass
class GuardrailReport:
    kinds: list[KindScore]
    jobs: int
    measured: int
    healthy_measured: int
    false_alarms: dict[int, list[str]]
    checks: int
    policy: dict[str, Any] = field(default_factory=dict)


def score(truth: Mapping[str, Any], replayed: Iterable[Replayed]) -> GuardrailReport:
    """Score replayed alerts against ``truth`` (see the module docstring)."""
    seen = {r.job_id: r for r in replayed}
    measured = {j for j, r in seen.items() if r.measured}
    planted = _planted(truth)
    healthy = set(healthy_jobs(truth)) & measured
    kinds = [_score(kind, seen, measured, planted) for kind in KINDS]
    alarms = {j: sorted(seen[j].alerts) for j in healthy if seen[j].alerts}
    return GuardrailReport(kinds, len(seen), len(measured), len(healthy), alarms,
                           sum(r.checks for r in seen.values()),
                           _policy(seen, planted, healthy))


def _policy(seen: dict[int, Replayed], planted: dict[str, dict[int, dict[str, Any]]],
            healthy: set[int]) -> dict[str, Any]:
    """The idle-job policy as a dry run: jobs warned and cancelled, by what the truth says
    of them, and the GPU-hours the cancels would have freed (to the job's real end)."""
    def what(job_id: int) -> str:
        kinds = sorted(t for t, jobs in planted.items() if job_id in jobs)
        return ", ".join(kinds) or ("healthy" if job_id in healthy else "other")

    out: dict[str, Any] = {"warned": {}, "cancelled": {}, "withdrawn": 0, "freed_gpu_hours": 0.0}
    for job_id, r in seen.items():
        steps = [s for _, s in r.policy]
        for step, key in (("warn", "warned"), ("cancel", "cancelled")):
            if step in steps:
                out[key][what(job_id)] = out[key].get(what(job_id), 0) + 1
        out["withdrawn"] += steps.count("clear")
        if "cancel" in steps:
            out["freed_gpu_hours"] += r.gpus * (r.end - r.policy[-1][0]) / 3600
    return out


def _planted(truth: Mapping[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """Truth kind -> job id -> the finding."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for f in truth["findings"]:
        job = f["entity"]["job_id"]
        if job is not None:
            out.setdefault(f["kind"], {})[int(job)] = f
    return out


def _score(kind: str, seen: dict[int, Replayed], measured: set[int],
           planted: dict[str, dict[int, dict[str, Any]]]) -> KindScore:
    result = KindScore(kind)
    expected = {j: f for t in TRUTH_KINDS[kind] for j, f in planted.get(t, {}).items()
                if j in measured}
    result.planted = len(expected)
    for job_id, replay in seen.items():
        if kind not in replay.alerts:
            continue
        result.raised += 1
        at, alert = replay.alerts[kind]
        finding = expected.get(job_id)
        why = _wrong(kind, finding, alert.gpus, dict(alert.detail), planted, job_id)
        if why:
            result.wrong.append((job_id, why))
            continue
        assert finding is not None
        result.true_positives += 1
        delay = max(0.0, at - finding["window"]["start"]) / 3600
        result.delays_h.append(delay)
        result.delays_by_truth.setdefault(finding["kind"], []).append(delay)
    result.missed = sorted(j for j in expected if kind not in seen[j].alerts)
    return result


def _wrong(kind: str, finding: dict[str, Any] | None, gpus: tuple[str, ...],
           detail: dict[str, Any], planted: dict[str, dict[int, dict[str, Any]]],
           job_id: int) -> str:
    """Why an alert is a false positive ("" when it is right)."""
    if finding is None:
        other = sorted(t for t, jobs in planted.items() if job_id in jobs)
        return f"job carries {', '.join(other)}" if other else "healthy job"
    if kind == "straggler":
        named = f"{finding['entity']['node']}:{finding['entity']['gpu']}"
        return "" if named in gpus else f"named {', '.join(gpus)}, planted {named}"
    if kind == "gpus_idle" and finding["kind"] == "idle_allocated_gpus":
        want = finding["details"]["idle_gpus"]
        return "" if detail.get("idle_gpus") == want else \
            f"named {detail.get('idle_gpus')} idle GPUs, planted {want}"
    return ""


def render(report: GuardrailReport) -> str:
    """The report as text: one line per kind, then what went wrong."""
    lines = [f"jobs replayed: {report.jobs} ({report.measured} with telemetry), "
             f"{report.checks} checks", "",
             f"{'alert':<13} {'planted':>7} {'raised':>6} {'right':>5} {'precision':>9} "
             f"{'recall':>6} {'delay h (median, max)':>22}"]
    for k in report.kinds:
        delay = (f"{median(k.delays_h):.1f}, {max(k.delays_h):.1f}" if k.delays_h else "-")
        lines.append(f"{k.kind:<13} {k.planted:>7} {k.raised:>6} {k.true_positives:>5} "
                     f"{_pct(k.precision):>9} {_pct(k.recall):>6} {delay:>22}")
    for k in report.kinds:
        if len(k.delays_by_truth) > 1:
            lines += [f"  {k.kind} on {truth}: delay h (median, max) {median(d):.1f}, "
                      f"{max(d):.1f}" for truth, d in sorted(k.delays_by_truth.items())]
    lines += ["", f"healthy jobs with telemetry: {report.healthy_measured}; "
                  f"with any alert: {len(report.false_alarms)}"]
    lines += [f"  job {j}: {', '.join(kinds)}" for j, kinds in sorted(report.false_alarms.items())]
    p = report.policy
    if p:
        lines += ["", "idle-job policy (dry run, defaults, no exemption): warned "
                      f"{_counts(p['warned'])}; cancelled {_counts(p['cancelled'])}; warnings "
                      f"withdrawn {p['withdrawn']}; GPU-hours freed {p['freed_gpu_hours']:.0f}"]
    for k in report.kinds:
        lines += [f"{k.kind}: missed job {j}" for j in k.missed[:20]]
        lines += [f"{k.kind}: wrong on job {j} ({why})" for j, why in k.wrong[:20]]
    return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    return f"{total} ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})" if total \
        else "0"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"
