"""Telemetry to the rules' frame: every GPU and node on buckets of one step, each GPU bucket
with its owner (the ``hpc_job`` label, else a ``JobGpu`` binding) or known to be free.

Ownership is "unknown" (``bound=False``) on a node whose series never carry the job
label, at times when a GPU job without bindings ran there: any of its GPUs might be that
job's. The frame counts those buckets so the run can say what it could not judge.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from apps.analysis.security_types import Allocation, Frame, GpuPoint, GpuTrack, NodePoint, NodeTrack
from apps.analysis.timeseries import GpuKey, Point
from apps.clusters.adapters.catalogue import Catalogue
from apps.security.adapters.telemetry import INSTANT_MEASURE, RawTelemetry

# catalogue measure -> GpuPoint field
_FIELDS = {"gpu_util": "util", "fb_used": "fb_mib", "sm_active": "sm",
           "tensor_active": "tensor", "power": "power_w", "nvlink_tx": "nvlink_bps"}
_MIG_LABELS = ("GPU_I_ID", "GPU_I_PROFILE")
Held = Mapping[GpuKey, list[tuple[float, float, str]]]  # (start, end, job id) per GPU


@dataclass(frozen=True)
class Grid:
    """Buckets ``(start + k*step, start + (k+1)*step]`` for k in 0..n-1."""

    start: float
    step: float
    n: int

    def bucket(self, t: float) -> int | None:
        k = math.ceil((t - self.start) / self.step - 1e-6) - 1
        return k if 0 <= k < self.n else None

    def end_of(self, k: int) -> float:
        return self.start + (k + 1) * self.step


@dataclass
class FrameStats:
    gpus: int = 0
    gpu_buckets: int = 0
    unknown_buckets: int = 0
    unmapped_hosts: list[str] = field(default_factory=list)


@dataclass
class _Bucket:
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    owners: set[str] = field(default_factory=set)
    at: dict[float, set[str]] = field(default_factory=dict)  # instant -> jobs seen then
    mig: bool = False

    def together(self) -> tuple[str, ...]:
        """The largest set of jobs seen at one instant, when it has two or more."""
        best = max(self.at.values(), key=len, default=set())
        return tuple(sorted(best)) if len(best) > 1 else ()

    def add(self, name: str, value: float) -> None:
        self.sums[name] += value
        self.counts[name] += 1

    def mean(self, name: str) -> float | None:
        return self.sums[name] / self.counts[name] if self.counts.get(name) else None


def build_frame(raw: RawTelemetry, catalogue: Catalogue, grid: Grid,
                allocations: Iterable[Allocation], held: Held,
                bound_jobs: set[int]) -> tuple[Frame, FrameStats]:
    """The frame for ``grid`` from ``raw``; ``held`` are the GPU bindings and
    ``bound_jobs`` the jobs that have any (their GPUs are known wherever they ran)."""
    buckets, meta, labelled = _gpu_buckets(raw, catalogue, grid)
    by_host: dict[str, list[Allocation]] = defaultdict(list)
    for a in allocations:
        if a.gpus > 0:
            for host in a.nodes:
                by_host[host].append(a)
    stats = FrameStats(gpus=len(buckets))
    tracks = []
    for key in sorted(buckets):
        uuid, model = meta.get(key, ("", ""))
        points = tuple(_point(key, k, b, grid, held, by_host, bound_jobs, key.host in labelled)
                       for k, b in sorted(buckets[key].items()))
        stats.gpu_buckets += len(points)
        stats.unknown_buckets += sum(1 for p in points if not p.bound)
        tracks.append(GpuTrack(key.host, key.gpu, uuid, model, points))
    stats.unmapped_hosts = sorted({k.host for k in buckets} - labelled)
    return Frame(grid.step, tuple(tracks), _node_tracks(raw, grid)), stats


def _gpu_buckets(raw: RawTelemetry, catalogue: Catalogue, grid: Grid) -> tuple[
        dict[GpuKey, dict[int, _Bucket]], dict[GpuKey, tuple[str, str]], set[str]]:
    buckets: dict[GpuKey, dict[int, _Bucket]] = defaultdict(lambda: defaultdict(_Bucket))
    meta: dict[GpuKey, tuple[str, str]] = {}
    labelled: set[str] = set()
    for measure, series in raw.gpus:
        key = catalogue.gpu_key(series)
        name = _FIELDS.get(measure)
        if key is None or name is None:
            continue
        job = series.labels.get(catalogue.job_label, "")
        labelled |= {key.host} if job else set()
        meta.setdefault(key, (series.label(*catalogue.uuid_labels),
                              series.labels.get("modelName", "")))
        mig = any(series.labels.get(label) for label in _MIG_LABELS)
        for t, v in series.points:
            k = grid.bucket(t)
            if k is None or not math.isfinite(v):
                continue
            bucket = buckets[key][k]
            bucket.add(name, v)
            bucket.mig = bucket.mig or mig
            if job:
                bucket.owners.add(job)
                if measure == INSTANT_MEASURE:
                    bucket.at.setdefault(t, set()).add(job)
    return buckets, meta, labelled


def _point(key: GpuKey, k: int, bucket: _Bucket, grid: Grid, held: Held,
           by_host: Mapping[str, list[Allocation]], bound_jobs: set[int],
           labelled: bool) -> GpuPoint:
    t = grid.end_of(k)
    owners = sorted(bucket.owners)
    together = bucket.together()
    if not owners:
        spans = held.get(key, [])
        owners = _held_by(spans, t - grid.step, t)
        together = _held_together(spans, t - grid.step, t) if len(owners) > 1 else ()
    bound = True
    if not owners and not labelled:
        # No label on this node: free only if every GPU job running here has bindings.
        bound = not any(a.job_id not in bound_jobs and a.overlaps(key.host, t - grid.step, t)
                        for a in by_host.get(key.host, []))
    return GpuPoint(t, tuple(owners), bound, bucket.mean("util"), bucket.mean("fb_mib"),
                    bucket.mean("sm"), bucket.mean("tensor"), bucket.mean("power_w"),
                    bucket.mean("nvlink_bps"), bucket.mig, together)


def _held_by(spans: list[tuple[float, float, str]], start: float, end: float) -> list[str]:
    return sorted({job for s, e, job in spans if s < end and e > start})


def _held_together(spans: list[tuple[float, float, str]], start: float,
                   end: float) -> tuple[str, ...]:
    """The most jobs whose bindings cover one instant of ``(start, end]``."""
    inside = [(max(s, start), min(e, end), job) for s, e, job in spans if s < end and e > start]
    best: set[str] = set()
    for instant, _, _ in inside:
        holding = {job for s, e, job in inside if s <= instant < e}
        best = holding if len(holding) > len(best) else best
    return tuple(sorted(best)) if len(best) > 1 else ()


def _node_tracks(raw: RawTelemetry, grid: Grid) -> tuple[NodeTrack, ...]:
    tracks = []
    for host in sorted(raw.nodes):
        measures = raw.nodes[host]
        columns = {name: _bucketed(measures.get(name, []), grid)
                   for name in ("ib", "egress", "transport_errors", "link_errors",
                                "pkey_errors", "cpu_busy", "cpu_cores")}
        devices = {dev: _bucketed(pts, grid) for dev, pts in raw.ib_devices.get(host, {}).items()}
        ks = sorted(set().union(*(c.keys() for c in columns.values())))
        points = tuple(NodePoint(grid.end_of(k), columns["ib"].get(k), _top(devices, k),
                                 columns["egress"].get(k), columns["transport_errors"].get(k),
                                 columns["link_errors"].get(k), columns["pkey_errors"].get(k),
                                 columns["cpu_busy"].get(k), columns["cpu_cores"].get(k))
                       for k in ks)
        tracks.append(NodeTrack(host, points))
    return tuple(tracks)


def _bucketed(points: Iterable[Point], grid: Grid) -> dict[int, float]:
    """Mean per bucket; points at one timestamp (several devices) are summed first."""
    at: dict[float, float] = defaultdict(float)
    for t, v in points:
        if math.isfinite(v):
            at[t] += v
    sums: dict[int, list[float]] = defaultdict(list)
    for t, v in at.items():
        k = grid.bucket(t)
        if k is not None:
            sums[k].append(v)
    return {k: sum(vs) / len(vs) for k, vs in sums.items()}


def _top(devices: Mapping[str, Mapping[int, float]], k: int) -> str:
    best = max(((v.get(k, 0.0), dev) for dev, v in devices.items()), default=(0.0, ""))
    return best[1] if best[0] > 0 else ""
