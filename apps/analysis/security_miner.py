"""Rule 2: miner-like compute inside a job (``security_rules.RULES["miner_in_job"]``).

A combination, not a single signal (the issue's table). A job becomes a candidate by one of
two patterns, and the other signals grade it into a stated confidence:

- **GPU mining**: its GPUs run flat out with no tensor-pipe work (``_signature_runs``);
- **CPU mining in a GPU job**: the CPU of its nodes pegged while its allocated GPUs sit idle
  (``_cpu_runs``; node_exporter CPU, so node-level: only a whole pegged node counts, and a
  CPU-heavy preprocessing job is the false positive, hence the low severity of its own).

Supporting signals: a small memory footprint, high steady power, no interconnect traffic
(NVLink, and InfiniBand bytes on the job's nodes for a multi-node job), node egress well
above the cluster's, off-hours, and the CPU pegged during the GPU signature.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apps.analysis.security_base import (
    gpu_tracks,
    long_enough,
    lower,
    mean,
    param,
    quiet,
    reportable,
    runs,
    span,
    window,
)
from apps.analysis.security_types import (
    CONFIDENCES,
    SEVERITIES,
    Allocation,
    Allow,
    GpuPoint,
    GpuTrack,
    Hit,
    Inputs,
    NodePoint,
    Outcome,
    RuleConfig,
)

# Supporting signals and what each adds to the score (off-hours alone proves little).
_WEIGHTS = {"small_memory": 1.0, "high_power": 1.0, "egress": 1.0, "no_interconnect": 1.0,
            "off_hours": 0.5, "cpu_pegged": 1.0}
# A bucket may miss a threshold by this much (noise) without ending a run; the run's means
# must still meet the thresholds.
_TOLERANCE = 0.10


@dataclass
class _Part:
    """One GPU's signature run, attributed to a job (or to a set of candidate jobs)."""

    track: GpuTrack
    run: list[int]
    how: str
    candidates: tuple[int, ...] = ()


def miner_in_job(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Jobs whose GPUs show the mining signature, or whose nodes' CPU is pegged while their
    GPUs idle, graded by supporting signals.

    1. Signature runs per GPU: util >= util_min, tensor pipe <= tensor_max, SM active >=
       sm_min where collected, for at least min_minutes.
    2. Each run belongs to the job holding the GPU (label or binding); on a node without
       either, to the one job whose start and end line up with the run (else the node).
    3. Per job, supporting signals give a confidence; below min_confidence nothing is
       raised. Without the egress signal the severity is one level lower.
    4. Jobs without a GPU signature: stretches of at least min_minutes where every GPU of
       the job seen is idle (util <= gpu_idle_max) and every node it holds has its CPU
       pegged (busy share >= cpu_busy_min); graded by egress, off-hours and the CPU itself,
       raised at ``cpu_only_severity``.
    """
    step, tracks = gpu_tracks(inputs)
    out = Outcome()
    parts: dict[str, list[_Part]] = defaultdict(list)
    for track in tracks:
        for part in _signature_runs(inputs, cfg, allow, track, step):
            if part.how == "ambiguous":
                parts["?" + track.host + ":" + ",".join(map(str, part.candidates))].append(part)
            elif part.how != "no job":
                parts[part.how].append(part)
    baseline = _egress_baseline(inputs)
    for job, found in sorted(parts.items()):
        hit = _miner_hit(inputs, cfg, allow, job, found, baseline, step)
        if hit is not None:
            out.hits.append(hit)
        elif job.startswith("?"):
            out.skipped.append(f"miner-like GPU activity on {found[0].track.host} not tied to "
                               f"one job (candidates {', '.join(map(str, found[0].candidates))})")
    for alloc, buckets in _cpu_runs(inputs, cfg, allow, step):
        if str(alloc.job_id) not in parts:
            hit = _cpu_miner_hit(inputs, cfg, alloc, buckets, baseline, step)
            out.hits += [hit] if hit is not None else []
    return out


def _signature_runs(inputs: Inputs, cfg: RuleConfig, allow: Allow, track: GpuTrack,
                    step: float) -> list[_Part]:
    pts = track.points
    util, tensor, sm = param(cfg, "util_min"), param(cfg, "tensor_max"), param(cfg, "sm_min")

    def keep(p: GpuPoint) -> bool:
        return ((p.util or 0) >= util - _TOLERANCE and p.tensor is not None
                and p.tensor <= tensor + _TOLERANCE / 3
                and (p.sm is None or p.sm >= sm - _TOLERANCE)
                and not quiet(allow, track.host, p, track))

    found = []
    for run in runs(pts, keep, step):
        points = [pts[i] for i in run]
        sm_mean = mean(p.sm for p in points)
        if (mean(p.util for p in points) or 0) < util or (mean(p.tensor for p in points) or 0) \
                > tensor or (sm_mean is not None and sm_mean < sm) or \
                not long_enough(pts, run, step, param(cfg, "min_minutes")) or \
                not reportable(inputs, span(pts, run, step)[1]):
            continue
        found.append(_attribute(inputs, track, run, step))
    return found


def _attribute(inputs: Inputs, track: GpuTrack, run: list[int], step: float) -> _Part:
    """Whose run is it: the job label or binding; else the one job that lines up in time."""
    pts = track.points
    owners = Counter(pts[i].owners[0] for i in run if pts[i].owners)
    if owners:
        return _Part(track, run, owners.most_common(1)[0][0])
    if all(pts[i].bound for i in run):
        return _Part(track, run, "no job")  # rule 1's, not a job's
    first, last = pts[run[0]].t, pts[run[-1]].t
    at_start, at_end = run[0] == 0, run[-1] == len(pts) - 1
    fits = [a.job_id for a in inputs.allocations if a.gpus > 0 and track.host in a.nodes
            and (first - 2 * step <= a.start <= first or (at_start and a.start <= first))
            and (last - step <= a.end <= last + step or (at_end and a.end >= last - step))]
    if len(fits) == 1:
        return _Part(track, run, str(fits[0]), (fits[0],))
    near = tuple(sorted(a.job_id for a in inputs.allocations
                        if a.overlaps(track.host, first - step, last)))
    return _Part(track, run, "ambiguous", tuple(fits) or near)


def _miner_hit(inputs: Inputs, cfg: RuleConfig, allow: Allow, job: str, parts: list[_Part],
               baseline: float | None, step: float) -> Hit | None:
    alloc = None if job.startswith("?") else inputs.allocation(job)
    if alloc is not None and alloc.user in allow.exempt_users:
        return None
    points = [p.track.points[i] for p in parts for i in p.run]
    signals = _signals(inputs, cfg, parts, points, baseline, alloc)
    confidence = _graded(cfg, signals, ambiguous=alloc is None)
    if confidence is None:
        return None
    start = min(span(p.track.points, p.run, step)[0] for p in parts)
    end = max(span(p.track.points, p.run, step)[1] for p in parts)
    severity = cfg.severity if signals["egress"]["met"] else lower(cfg.severity, 1)
    return _miner_finding(cfg, job, alloc, parts, signals, confidence, severity, start, end,
                          step)


def _graded(cfg: RuleConfig, signals: Mapping[str, Mapping[str, object]],
            ambiguous: bool) -> str | None:
    """The confidence the met signals give, or None below ``min_confidence``."""
    score = sum(weight for name, weight in _WEIGHTS.items() if signals[name]["met"])
    confidence = _confidence(score, ambiguous)
    floor = param(cfg, "min_confidence")
    if not confidence or CONFIDENCES.index(confidence) < CONFIDENCES.index(floor):
        return None
    return confidence


def _confidence(score: float, ambiguous: bool) -> str:
    level = 3 if score >= 3 else 2 if score >= 2 else 1 if score >= 1 else 0
    level -= 1 if ambiguous else 0  # not tied to one job: one level less sure
    return CONFIDENCES[level - 1] if level > 0 else ""


def _miner_finding(cfg: RuleConfig, job: str, a: Allocation | None, parts: list[_Part],
                   signals: Mapping[str, Mapping[str, object]], confidence: str, severity: str,
                   start: float, end: float, step: float) -> Hit:
    gpus = sorted({f"{p.track.host}:{p.track.gpu}" for p in parts})
    hosts = sorted({p.track.host for p in parts})
    how = "time alignment" if parts[0].candidates and a else \
        "not tied to one job" if a is None else "job label or GPU binding"
    title = (f"Job {job}: miner-like GPU use ({confidence} confidence)" if a else
             f"{hosts[0]}: miner-like GPU use in an unidentified job ({confidence} confidence)")
    return Hit("miner_in_job", severity, f"job:{job}" if a else f"node:{hosts[0]}", title,
               start, end, node=hosts[0] if len(hosts) == 1 else "",
               gpu=parts[0].track.gpu if len(gpus) == 1 else None,
               uuid=parts[0].track.uuid if len(gpus) == 1 else "",
               job_id=a.job_id if a else None, user=a.user if a else "",
               team=a.team if a else "", confidence=confidence, merge_gap=1.5 * step,
               evidence={"window": window(start, end), "gpus": gpus, "attribution": how,
                         "candidates": list(parts[0].candidates), "signals": signals,
                         "confidence": confidence})


def _signals(inputs: Inputs, cfg: RuleConfig, parts: list[_Part], points: list[GpuPoint],
             baseline: float | None, alloc: Allocation | None) -> dict[str, dict[str, object]]:
    fb = mean(p.fb_mib for p in points)
    share = _power_share(cfg, parts)
    egress = _egress(inputs, parts)
    ratio = egress / baseline if egress is not None and baseline else None
    gpus = alloc.gpus if alloc else len({(p.track.host, p.track.gpu) for p in parts})
    night = _off_hours_share(inputs, cfg, points)
    during = {p.track.host: {p.track.points[i].t for i in p.run} for p in parts}
    cpu = mean(_node_values(inputs, during, "cpu_share"))
    return {
        "core": {"met": True, "mean_util": _r(mean(p.util for p in points)),
                 "mean_tensor": _r(mean(p.tensor for p in points)),
                 "mean_sm": _r(mean(p.sm for p in points))},
        "small_memory": _signal(fb, fb is not None and fb <= param(cfg, "fb_small_mib"), "MiB"),
        "high_power": _signal(share, share is not None and share >= param(cfg, "power_share_min"),
                              "share of max power"),
        "egress": _signal(ratio, ratio is not None and ratio >= param(cfg, "egress_ratio"),
                          "x cluster median"),
        "no_interconnect": _no_interconnect(inputs, cfg, parts, points, alloc, gpus),
        "off_hours": _signal(night, night is not None and night >= 0.5, "share of time"),
        "cpu_pegged": _signal(cpu, cpu is not None and cpu >= param(cfg, "cpu_busy_min"),
                              "share of the node's CPU"),
    }


def _no_interconnect(inputs: Inputs, cfg: RuleConfig, parts: list[_Part],
                     points: list[GpuPoint], alloc: Allocation | None,
                     gpus: int) -> dict[str, object]:
    """No NCCL traffic in a multi-GPU job: NVLink quiet where collected and, for a multi-node
    job, InfiniBand on every node it holds no more than ``ib_quiet_bps`` (storage traffic).
    A single-node job is judged by NVLink, a multi-node one needs InfiniBand counters."""
    nvlink = mean(p.nvlink_bps for p in points)
    hosts = alloc.nodes if alloc else frozenset(p.track.host for p in parts)
    ib = None
    if len(hosts) > 1:
        times = {t for p in parts for t in (p.track.points[i].t for i in p.run)}
        ib = _node_max_mean(inputs, {host: times for host in hosts}, "ib_bps")
    nv_quiet = nvlink is None or nvlink <= param(cfg, "nvlink_quiet_bps")
    if len(hosts) > 1:
        met = ib is not None and ib <= param(cfg, "ib_quiet_bps") and nv_quiet
    else:
        met = nvlink is not None and nv_quiet
    return {**_signal(nvlink, gpus >= 2 and met, "B/s NVLink"), "ib_bps": _r(ib)}


def _signal(value: float | None, met: bool, unit: str) -> dict[str, object]:
    return {"met": bool(met), "value": _r(value), "unit": unit}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _power_share(cfg: RuleConfig, parts: list[_Part]) -> float | None:
    shares = []
    for part in parts:
        limit = _power_limit(param(cfg, "gpu_power_w"), part.track.model)
        power = mean(part.track.points[i].power_w for i in part.run)
        if limit and power is not None:
            shares.append(power / limit)
    return sum(shares) / len(shares) if shares else None


def _power_limit(table: Mapping[str, float], model: str) -> float | None:
    """The table entry whose name is the longest one found in the model name."""
    matches = [name for name in table if name.lower() in model.lower()]
    return float(table[max(matches, key=len)]) if matches else None


def _egress_baseline(inputs: Inputs) -> float | None:
    values = [p.egress_bps for n in (inputs.frame.nodes if inputs.frame else ())
              for p in n.points if p.egress_bps is not None and math.isfinite(p.egress_bps)]
    return statistics.median(values) if values else None


def _egress(inputs: Inputs, parts: list[_Part]) -> float | None:
    """Mean egress of the job's nodes over the buckets of its signature runs."""
    times: dict[str, set[float]] = {p.track.host: set() for p in parts}
    for part in parts:
        times[part.track.host].update(part.track.points[i].t for i in part.run)
    return mean(_node_values(inputs, times, "egress_bps"))


def _node_points(inputs: Inputs, times: Mapping[str, Iterable[float]],
                 ) -> dict[str, list[NodePoint]]:
    """Each host's node points at the given bucket ends (the GPU and node tracks share
    one grid; half a step of slack for data built otherwise)."""
    step = inputs.frame.step if inputs.frame else 60.0
    nodes = {n.host: n for n in (inputs.frame.nodes if inputs.frame else ())}
    out: dict[str, list[NodePoint]] = {}
    for host, ts in times.items():
        wanted = sorted(ts)
        if host not in nodes or not wanted:
            continue
        out[host] = [p for p in nodes[host].points if _near(wanted, p.t, step / 2)]
    return out


def _near(ordered: list[float], t: float, slack: float) -> bool:
    i = bisect.bisect_left(ordered, t - slack)
    return i < len(ordered) and ordered[i] < t + slack


def _node_values(inputs: Inputs, times: Mapping[str, Iterable[float]],
                 attr: str) -> list[float | None]:
    return [getattr(p, attr) for pts in _node_points(inputs, times).values() for p in pts]


def _node_max_mean(inputs: Inputs, times: Mapping[str, Iterable[float]],
                   attr: str) -> float | None:
    """The busiest node's mean of ``attr`` (None: no node has the measure)."""
    means = [mean(getattr(p, attr) for p in pts)
             for pts in _node_points(inputs, times).values()]
    known = [m for m in means if m is not None]
    return max(known) if known else None


# --- CPU pegged while the allocated GPUs idle --------------------------------------------------


@dataclass(frozen=True)
class _CpuBucket:
    """One bucket of a job: its GPUs' highest util and its least busy node's CPU share."""

    t: float
    gpu_util: float
    cpu_share: float


def _cpu_runs(inputs: Inputs, cfg: RuleConfig, allow: Allow,
              step: float) -> list[tuple[Allocation, list[_CpuBucket]]]:
    """Per GPU job: stretches where all its GPUs seen are idle and all its nodes pegged."""
    idle, busy = param(cfg, "gpu_idle_max"), param(cfg, "cpu_busy_min")
    shares = _cpu_shares(inputs)
    utils = _job_gpu_util(inputs, allow) if shares else {}
    found = []
    for alloc in inputs.allocations:
        seen = utils.get(str(alloc.job_id))
        if alloc.gpus <= 0 or not seen or alloc.user in allow.exempt_users:
            continue
        buckets = [_CpuBucket(t, u, min(shares.get(h, {}).get(round(t), -1.0)
                                        for h in alloc.nodes)) for t, u in sorted(seen.items())]
        for run in runs(buckets, lambda b: b.gpu_util <= idle and b.cpu_share >= busy, step):
            if long_enough(buckets, run, step, param(cfg, "min_minutes")) and \
                    reportable(inputs, span(buckets, run, step)[1]):
                found.append((alloc, [buckets[i] for i in run]))
    return found


def _cpu_shares(inputs: Inputs) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for track in inputs.frame.nodes if inputs.frame else ():
        values = {round(p.t): p.cpu_share for p in track.points}
        out[track.host] = {t: v for t, v in values.items() if v is not None}
    return {host: v for host, v in out.items() if v}


def _job_gpu_util(inputs: Inputs, allow: Allow) -> dict[str, dict[float, float]]:
    """The highest util of each job's GPUs per bucket (GPUs held by one job, not quiet)."""
    out: dict[str, dict[float, float]] = defaultdict(dict)
    for track in gpu_tracks(inputs)[1]:
        for p in track.points:
            if len(p.owners) != 1 or p.util is None or quiet(allow, track.host, p, track):
                continue
            at = out[p.owners[0]]
            at[p.t] = max(at.get(p.t, 0.0), p.util)
    return out


def _cpu_miner_hit(inputs: Inputs, cfg: RuleConfig, alloc: Allocation,
                   buckets: list[_CpuBucket], baseline: float | None, step: float) -> Hit | None:
    times = {host: {b.t for b in buckets} for host in alloc.nodes}
    egress = mean(_node_values(inputs, times, "egress_bps"))
    ratio = egress / baseline if egress is not None and baseline else None
    night = _off_hours_share(inputs, cfg, buckets)
    cpu = mean(b.cpu_share for b in buckets)
    idle: dict[str, object] = {"met": False, "value": None, "unit": "n/a: the GPUs are idle"}
    signals: dict[str, dict[str, object]] = {
        "core": {"met": True, "pattern": "CPU pegged while the allocated GPUs idle",
                 "mean_cpu_share": _r(cpu), "max_gpu_util": _r(max(b.gpu_util for b in buckets))},
        "small_memory": idle, "high_power": idle, "no_interconnect": idle,
        "egress": _signal(ratio, ratio is not None and ratio >= param(cfg, "egress_ratio"),
                          "x cluster median"),
        "off_hours": _signal(night, night is not None and night >= 0.5, "share of time"),
        "cpu_pegged": _signal(cpu, True, "share of the node's CPU"),
    }
    confidence = _graded(cfg, signals, ambiguous=False)
    if confidence is None:
        return None
    severity = param(cfg, "cpu_only_severity")
    start, end = buckets[0].t - step, buckets[-1].t
    hosts = sorted(alloc.nodes)
    return Hit("miner_in_job", severity if severity in SEVERITIES else "low",
               f"job:{alloc.job_id}",
               f"Job {alloc.job_id}: CPU pegged while its GPUs idle ({confidence} confidence)",
               start, end, node=hosts[0] if len(hosts) == 1 else "", job_id=alloc.job_id,
               user=alloc.user, team=alloc.team, confidence=confidence, merge_gap=1.5 * step,
               evidence={"window": window(start, end), "gpus": [], "nodes": hosts,
                         "attribution": "job label or GPU binding", "candidates": [],
                         "signals": signals, "confidence": confidence,
                         "node_level": "CPU is read per node (node_exporter): only a node "
                                       "pegged as a whole counts, whoever's load it is"})


def _off_hours_share(inputs: Inputs, cfg: RuleConfig,
                     points: Sequence[GpuPoint | _CpuBucket]) -> float | None:
    try:
        zone = ZoneInfo(inputs.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    begin, finish = param(cfg, "offhours_start"), param(cfg, "offhours_end")
    hours = [datetime.fromtimestamp(p.t, UTC).astimezone(zone).hour for p in points]
    if not hours:
        return None
    night = [h for h in hours if h >= begin or h < finish]
    return len(night) / len(hours)
