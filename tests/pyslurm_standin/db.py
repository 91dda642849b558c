"""The stand-in ``pyslurm.db``: db/tres.pyx, db/job.pyx, db/stats.pyx, db/assoc.pyx."""

from __future__ import annotations

import copy
from typing import Any

from tests.pyslurm_standin.base import (
    INFINITE,
    LOCAL_CLUSTER,
    NO_VAL,
    STATE,
    TRES_TABLE,
    MultiClusterMap,
    _exit_code,
    _key_values,
    _public,
    _raw_time,
    _u32_parse,
)

# --- pyslurm/db/tres.pyx: TrackableResources, TrackableResource, GPU --------------------


class TrackableResource:
    """db/tres.pxd: ``id``, ``name``, ``type``, ``count`` (mem in MiB)."""

    __slots__ = ("count", "id", "name", "type")

    def __init__(self, tres_type: str, count: int, name: str | None = None,
                 tres_id: int | None = None) -> None:
        self.type, self.count, self.name, self.id = tres_type, int(count), name, tres_id


class GPU:
    """db/tres.pxd: ``id``, ``type`` (the model, or None), ``count``; ``name`` is
    ``gpu:<type>`` or ``gpu``."""

    __slots__ = ("count", "id", "type")

    def __init__(self, count: int, gpu_type: str | None = None, tres_id: int | None = None) -> None:
        self.count, self.type, self.id = int(count), gpu_type, tres_id

    @property
    def name(self) -> str:
        return f"gpu:{self.type}" if self.type else "gpu"


class TrackableResources:
    """db/tres.pxd: ``cpu``, ``mem``, ``energy``, ``node``, ``billing``, ``vmem``, ``pages``
    (a TrackableResource or None), ``gres``/``license``/``fs``/``interconnect``/``other``
    (dicts by name; GPUs are ``GPU`` objects keyed ``gpu`` or ``gpu:<model>``)."""

    __slots__ = ("billing", "cpu", "energy", "fs", "gres", "interconnect", "license", "mem",
                 "node", "other", "pages", "raw_str", "vmem")

    def __init__(self) -> None:
        for name in ("billing", "cpu", "energy", "mem", "node", "pages", "raw_str", "vmem"):
            setattr(self, name, None)
        self.fs, self.gres, self.license, self.interconnect, self.other = {}, {}, {}, {}, {}

    @staticmethod
    def from_str(text: str, table: dict[int, tuple[str, str]] | None = None,
                 on_empty: Any = None) -> Any:
        """``1=4,2=8192,1002=2`` (slurmdbd's TRES ids) or ``cpu=4,gres/gpu=2``; None when empty."""
        pairs = _key_values(text)
        if not pairs:
            return on_empty
        out = TrackableResources()
        for key, raw in pairs.items():
            if key.isdigit():
                kind, name = (table or TRES_TABLE).get(int(key), ("", ""))
            else:
                kind, _, name = key.partition("/")
            count = _mebibytes(raw) if kind == "mem" else int(raw)
            if kind == "gres" and name.split(":")[0] == "gpu":
                out.gres[name] = GPU(count, name.partition(":")[2] or None)
            elif kind in ("gres", "license", "fs", "interconnect"):
                getattr(out, kind)[name] = TrackableResource(kind, count, name)
            elif kind:
                setattr(out, kind, TrackableResource(kind, count))
        return out


def _mebibytes(raw: Any) -> int:
    """helpers.pyx ``dehumanize``: ``8192`` stays, ``64G`` becomes 65536."""
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}
    text = str(raw)
    return round(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def _tres(text: str) -> Any:
    return TrackableResources.from_str(text)


# --- pyslurm/db/job.pyx + db/stats.pyx: JobFilter, Jobs, Job, JobStatistics --------------


class JobFilter:
    """db/job.pxd ``cdef public`` attributes; any other keyword is an AttributeError."""

    __slots__ = ("accounts", "association_ids", "clusters", "constraints", "cpus", "end_time",
                 "groups", "ids", "max_cpus", "max_nodes", "max_timelimit", "names", "nodelist",
                 "nodes", "partitions", "qos", "start_time", "timelimit", "truncate_time",
                 "users", "wckeys", "with_env", "with_script")

    def __init__(self, **kwargs: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, None)
        for key, value in kwargs.items():
            setattr(self, key, value)


class JobStatistics:
    """db/stats.pxd: of the fields, ``resident_memory`` (the largest step MaxRSS, bytes)."""

    __slots__ = ("elapsed_cpu_time", "resident_memory", "total_cpu_time", "virtual_memory")

    def __init__(self, resident_memory: int = 0) -> None:
        self.resident_memory, self.virtual_memory = resident_memory, 0
        self.total_cpu_time = self.elapsed_cpu_time = 0


class DbJob:
    """``pyslurm.db.Job`` (db/job.pyx) over the raw ``slurmdb_job_rec_t`` fields it reads.

    Mirrored attributes: ``id``, ``cluster``, ``name``, ``account``, ``partition``, ``qos``,
    ``user_name``, ``working_directory``, ``comment`` (derived_es), ``state`` (string),
    ``state_reason`` (the previous reason, ``"None"`` when none), ``submit_time``,
    ``eligible_time``, ``start_time``, ``end_time`` (ints or None), ``time_limit`` (minutes,
    ``"PartitionLimit"`` when unset, None when infinite), ``exit_code``,
    ``exit_code_signal``, ``array_id``, ``array_task_id``, ``array_tasks_waiting``,
    ``heterogeneous_id``, ``heterogeneous_offset``, ``nodelist``, ``num_nodes``, ``cpus``,
    ``memory``, ``allocated_tres`` / ``requested_tres`` (TrackableResources or None), ``tres``,
    ``gres``, ``gpus``, ``submit_command`` (the submit line), ``script``, ``environment`` (a
    dict), ``stats``, ``to_dict()``,
    ``as_dict()``. Not there: ``tres_alloc_str`` and the other raw C names.
    """

    __slots__ = ("_account", "_array_job_id", "_array_task_id", "_array_task_str", "_cluster",
                 "_derived_es", "_eligible", "_end", "_env", "_exitcode", "_het_job_id",
                 "_het_job_offset", "_jobid", "_jobname", "_nodes", "_partition", "_qos",
                 "_script", "_start", "_state", "_state_reason_prev", "_submit", "_submit_line",
                 "_timelimit",
                 "_tres_alloc_str", "_tres_req_str", "_user", "_work_dir", "stats", "steps")

    def __init__(self, jobid: int, *, cluster: str = LOCAL_CLUSTER, jobname: str = "",
                 user: str = "", account: str = "", partition: str = "", qos: str = "normal",
                 work_dir: str = "", derived_es: str = "", state: str = "COMPLETED",
                 state_reason_prev: str = "None", submit: int = 0, eligible: int = 0,
                 start: int = 0, end: int = 0, timelimit: int = NO_VAL, exitcode: int = 0,
                 array_job_id: int = 0, array_task_id: int = NO_VAL, array_task_str: str = "",
                 het_job_id: int = 0, het_job_offset: int = NO_VAL, nodes: str = "",
                 tres_alloc_str: str = "", tres_req_str: str = "", script: str = "",
                 env: str = "", max_rss: int = 0, submit_line: str = "") -> None:
        self._jobid, self._cluster, self._jobname, self._user = jobid, cluster, jobname, user
        self._account, self._partition, self._qos, self._work_dir = account, partition, qos, \
            work_dir
        self._derived_es, self._state, self._state_reason_prev = derived_es, state, \
            state_reason_prev
        self._submit, self._eligible, self._start, self._end = submit, eligible, start, end
        self._timelimit, self._exitcode = timelimit, exitcode
        self._array_job_id, self._array_task_id = array_job_id, array_task_id
        self._array_task_str = array_task_str
        self._het_job_id, self._het_job_offset, self._nodes = het_job_id, het_job_offset, nodes
        self._tres_alloc_str, self._tres_req_str = tres_alloc_str, tres_req_str
        self._script, self._env, self._submit_line = script, env, submit_line
        self.stats, self.steps = JobStatistics(max_rss), {}

    id = property(lambda self: self._jobid)
    cluster = property(lambda self: self._cluster)
    name = property(lambda self: self._jobname or None)
    user_name = property(lambda self: self._user or None)
    account = property(lambda self: self._account or None)
    partition = property(lambda self: self._partition or None)
    qos = property(lambda self: self._qos or None)
    working_directory = property(lambda self: self._work_dir or None)
    comment = property(lambda self: self._derived_es or None)
    state = property(lambda self: self._state)
    state_reason = property(lambda self: self._state_reason_prev)
    submit_time = property(lambda self: _raw_time(self._submit))
    eligible_time = property(lambda self: _raw_time(self._eligible))
    start_time = property(lambda self: _raw_time(self._start))
    end_time = property(lambda self: _raw_time(self._end))
    time_limit = property(lambda self: _raw_time(self._timelimit, "PartitionLimit"))
    exit_code = property(lambda self: _exit_code(self._exitcode)[0])
    exit_code_signal = property(lambda self: _exit_code(self._exitcode)[1])
    array_id = property(lambda self: _u32_parse(self._array_job_id))
    array_task_id = property(lambda self: _u32_parse(self._array_task_id))
    array_tasks_waiting = property(lambda self: self._array_task_str.split("%")[0] or None)
    heterogeneous_id = property(lambda self: _u32_parse(self._het_job_id, noval=0))
    heterogeneous_offset = property(lambda self: _u32_parse(self._het_job_offset, noval=0))
    nodelist = property(lambda self: self._nodes or None)
    allocated_tres = property(lambda self: _tres(self._tres_alloc_str))
    requested_tres = property(lambda self: _tres(self._tres_req_str))
    tres = property(lambda self: self.allocated_tres or self.requested_tres)
    gres = property(lambda self: self.tres.gres if self.tres else {})
    gpus = property(lambda self: {k: v for k, v in self.gres.items() if isinstance(v, GPU)})
    submit_command = property(lambda self: self._submit_line or None)
    script = property(lambda self: self._script or None)
    environment = property(lambda self: _key_values(self._env, "\n"))

    @property
    def num_nodes(self) -> int:
        tres = self.allocated_tres or self.requested_tres
        return tres.node.count if tres and tres.node else 0

    @property
    def cpus(self) -> int:
        tres = self.allocated_tres
        return tres.cpu.count if tres and tres.cpu else 1

    @property
    def memory(self) -> Any:
        tres = self.requested_tres
        return tres.mem.count if tres and tres.mem else 0

    def to_dict(self, recursive: bool = False) -> dict[str, Any]:
        return _public(self)

    def as_dict(self) -> dict[str, Any]:
        return self.to_dict()


class DbJobs(MultiClusterMap):
    """``pyslurm.db.Jobs``: ``load(db_filter=None, db_connection=None)``, a multi-cluster
    map by job id. Like slurmdbd: ids select jobs and whole arrays; no ids, everything
    staged (the window itself is not emulated); scripts and environments only on request."""

    __slots__ = ()

    @staticmethod
    def load(db_filter: JobFilter | None = None, db_connection: Any = None) -> DbJobs:
        flt = db_filter or JobFilter()
        STATE.call("db.Jobs.load", flt)
        if flt.with_script and flt.with_env:
            raise ValueError("with_script and with_env are mutually exclusive")
        clusters = flt.clusters or [LOCAL_CLUSTER]
        out = []
        for job in STATE.db_jobs:
            if job.cluster not in clusters:
                continue
            if flt.ids and job._jobid not in flt.ids and job._array_job_id not in flt.ids:
                continue
            job = copy.copy(job)
            job._script = job._script if flt.ids and flt.with_script else ""
            job._env = job._env if flt.ids and flt.with_env else ""
            out.append(job)
        return DbJobs(out)


# --- pyslurm/db/assoc.pyx: AssociationFilter, Associations, Association ------------------


class AssociationFilter:
    """db/assoc.pxd ``cdef public``: ``users``, ``ids`` (only ``users`` reaches slurmdbd)."""

    __slots__ = ("ids", "users")

    def __init__(self, **kwargs: Any) -> None:
        self.users = self.ids = None
        for key, value in kwargs.items():
            setattr(self, key, value)


class Association:
    """``pyslurm.db.Association``: ``id``, ``cluster``, ``account``, ``user``,
    ``parent_account``, ``partition``, ``shares`` (raw, 0x7FFFFFFF = parent), ``group_jobs``,
    ``max_wall_time_per_job`` (minutes), ``qos`` (names), ``group_tres``,
    ``group_tres_mins``, ``group_tres_run_mins`` (filled from grp_tres_mins, as
    ``_parse_assoc_ptr`` does), ``max_tres_per_job`` (TrackableResources or None)."""

    __slots__ = ("_acct", "_cluster", "_grp_jobs", "_id", "_max_wall_pj", "_parent_acct",
                 "_partition", "_shares_raw", "_user", "group_tres", "group_tres_mins",
                 "group_tres_run_mins", "max_tres_mins_per_job", "max_tres_per_job",
                 "max_tres_per_node", "max_tres_run_mins_per_user", "qos")

    def __init__(self, assoc_id: int, *, cluster: str = LOCAL_CLUSTER, acct: str = "",
                 user: str = "", parent_acct: str = "", partition: str = "",
                 shares_raw: int = 1, grp_jobs: int = INFINITE, max_wall_pj: int = INFINITE,
                 grp_tres: str = "", grp_tres_mins: str = "", max_tres_pj: str = "",
                 qos: list[str] | None = None) -> None:
        self._id, self._cluster, self._acct, self._user = assoc_id, cluster, acct, user
        self._parent_acct, self._partition, self._shares_raw = parent_acct, partition, shares_raw
        self._grp_jobs, self._max_wall_pj = grp_jobs, max_wall_pj
        self.group_tres, self.group_tres_mins = _tres(grp_tres), _tres(grp_tres_mins)
        self.group_tres_run_mins = _tres(grp_tres_mins)  # sic: pyslurm 25.11 reads grp_tres_mins
        self.max_tres_per_job, self.max_tres_per_node = _tres(max_tres_pj), None
        self.max_tres_mins_per_job = self.max_tres_run_mins_per_user = None
        self.qos = list(qos or [])

    id = property(lambda self: _u32_parse(self._id))
    cluster = property(lambda self: self._cluster)
    account = property(lambda self: self._acct or None)
    user = property(lambda self: self._user or None)
    parent_account = property(lambda self: self._parent_acct or None)
    partition = property(lambda self: self._partition or None)
    shares = property(lambda self: _u32_parse(self._shares_raw, zero_is_noval=False))
    group_jobs = property(lambda self: _u32_parse(self._grp_jobs, zero_is_noval=False))
    max_wall_time_per_job = property(
        lambda self: _u32_parse(self._max_wall_pj, zero_is_noval=False))

    def to_dict(self, recursive: bool = False) -> dict[str, Any]:
        return _public(self)


class Associations(MultiClusterMap):
    """``pyslurm.db.Associations.load(db_filter=None, db_connection=None)``: every
    association of every cluster, a multi-cluster map by association id."""

    __slots__ = ()

    @staticmethod
    def load(db_filter: AssociationFilter | None = None,
             db_connection: Any = None) -> Associations:
        STATE.call("db.Associations.load", db_filter)
        return Associations(STATE.associations)
