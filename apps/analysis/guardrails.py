"""Guardrails: what to tell a researcher about their own running job (pure).

A **live view** of a running job (``LiveJob``) is what the beat reads each time it looks:
per GPU, the samples so far (busy share and memory in use), plus the live straggler verdict
and the input-stall diagnosis that the job page shows (``apps/analysis/stragglers.py``,
the ``input-stall*`` diagnosis rules). ``evaluate`` says which alerts the view calls for:

- ``gpus_idle``: GPUs whose samples stayed below ``idle_below`` busy for ``idle_minutes``
  (``interactive_idle_minutes`` on interactive partitions, where a GPU waits while
  people think between cells), naming those GPUs and since when; or a job the site's
  idleness reading (``apps/analysis/idleness.py``, the one the diagnosis and the pages
  use) calls idle over its run so far;
- ``memory_held``: of those idle GPUs, the ones holding at least ``memory_held_mib`` of
  memory (a CUDA context alone holds a few hundred MiB): memory another job could use; or
  a job the reading calls idle or mostly idle with its memory held (issue 26: a notebook
  busy 8 % now and then never stays idle an hour in a row, yet held its GPUs for days);
- ``straggler``: the live verdict names a GPU holding back a multi-GPU job, with its cause;
  a hardware cause (thermal, a hardware slowdown or power brake, clocks below peers at the
  same load, XID, ECC) is copied to the hardware contact; the busiest GPU at its software
  power limit is the slowest stage, the owner's alone;
- ``input_stall``: the input-stall diagnosis fires (GPUs waiting on data loading).

Idle time is counted between samples only: a run of idle samples from ``t0`` to ``t1`` is
``t1 - t0`` idle, never more (a sample is a point, not a promise about what came before).
Dedup (once per job and kind), rate limits and opt-outs are the service's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apps.analysis.idleness import IDLE, RULES, Idleness, IdleRules, holds_memory

KINDS = ("gpus_idle", "memory_held", "straggler", "input_stall")
KIND_TITLES = {
    "gpus_idle": "GPUs idle",
    "memory_held": "GPU memory held on idle GPUs",
    "straggler": "A straggler GPU is holding back the job",
    "input_stall": "GPUs waiting on input (data loading or the file system)",
}
# A straggler whose cause is one of these is a hardware matter: the hardware contact hears too.
# (``power``, the software power cap, was one until issue 28: the busiest GPU reaches it.)
HARDWARE_CAUSES = frozenset({"thermal", "hw_slowdown", "clock", "xid", "ecc"})
CAUSE_WORDS = {"thermal": "thermal throttling (the GPU runs hot and slows its clocks)",
               "hw_slowdown": "a hardware slowdown or power brake reported by the GPU",
               "clock": "SM clocks below its peers' at the same load",
               "xid": "XID errors reported by the driver",
               "ecc": "uncorrectable ECC memory errors", "power": "power capping",
               "power_limit": "the slowest stage: it has the most work, so it runs at its "
                              "software power limit (a consequence of its load, not a fault); "
                              "uneven work per rank or pipeline stage is the likely cause",
               "unknown": "no hardware sign: uneven work per rank is the likely cause"}


@dataclass(frozen=True)
class GpuTrack:
    """One GPU's samples so far: times (epoch s), busy share 0..1 and memory used (MiB).

    ``None`` is a sample that was not measured; it neither starts nor breaks an idle run.
    """

    gpu: str  # "host:index"
    times: tuple[float, ...]
    busy: tuple[float | None, ...]
    memory_mib: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class Straggler:
    """The live straggler verdict's named GPU (docs/stragglers.md)."""

    gpu: str
    cause: str
    slowdown: float
    waiting_gpus: int = 0
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stall:
    """The input-stall diagnosis that fired on the live view (its rule's words)."""

    rule: str
    title: str
    text: str
    hint: str


@dataclass(frozen=True)
class LiveJob:
    """What the beat reads about one running job; ``idleness`` is the site's reading of its
    run so far (the job page's and the diagnosis')."""

    start: float
    now: float
    gpus: tuple[GpuTrack, ...]
    interactive: bool = False
    straggler: Straggler | None = None
    stall: Stall | None = None
    idleness: Idleness | None = None


@dataclass(frozen=True)
class AlertConfig:
    """Thresholds (settings ``GUARDRAILS_*``; idle and memory held: the site's ``IdleRules``)."""

    idle_minutes: int = 60
    interactive_idle_minutes: int = 240
    rules: IdleRules = RULES
    min_run_minutes: int = 30  # a verdict over less of a run is noise
    # ... or over fewer scrape windows per GPU: on coarse telemetry (hourly) the first check
    # holds one sample per GPU, and one window's wait shares named a straggler in a healthy
    # 2-GPU job that the later checks (and its archive) cleared.
    min_samples: int = 2

    @property
    def idle_below(self) -> float:
        """Busy share under which a sample is idle."""
        return self.rules.idle_below

    @property
    def memory_held_mib(self) -> float:
        return self.rules.memory_held_mib


@dataclass(frozen=True)
class Raised:
    """One alert the view calls for: its kind, the GPUs, since when, and the details."""

    kind: str
    gpus: tuple[str, ...]
    since: float
    hardware: bool = False
    detail: Mapping[str, Any] = field(default_factory=dict)


def evaluate(view: LiveJob, config: AlertConfig = AlertConfig()) -> list[Raised]:
    """Every alert ``view`` calls for, in ``KINDS`` order."""
    raised: list[Raised] = []
    idle = idle_gpus(view, config)
    if idle:
        raised.append(_idle_alert(idle, view, config))
        held = {gpu: run for gpu, run in idle.items()
                if run.memory_mib is not None and holds_memory(run.memory_mib, config.rules)}
        if held:
            raised.append(_memory_alert(held))
    raised += _reading_alerts(view, {r.kind for r in raised})
    long_enough = (view.now - view.start >= config.min_run_minutes * 60
                   and min((len(t.times) for t in view.gpus), default=0) >= config.min_samples)
    if long_enough and view.straggler is not None:
        raised.append(_straggler_alert(view))
    if long_enough and view.stall is not None:
        s = view.stall
        raised.append(Raised("input_stall", tuple(t.gpu for t in view.gpus), view.start,
                             detail={"rule": s.rule, "title": s.title, "text": s.text,
                                     "hint": s.hint}))
    return raised


# --- Idle GPUs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class IdleRun:
    """A GPU's trailing run of idle samples: from ``since`` to ``last``."""

    since: float
    last: float
    samples: int
    memory_mib: float | None  # mean over the run's measured memory samples

    @property
    def seconds(self) -> float:
        return self.last - self.since


def idle_run(track: GpuTrack, idle_below: float) -> IdleRun | None:
    """The trailing run of idle samples of ``track`` (None: its last measured sample is busy,
    or nothing was measured)."""
    since = last = None
    count = 0
    memory: list[float] = []
    for i in range(len(track.times) - 1, -1, -1):
        busy = track.busy[i]
        if busy is None:
            continue
        if not busy < idle_below:  # the one reading: idleness.is_idle
            break
        since, count = track.times[i], count + 1
        last = track.times[i] if last is None else last
        mem = track.memory_mib[i] if i < len(track.memory_mib) else None
        if mem is not None:
            memory.append(mem)
    if since is None or last is None:
        return None
    return IdleRun(since, last, count, sum(memory) / len(memory) if memory else None)


def idle_minutes(view: LiveJob, config: AlertConfig) -> int:
    return config.interactive_idle_minutes if view.interactive else config.idle_minutes


def idle_gpus(view: LiveJob, config: AlertConfig) -> dict[str, IdleRun]:
    """GPUs idle for at least the threshold, by name."""
    needed = idle_minutes(view, config) * 60
    runs = {t.gpu: idle_run(t, config.idle_below) for t in view.gpus}
    return {gpu: run for gpu, run in runs.items()
            if run is not None and run.samples >= 2 and run.seconds >= needed}


def all_idle_since(view: LiveJob, idle_below: float) -> float | None:
    """When the last of the job's GPUs went idle (None: a GPU is busy, or none measured).

    The idle-job policy reads this: every GPU idle since then.
    """
    runs = [idle_run(t, idle_below) for t in view.gpus]
    if not runs or any(r is None or r.samples < 2 for r in runs):
        return None
    return max(r.since for r in runs if r is not None)


def _idle_alert(idle: dict[str, IdleRun], view: LiveJob, config: AlertConfig) -> Raised:
    since = min(r.since for r in idle.values())
    return Raised("gpus_idle", tuple(sorted(idle)), since, detail={
        "idle_gpus": len(idle), "gpus": len(view.gpus),
        "idle_hours": round(max(r.seconds for r in idle.values()) / 3600, 2),
        "threshold_minutes": idle_minutes(view, config), "interactive": view.interactive,
        "below_pct": round(config.idle_below * 100)})


def _memory_alert(held: dict[str, IdleRun]) -> Raised:
    return Raised("memory_held", tuple(sorted(held)), min(r.since for r in held.values()),
                  detail={"memory_gib": {gpu: round((r.memory_mib or 0) / 1024, 1)
                                         for gpu, r in sorted(held.items())},
                          "total_gib": round(sum(r.memory_mib or 0 for r in held.values())
                                             / 1024, 1)})


def _reading_alerts(view: LiveJob, have: set[str]) -> list[Raised]:
    """What the site's idleness reading of the run so far calls for, beyond the idle runs:
    the same words and numbers as the job page and the diagnosis."""
    reading = view.idleness
    if reading is None or not reading.flagged:
        return []
    gpus = tuple(sorted(t.gpu for t in view.gpus))
    detail = {"reading": reading.state, "busy": reading.busy, "held": reading.held,
              "hours": reading.hours, "summary": reading.summary}
    out = []
    if reading.state == IDLE and "gpus_idle" not in have:
        out.append(Raised("gpus_idle", gpus, view.start, detail=detail))
    if reading.memory_held and "memory_held" not in have:
        out.append(Raised("memory_held", gpus, view.start, detail=detail))
    return out


def _straggler_alert(view: LiveJob) -> Raised:
    s = view.straggler
    assert s is not None
    return Raised("straggler", (s.gpu,), view.start, hardware=s.cause in HARDWARE_CAUSES,
                  detail={"cause": s.cause, "cause_words": CAUSE_WORDS.get(s.cause, s.cause),
                          "slowdown": s.slowdown, "waiting_gpus": s.waiting_gpus,
                          "evidence": list(s.evidence)})


# --- Words ----------------------------------------------------------------------------------

CHECKS = {
    "gpus_idle": ("Check that the job still does what you meant: a notebook left open, a "
                  "process that died or is waiting for input, a script that asked for more GPUs "
                  "than it uses (it starts one process per GPU?). If you are done, end the job."),
    "memory_held": ("A process still holds memory on GPUs that do no work: a notebook kernel "
                    "or a finished step that did not exit. Restart the kernel or end the job, "
                    "so the GPUs go back to the queue."),
    "straggler": ("The other GPUs wait for this one at every step. If the cause is hardware, "
                  "the hardware contact has a copy; resubmitting with --exclude=<node> avoids "
                  "the node. Without a hardware sign, check that every rank gets the same work "
                  "(uneven shards, one rank doing logging or evaluation)."),
    "input_stall": ("The GPUs are busy copying and waiting rather than computing: raise the "
                    "data loader's workers (num_workers), prefetch, use local scratch or a "
                    "pre-processed dataset."),
}


def describe(alert: Raised, started: str, since: str) -> str:
    """One alert in plain words: what was seen, on which GPUs, since when (times as given)."""
    d, gpus = alert.detail, ", ".join(alert.gpus)
    if "summary" in d:  # the idleness reading of the run (apps/analysis/idleness.py)
        return f"{d['summary']} (GPUs {gpus}, running since {started})."
    if alert.kind == "gpus_idle":
        return (f"{d['idle_gpus']} of the job's {d['gpus']} GPUs ({gpus}) did no work "
                f"(under {d.get('below_pct', 5)}% busy) since {since}: {d['idle_hours']:.1f} h "
                f"idle.")
    if alert.kind == "memory_held":
        held = ", ".join(f"{g} {gib:.1f} GiB" for g, gib in d["memory_gib"].items())
        return (f"Idle GPUs hold {d['total_gib']:.1f} GiB of GPU memory since {since} "
                f"({held}).")
    if alert.kind == "straggler":
        return (f"GPU {gpus} is slower than its peers (about {d['slowdown'] * 100:.0f}% more "
                f"time per step), and {d['waiting_gpus']} GPUs wait for it. Likely cause: "
                f"{d['cause_words']}. Seen over the run so far (started {started}).")
    return f"{d['title']}: {d['text']} Seen over the run so far (started {started})."
