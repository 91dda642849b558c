"""Straggler GPUs from telemetry alone: which GPU makes the others wait, and by how much (pure).

The method (docs/stragglers.md). In synchronous data-parallel training every GPU waits in
each collective for the last one to arrive. While it waits, a GPU runs an NCCL kernel that
keeps it "busy" (GPU utilisation high) with its SMs mostly idle, and moves NVLink/PCIe
bytes: the **waiting signature**. The straggler is the GPU that waits least: it is still
computing while its peers wait for it (HTA's "arrives last", seen in counters).

So each GPU's *waiting share* (busy but not computing: ``max(util, SM active) - SM active``,
the archive's ``waiting``) is compared with the median of the **other** GPUs
(leave-one-out). A GPU is named when its peers show the waiting signature and it waits
clearly less than they do. SM clock, temperature, throttle reasons, XIDs and ECC errors are
evidence of *why* it is slow; they raise the confidence and are never enough alone.

Only what points at the device is **hardware** evidence (issue 28): a throttle reason the
device raises (thermal, hardware slowdown, hardware power brake), SM clocks below those of
peers at the same load, XIDs and uncorrectable ECC errors. The straggler does the most work
per step, so it draws the most power and runs the hottest: reaching its *software* power
limit, or a temperature above its waiting peers', is what its load does to it. Those are
shown as context, and such a straggler is named "the slowest stage": uneven work (a
pipeline stage with too many layers, a larger shard), the owner's to fix, not the hardware
contact's.

With two GPUs a median-based rule is a coin flip (the median of two values is their
midpoint, so both deviate equally). The rule here is directional: the peer must show the
waiting signature and the named GPU must not. When two GPUs differ without that pattern
the verdict says it cannot be determined, unless hardware evidence on one of them breaks
the tie (low confidence).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from apps.analysis.timeseries import GpuKey

FOUND, NONE, UNDETERMINED, NOT_APPLICABLE = "found", "none", "undetermined", "not_applicable"
HIGH, MEDIUM, LOW = "high", "medium", "low"
SM_MEASURES = ("sm_active",)


@dataclass(frozen=True)
class GpuSignals:
    """What one GPU did over the job (fractions of measured time; None: not collected)."""

    key: GpuKey
    busy: float
    computing: float
    waiting: float
    traffic_share: float | None = None
    sm_clock: float | None = None
    temperature: float | None = None
    thermal_share: float | None = None
    power_share: float | None = None  # at the software power limit (throttle reason 0x4)
    hw_slowdown_share: float | None = None  # hardware slowdown or power brake (0x8, 0x80)
    xids: tuple[int, ...] = ()
    ecc_dbe: int | None = None


@dataclass(frozen=True)
class StragglerConfig:
    """Thresholds, calibrated on the simulator's healthy and planted jobs (docs/stragglers.md)."""

    min_peer_waiting: float = 0.25  # peers must be busy-waiting at least this share
    min_gap: float = 0.15  # ... and wait this much more than the named GPU (absolute)
    max_ratio: float = 0.7  # ... with the named GPU waiting at most 70 % of what they do
    min_busy: float = 0.3  # an idle GPU is idle, not a straggler
    clock_drop: float = 0.9  # SM clock under 90 % of the peers' while busy
    temp_rise_c: float = 10.0  # temperature this much above the peers'
    min_throttle_share: float = 0.2  # throttled (thermal or power) this share of samples
    same_load: float = 0.05  # peers computing at least this close to it work as hard
    min_traffic_share: float = 0.5  # peers' waiting time with NVLink/PCIe traffic


@dataclass(frozen=True)
class Evidence:
    """One observation supporting a verdict, with the GPU it is about."""

    kind: str  # waiting, thermal, hw_slowdown, clock, temperature, power_cap, xid, ecc
    gpu: str
    text: str
    value: float | None = None


@dataclass(frozen=True)
class StragglerGpu:
    """A GPU named as a straggler: how much less it waited and how much slower it ran."""

    key: GpuKey
    waiting: float
    peer_waiting: float
    slowdown: float
    cause: str
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class StragglerVerdict:
    """The answer for one job, with its confidence, reasons and limits in words."""

    status: str
    summary: str
    confidence: str = ""
    stragglers: tuple[StragglerGpu, ...] = ()
    waiting_gpus: tuple[GpuKey, ...] = ()
    reasons: tuple[str, ...] = ()
    limits: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()

    @property
    def found(self) -> bool:
        return self.status == FOUND


LIMITS = (
    "Telemetry averages each scrape window: a GPU that is late only in some steps, or by "
    "less than the scrape resolution shows, is not seen.",
    "The slowdown is estimated from time shares (own work per step against the peers'), "
    "not measured per step; a profiler trace gives the exact figure.",
    "A rank given more work by design (pipeline stages, uneven shards) looks like a "
    "straggler: its GPU is slow because of the code, not the hardware.",
)


def detect(gpus: Sequence[GpuSignals], measure: str,
           config: StragglerConfig = StragglerConfig()) -> StragglerVerdict:
    """The straggler verdict of one multi-GPU job.

    1. One GPU, or no SM activity measured: nothing to compare, or no waiting signature.
    2. Name GPUs while they clear the thresholds against the GPUs not yet named.
    3. None named: no straggler, or "cannot be determined" when the picture is unclear.
    """
    if not gpus:
        return StragglerVerdict(NOT_APPLICABLE, "No GPU telemetry: no straggler analysis.")
    if len(gpus) < 2:
        return StragglerVerdict(NOT_APPLICABLE, "A single GPU: no straggler analysis.")
    # Idle GPUs are idle, not stragglers nor waiters: compare the GPUs that worked.
    active = [g for g in gpus if g.busy >= config.min_busy]
    if len(active) < 2:
        return StragglerVerdict(NOT_APPLICABLE, f"Fewer than two GPUs were busy "
                                f"({len(active)} of {len(gpus)}): no straggler analysis.")
    gpus = active
    seen = {g.key: _evidence(g, gpus, config) for g in gpus}
    if measure not in SM_MEASURES:
        return _unmeasured(measure, _hardware(seen))
    named = _name_stragglers(gpus, config)
    if named:
        return _found(gpus, named, seen, config)
    return _not_found(gpus, seen, config)


# --- Naming --------------------------------------------------------------------------------


def _name_stragglers(gpus: Sequence[GpuSignals],
                     config: StragglerConfig) -> list[tuple[GpuSignals, float]]:
    """GPUs (least waiting first) that clear the thresholds, with their peers' waiting.

    At most a minority is named (one of two GPUs): the majority are the peers.
    """
    most = max(1, (len(gpus) - 1) // 2)
    named: list[tuple[GpuSignals, float]] = []
    for gpu in sorted(gpus, key=lambda g: (g.waiting, g.key)):
        if len(named) >= most:
            break
        peers = _peers(gpus, gpu, {g.key for g, _ in named})
        peer_waiting = median(p.waiting for p in peers)
        if not _clears(gpu, peer_waiting, config):
            break
        named.append((gpu, peer_waiting))
    return named


def _peers(gpus: Sequence[GpuSignals], gpu: GpuSignals,
           excluded: set[GpuKey]) -> list[GpuSignals]:
    return [g for g in gpus if g.key != gpu.key and g.key not in excluded]


def _clears(gpu: GpuSignals, peer_waiting: float, config: StragglerConfig) -> bool:
    return (peer_waiting >= config.min_peer_waiting
            and peer_waiting - gpu.waiting >= config.min_gap
            and gpu.waiting <= config.max_ratio * peer_waiting)


def slowdown(waiting: float, peer_waiting: float) -> float:
    """How much longer the straggler's own work per step is than its peers' (0.5 = 50 %).

    Peers do their own work in ``1 - peer_waiting`` of each step and wait the rest; the
    straggler works ``1 - waiting`` of it.
    """
    return min(10.0, max(0.0, (peer_waiting - waiting) / max(1.0 - peer_waiting, 0.05)))


# --- Verdicts ------------------------------------------------------------------------------


def _found(gpus: Sequence[GpuSignals], named: list[tuple[GpuSignals, float]],
           seen: dict[GpuKey, tuple[Evidence, ...]],
           config: StragglerConfig) -> StragglerVerdict:
    names = {g.key for g, _ in named}
    hardware = _hardware(seen)
    stragglers = tuple(
        StragglerGpu(g.key, g.waiting, peer, slowdown(g.waiting, peer),
                     _cause(seen[g.key], _busiest(g, gpus)),
                     (_waiting_evidence(g, peer), *seen[g.key]))
        for g, peer in named)
    waiting = tuple(sorted(g.key for g in gpus
                           if g.key not in names and g.waiting >= config.min_peer_waiting))
    confidence, reasons = _confidence(gpus, named, hardware, config)
    return StragglerVerdict(
        FOUND, _found_summary(stragglers, len(waiting)), confidence, stragglers, waiting,
        reasons, LIMITS, tuple(e for s in stragglers for e in s.evidence))


def _found_summary(stragglers: tuple[StragglerGpu, ...], waiting: int) -> str:
    first = stragglers[0]
    text = (f"GPU {first.key} is the straggler: it waited {_pct(first.waiting)} of the time "
            f"while its peers waited {_pct(first.peer_waiting)} for it; its work per step "
            f"took about {_pct(first.slowdown)} longer")
    if first.cause != "unknown":
        text += f" ({CAUSE_WORDS.get(first.cause, first.cause)})"
    if len(stragglers) > 1:
        text += "; also " + ", ".join(str(s.key) for s in stragglers[1:])
    return f"{text}. {waiting} GPU(s) waited for it."


def _confidence(gpus: Sequence[GpuSignals], named: list[tuple[GpuSignals, float]],
                hardware: dict[GpuKey, tuple[Evidence, ...]],
                config: StragglerConfig) -> tuple[str, tuple[str, ...]]:
    """Score the verdict: more GPUs, a wider gap, hardware evidence and collective traffic
    during the peers' waiting each add one; waiting without traffic takes one away."""
    gpu, peer = named[0]
    score, reasons = (2, ["compared with the median of several peers"]) if len(gpus) >= 3 \
        else (1, ["two GPUs: a single peer to compare with"])
    if peer - gpu.waiting >= 2 * config.min_gap:
        score += 1
        reasons.append(f"a wide gap ({_pct(peer - gpu.waiting)} of the time)")
    if hardware[gpu.key]:
        score += 1
        reasons.append("hardware evidence on the GPU itself")
    traffic = [g.traffic_share for g in gpus if g.key != gpu.key and g.traffic_share is not None]
    if traffic and median(traffic) >= config.min_traffic_share:
        score += 1
        reasons.append("the peers moved NVLink/PCIe data while waiting (collectives)")
    elif traffic:
        score -= 1
        reasons.append("the peers waited without NVLink/PCIe traffic: maybe not collectives")
    if len(gpus) < 3 and not hardware[gpu.key]:
        score = min(score, 2)
    return (HIGH if score >= 4 else MEDIUM if score >= 2 else LOW), tuple(reasons)


def _not_found(gpus: Sequence[GpuSignals], seen: dict[GpuKey, tuple[Evidence, ...]],
               config: StragglerConfig) -> StragglerVerdict:
    ordered = sorted(gpus, key=lambda g: (g.waiting, g.key))
    best = ordered[0]
    peer = median(p.waiting for p in _peers(gpus, best, set()))
    evidence = tuple(e for g in gpus for e in seen[g.key])
    gap = peer - best.waiting
    if len(gpus) == 2 and gap >= config.min_gap / 2 and peer >= config.min_peer_waiting / 2:
        return _two_gpu_tie(best, ordered[1], seen, config, evidence)
    if peer < config.min_peer_waiting:
        return StragglerVerdict(
            NONE, f"No straggler: no GPU made the others wait (they were busy-waiting "
                  f"{_pct(peer)} of the time at most in the median).", HIGH if len(gpus) > 2
            else MEDIUM, limits=LIMITS, evidence=evidence)
    if gap >= config.min_gap / 2:
        return StragglerVerdict(
            UNDETERMINED, f"Cannot be determined: GPU {best.key} waited less than its peers "
                          f"({_pct(best.waiting)} against {_pct(peer)}), not clearly enough to "
                          f"name it.", limits=LIMITS, evidence=evidence)
    return StragglerVerdict(
        NONE, f"No straggler: all GPUs waited alike ({_pct(peer)} of the time busy but not "
              f"computing): the wait is shared, e.g. input data or communication, not one "
              f"slow GPU.", MEDIUM, limits=LIMITS, evidence=evidence)


def _two_gpu_tie(best: GpuSignals, other: GpuSignals,
                 seen: dict[GpuKey, tuple[Evidence, ...]], config: StragglerConfig,
                 evidence: tuple[Evidence, ...]) -> StragglerVerdict:
    """Two GPUs that differ without the full waiting pattern: hardware breaks the tie."""
    hardware = _hardware(seen)
    if hardware[best.key] and not hardware[other.key]:
        named = StragglerGpu(best.key, best.waiting, other.waiting,
                             slowdown(best.waiting, other.waiting), _cause(seen[best.key]),
                             (_waiting_evidence(best, other.waiting), *seen[best.key]))
        return StragglerVerdict(
            FOUND, _found_summary((named,), 1), LOW, (named,), (other.key,),
            ("two GPUs, the waiting pattern alone is not conclusive",
             "hardware evidence on this GPU only breaks the tie"), LIMITS, named.evidence)
    return StragglerVerdict(
        UNDETERMINED, f"Cannot be determined with two GPUs: {best.key} waited "
                      f"{_pct(best.waiting)} and {other.key} {_pct(other.waiting)}, but "
                      f"{other.key} does not show the full waiting signature and neither GPU "
                      f"alone shows hardware trouble.",
        reasons=("a two-GPU comparison by median would be a coin flip",), limits=LIMITS,
        evidence=evidence)


def _unmeasured(measure: str, hardware: dict[GpuKey, tuple[Evidence, ...]]) -> StragglerVerdict:
    evidence = tuple(e for items in hardware.values() for e in items)
    text = (f"Cannot be determined: SM activity is not measured on these GPUs (measure "
            f"{measure or 'none'}), so waiting cannot be told from computing.")
    if evidence:
        text += f" Hardware evidence: {evidence[0].text}."
    return StragglerVerdict(UNDETERMINED, text, limits=LIMITS, evidence=evidence)


# --- Evidence ------------------------------------------------------------------------------

# Evidence that points at the device; the rest (temperature above the peers', the software
# power limit) is what the heaviest load does to any GPU: context, never the hardware's.
HARDWARE_KINDS = frozenset({"thermal", "hw_slowdown", "clock", "xid", "ecc"})
CAUSE_WORDS = {"thermal": "thermal throttling", "clock": "a low SM clock",
               "xid": "XID errors", "ecc": "ECC errors",
               "hw_slowdown": "a hardware slowdown or power brake",
               "power_limit": "the slowest stage: it works hardest and so runs at its software "
                              "power limit, a consequence of its load, not a fault"}


def _hardware(seen: dict[GpuKey, tuple[Evidence, ...]]) -> dict[GpuKey, tuple[Evidence, ...]]:
    return {key: tuple(e for e in items if e.kind in HARDWARE_KINDS)
            for key, items in seen.items()}


def _evidence(gpu: GpuSignals, gpus: Sequence[GpuSignals],
              config: StragglerConfig) -> tuple[Evidence, ...]:
    """What sets this GPU apart from its peers: throttle reasons, clocks, heat, errors."""
    peers = [g for g in gpus if g.key != gpu.key]
    name, found = str(gpu.key), []
    if gpu.thermal_share is not None and gpu.thermal_share >= config.min_throttle_share:
        found.append(Evidence("thermal", name, f"{name} was thermally throttled "
                              f"{_pct(gpu.thermal_share)} of the time", gpu.thermal_share))
    if gpu.hw_slowdown_share is not None and gpu.hw_slowdown_share >= config.min_throttle_share:
        found.append(Evidence("hw_slowdown", name, f"{name} reported a hardware slowdown or "
                              f"power brake {_pct(gpu.hw_slowdown_share)} of the time",
                              gpu.hw_slowdown_share))
    found += _clock_evidence(gpu, peers, config)
    temp = _peer_median([p.temperature for p in peers])
    if gpu.temperature is not None and temp is not None and \
            gpu.temperature >= temp + config.temp_rise_c:
        found.append(Evidence("temperature", name, f"{name} ran at {gpu.temperature:.0f} °C "
                              f"against {temp:.0f} °C on its peers", gpu.temperature))
    if _capped(gpu, config):
        found.append(_power_cap_evidence(gpu, peers))
    if gpu.xids:
        found.append(Evidence("xid", name, f"{name} reported XID "
                              f"{', '.join(map(str, gpu.xids))}", float(gpu.xids[0])))
    if gpu.ecc_dbe:
        found.append(Evidence("ecc", name, f"{name} counted {gpu.ecc_dbe} uncorrectable ECC "
                              f"error(s)", float(gpu.ecc_dbe)))
    return tuple(found)


def _capped(gpu: GpuSignals, config: StragglerConfig) -> bool:
    return gpu.power_share is not None and gpu.power_share >= config.min_throttle_share


def _clock_evidence(gpu: GpuSignals, peers: Sequence[GpuSignals],
                    config: StragglerConfig) -> list[Evidence]:
    """SM clocks below the peers' at the same load.

    A GPU at its software power limit lowers its clocks to stay under it: compared only
    with peers that work at least as hard (none: the cap explains the clock). A GPU below
    its peers' clocks with no power limit reached is held back by the device itself.
    """
    if _capped(gpu, config):
        peers = [p for p in peers if p.computing >= gpu.computing - config.same_load]
    clock = _peer_median([p.sm_clock for p in peers])
    if gpu.sm_clock is None or not clock or gpu.sm_clock >= config.clock_drop * clock:
        return []
    name = str(gpu.key)
    return [Evidence("clock", name, f"{name} ran its SMs at {gpu.sm_clock:.0f} MHz against "
                     f"{clock:.0f} MHz on peers working as hard", gpu.sm_clock)]


def _power_cap_evidence(gpu: GpuSignals, peers: Sequence[GpuSignals]) -> Evidence:
    """At the software power limit: context, with how hard it worked against its peers."""
    name, share = str(gpu.key), gpu.power_share or 0.0
    text = f"{name} ran at its software power limit {_pct(share)} of the time"
    if peers and _busiest(gpu, [gpu, *peers]):
        text += (f" while computing {_pct(gpu.computing)} of the time against "
                 f"{_pct(median(p.computing for p in peers))} on its peers: the limit follows "
                 f"from its load, not a fault")
    return Evidence("power_cap", name, text, share)


def _waiting_evidence(gpu: GpuSignals, peer_waiting: float) -> Evidence:
    return Evidence("waiting", str(gpu.key), f"{gpu.key} waited {_pct(gpu.waiting)} of the "
                    f"time, its peers {_pct(peer_waiting)} (median)", gpu.waiting)


def _cause(evidence: tuple[Evidence, ...], busiest: bool = False) -> str:
    """The hardware cause the evidence points at; else, for the busiest GPU at its software
    power limit, the slowest stage (``power_limit``); else unknown."""
    kinds = {e.kind for e in evidence}
    for cause, needs in (("thermal", {"thermal"}), ("hw_slowdown", {"hw_slowdown"}),
                         ("xid", {"xid"}), ("ecc", {"ecc"}), ("clock", {"clock"})):
        if kinds & needs:
            return cause
    return "power_limit" if busiest and "power_cap" in kinds else "unknown"


def _busiest(gpu: GpuSignals, gpus: Sequence[GpuSignals]) -> bool:
    """It computed more than any other GPU of the job (its SMs active the most)."""
    return all(gpu.computing > g.computing for g in gpus if g.key != gpu.key)


def _peer_median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return median(known) if known else None


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"
