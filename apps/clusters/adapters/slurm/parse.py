"""Pure parsers for Slurm job records: ``sacct --json`` (streamed), ``squeue --json``,
``sacct -P -o JobIDRaw,ExitCode`` and stored batch scripts. Cluster-level output (nodes,
partitions, associations, fairshare, sdiag) is in ``parse_cluster``; which GPU indices jobs
hold (``gres_detail``, ``scontrol -d show job``, the prolog's history) in ``parse_gpus``.

No I/O except reading the stream handed in, no Django: every backend and ``import_sacct``
share these. Shapes are those of Slurm 22.05 (data parser v0.0.38 / dbv0.0.38, also
v0.0.37); newer data parsers wrap numbers as ``{"set": true, "number": 5}`` and states as
lists, which ``_num`` and ``_state`` already accept, so a newer version is a small addition.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import IO, Any

from apps.analysis import hostlist
from apps.clusters.adapters.slurm.types import (
    ACTIVE_STATES,
    ExitStatus,
    QueueEntry,
    RecordError,
    SlurmJob,
)
from apps.jobs.adapters import jsonstream

Record = Mapping[str, Any]

# --- Small value parsers --------------------------------------------------------------


def _num(value: Any) -> int | None:
    """An integer field: plain (v0.0.38) or ``{"set", "infinite", "number"}`` (v0.0.39+)."""
    if type(value) is int:  # the common case first: this runs ~20 times per record
        return value
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return int(value)


def _time(value: Any) -> datetime | None:
    """Unix epoch seconds to an aware UTC datetime; 0 and null mean "not yet"."""
    seconds = _num(value)
    if not seconds or seconds < 0:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


def _text(value: Any) -> str:
    """A string field: null becomes "", NUL bytes go (PostgreSQL refuses them)."""
    if type(value) is str and "\x00" not in value:
        return value
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value.replace("\x00", "")


def _state(value: Any) -> str:
    """``state.current`` is a string in 22.05 and a list of flags in 23.02+."""
    if isinstance(value, list):
        value = value[0] if value else ""
    state = _text(value).split(" ")[0].upper()  # text sacct prints "CANCELLED by 0"
    return state or "UNKNOWN"


# One implementation of Slurm's host lists and index ranges, shared with the simulator (issue 25).
# A malformed one raises ``HostlistError`` (a ValueError): a record's error, not a crash.
expand_ranges = hostlist.expand_ranges
compress_ranges = hostlist.compress_ranges
expand_hostlist = hostlist.expand


def bitmap_tasks(bitmap: str) -> list[int]:
    """An array's pending remainder as sacct JSON stores it: hex ``"0x38"`` = tasks 3, 4, 5."""
    bits = int(bitmap, 16)
    return [i for i in range(bits.bit_length()) if bits >> i & 1]


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


def parse_tres_string(spec: str) -> dict[str, int]:
    """``"cpu=16,mem=64G,gres/gpu=8"`` to ``{"cpu": 16, "mem": 65536, "gres/gpu": 8}``.

    Memory becomes MB. ``N/A``, empty and unparsable values are left out.
    """
    out: dict[str, int] = {}
    for item in spec.split(","):
        key, sep, raw = item.strip().partition("=")
        if not sep or not key:
            continue
        unit = raw[-1:].upper()
        try:
            if unit in _MEM_UNITS:
                out[key] = round(float(raw[:-1]) * _MEM_UNITS[unit])
            else:
                out[key] = int(float(raw))
        except ValueError:
            continue
    return out


# --- GPUs from allocated TRES ---------------------------------------------------------


def _gpu_counts(tres: Mapping[str, int]) -> tuple[int, int, dict[str, int]]:
    """(GPU devices, shards, devices per type) from ``gres/...`` TRES names, as Slurm counts
    them.

    ``gres/gpu`` is the total; ``gres/gpu:<type>`` the per-type split. When a site only
    accounts typed GPUs the total is their sum. ``gres/shard`` counts shards. A MIG slice is
    one device here (``gres/gpu:a100_1g.5gb=1``), as in Slurm's accounting and limits; the
    importer turns it into its fraction of the parent GPU with the cluster's table
    (``apps.analysis.chargeback.gpu_allocation``).
    """
    types: dict[str, int] = {}
    typed_shards = 0
    for key, value in tres.items():
        if key.startswith("gres/gpu:"):
            if value:
                types[key[len("gres/gpu:"):]] = value
        elif key.startswith("gres/shard:"):
            typed_shards += value
    gpus = tres["gres/gpu"] if "gres/gpu" in tres else sum(types.values())
    shards = tres.get("gres/shard", typed_shards)
    return gpus, shards, types


def _tres_list(items: Any) -> dict[str, int]:
    """sacct JSON's ``[{"type": "gres", "name": "gpu:h100", "count": 8}]`` to a name->count dict."""
    out: dict[str, int] = {}
    for item in items or []:
        kind, name, count = item.get("type"), item.get("name"), item.get("count")
        if type(count) is not int:  # the common case is a plain int: skip the calls
            count = _num(count)
        if type(kind) is not str or "\x00" in kind:
            kind = _text(kind)
        if type(name) is not str or "\x00" in name:
            name = _text(name)
        if kind and count is not None:
            out[f"{kind}/{name}" if name else kind] = count
    return out


def _tres_text(tres: Mapping[str, int]) -> str:
    """The TRES dict printed the way Slurm prints ``AllocTRES`` (mem in M)."""
    return ",".join(f"{k}={v}M" if k == "mem" else f"{k}={v}" for k, v in tres.items())


# --- sacct --json / slurmdbd jobs -----------------------------------------------------


def _exit_from_json(value: Any, state: str) -> tuple[ExitStatus | None, bool]:
    """(exit status, unresolved) from a dbv0.0.38 ``exit_code`` object.

    Slurm 22.05 reports ``SUCCESS/0`` for a job that exited non-zero (the database holds
    768 for exit 3), so ``SUCCESS`` is believed only for COMPLETED jobs; signals and
    explicit failures are right. Active jobs have no exit yet.
    """
    if state in ACTIVE_STATES:
        return None, False
    value = value or {}
    status = _text(value.get("status")).upper()
    signal = _num((value.get("signal") or {}).get("signal_id"))
    code = _num(value.get("return_code"))
    if status == "SIGNALED" and signal is not None:
        return ExitStatus(0, signal), False
    if status == "FAILED" and code:
        return ExitStatus(code, 0), False
    if state == "COMPLETED" and status in ("SUCCESS", ""):
        return ExitStatus(0, 0), False
    return None, True


def _display_id(job_id: int, array_job: int | None, task: int | None, pending: str,
                het_job: int | None, het_offset: int | None) -> str:
    if array_job and task is not None:
        return f"{array_job}_{task}"
    if array_job and pending:
        return f"{array_job}_[{pending}]"
    if het_job and het_offset is not None:
        return f"{het_job}+{het_offset}"
    return str(job_id)


def _array_fields(rec: Record) -> tuple[int | None, int | None, str]:
    array = rec.get("array") or {}
    array_job = _num(array.get("job_id")) or None
    task = _num(array.get("task_id"))
    bitmap = array.get("task")
    pending = compress_ranges(bitmap_tasks(bitmap)) if bitmap and task is None else ""
    return array_job, task, pending


def parse_sacct_job(rec: Record) -> SlurmJob:
    """One ``jobs[]`` element of ``sacct --json`` (or slurmdbd REST) to a ``SlurmJob``.

    Raises ``KeyError``/``ValueError``/``TypeError``/``AttributeError`` on a malformed
    record; ``iter_sacct_json`` turns those into a ``RecordError``.
    """
    job_id = _num(rec["job_id"])
    if job_id is None or job_id <= 0:
        raise ValueError(f"bad job_id {rec['job_id']!r}")
    times = rec["time"]
    submit = _time(times["submission"])
    if submit is None:
        raise ValueError("no submission time")
    state = _state(rec["state"]["current"])
    array_job, task, pending = _array_fields(rec)
    het = rec.get("het") or {}
    het_job = _num(het.get("job_id")) or None
    het_offset = _num(het.get("job_offset")) if het_job else None
    tres = _tres_list((rec.get("tres") or {}).get("allocated"))
    gpus, shards, types = _gpu_counts(tres)
    exit_status, unresolved = _exit_from_json(rec.get("exit_code"), state)
    nodes = _text(rec.get("nodes"))
    hostlist.count(nodes)  # a malformed host list fails this record here, not a page later
    association = rec.get("association") or {}
    return SlurmJob(
        job_id=job_id,
        display_id=_display_id(job_id, array_job, task, pending, het_job, het_offset),
        cluster=_text(rec.get("cluster")),
        submit_time=submit,
        name=_text(rec.get("name")),
        user_name=_text(rec.get("user")) or _text(association.get("user")),
        account=_text(rec.get("account")) or _text(association.get("account")),
        partition=_text(rec.get("partition")),
        qos=_text(rec.get("qos")),
        work_dir=_text(rec.get("working_directory")),
        comment=_text((rec.get("comment") or {}).get("job")),
        state=state,
        reason=_pending_reason(state, (rec["state"] or {}).get("reason")),
        wait_reason=_wait_reason(state, (rec["state"] or {}).get("reason")),
        exit=exit_status,
        exit_unresolved=unresolved,
        eligible_time=_time(times.get("eligible")),
        start_time=_time(times.get("start")) if state != "PENDING" else None,
        end_time=_time(times.get("end")) if state not in ACTIVE_STATES else None,
        time_limit_min=_num(times.get("limit")),
        array_job_id=array_job,
        array_task_id=task,
        array_tasks_pending=pending,
        het_job_id=het_job,
        het_job_offset=het_offset,
        nodes="" if nodes == "None assigned" else nodes,
        node_count=_num(rec.get("allocation_nodes")) or 0,
        cpus=tres.get("cpu", 0),
        memory_mb=tres.get("mem", 0),
        mem_peak_mb=_max_rss_mb(rec.get("steps")),
        gpus=gpus,
        gpu_shards=shards,
        gpu_types=types,
        tres_alloc=_tres_text(tres),
    )


def _max_rss_mb(steps: Any) -> float | None:
    """The largest ``mem`` among the steps' ``tres.requested.max`` (MaxRSS, in bytes), in
    MiB; None when no step measured any (0 is what an accounting plugin that gathers
    nothing records)."""
    peak = 0
    for step in steps or []:
        for item in ((step.get("tres") or {}).get("requested") or {}).get("max") or []:
            if item.get("type") == "mem":
                peak = max(peak, _num(item.get("count")) or 0)
    return peak / 2**20 if peak > 0 else None


def _pending_reason(state: str, reason: Any) -> str:
    # After a job starts, Slurm keeps its last pending reason: only a waiting job has one.
    text = _text(reason)
    return text if state == "PENDING" and text != "None" else ""


def _wait_reason(state: str, reason: Any) -> str:
    # The same field once the job left the queue: why it last waited (slurmdbd keeps the
    # last reason that was not plain priority or resources), "None" when it never waited.
    text = _text(reason)
    return text if state != "PENDING" and text != "None" else ""


def _job_id_hint(rec: Any) -> int | None:
    try:
        return int(rec.get("job_id"))
    except (AttributeError, TypeError, ValueError):
        return None


def iter_sacct_json(stream: IO[bytes], members: dict[str, Any] | None = None,
                    prepare: Callable[[dict[str, Any]], None] | None = None,
                    ) -> Iterator[SlurmJob | RecordError]:
    """Stream ``sacct --json`` output: one ``SlurmJob`` or ``RecordError`` per record.

    Memory stays bounded: the standard library's C decoder decodes one ``jobs[]`` element
    at a time from 1 MiB chunks (``jsonstream``; on these files over twice as fast as
    ijson's yajl2_c items), so a 100k-job file never sits in memory. A malformed record becomes a
    ``RecordError`` naming its index and job id and the stream goes on; broken JSON
    (truncated, not JSON at all, not an object) ends the stream with one last
    ``RecordError``. ``members``, when given, receives the other top-level members
    (``meta``, ``errors``, ``warnings``) as they are read; ``prepare``, when given, may
    correct each raw record before it is parsed (a data parser's known quirk).
    """
    index = -1
    last_id: int | None = None
    try:
        chunks = jsonstream.read_chunks(stream)
        for records in jsonstream.stream(chunks, "jobs", members, batches=False):
            for rec in records:
                index += 1
                try:
                    if prepare is not None:
                        prepare(rec)
                    job = parse_sacct_job(rec)
                except (KeyError, ValueError, TypeError, AttributeError, OverflowError) as exc:
                    last_id = _job_id_hint(rec)
                    yield RecordError(index, last_id, _describe(exc))
                    continue
                last_id = job.job_id
                yield job
    except jsonstream.JsonStreamError as exc:
        where = f"after record #{index} (job {last_id})" if index >= 0 else "before any record"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        yield RecordError(index + 1, None, f"invalid JSON {where}: {first_line}")


def _describe(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return f"{type(exc).__name__}: {exc}"


# --- sacct -P -o JobIDRaw,ExitCode ----------------------------------------------------


def parse_exit_codes(text: str) -> dict[int, ExitStatus]:
    """Text ``sacct -P -n -o JobIDRaw,ExitCode``: the exit codes 22.05's JSON gets wrong.

    Step lines (``5.batch``) and malformed lines are skipped; a header line is tolerated.
    """
    out: dict[int, ExitStatus] = {}
    for line in text.splitlines():
        raw_id, _, exit_text = line.strip().partition("|")
        code, sep, signal = exit_text.partition(":")
        if not raw_id.isdigit() or not sep:
            continue
        try:
            out[int(raw_id)] = ExitStatus(int(code), int(signal.split("|")[0]))
        except ValueError:
            continue
    return out


# --- squeue --json / slurm REST jobs --------------------------------------------------


def parse_squeue_json(data: Record) -> list[QueueEntry]:
    """Live jobs from ``squeue --json`` (or ``/slurm/v0.0.38/jobs``).

    ``squeue --json`` ignores its filters and lists finished jobs still in slurmctld's
    memory; they are kept here (their raw ``exit_code`` is the trustworthy one) and the
    caller filters by state.
    """
    entries: list[QueueEntry] = []
    for rec in data.get("jobs") or []:
        state = _state(rec.get("job_state"))
        raw_exit = _num(rec.get("exit_code"))
        entries.append(QueueEntry(
            job_id=int(rec["job_id"]),
            state=state,
            reason=_pending_reason(state, rec.get("state_reason")),
            estimated_start=_time(rec.get("start_time")) if state == "PENDING" else None,
            exit=(ExitStatus.from_wait_status(raw_exit)
                  if raw_exit is not None and state not in ACTIVE_STATES else None),
            array_job_id=_num(rec.get("array_job_id")) or None,
            array_task_id=_num(rec.get("array_task_id")),
            user_name=_text(rec.get("user_name")),
        ))
    return entries


# --- sacct --batch-script / --env-vars ----------------------------------------------------

_SCRIPT_HEADER = re.compile(r"^Batch Script for (\S+)\n-{20,}\n", re.MULTILINE)
# Slurm 22.05 src/sacct/options.c prints "Environment used for <id> (must be batch to display)"
_ENV_HEADER = re.compile(r"^Environment used for (\S+) \(must be batch to display\)\n-{20,}\n",
                         re.MULTILINE)


def parse_batch_scripts(text: str) -> dict[str, str]:
    """``sacct --batch-script -j ...`` to {display id ("21", "4_0", "19+1"): script}.

    Scripts are stored when ``AccountingStoreFlags=job_script``; jobs without one are absent
    (sacct prints ``NONE`` for them).
    """
    return _sections(_SCRIPT_HEADER, text)


def parse_job_environments(text: str) -> dict[str, str]:
    """``sacct --env-vars -j ...`` to {display id: the ``VAR=value`` lines}.

    Stored when ``AccountingStoreFlags=job_env``, for batch jobs only; sacct prints ``NONE``
    for a job without one (an interactive job, or one submitted before the flag), left out.
    """
    return _sections(_ENV_HEADER, text)


def saved_section(text: str, ids: Iterable[str],
                  environment: bool = False) -> tuple[str, list[str]]:
    """One job's script (or environment) from a saved file: the file itself when it is
    bare, or this job's section when it was saved as ``sacct --batch-script -j ID > file``
    prints it (header line and dashes), so line numbers are the script's own. Returns the
    text ('' for ``NONE`` or no section of these ids) and the other ids the file holds."""
    header = _ENV_HEADER if environment else _SCRIPT_HEADER
    if not header.match(text):
        return text, []
    sections = _sections(header, text)
    wanted = list(dict.fromkeys(ids))
    mine = next((sections[i] for i in wanted if i in sections), "")
    others = sorted(set(header.findall(text)) - set(wanted))
    return mine, others


def _sections(header: re.Pattern[str], text: str) -> dict[str, str]:
    parts = header.split(text)
    # parts = [before, id1, body1, id2, body2, ...]
    bodies = {parts[i]: parts[i + 1].rstrip("\n") + "\n" for i in range(1, len(parts) - 1, 2)}
    return {job: body for job, body in bodies.items() if body.strip() != "NONE"}
