"""A streaming reader of PyTorch profiler traces (Chrome / Kineto JSON), one file per rank.

Traces run to gigabytes per rank (HTA #250: 200 GB of traces needed 950 GB of RAM), so the
reader never loads a file whole: it decompresses in bounded chunks (gzip detected by its
magic bytes, not its suffix), decodes one event at a time (``jsonstream.walk``) and keeps
only the events the phase analysis needs, as ``apps.analysis.trace_types.TraceEvent``.
The rank comes from ``distributedInfo``, never from the file name.

Every failure is an ``AdapterError`` whose message names the file: unreadable, over the size
limit, a decompression bomb, truncated or corrupt gzip, invalid JSON, not a trace.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import re
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

from apps.analysis.trace_types import DistributedInfo, Kind, Origin, RankTrace, TraceEvent
from apps.core.errors import AdapterError
from apps.jobs.adapters.jsonstream import JsonStreamError, walk

SERVICE = "kineto"
GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 256 << 10  # bigger chunks only add decoded events in flight
MIB = 1 << 20
# A bomb is recognised early by its expansion ratio, once this much has come out of it.
RATIO_CHECK_AFTER = 16 * MIB
TRACE_SUFFIXES = (".json", ".gz")
# Times and durations are microseconds. 1e16 us is 317 years: as epoch microseconds the year
# 2286, as a duration longer than any job. Past it a file is corrupt or made up (1e300 went
# on to overflow the date conversions), and it is refused rather than read.
MAX_TIME_US = 1e16

_KEPT_CPU_OPS = (
    "autograd::engine::evaluate_function",
    "torch::autograd::AccumulateGrad",
    "c10d::",
    "record_param_comms",
    "nccl:",
    "gloo:",
)
# Runtime calls that launch no GPU work (so no kernel carries their correlation id)
_NOT_LAUNCHES = ("cudaEvent", "cudaStreamWaitEvent", "cudaStreamIsCapturing",
                 "cudaStreamGetCaptureInfo", "cudaOccupancy", "cudaFuncSetAttribute",
                 "cudaFuncGetAttributes", "cudaPeekAtLastError", "cudaGetLastError",
                 "cudaPointerGetAttributes", "cudaDeviceGetAttribute", "cudaGetDevice",
                 "cudaSetDevice", "cudaStreamGetPriority", "cudaDeviceGetStreamPriorityRange",
                 "hipGetDevice", "hipEvent", "hipStreamWaitEvent", "hipDeviceGetAttribute",
                 "hipSetDevice")
# What the reader never keeps, recognised in the text before it is decoded (most of a
# trace): events that are not complete (flows, instants, counters), aten:: and other CPU
# ops the analysis does not read, runtime calls that launch nothing, Python functions.
# Kineto writes every event as {"ph": ..., "cat": ..., "name": ...}; an element is matched
# only when nothing in it can reach into the next one (at most one nested object, its
# args, and no brace in a string), so whatever is unsure stays and is decoded.
_UNNEEDED_EVENT = re.compile(
    r'\{\s*"ph"\s*:\s*"(?:[^X"]"'
    r'|X"\s*,\s*"cat"\s*:\s*"(?:'
    r'cpu_op"\s*,\s*"name"\s*:\s*"(?!' + "|".join(re.escape(n) for n in _KEPT_CPU_OPS)
    + r')(?![^"]*Backward)'
    r'|(?:cuda_runtime|cuda_driver)"\s*,\s*"name"\s*:\s*"(?:'
    + "|".join(re.escape(n) for n in _NOT_LAUNCHES) + r')'
    r'|(?:python_function|Trace|cpu_instant_event|overhead|cuda_sync|cuda_event)"))'
    # possessive: a brace where none may be fails at once, without backtracking
    r'[^{}]*+(?:\{[^{}]*+\}[^{}]*+)?\},?\s*')
_MEMORY_CATS = frozenset({"gpu_memcpy", "gpu_memset"})
_KEPT_CATS = frozenset({"user_annotation", "gpu_user_annotation", "kernel", "collective_comm",
                        *_MEMORY_CATS})
# ROCm traces use the same categories: hipLaunchKernel is a "cuda_runtime" event
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
_INT_RE = re.compile(r"-?\d+")
# tensorboard_trace_handler's default worker name is "<hostname>_<pid>"
_HANDLER_NAME_RE = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$")


@dataclass(frozen=True)
class TraceLimits:
    """How much one trace file may weigh, stored and decompressed.

    ``max_ratio`` refuses a gzip that expands more than that many times once 16 MiB have
    come out of it: profiler JSON compresses about tenfold, a bomb a thousandfold.
    """

    max_file_bytes: int = 1024 * MIB
    max_decompressed_bytes: int = 8192 * MIB
    max_ratio: int = 100


R = TypeVar("R")


def _as_read(trace: RankTrace) -> RankTrace:
    return trace


class KinetoReader:
    """Reads trace files into ``RankTrace`` values, within ``limits``."""

    def __init__(self, limits: TraceLimits | None = None) -> None:
        self.limits = limits or TraceLimits()

    def read(self, path: Path) -> RankTrace:
        """Stream one trace file and keep what the phase analysis needs."""
        digest = hashlib.sha256()
        try:
            with path.open("rb") as raw:
                self._check_size(path, raw)
                chunks = _decompressed_chunks(path, raw, digest, self.limits)
                parsed = _parse(path, chunks)
        except OSError as exc:
            raise _error(path, f"cannot read it ({exc.strerror or exc})") from exc
        return parsed.rank_trace(str(path), digest.hexdigest())

    def read_many(self, paths: Sequence[Path], workers: int = 1,
                  reduce: Callable[[RankTrace], R] = _as_read,  # type: ignore[assignment]
                  ) -> list[R | AdapterError]:
        """Read several files, in ``workers`` processes when above 1; errors are returned.

        One file per rank, as HTA's parser pool does. ``reduce`` runs on each file read,
        where it was read, before the next (the phase analysis' ``rank_digest.digest``: a
        file's events then never outlive it, whatever the number of files); it must be
        picklable for ``workers > 1``. Keep ``workers=1`` inside Celery workers: their
        daemonic processes cannot have children.
        """
        job = _ReadJob(self, reduce)
        if workers <= 1 or len(paths) < 2:
            return [job(path) for path in paths]
        # imported here: a single file (the common case) needs no pool
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # fork: the children only parse files, and start in milliseconds
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(workers, len(paths)), mp_context=context) as pool:
            return list(pool.map(job, paths))

    def _check_size(self, path: Path, raw: IO[bytes]) -> None:
        size = path.stat().st_size
        if size > self.limits.max_file_bytes:
            raise _error(path, f"is {size / MIB:.1f} MiB, over the limit of "
                               f"{self.limits.max_file_bytes / MIB:.0f} MiB per trace file")
        if size == 0:
            raise _error(path, "is empty")


@dataclass(frozen=True)
class _ReadJob(Generic[R]):
    """Read one file and reduce it; an ``AdapterError`` is returned, not raised (a pool
    hands it back in the file's place)."""

    reader: KinetoReader
    reduce: Callable[[RankTrace], R]

    def __call__(self, path: Path) -> R | AdapterError:
        try:
            return self.reduce(self.reader.read(path))
        except AdapterError as exc:
            return exc


@dataclass(frozen=True)
class TraceReading(Generic[R]):
    """The files read (each as ``reduce`` left it: a ``RankTrace`` by default), and the
    ones skipped with the reason (their message names them)."""

    traces: list[R]
    problems: list[str]


def read_trace_paths(paths: Sequence[Path], limits: TraceLimits | None = None,
                     workers: int = 1,
                     reduce: Callable[[RankTrace], R] = _as_read,  # type: ignore[assignment]
                     ) -> TraceReading[R]:
    """Read every trace file under ``paths``; a bad file is skipped and reported.

    ``workers > 1`` reads files in parallel processes (one file per rank, as HTA does). Keep
    the default of 1 inside Celery workers: their daemonic processes cannot have children.
    ``reduce`` runs on each file as soon as it is read (``KinetoReader.read_many``).
    Raises ``AdapterError`` when a path does not exist or no file at all is readable.
    """
    files = find_trace_files(paths)
    if not files:
        raise AdapterError(f"no trace files (*.json, *.json.gz) in "
                           f"{', '.join(str(p) for p in paths)}", service=SERVICE)
    return readable(read_trace_files(files, limits, workers, reduce))


def read_trace_files(files: Sequence[Path], limits: TraceLimits | None = None,
                     workers: int = 1,
                     reduce: Callable[[RankTrace], R] = _as_read,  # type: ignore[assignment]
                     ) -> TraceReading[R]:
    """Read ``files`` (some of a run's: one group of a fan-out), each bad one skipped and
    reported, even all of them (``readable`` says whether the whole run has any)."""
    results = KinetoReader(limits).read_many(list(files), workers, reduce)
    return TraceReading([r for r in results if not isinstance(r, AdapterError)],
                        [f"skipped: {r}" for r in results if isinstance(r, AdapterError)])


def readable(reading: TraceReading[R]) -> TraceReading[R]:
    """``reading`` itself; ``AdapterError`` naming every problem when no file was readable."""
    if not reading.traces:
        raise AdapterError("no readable trace file: " + "; ".join(reading.problems),
                           service=SERVICE)
    return reading


def find_trace_files(paths: Iterable[Path]) -> list[Path]:
    """Expand folders (the ``tensorboard_trace_handler`` layout) into their trace files.

    A folder contributes its ``*.json`` and ``*.gz`` files, not recursively and not hidden
    ones; a file is taken as it is, whatever its name.
    """
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if _looks_like_trace(p))
        elif path.is_file():
            found.append(path)
        else:
            raise AdapterError(f"trace path {path} does not exist", service=SERVICE)
    return found


def _looks_like_trace(path: Path) -> bool:
    name = path.name.lower()
    return path.is_file() and not name.startswith(".") and name.endswith(TRACE_SUFFIXES)


def _error(path: Path, message: str, detail: str = "") -> AdapterError:
    return AdapterError(f"trace file {path} {message}", service=SERVICE, detail=detail)


# --- Bytes: size limits and gzip --------------------------------------------------------


class _CountingReader:
    """A read-only file wrapper that hashes and counts the stored bytes as they go by."""

    def __init__(self, raw: IO[bytes], digest: Any) -> None:
        self.raw, self.digest, self.count = raw, digest, 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.count += len(data)
        self.digest.update(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        # GzipFile asks for it only to rewind, which a stream read once never needs
        raise OSError("trace streams cannot seek")


def _decompressed_chunks(path: Path, raw: IO[bytes], digest: Any,
                         limits: TraceLimits) -> Iterator[bytes]:
    """Yield the file's JSON bytes, gunzipped when it starts with the gzip magic."""
    is_gzip = raw.read(2) == GZIP_MAGIC
    raw.seek(0)
    counter = _CountingReader(raw, digest)
    if not is_gzip:
        yield from iter(lambda: counter.read(CHUNK_BYTES), b"")
        return
    stream = gzip.GzipFile(fileobj=counter, mode="rb")
    total = 0
    while chunk := _gunzip(path, stream):
        total += len(chunk)
        _check_expansion(path, total, counter.count, limits)
        yield chunk


def _gunzip(path: Path, stream: gzip.GzipFile) -> bytes:
    try:
        return stream.read(CHUNK_BYTES)
    except EOFError as exc:
        raise _error(path, "is a truncated gzip file (it ends before the end-of-stream "
                           "marker: an interrupted upload or copy?)") from exc
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise _error(path, f"is a corrupt gzip file ({exc})") from exc


def _check_expansion(path: Path, total: int, stored: int, limits: TraceLimits) -> None:
    if total > limits.max_decompressed_bytes:
        raise _error(path, f"decompresses past the limit of "
                           f"{limits.max_decompressed_bytes / MIB:.0f} MiB: refused "
                           f"(a decompression bomb, or raise the limit)")
    if total > RATIO_CHECK_AFTER and total > limits.max_ratio * max(stored, 1):
        raise _error(path, f"expands more than {limits.max_ratio}x when decompressed: "
                           f"refused as a decompression bomb")


# --- JSON: stream the events, keep what the analysis needs ------------------------------


@dataclass
class _Parsed:
    events: list[TraceEvent]
    distributed: Any = None
    base_time_ns: Any = None
    host_name: Any = None
    device_properties: Any = None
    seen_events: int = 0
    dropped: int = 0
    devices: Counter[int] = field(default_factory=Counter)
    step_pids: Counter[Any] = field(default_factory=Counter)
    launches: dict[int, float] = field(default_factory=dict)

    def take(self, raws: list[Any]) -> None:
        """Look at raw events: keep each, count it as dropped, or let it go.

        Most of a trace is let go (aten:: ops, flows, instants, runtime calls other than
        launches), so the ways out come first; launches are kept as a bare
        ``correlation -> time`` map, not as events.
        """
        self.seen_events += len(raws)
        events, devices = self.events, self.devices
        for raw in raws:
            if raw.__class__ is not dict or raw.get("ph") != "X":
                continue
            cat = raw.get("cat")
            if cat == "cpu_op":
                name = raw.get("name")
                if name.__class__ is str and not _kept_cpu_op(name):
                    continue
            elif cat in _LAUNCH_CATS:
                self.launch(raw)
                continue
            elif cat not in _KEPT_CATS:
                continue
            kept = _event(raw)
            if kept is _DROPPED:
                self.dropped += 1
            elif kept.__class__ is TraceEvent:
                events.append(kept)
                if kept.device >= 0:
                    devices[kept.device] += 1
                elif kept.kind is Kind.STEP:
                    self.step_pids[raw.get("pid")] += 1

    def launch(self, raw: dict[str, Any]) -> None:
        """A CPU call that launched GPU work: when, under which ``correlation`` id."""
        args = raw.get("args")
        correlation = args.get("correlation") if args.__class__ is dict else None
        if correlation.__class__ is not int:
            return
        ts, dur = _time(raw.get("ts")), _time(raw.get("dur", 0))
        if ts is None or dur is None or not (0 <= dur < MAX_TIME_US and -MAX_TIME_US < ts <
                                             MAX_TIME_US):
            _unusable(ts, dur)
            self.dropped += 1
        else:
            self.launches.setdefault(correlation, ts)

    def rank_trace(self, source: str, sha256: str) -> RankTrace:
        """Check the file was a trace and build the value the analysis reads."""
        path = Path(source)
        if self.seen_events == 0:
            raise _error(path, "is not a PyTorch profiler trace: it has no traceEvents")
        base = _int_or_none(self.base_time_ns)
        if base is not None and not 0 <= base < MAX_TIME_US * 1000:
            raise _error(path, f"has a baseTimeNanoseconds of {base:.3g}, outside 0 to "
                               f"{MAX_TIME_US * 1000:.0e} ns (the year 2286): a corrupt file?")
        notes = [f"{self.dropped} events with a negative duration or a non-numeric time "
                 f"were ignored"] if self.dropped else []
        distributed = _distributed(path, self.distributed)
        if distributed is not None and distributed.world_size is None:
            notes.append(f"distributedInfo gives rank {distributed.rank} but no world_size: "
                         f"the world size is taken from the ranks given")
        if len(self.devices) > 1:
            notes.append(f"GPU events on devices {sorted(self.devices)}: the GPU timeline "
                         f"reads device {self.devices.most_common(1)[0][0]}, where most ran")
        return RankTrace(source=source, distributed=distributed, events=tuple(self.events),
                         base_time_ns=base, sha256=sha256, dropped=self.dropped,
                         notes=tuple(notes), origin=self.origin(path),
                         launches=self.launches)

    def origin(self, path: Path) -> Origin:
        """Host, process and GPU of the trace, from what the file says (see ``Origin``)."""
        pid = self.step_pids.most_common(1)[0][0] if self.step_pids else None
        pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        host, source = "", ""
        if isinstance(self.host_name, str) and self.host_name:
            host, source = self.host_name, "host_name"
        elif (match := _HANDLER_NAME_RE.match(path.name)) and int(match["pid"]) == pid:
            host, source = match["host"], "file name"
        names = _device_names(self.device_properties)
        device = self.devices.most_common(1)[0][0] if self.devices else None
        return Origin(host=host, host_source=source, pid=pid, device=device,
                      device_name=names.get(device, "") if device is not None else "",
                      devices=tuple(sorted(set(names.values()))))


def _unneeded_removed(text: str) -> tuple[str, int]:
    """``jsonstream.Prefilter``: the text of a batch of events without those never kept."""
    kept, removed = _UNNEEDED_EVENT.subn("", text)
    return (kept.rstrip().rstrip(",") if removed else kept), removed


def _parse(path: Path, chunks: Iterator[bytes]) -> _Parsed:
    """One pass over the bytes: each trace event is looked at once, then kept or dropped."""
    parsed = _Parsed(events=[])
    try:
        members = walk(chunks, "traceEvents", parsed.take, prefilter=_unneeded_removed)
    except TimeOutOfRange as exc:
        raise _error(path, f"has a time of {exc.value:.3g} µs, past the {MAX_TIME_US:.0e} µs "
                           f"a trace can hold (317 years; as epoch microseconds the year "
                           f"2286): a corrupt file?") from None
    except JsonStreamError as exc:
        if exc.not_json:
            raise _error(path, f"is not valid JSON (truncated or corrupt): {exc}",
                         detail=str(exc)) from exc
        raise _error(path, f"is not a PyTorch profiler trace: {exc}") from exc
    if isinstance(members.get("traceEvents"), int):  # elements, the prefiltered ones too
        parsed.seen_events = members["traceEvents"]
    parsed.distributed = members.get("distributedInfo")
    parsed.base_time_ns = members.get("baseTimeNanoseconds")
    parsed.host_name = members.get("host_name")
    parsed.device_properties = members.get("deviceProperties")
    return parsed


def _device_names(properties: Any) -> dict[int, str]:
    """GPU index -> model name, from ``deviceProperties``."""
    if not isinstance(properties, list):
        return {}
    return {p["id"]: p["name"] for p in properties
            if isinstance(p, dict) and isinstance(p.get("id"), int)
            and isinstance(p.get("name"), str)}


_DROPPED = object()


def _event(raw: dict[str, Any]) -> TraceEvent | object | None:
    """The kept form of one raw complete event, ``None`` when not needed, ``_DROPPED`` when
    unusable (a negative duration, a time that is not a number)."""
    name, cat = raw.get("name"), raw.get("cat")
    if name.__class__ is not str:
        name = ""
    args = raw.get("args")
    if args.__class__ is not dict:
        args = {}
    kind = _kind(cat, name)
    if kind is None:
        return None
    ts, dur = _time(raw.get("ts")), _time(raw.get("dur", 0))
    if ts is None or dur is None:
        return _DROPPED
    if not (0 <= dur < MAX_TIME_US and -MAX_TIME_US < ts < MAX_TIME_US):  # NaN fails both
        return _unusable(ts, dur)
    device = -1
    if kind is Kind.KERNEL or kind is Kind.MEMORY:
        pid = raw.get("pid")
        device = pid if pid.__class__ is int else -1
    correlation = args.get("correlation")
    collective = args.get("Collective name")
    return TraceEvent(
        kind, sys.intern(name), ts, dur, _thread(raw.get("tid")),
        correlation if correlation.__class__ is int else None,
        _collective(cat, name, collective), device,
    )


class TimeOutOfRange(Exception):
    """A finite time or duration past ``MAX_TIME_US``: the file is refused (``_parse``)."""

    def __init__(self, value: float) -> None:
        super().__init__(value)
        self.value = value


def _unusable(ts: float | None, dur: float | None) -> object:
    """``_DROPPED`` for what is skipped and counted (a negative duration, NaN, an infinity:
    a profiler's glitch); raises ``TimeOutOfRange`` for a number no profiler writes."""
    for value in (ts, dur):
        if value is not None and math.isfinite(value) and abs(value) >= MAX_TIME_US:
            raise TimeOutOfRange(value)
    return _DROPPED


def _kept_cpu_op(name: str) -> bool:
    return name.startswith(_KEPT_CPU_OPS) or "Backward" in name


def _kind(cat: Any, name: str) -> Kind | None:
    if cat == "user_annotation":
        return Kind.STEP if name.startswith("ProfilerStep#") else Kind.ANNOTATION
    if cat == "gpu_user_annotation":
        return Kind.GPU_ANNOTATION
    if cat == "kernel":
        return Kind.KERNEL
    if cat in _MEMORY_CATS:
        return Kind.MEMORY
    if cat == "collective_comm" or cat == "cpu_op":  # take() let only kept cpu_op names by
        return Kind.CPU_OP
    return None


def _collective(cat: Any, name: str, value: Any) -> str:
    """Kineto's ``Collective name`` argument; a ``collective_comm`` event's own name."""
    if value.__class__ is str and value:
        return sys.intern(value)
    return name if cat == "collective_comm" else ""


def _time(value: Any) -> float | None:
    """A time or duration: Kineto writes floats (3 decimals) or, older ones, ints."""
    kind = value.__class__
    if kind is float:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return float(value)
    return _number(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _thread(value: Any) -> int | str:
    return value if value.__class__ is int or value.__class__ is str else ""


# --- distributedInfo ---------------------------------------------------------------------


def _distributed(path: Path, info: Any) -> DistributedInfo | None:
    """Parse ``distributedInfo``; ``None`` when the file has none (not a distributed run).

    A rank without a world size is accepted (``world_size=None``); a rank that is missing,
    not a number, negative or not below the world size makes the file unusable.
    """
    if info is None:
        return None
    rank, world = (_as_int(info.get(key)) if isinstance(info, dict) else None
                   for key in ("rank", "world_size"))
    world_given = isinstance(info, dict) and info.get("world_size") is not None
    if rank is None or rank < 0 or (world_given and (world is None or rank >= world)):
        raise _error(path, f"has an unusable distributedInfo (rank={_show(info, 'rank')}, "
                           f"world_size={_show(info, 'world_size')})")
    backend, nccl = info.get("backend"), info.get("nccl_version")
    return DistributedInfo(rank=rank, world_size=world,
                           backend=backend if isinstance(backend, str) else "",
                           group_ranks=_default_group_ranks(info.get("pg_config")),
                           nccl_version=nccl if isinstance(nccl, str) else "")


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
        return int(value)
    return None


def _show(info: Any, key: str) -> str:
    return repr(info.get(key)) if isinstance(info, dict) else "missing"


def _default_group_ranks(pg_config: Any) -> tuple[int, ...]:
    """Ranks of the default process group; Kineto's on-demand path writes them as a string."""
    if not isinstance(pg_config, list):
        return ()
    groups = [g for g in pg_config if isinstance(g, dict)]
    default = next((g for g in groups if g.get("pg_desc") == "default_pg"), None)
    ranks = (default or (groups[0] if groups else {})).get("ranks")
    if isinstance(ranks, str):
        return tuple(int(r) for r in _INT_RE.findall(ranks))
    if isinstance(ranks, list):
        return tuple(r for r in ranks if isinstance(r, int) and not isinstance(r, bool))
    return ()
