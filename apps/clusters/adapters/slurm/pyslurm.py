"""The ``pyslurm`` Slurm backend: slurmctld and slurmdbd through pyslurm 25.11's classes.

**Checked against pyslurm 25.11's source, never run against a real libslurm 25.11 here.**
PyPI's pyslurm exists only for Slurm 25.11 and its build refuses any other ``slurm_version.h``
("Slurm version mismatch"); none of the Slurm releases Beacon runs in CI (22.05, 24.11,
26.05) is 25.11. Every call below was read against the pyslurm 25.11.2 sdist and is tested
with stand-in objects shaped as its classes define them (tests/clusters/test_slurm_pyslurm.py);
the cluster page says so for a pyslurm cluster (``NOTE``). Prefer ``cli`` or ``rest``.

What goes through pyslurm (the pyslurm 25.11 source file in brackets):

- ``change_marker``: ``pyslurm.slurmctld.diag()`` counters (core/slurmctld/stats.pyx);
- ``jobs_since``, ``jobs_by_id``, ``exit_codes``, ``job_scripts``, ``job_environments``:
  ``pyslurm.db.Jobs.load(db_filter=pyslurm.db.JobFilter(...))`` (db/job.pyx);
- ``queue``, ``gpu_bindings``: ``pyslurm.Jobs.load()`` and
  ``Job.get_resource_layout_per_node()`` (core/job/job.pyx);
- ``nodes``, ``partitions``: ``pyslurm.Nodes.load()``, ``pyslurm.Partitions.load()``
  (core/node.pyx, core/partition.pyx);
- ``associations``, ``account_limits``: ``pyslurm.db.Associations.load()`` (db/assoc.pyx);
- ``cancel_job``: ``pyslurm.Job(id).cancel()`` (SIGKILL; a job already done is no error).

What pyslurm 25.11 cannot give (an ``AdapterError`` naming why; ``cannot`` says it first):
fairshare (no sshare data), usage reports for reconciliation (no sreport), and quota previews
and writes (``db.Associations.modify`` can only select associations by user, and its
``_create_assoc_ptr`` uses an undefined ``self``, so it fails before sending anything).

Shapes that differ from sacct's JSON, handled here: every collection is a
``MultiClusterMap`` (iterating yields ids; ``.values()`` yields the objects); times are epoch
ints or None; ``allocated_tres`` is a ``TrackableResources`` object (None while pending), GPUs
in its ``gres`` dict; an array task 0 and a heterogeneous leader's offset 0 come back as None
(``u32_parse`` treats 0 as unset), a non-heterogeneous job's offset as 4294967294; slurmdbd's
pending array remainder is a hex bitmap (``0x38``); ``time_limit`` is ``"PartitionLimit"``
when unset; ``Node.configured_gres`` is a dict (``{"gpu:h100": 2}``); user names are looked
up in the worker's own passwd/NSS (a uid it cannot resolve comes back as the number).

Known limits: pyslurm's ``JobFilter`` cannot filter by state (``_parse_state`` is a TODO), so
a window misses jobs that never became eligible (the queue sync stores those); accounting
without ``gres/gpu`` in ``AccountingStorageTRES`` gives 0 GPUs per job (``db.Job`` carries
accounted TRES only, and slurmctld's ``Job.tres_per_job`` reads ``gres/gpu:4`` as empty);
GrpTRESRunMins is left empty (pyslurm fills it from GrpTRESMins); the default QOS is not
exposed; environment values that are all digits lose leading zeros (pyslurm makes them ints).

``pyslurm`` is imported inside the methods, so importing this module (the registry does)
never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from apps.clusters.adapters.slurm import parse, requested
from apps.clusters.adapters.slurm import types as st
from apps.core.errors import AdapterError, TransientAdapterError

T = TypeVar("T")

SERIES = "25.11"  # the pyslurm release series this module was checked against
NOTE = ("The pyslurm backend is tested only against objects shaped as pyslurm 25.11's source "
        "defines them. It has not run against a real libslurm 25.11 here: pyslurm builds only "
        "against Slurm 25.11, and Beacon's CI runs Slurm 22.05, 24.11 and 26.05. Prefer the cli "
        "or rest backend where you can.")

# Slurm errnos a retry can fix (slurm/slurm_errno.h; 22.05's numbers, kept since, with
# 1804-1805 added later): communication failures 1001-1004 and 1800-1805 (backoff, hard
# drop), a controller in standby (2027, 2131), a socket timeout (5004), slurmdbd down or its
# connection invalid (7000, 7008).
_TRANSIENT_ERRNOS = frozenset({1001, 1002, 1003, 1004, 1800, 1801, 1802, 1803, 1804, 1805,
                               2027, 2131, 5004, 7000, 7008})
# pyslurm raises some RPCErrors with its own text and errno -1 ("Failed to open onnection to
# slurmdbd", "Failed to get Jobs from slurmdbd"): these words mark a daemon down or slow.
_TRANSIENT_WORDS = ("slurmdbd", "unable to contact", "connect", "timed out", "timeout")
_NO_VAL = 0xFFFFFFFE
_FS_USE_PARENT = 0x7FFFFFFF  # SLURMDB_FS_USE_PARENT: sacctmgr prints "parent"
_SINCE_EVER = 946684800  # 2000-01-01 UTC: the cli backend's first window starts there too
_DIAG_KEYS = ("data_since", "jobs_submitted", "jobs_started", "jobs_completed",
              "jobs_canceled", "jobs_failed", "jobs_running", "jobs_pending")
# TrackableResources (db/tres.pxd): one TrackableResource per built-in type, dicts by name
_SCALAR_TRES = ("cpu", "mem", "energy", "node", "billing", "vmem", "pages")
_NAMED_TRES = ("gres", "license", "fs", "interconnect")
_WHY = {
    "fairshare": "pyslurm 25.11 does not wrap sshare's data",
    "usage reports": "pyslurm 25.11 has no sreport (slurmdb report) API",
    "quota previews and writes": ("pyslurm 25.11's db.Associations.modify cannot select one "
                                  "account and fails before sending (db/assoc.pyx)"),
    # issue 30's live view: not yet read against pyslurm 25.11's source, so not guessed
    "reservations": "not checked against pyslurm 25.11's Reservations class yet",
    "QOS limits": "not checked against pyslurm 25.11's db.QualitiesOfService yet",
}


def _pyslurm() -> Any:
    try:
        import pyslurm  # only now: this backend was selected
    except ImportError as exc:
        raise AdapterError(f"the pyslurm backend needs the pyslurm package ({SERIES}, built "
                           f"against libslurm {SERIES})", service="slurm") from exc
    version = str(getattr(pyslurm, "__version__", ""))
    if not version.startswith(f"{SERIES}."):
        raise AdapterError(f"the pyslurm backend was checked against pyslurm {SERIES} only; "
                           f"this is pyslurm {version or '(unknown version)'}", service="slurm")
    return pyslurm


def _error(ps: Any, what: str, exc: Exception) -> AdapterError:
    """An exception from pyslurm as Beacon's error: transient when Slurm's errno or pyslurm's
    own message says a daemon is down or slow, permanent otherwise (refusals, bad shapes)."""
    text = str(exc) or type(exc).__name__
    errno = getattr(exc, "errno", None)
    transient = isinstance(exc, ps.PyslurmError) and (
        errno in _TRANSIENT_ERRNOS or any(w in text.lower() for w in _TRANSIENT_WORDS))
    suffix = f" (Slurm errno {errno})" if isinstance(errno, int) and errno > 0 else ""
    kind = TransientAdapterError if transient else AdapterError
    return kind(f"pyslurm {what}: {text}{suffix}", service="slurm", detail=text)


def _call(ps: Any, what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # pyslurm raises RPCError, and plain errors on odd input
        raise _error(ps, what, exc) from exc


def _unsupported(what: str) -> AdapterError:
    why = _WHY.get(what, "pyslurm 25.11 does not offer it")
    return AdapterError(f"{what}: not available through the pyslurm backend ({why}); use cli",
                        service="slurm")


# --- Values as pyslurm 25.11 returns them ---------------------------------------------


def _int(value: Any) -> int | None:
    """An int pyslurm returned, or None for its "unset" forms (None, "UNLIMITED",
    "PartitionLimit", NO_VAL leaking through ``u32_parse(..., noval=0)``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _NO_VAL:
        return None
    return value


def _ts(value: Any) -> datetime | None:
    seconds = _int(value)
    return datetime.fromtimestamp(seconds, tz=UTC) if seconds else None


def _reason(value: Any) -> str:
    text = str(value or "")
    return "" if text == "None" else text


def _tres_dict(tres: Any) -> dict[str, int]:
    """A ``pyslurm.db.TrackableResources`` (None when empty) to Slurm's flat names, as
    ``parse.parse_tres_string`` gives them: ``{"cpu": 4, "mem": 8192, "gres/gpu:h100": 2}``."""
    out: dict[str, int] = {}
    if tres is None:
        return out
    for kind in _SCALAR_TRES:
        item = getattr(tres, kind, None)
        if item is not None:
            out[kind] = int(item.count)
    for kind in _NAMED_TRES:
        for name, item in (getattr(tres, kind, None) or {}).items():
            out[f"{kind}/{name}"] = int(item.count)
    return out


def _pending_tasks(raw: Any) -> str:
    """``array_tasks_waiting``: slurmdbd keeps a hex bitmap (``0x38``), slurmctld's answer a
    range (``3-5``); both to ``3-5``."""
    text = str(raw or "").split("%")[0]
    if text.lower().startswith("0x"):
        return parse.compress_ranges(parse.bitmap_tasks(text))
    return text


def _array_fields(job: Any) -> tuple[int | None, int | None, str]:
    array_job = _int(job.array_id)
    task = _int(job.array_task_id)
    pending = _pending_tasks(job.array_tasks_waiting) if task is None else ""
    if array_job and task is None and not pending:
        task = 0  # u32_parse turned task 0 into None
    return array_job, task, pending


def _het_fields(job: Any) -> tuple[int | None, int | None]:
    het_job = _int(job.heterogeneous_id)
    if not het_job:
        return None, None
    return het_job, _int(job.heterogeneous_offset) or 0  # the leader's 0 came back as None


def _peak_rss_mb(job: Any) -> float | None:
    peak = _int(getattr(job.stats, "resident_memory", None)) if job.stats is not None else None
    return peak / 2**20 if peak else None


def job_from_pyslurm(job: Any) -> st.SlurmJob:
    """Map one ``pyslurm.db.Job`` (pyslurm 25.11, db/job.pyx) to a ``SlurmJob``.

    pyslurm decodes the stored exit status itself (``exit_code``/``exit_code_signal``), so
    the 22.05 JSON bug does not apply. GPUs come from the allocated TRES (accounting).
    """
    job_id = int(job.id)
    submit = _ts(job.submit_time)
    if submit is None:
        raise ValueError("no submit_time")
    state = parse._state(job.state)
    array_job, task, pending = _array_fields(job)
    het_job, het_offset = _het_fields(job)
    tres = _tres_dict(job.allocated_tres)
    gpus, shards, types = parse._gpu_counts(tres)
    finished = state not in st.ACTIVE_STATES
    reason = _reason(job.state_reason)
    nodes = str(job.nodelist or "")
    return st.SlurmJob(
        job_id=job_id,
        display_id=parse._display_id(job_id, array_job, task, pending, het_job, het_offset),
        cluster=str(job.cluster or ""), submit_time=submit,
        name=str(job.name or ""), user_name=str(job.user_name or ""),
        account=str(job.account or ""), partition=str(job.partition or ""),
        qos=str(job.qos or ""), work_dir=str(job.working_directory or ""),
        comment=str(job.comment or ""), state=state,
        reason=reason if state == "PENDING" else "",
        wait_reason=reason if state != "PENDING" else "",
        exit=(st.ExitStatus(int(job.exit_code or 0), int(job.exit_code_signal or 0))
              if finished else None),
        eligible_time=_ts(job.eligible_time),
        start_time=_ts(job.start_time) if state != "PENDING" else None,
        end_time=_ts(job.end_time) if finished else None,
        time_limit_min=_int(job.time_limit),
        array_job_id=array_job, array_task_id=task, array_tasks_pending=pending,
        het_job_id=het_job, het_job_offset=het_offset,
        nodes="" if nodes == "None assigned" else nodes, node_count=tres.get("node", 0),
        cpus=tres.get("cpu", 0), memory_mb=tres.get("mem", 0), mem_peak_mb=_peak_rss_mb(job),
        gpus=gpus, gpu_shards=shards, gpu_types=types, tres_alloc=parse._tres_text(tres),
        gpu_source=st.GpuSource.ACCOUNTING if gpus or shards else "",
        requested=requested.from_tres(_tres_dict(job.requested_tres), _int(job.time_limit),
                                      str(job.submit_command or "")),
    )


def _queue_entry(job: Any) -> st.QueueEntry:
    """One ``pyslurm.Job`` (slurmctld, core/job/job.pyx) as the live queue shows it."""
    state = parse._state(job.state)
    pending = state == "PENDING"
    array_job, task, _ = _array_fields(job)
    return st.QueueEntry(
        job_id=int(job.id), state=state, user_name=str(job.user_name or ""),
        reason=_reason(job.state_reason) if pending else "",
        estimated_start=_ts(job.start_time) if pending else None,
        array_job_id=array_job, array_task_id=task,
        requested=requested.from_tres(_tres_dict(job.requested_tres), _int(job.time_limit)))


def _gpu_models(gres: Mapping[str, Any] | None) -> tuple[dict[str, int], int]:
    """A pyslurm gres dict (``{"gpu:h100": 2, "gpu:h200": 4}``, or ``{"gpu": 8}``; with
    ``IDX`` a value is ``{"count": 4, "indexes": "0-3"}``) to (GPUs per model, untyped)."""
    models: dict[str, int] = {}
    untyped = 0
    for key, value in (gres or {}).items():
        name, _, model = str(key).partition(":")
        if name != "gpu":
            continue
        count = _int(value.get("count") if isinstance(value, Mapping) else value) or 0
        if model:
            models[model] = models.get(model, 0) + count
        else:
            untyped += count
    return models, untyped


def _node(node: Any) -> st.SlurmNode:
    """One ``pyslurm.Node`` (core/node.pyx): ``configured_gres`` and ``allocated_gres`` are
    dicts; ``state`` is Slurm's complete state string (``IDLE+DRAIN``)."""
    models, untyped = _gpu_models(node.configured_gres)
    used_models, used_untyped = _gpu_models(node.allocated_gres)
    return st.SlurmNode(
        name=str(node.name), state=str(node.state or "").lower(),
        partitions=tuple(str(p) for p in node.partitions or ()),
        cpus=_int(node.total_cpus) or 0, memory_mb=_int(node.real_memory) or 0,
        gpu_type="+".join(models), gpu_count=sum(models.values()) or untyped,
        gpus_used=used_untyped or sum(used_models.values()),
        reason=str(node.reason or ""), gpu_types=models)


def _partition(part: Any) -> st.SlurmPartition:
    """One ``pyslurm.Partition`` (core/partition.pyx): ``max_time`` is minutes, or
    ``"UNLIMITED"``/None."""
    return st.SlurmPartition(
        name=str(part.name), state=str(part.state or "").lower(),
        is_default=bool(part.is_default), max_time_min=_int(part.max_time),
        nodes=str(part.nodes or ""))


def _association(assoc: Any) -> st.Association:
    """One ``pyslurm.db.Association`` (db/assoc.pyx). Its ``group_tres_run_mins`` is filled
    from GrpTRESMins by pyslurm 25.11, so it is left empty; the default QOS is not exposed."""
    shares = _int(assoc.shares)
    return st.Association(
        cluster=str(assoc.cluster or ""), account=str(assoc.account or ""),
        user=str(assoc.user or ""), parent=str(assoc.parent_account or ""),
        shares="parent" if shares == _FS_USE_PARENT else "" if shares is None else str(shares),
        grp_tres=_tres_dict(assoc.group_tres), grp_tres_mins=_tres_dict(assoc.group_tres_mins),
        max_tres=_tres_dict(assoc.max_tres_per_job), grp_jobs=_int(assoc.group_jobs),
        max_wall_min=_int(assoc.max_wall_time_per_job),
        qos=tuple(str(q) for q in assoc.qos or ()))


def _bindings(job_id: int, node: str, gres: Mapping[str, Any] | None) -> list[st.GpuBinding]:
    """GPU indices from a layout's ``gres`` (``{"gpu:h100": {"count": 2, "indexes": "0-1"}}``),
    one binding per model: a node may hold two."""
    out = []
    for key, value in (gres or {}).items():
        name, _, model = str(key).partition(":")
        indexes = str(value.get("indexes") or "") if isinstance(value, Mapping) else ""
        if name == "gpu" and indexes not in ("", "N/A"):
            out.append(st.GpuBinding(job_id, node, tuple(parse.expand_ranges(indexes)), model))
    return out


def _job_bindings(ps: Any, job: Any) -> list[st.GpuBinding]:
    layout = _call(ps, f"job {job.id} layout", job.get_resource_layout_per_node)
    return [binding for node, resources in layout.items()
            for binding in _bindings(int(job.id), str(node), (resources or {}).get("gres"))]


@dataclass
class SlurmPyslurm:
    """Talks to slurmctld/slurmdbd through pyslurm 25.11 (see the module docstring).

    Options: ``cluster`` (the Slurm ClusterName whose accounting is read; pyslurm talks to
    the controller of the worker's own slurm.conf).
    """

    cluster: str = ""

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlurmPyslurm:
        _pyslurm()  # fail at configuration time, with a clear message
        return cls(cluster=str(options.get("cluster", "")))

    def _db_jobs(self, what: str, **filters: Any) -> list[Any]:
        """``pyslurm.db.Jobs.load``'s jobs (its collection iterates ids: take ``values()``)."""
        ps = _pyslurm()
        if self.cluster:
            filters["clusters"] = [self.cluster]
        loaded = _call(ps, what, lambda: ps.db.Jobs.load(db_filter=ps.db.JobFilter(**filters)))
        return list(loaded.values())

    def _ctld(self, what: str, load: Callable[[Any], Any]) -> list[Any]:
        """The objects of a slurmctld collection (``pyslurm.Jobs``, ``Nodes``, ``Partitions``)."""
        ps = _pyslurm()
        return list(_call(ps, what, lambda: load(ps)).values())

    def _mapped(self, jobs: list[Any]) -> Iterator[st.SlurmJob | st.RecordError]:
        for index, job in enumerate(jobs):
            try:
                yield job_from_pyslurm(job)
            except (AttributeError, KeyError, ValueError, TypeError) as exc:
                yield st.RecordError(index, _int(getattr(job, "id", None)),
                                     f"{type(exc).__name__}: {exc}")

    def _by_display_id(self, jobs: list[Any], text: Callable[[Any], str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for job in jobs:
            body = text(job)
            if not body:
                continue
            try:
                key = job_from_pyslurm(job).display_id
            except (AttributeError, KeyError, ValueError, TypeError):
                key = str(job.id)
            out[key] = body
        return out

    def _shaped(self, what: str, build: Callable[[], T]) -> T:
        """Map loaded objects; an attribute pyslurm does not have is an ``AdapterError``."""
        try:
            return build()
        except (AttributeError, KeyError, ValueError, TypeError) as exc:
            raise AdapterError(f"pyslurm {what}: unexpected shape: {exc}",
                               service="slurm") from exc

    # --- the SlurmClient interface ---------------------------------------------------

    def change_marker(self) -> str:
        ps = _pyslurm()
        stats = _call(ps, "diag", lambda: ps.slurmctld.diag())
        return self._shaped("diag", lambda: ";".join(
            f"{key}={int(getattr(stats, key))}" for key in _DIAG_KEYS))

    def jobs_since(self, since: datetime | None) -> Iterator[st.SlurmJob | st.RecordError]:
        start = int(since.timestamp()) if since else _SINCE_EVER
        end = int(datetime.now(tz=UTC).timestamp())
        return self._mapped(self._db_jobs("db jobs", start_time=start, end_time=end))

    def jobs_by_id(self, job_ids: Iterable[int]) -> Iterator[st.SlurmJob | st.RecordError]:
        ids = [int(i) for i in job_ids]
        # a JobFilter without ids loads today's jobs: no ids, no call
        return self._mapped(self._db_jobs("db jobs", ids=ids)) if ids else iter(())

    def exit_codes(self, job_ids: Iterable[int]) -> dict[int, st.ExitStatus]:
        return {j.job_id: j.exit for j in self.jobs_by_id(job_ids)
                if isinstance(j, st.SlurmJob) and j.exit is not None}

    def queue(self) -> list[st.QueueEntry]:
        jobs = self._ctld("jobs", lambda ps: ps.Jobs.load())
        entries = self._shaped("jobs", lambda: [_queue_entry(j) for j in jobs])
        return [e for e in entries if e.state in st.ACTIVE_STATES]

    def gpu_bindings(self) -> list[st.GpuBinding]:
        """slurmctld's per-node ``gres_detail`` of running jobs, through
        ``Job.get_resource_layout_per_node()`` (pyslurm loads jobs with SHOW_DETAIL)."""
        ps = _pyslurm()
        jobs = self._ctld("jobs", lambda ps: ps.Jobs.load())
        return self._shaped("job layouts", lambda: [
            binding for job in jobs if parse._state(job.state) == "RUNNING"
            for binding in _job_bindings(ps, job)])

    def nodes(self) -> list[st.SlurmNode]:
        nodes = self._ctld("nodes", lambda ps: ps.Nodes.load())
        return self._shaped("nodes", lambda: [_node(n) for n in nodes])

    def partitions(self) -> list[st.SlurmPartition]:
        parts = self._ctld("partitions", lambda ps: ps.Partitions.load())
        return self._shaped("partitions", lambda: [_partition(p) for p in parts])

    def associations(self) -> list[st.Association]:
        """Every association of this cluster but partition-specific ones (Beacon keeps one
        row per account and user). pyslurm's filter selects users only: the cluster is
        matched here."""
        ps = _pyslurm()
        loaded = _call(ps, "associations", lambda: ps.db.Associations.load())
        return self._shaped("associations", lambda: [
            _association(a) for a in loaded.values()
            if (not self.cluster or a.cluster == self.cluster) and not a.partition])

    def reservations(self) -> list[st.Reservation]:
        raise _unsupported("reservations")

    def qos(self) -> list[st.Qos]:
        raise _unsupported("QOS limits")

    def shares(self) -> list[st.ShareRow]:
        raise _unsupported("fairshare")

    def job_scripts(self, job_ids: Iterable[int]) -> dict[str, str]:
        """Scripts by display id (``4_0``), as the labels look them up; a record that cannot
        be mapped keeps its raw id."""
        ids = [int(i) for i in job_ids]
        if not ids:  # slurmdbd sends scripts only for jobs named by id
            return {}
        jobs = self._db_jobs("db job scripts", ids=ids, with_script=True)
        return self._by_display_id(jobs, lambda job: str(job.script or ""))

    def job_environments(self, job_ids: Iterable[int]) -> dict[str, str]:
        """``VAR=value`` lines by display id, from ``db.Job.environment`` (a dict)."""
        ids = [int(i) for i in job_ids]
        if not ids:
            return {}
        jobs = self._db_jobs("db job environments", ids=ids, with_env=True)
        return self._by_display_id(jobs, lambda job: "".join(
            f"{key}={value}\n" for key, value in (job.environment or {}).items()))

    def usage_report(self, start: datetime, end: datetime, tres: str) -> list[st.UsageRow]:
        raise _unsupported("usage reports")

    def job_allocations(self, start: datetime, end: datetime) -> list[st.JobAllocation]:
        raise _unsupported("usage reports")  # only the reconciliation asks, with sreport's

    def account_limits(self, account: str) -> st.Association | None:
        rows = [a for a in self.associations() if a.account == account and not a.user]
        return rows[0] if rows else None

    def set_account_limit(self, account: str, tres: str, minutes: int | None,
                          dry_run: bool = False) -> st.LimitChange:
        raise _unsupported("quota previews and writes")

    def cancel_job(self, job_id: int) -> None:
        """``pyslurm.Job(id).cancel()``: SIGKILL to the whole job; pyslurm itself ignores
        "already done" and, for SIGKILL, "invalid job id" (a job purged from memory)."""
        ps = _pyslurm()
        _call(ps, f"cancel job {int(job_id)}", lambda: ps.Job(int(job_id)).cancel())

    def cannot(self, action: st.Action) -> str:
        what = {st.Action.QUOTA_PREVIEW: "quota previews and writes",
                st.Action.QUOTA_WRITE: "quota previews and writes",
                st.Action.RECONCILE: "usage reports"}
        return str(_unsupported(what[action])) if action in what else ""

    def accounted_until(self) -> datetime | None:
        return None
