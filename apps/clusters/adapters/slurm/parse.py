"""Pure parsers for Slurm job records: ``sacct --json`` (streamed), ``squeue --json``,
``sacct -P -o JobIDRaw,ExitCode`` and stored batch scripts. Cluster-level output (nodes,
partitions, associations, fairshare, sdiag) is in ``parse_cluster``; which GPU indices jobs
hold (``gres_detail``, ``scontrol -d show job``, the prolog's history) in ``parse_gpus``.

No I/O except reading the stream handed in, no Django: every backend and ``import_sacct``
share these. Every data parser version from v0.0.37 (Slurm 21.08/22.05) to v0.0.45 (26.05)
is read here: each field through ``values``, which accepts all its known shapes; what a
record's shape cannot show (22.05's doubtful exit codes) comes from the document's version
(``versions``), detected from its ``meta``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any

from apps.analysis import hostlist
from apps.clusters.adapters.slurm import gpu_requests, requested, values
from apps.clusters.adapters.slurm.types import (
    ACTIVE_STATES,
    ExitStatus,
    GpuSource,
    QueueEntry,
    RecordError,
    SlurmJob,
)
from apps.clusters.adapters.slurm.versions import DataParser, UnknownDataParser, detect
from apps.jobs.adapters import jsonstream

Record = Mapping[str, Any]

# --- Small value parsers (values.py; the names here are kept for older callers) -------

_num = values.num
_time = values.epoch
_text = values.text
_state = values.state
parse_tres_string = values.parse_tres_string
_tres_list = values.tres_list
_gpu_counts = values.gpu_counts


# One implementation of Slurm's host lists and index ranges, shared with the simulator (issue 25).
# A malformed one raises ``HostlistError`` (a ValueError): a record's error, not a crash.
expand_ranges = hostlist.expand_ranges
compress_ranges = hostlist.compress_ranges
expand_hostlist = hostlist.expand


def bitmap_tasks(bitmap: str) -> list[int]:
    """An array's pending remainder as sacct JSON stores it: hex ``"0x38"`` = tasks 3, 4, 5."""
    bits = int(bitmap, 16)
    return [i for i in range(bits.bit_length()) if bits >> i & 1]


# --- GPUs from allocated TRES ---------------------------------------------------------


_tres_text = values.tres_text


# --- sacct --json / slurmdbd jobs -----------------------------------------------------


def _exit_from_json(value: Any, state: str,
                    parser: DataParser | None) -> tuple[ExitStatus | None, bool]:
    """(exit status, unresolved) from slurmdbd's ``exit_code`` object, any version.

    Slurm 22.05 (v0.0.37/38) reports ``SUCCESS/0`` for a job that exited non-zero (the
    database holds 768 for exit 3), so there a plain ``SUCCESS`` is believed only for
    COMPLETED jobs; signals and explicit failures are right. A version known to decode the
    wait status (``DataParser.exit_trusted``) is believed as it is. Active jobs have no
    exit yet.
    """
    if state in ACTIVE_STATES:
        return None, False
    said = values.exit_code(value or {})
    trusted = parser is not None and parser.exit_trusted
    if said.status is None:
        return None, True
    if said.doubtful and not trusted and state != "COMPLETED":
        return None, True
    return said.status, False


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
    """(array job id, task id, pending remainder) of a record. ``array.task`` is the
    remainder a record of the whole array stands for: a hex bitmap (``0x3FC``, what
    slurmdbd stores) or a range list (``2-9%2``)."""
    array = rec.get("array") or {}
    array_job = _num(array.get("job_id")) or None
    task = _num(array.get("task_id"))
    remainder = _text(array.get("task"))
    pending = ""
    if remainder and task is None:
        if remainder.lower().startswith("0x"):
            pending = compress_ranges(bitmap_tasks(remainder))
        else:
            pending = compress_ranges(expand_ranges(remainder.split("%")[0]))
    return array_job, task, pending


def parse_sacct_job(rec: Record, parser: DataParser | None = None) -> SlurmJob:
    """One ``jobs[]`` element of ``sacct --json`` (or slurmdbd REST), any data parser
    version, to a ``SlurmJob``. ``parser`` is the document's version when known (it decides
    whether a plain ``SUCCESS`` exit is believed).

    GPUs come from the allocated TRES (``gpu_source`` "accounting"). A site whose
    accounting does not track ``gres/gpu`` has none there: a job that started then gets
    what it asked for on its ``sbatch`` command line (``submit_line``, ``gpu_source``
    "submit_line") when that says it unambiguously; the queue sync adds slurmctld's view
    (``tres_per_job``, ``gres_detail``) for jobs it sees.

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
    state_field = rec["state"]
    if not isinstance(state_field, Mapping):
        raise ValueError(f"state is not an object: {state_field!r}")
    state = values.job_state(state_field.get("current"))
    array_job, task, pending = _array_fields(rec)
    het = rec.get("het") or {}
    het_job = _num(het.get("job_id")) or None
    het_offset = _num(het.get("job_offset")) if het_job else None
    tres = _tres_list((rec.get("tres") or {}).get("allocated"))
    start = _time(times.get("start")) if state != "PENDING" else None
    node_count = _num(rec.get("allocation_nodes")) or 0
    gpus, shards, types = _gpu_counts(tres)
    source = GpuSource.ACCOUNTING if gpus or shards else ""
    if not source and start is not None and node_count:  # it ran on nodes
        gpus, types, source = gpu_requests.gpus_from_submit_line(
            _text(rec.get("submit_line")), node_count)
    exit_status, unresolved = _exit_from_json(rec.get("exit_code"), state, parser)
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
        reason=_pending_reason(state, state_field.get("reason")),
        wait_reason=_wait_reason(state, state_field.get("reason")),
        exit=exit_status,
        exit_unresolved=unresolved,
        eligible_time=_time(times.get("eligible")),
        start_time=start,
        end_time=_time(times.get("end")) if state not in ACTIVE_STATES else None,
        time_limit_min=_num(times.get("limit")),
        array_job_id=array_job,
        array_task_id=task,
        array_tasks_pending=pending,
        het_job_id=het_job,
        het_job_offset=het_offset,
        nodes="" if nodes == "None assigned" else nodes,
        node_count=node_count,
        cpus=tres.get("cpu", 0),
        memory_mb=tres.get("mem", 0),
        mem_peak_mb=_max_rss_mb(rec.get("steps")),
        gpus=gpus,
        gpu_shards=shards,
        gpu_types=types,
        tres_alloc=_tres_text(tres),
        gpu_source=source,
        requested=requested.from_sacct(rec),
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


class _Dialect:
    """The data parser of a stream being read: the one its reader expects (slurmrestd's
    URL names it), checked against the document's ``meta`` whenever that arrives (first
    in sacct's output, last in slurmrestd's)."""

    def __init__(self, expected: DataParser | None, members: dict[str, Any]) -> None:
        self.parser = expected
        self.members = members
        self.checked = False

    def check(self) -> DataParser | None:
        """Detect (or confirm) the version once ``meta`` has been read; raises
        ``UnknownDataParser`` for a version Beacon does not read or one that contradicts
        what was expected."""
        if self.checked or "meta" not in self.members:
            return self.parser
        self.checked = True
        found = detect(self.members["meta"])
        if self.parser is not None and found.name != self.parser.name:
            raise UnknownDataParser(f"asked for Slurm JSON in {self.parser.name}, got "
                                    f"{found.name}")
        self.parser = found
        return found


def iter_sacct_json(stream: IO[bytes], members: dict[str, Any] | None = None,
                    prepare: Callable[[dict[str, Any]], None] | None = None,
                    parser: DataParser | None = None,
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

    The document's data parser (``parser`` when the caller knows it, else what ``meta``
    says) is checked as soon as ``meta`` is read: a version Beacon does not read raises
    ``UnknownDataParser`` there, before any further record. A document without ``meta``
    is read by shape, doubting 22.05-style exit codes; ``import_sacct`` refuses such a
    file unless told its version.
    """
    index = -1
    last_id: int | None = None
    members = {} if members is None else members
    dialect = _Dialect(parser, members)
    try:
        chunks = jsonstream.read_chunks(stream)
        for records in jsonstream.stream(chunks, "jobs", members, batches=False):
            version = dialect.check()
            for rec in records:
                index += 1
                try:
                    if prepare is not None:
                        prepare(rec)
                    job = parse_sacct_job(rec, version)
                except (KeyError, ValueError, TypeError, AttributeError, OverflowError) as exc:
                    last_id = _job_id_hint(rec)
                    yield RecordError(index, last_id, _describe(exc))
                    continue
                last_id = job.job_id
                yield job
        dialect.check()
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
    """Jobs from ``squeue --json`` or ``/slurm/<v>/jobs`` (``scontrol --json show job``),
    any data parser version.

    22.05's ``squeue --json`` and every version's ``/slurm/<v>/jobs`` also list finished
    jobs still in slurmctld's memory (24.11+'s ``squeue --json`` lists only pending and
    running ones); they are kept here (their exit code is slurmctld's) and the caller
    filters by state. Each entry carries the GPUs slurmctld says the job holds
    (``gpu_requests.gpus_from_slurmctld``).
    """
    entries: list[QueueEntry] = []
    for rec in data.get("jobs") or []:
        state = values.job_state(rec.get("job_state"))
        said = values.exit_code(rec.get("exit_code"))
        gpus, gpu_types, gpu_source = gpu_requests.gpus_from_slurmctld(
            rec, _num(rec.get("node_count")) or 0, _num(rec.get("tasks")) or 0)
        entries.append(QueueEntry(
            job_id=int(rec["job_id"]),
            state=state,
            reason=_pending_reason(state, rec.get("state_reason")),
            estimated_start=_time(rec.get("start_time")) if state == "PENDING" else None,
            exit=said.status if state not in ACTIVE_STATES else None,
            array_job_id=_num(rec.get("array_job_id")) or None,
            array_task_id=_num(rec.get("array_task_id")),
            user_name=_text(rec.get("user_name")),
            gpus=gpus, gpu_types=gpu_types, gpu_source=gpu_source,
            requested=requested.from_slurmctld(rec),
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
