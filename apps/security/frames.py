"""Telemetry to the rules' frame: every GPU and node on buckets of one step, each GPU bucket
with its owner (the ``hpc_job`` label, else a ``JobGpu`` binding) or known to be free.

Ownership is "unknown" (``bound=False``) on a node whose series never carry the job
label, at times when a GPU job without bindings ran there: any of its GPUs might be that
job's. The frame counts those buckets so the run can say what it could not judge.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from apps.analysis.security_types import Allocation, Frame, GpuPoint, GpuTrack, NodePoint, NodeTrack
from apps.analysis.timeseries import GpuKey, Point, Series
from apps.clusters.adapters.catalogue import Catalogue
from apps.security.adapters.telemetry import INSTANT_MEASURE, RawTelemetry

# catalogue measures, in the order of GpuPoint's fields (util, fb_mib, sm, tensor, power_w,
# nvlink_bps)
_MEASURES = ("gpu_util", "fb_used", "sm_active", "tensor_active", "power", "nvlink_tx")
_INDEX = {measure: f for f, measure in enumerate(_MEASURES)}
_MIG_LABELS = ("GPU_I_ID", "GPU_I_PROFILE")
Held = Mapping[GpuKey, list[tuple[float, float, str]]]  # (start, end, job id) per GPU


@dataclass(frozen=True)
class Grid:
    """Buckets ``(start + k*step, start + (k+1)*step]`` for k in 0..n-1."""

    start: float
    step: float
    n: int

    @classmethod
    def over(cls, start: float, end: float, step: float) -> Grid:
        """Buckets of ``step`` (one second at least) ending at ``end`` and covering
        ``start``: a detection window's frame."""
        step = max(step, 1.0)
        n = math.ceil((end - start) / step)
        return cls(end - n * step, step, n)

    def bucket(self, t: float) -> int | None:
        k = math.ceil((t - self.start) / self.step - 1e-6) - 1
        return k if 0 <= k < self.n else None

    def end_of(self, k: int) -> float:
        if 0 <= k < self.n:
            return self.ends[k]
        return self.start + (k + 1) * self.step

    @cached_property
    def ends(self) -> tuple[float, ...]:
        # one float per bucket, shared by every point of the frame (not one per point)
        return tuple(self.start + (k + 1) * self.step for k in range(self.n))


@dataclass
class FrameStats:
    gpus: int = 0
    gpu_buckets: int = 0
    unknown_buckets: int = 0
    unmapped_hosts: list[str] = field(default_factory=list)


class _Gpu:
    """One GPU's buckets, as flat arrays rather than an object per bucket: per field
    (``_MEASURES`` order, field-major), the sum and count of the values in each bucket; the
    jobs labelled in each bucket; and, at each instant of the instant measure, the job seen
    first and, where two or more were seen at once, all of them. (A 10,000-GPU window has
    350,000 buckets: an object with dicts per bucket took half a gigabyte.)

    Most GPUs only ever see one job at a time: until a second job shows up, the instants
    are an array of floats beside that job, not a dict keyed by float objects (issue 29:
    a kilobyte or three per GPU at 100,000 GPUs)."""

    __slots__ = ("counts", "first", "many", "mig", "owners", "seen", "solo", "solo_at",
                 "sums")

    def __init__(self, n: int) -> None:
        self.sums = array("d", bytes(8 * len(_MEASURES) * n))
        self.counts = array("i", bytes(4 * len(_MEASURES) * n))
        self.seen = bytearray(n)  # a bucket exists once any value fell in it
        # bucket -> jobs, in the order seen (None: no job label in the bucket)
        self.owners: list[tuple[str, ...] | None] = [None] * n
        self.solo: str | None = None  # the one job seen at instants so far
        self.solo_at = array("d")  # ... and those instants, in the order seen
        self.first: dict[float, str] | None = None  # instant -> the first job seen then,
        # once a second job was seen at any instant
        self.many: dict[float, set[str]] = {}  # instants with two or more jobs
        self.mig: set[int] = set()

    def at(self, t: float, job: str) -> None:
        """``job`` was seen on the GPU at instant ``t``."""
        if self.first is None:
            if self.solo is None or self.solo == job:
                self.solo = job
                self.solo_at.append(t)
                return
            self.first = dict.fromkeys(self.solo_at, self.solo)  # in the order first seen
            self.solo_at = array("d")
        first = self.first.setdefault(t, job)
        if first != job:
            self.many.setdefault(t, {first}).add(job)

    def means(self, n: int) -> list[tuple[float | None, ...]]:
        """Per bucket, the mean of each field (None where it had no value)."""
        sums, counts = self.sums, self.counts
        columns = [[sums[i] / counts[i] if counts[i] else None
                    for i in range(f * n, (f + 1) * n)] for f in range(len(_MEASURES))]
        return list(zip(*columns, strict=True))

    def together(self, grid: Grid) -> dict[int, tuple[str, ...]]:
        """Per bucket, the largest set of jobs seen at one instant, when it has two or
        more (the first such instant of the bucket on a tie)."""
        best: dict[int, set[str]] = {}
        for t in self.first or ():  # instants in the order first seen
            jobs = self.many.get(t)
            k = grid.bucket(t)
            if jobs is not None and k is not None and len(jobs) > len(best.get(k, ())):
                best[k] = jobs
        return {k: tuple(sorted(jobs)) for k, jobs in best.items()}


class GpuFold:
    """A frame's GPU buckets, filled one series at a time and keeping no series: a store's
    answer is folded as it is decoded (issue 29; 100,000 GPUs' series held whole took
    most of 2 GB). Folding the series of ``raw.gpus`` in their order gives the frame
    ``build_frame`` always built from them."""

    def __init__(self, catalogue: Catalogue, grid: Grid) -> None:
        self.catalogue, self.grid = catalogue, grid
        self.gpus: dict[GpuKey, _Gpu] = {}
        self.meta: dict[GpuKey, tuple[str, str]] = {}  # (uuid, model), from the first series
        self.labelled: set[str] = set()  # hosts with a job label on any series
        self._singles: dict[str, tuple[str, ...]] = {}  # one ``(job,)`` per job, shared

    def add(self, measure: str, series: Series) -> None:
        """Fold one series of ``measure`` (a catalogue GPU measure; others are ignored)."""
        catalogue = self.catalogue
        key = catalogue.gpu_key(series)
        f = _INDEX.get(measure)
        if key is None or f is None:
            return
        job = catalogue.job_of(series)
        if job:
            self.labelled.add(key.host)
        if key not in self.meta:
            self.meta[key] = (catalogue.uuid_of(series), catalogue.model_of(series))
        gpu = self.gpus.get(key) or self.gpus.setdefault(key, _Gpu(self.grid.n))
        ks = _accumulate(gpu, f, series.points, self.grid)
        if any(series.labels.get(label) for label in _MIG_LABELS):
            gpu.mig.update(k for k, _ in ks)
        if job:
            single = self._singles.setdefault(job, (job,))
            _own(gpu, job, single, ks, measure == INSTANT_MEASURE)

    def absorb(self, other: GpuFold) -> None:
        """Take in another store's fold over the same grid (other GPUs: each store's
        answer is kept to the nodes it answers for)."""
        self.gpus.update(other.gpus)
        for key, meta in other.meta.items():
            self.meta.setdefault(key, meta)
        self.labelled |= other.labelled


def build_frame(raw: RawTelemetry, catalogue: Catalogue, grid: Grid,
                allocations: Iterable[Allocation], held: Held,
                bound_jobs: set[int], fold: GpuFold | None = None) -> tuple[Frame, FrameStats]:
    """The frame for ``grid`` from ``raw``, whose GPU series are in ``fold`` already when
    given (else folded here); ``held`` are the GPU bindings and ``bound_jobs`` the jobs
    that have any (their GPUs are known wherever they ran). ``fold`` is emptied: each
    GPU's buckets are dropped once its points are built."""
    if fold is None:
        fold = GpuFold(catalogue, grid)
        for measure, series in raw.gpus:
            fold.add(measure, series)
    by_host: dict[str, list[Allocation]] = defaultdict(list)
    for a in allocations:
        if a.gpus > 0:
            for host in a.nodes:
                by_host[host].append(a)
    gpus, labelled = fold.gpus, fold.labelled
    stats = FrameStats()
    tracks = []
    for key in sorted(k for k, gpu in gpus.items() if any(gpu.seen)):
        gpu, (uuid, model) = gpus.pop(key), fold.meta.get(key, ("", ""))
        points = _points(key, gpu, grid, held, by_host, bound_jobs, key.host in labelled)
        stats.gpu_buckets += len(points)
        stats.unknown_buckets += sum(1 for p in points if not p.bound)
        tracks.append(GpuTrack(key.host, key.gpu, uuid, model, points))
    gpus.clear()
    stats.gpus = len(tracks)
    stats.unmapped_hosts = sorted({t.host for t in tracks} - labelled)
    return Frame(grid.step, tuple(tracks), _node_tracks(raw, grid)), stats


def _own(gpu: _Gpu, job: str, single: tuple[str, ...], ks: list[tuple[int, float]],
         instant: bool) -> None:
    """``job`` held the GPU in the buckets ``ks`` (``single`` is ``(job,)``, shared by every
    bucket it alone holds); at their instants too if the series is the instant measure."""
    owners = gpu.owners
    for k, t in ks:
        held = owners[k]
        if held is None:
            owners[k] = single
        elif job not in held:
            owners[k] = (*held, job)
        if instant:
            gpu.at(t, job)


def _accumulate(gpu: _Gpu, f: int, points: Iterable[Point], grid: Grid) -> list[
        tuple[int, float]]:
    """Add a series' finite values into field ``f``'s buckets; the (bucket, time) of each.

    The hot loop of a frame (2 million points for 10,000 GPUs): ``Grid.bucket`` inlined.
    """
    start, step, n = grid.start, grid.step, grid.n
    sums, counts, seen, base = gpu.sums, gpu.counts, gpu.seen, f * n
    ceil, isfinite = math.ceil, math.isfinite
    kept = []
    for t, v in points:
        k = ceil((t - start) / step - 1e-6) - 1
        if 0 <= k < n and isfinite(v):
            sums[base + k] += v
            counts[base + k] += 1
            seen[k] = 1
            kept.append((k, t))
    return kept


def _points(key: GpuKey, gpu: _Gpu, grid: Grid, held: Held,
            by_host: Mapping[str, list[Allocation]], bound_jobs: set[int],
            labelled: bool) -> tuple[GpuPoint, ...]:
    """The GPU's points, one per bucket that had a value. Buckets a job label names are
    the common case (350,000 in a 10,000-GPU window) and take no other look-up."""
    together = gpu.together(grid) if gpu.many else {}
    means, owned, mig = gpu.means(grid.n), gpu.owners, gpu.mig
    points = []
    for k, seen in enumerate(gpu.seen):
        if not seen:
            continue
        jobs = owned[k]
        if jobs is None:
            points.append(_unlabelled(key, k, grid, means[k], k in mig, held, by_host,
                                      bound_jobs, labelled))
            continue
        owners = jobs if len(jobs) == 1 else tuple(sorted(jobs))
        m = means[k]
        points.append(GpuPoint(grid.end_of(k), owners, True, m[0], m[1], m[2], m[3], m[4], m[5],
                               k in mig, together.get(k, ())))
    return tuple(points)


def _unlabelled(key: GpuKey, k: int, grid: Grid, means: tuple[float | None, ...], mig: bool,
                held: Held, by_host: Mapping[str, list[Allocation]], bound_jobs: set[int],
                labelled: bool) -> GpuPoint:
    """A bucket no job label names: its owners from the GPU bindings, else free, or
    unknown on a node without labels while a job without bindings ran there."""
    t = grid.end_of(k)
    spans = held.get(key, [])
    owners = tuple(_held_by(spans, t - grid.step, t))
    together = _held_together(spans, t - grid.step, t) if len(owners) > 1 else ()
    bound = True
    if not owners and not labelled:
        # No label on this node: free only if every GPU job running here has bindings.
        bound = not any(a.job_id not in bound_jobs and a.overlaps(key.host, t - grid.step, t)
                        for a in by_host.get(key.host, []))
    return GpuPoint(t, owners, bound, means[0], means[1], means[2], means[3], means[4],
                    means[5], mig, together)


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
