"""A stand-in for the ``pyslurm`` package, release 25.11.2, for unit tests only.

pyslurm 25.11 builds only against libslurm 25.11, which no Slurm here is, so the backend is
tested against this module instead, injected as ``sys.modules["pyslurm"]``. Each class below
mirrors one class of the pyslurm 25.11.2 sdist (``pip download pyslurm==25.11.2 --no-binary
pyslurm``; the file is named on each class): the same class and attribute names, the same value
types and the same "unset" forms, computed from the raw C fields the way pyslurm computes them
(``u32_parse`` turning 0 into None, ``_raw_time``, exit statuses decoded from the wait status,
TRES ids translated through the TRES table). Attributes are ``__slots__``: reading one the real
Cython class does not define (``tres_alloc_str``, ``as_dict`` on a collection) fails the same
way. Collections are multi-cluster maps: iterating one yields ids, ``.values()`` the objects.
This is our own code written against pyslurm's documented shapes; none of pyslurm's is copied.

Tests stage data on ``STATE`` (``reset()`` first) and read back what was asked in
``STATE.calls``.
"""

from __future__ import annotations

import copy
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

VERSION = "25.11.2"
LOCAL_CLUSTER = "devcluster"  # pyslurm.settings.LOCAL_CLUSTER: ClusterName of slurm.conf
NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
UNLIMITED = "UNLIMITED"  # pyslurm/constants.py
# A TRES table as slurmdbd numbers it (ids 1-5 are Slurm's built-ins; gres ids from 1001)
TRES_TABLE = {1: ("cpu", ""), 2: ("mem", ""), 3: ("energy", ""), 4: ("node", ""),
              5: ("billing", ""), 1001: ("gres", "gpu"), 1002: ("gres", "gpu:h100"),
              1003: ("gres", "gpu:h200"), 1004: ("gres", "shard")}
STRERROR = {1800: "Unable to contact slurm controller (connect failure)",
            2002: "Access/permission denied", 2017: "Invalid job id specified",
            2021: "Job/step already completing or completed",
            7000: "Unable to connect to database"}


@dataclass
class State:
    """What the stand-in daemons hold, and what was asked of them."""

    db_jobs: list[Any] = field(default_factory=list)
    jobs: list[Any] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list)
    partitions: list[Any] = field(default_factory=list)
    associations: list[Any] = field(default_factory=list)
    diag: dict[str, int] = field(default_factory=dict)
    fail: dict[str, Exception] = field(default_factory=dict)  # call name -> raised
    kill_errno: dict[int, int] = field(default_factory=dict)  # job id -> slurm errno
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def call(self, name: str, arg: Any = None) -> None:
        self.calls.append((name, arg))
        if name in self.fail:
            raise self.fail[name]


STATE = State()


def reset() -> State:
    global STATE
    STATE = State()
    return STATE


# --- pyslurm/utils: the conversions every class uses (uint.pyx, ctime.pyx, helpers.pyx) --


def _u32_parse(value: int, noval: int = NO_VAL, zero_is_noval: bool = True) -> Any:
    if value == noval or (value == 0 and zero_is_noval):
        return None
    return UNLIMITED if value == INFINITE else value


def _raw_time(value: int, on_noval: Any = None, on_inf: Any = None) -> Any:
    if value in (NO_VAL, 0):
        return on_noval
    return on_inf if value == INFINITE else value


def _exit_code(raw: int) -> tuple[int, int]:
    """helpers.pyx ``_get_exit_code``: (code, signal) from a wait status; code >= 128 loses 128."""
    if raw == NO_VAL:
        return 0, 0
    if raw & 0x7F:
        return 0, raw & 0x7F
    code = (raw >> 8) & 0xFF
    return (code - 128 if code >= 128 else code), 0


def _key_values(text: str) -> dict[str, Any]:
    """cstr.pyx ``to_dict``: ``a=1,b=x`` to a dict, digit values as ints, items without '=' gone."""
    out: dict[str, Any] = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key] = int(value) if value.isdigit() else value
    return out


def _env_dict(text: str) -> dict[str, Any]:
    """cstr.pyx ``to_dict(env, delim1="\\n", delim2="=")``: one variable a line, digits as ints."""
    out: dict[str, Any] = {}
    for line in (text or "").split("\n"):
        key, sep, value = line.partition("=")
        if sep:
            out[key] = int(value) if value.isdigit() else value
    return out


_GRES_ITEM = re.compile(r"(?:gres:)?(?P<name>[^:,(]+)(?::(?P<type>[^:,(]+))?:(?P<count>\d+)"
                        r"(?:\((?:IDX:(?P<idx>[^)]*)|[^)]*)\))?")


def gres_dict(text: str) -> dict[str, Any]:
    """cstr.pyx ``to_gres_dict``: ``gpu:h100:2(S:0),gpu:h200:4(IDX:2-5)`` to
    ``{"gpu:h100": 2, "gpu:h200": {"count": 4, "indexes": "2-5"}}`` (IDX kept as text)."""
    out: dict[str, Any] = {}
    for match in _GRES_ITEM.finditer(text or ""):
        key = f"{match['name']}:{match['type']}" if match["type"] else match["name"]
        count = int(match["count"])
        out[key] = {"count": count, "indexes": match["idx"]} if match["idx"] else count
    return out


# --- pyslurm/xcollections.pyx: MultiClusterMap ------------------------------------------


class MultiClusterMap:
    """``{cluster: {id: object}}``; iterating yields the ids (not the objects), ``values()``
    the objects of every cluster, ``get(id)`` looks in the local cluster."""

    __slots__ = ("data",)

    def __init__(self, items: list[Any] | None = None, id_attr: str = "id") -> None:
        self.data: dict[str, dict[Any, Any]] = {}
        for item in items or []:
            self.data.setdefault(item.cluster, {})[getattr(item, id_attr)] = item

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self.keys()))

    def __len__(self) -> int:
        return sum(len(d) for d in self.data.values())

    def __bool__(self) -> bool:
        return bool(self.data)

    def keys(self) -> list[Any]:
        return [key for d in self.data.values() for key in d]

    def values(self) -> list[Any]:
        return [item for d in self.data.values() for item in d.values()]

    def items(self) -> list[tuple[Any, Any]]:
        return [(key, item) for d in self.data.values() for key, item in d.items()]

    def get(self, key: Any, default: Any = None) -> Any:
        cluster, key = key if isinstance(key, tuple) else (LOCAL_CLUSTER, key)
        return self.data.get(cluster, {}).get(key, default)

    def to_dict(self, multi_cluster: bool = False, recursive: bool = False) -> dict[Any, Any]:
        data = {c: {k: v.to_dict() for k, v in d.items()} for c, d in self.data.items()}
        return data if multi_cluster else data.get(LOCAL_CLUSTER, {})


def _public(obj: Any) -> dict[str, Any]:
    """helpers.pyx ``instance_to_dict``: every public, non-callable attribute."""
    names = (n for n in dir(obj) if not n.startswith("_"))
    return {n: getattr(obj, n) for n in names if not callable(getattr(obj, n))}


# --- pyslurm/core/error.pyx --------------------------------------------------------------


class PyslurmError(Exception):
    pass


class RPCError(PyslurmError):
    """``RPCError(errno=SLURM_ERROR, msg=None)``: ``errno`` and ``msg``; without a message,
    Slurm's text for the errno."""

    def __init__(self, errno: int = -1, msg: str | None = None) -> None:
        self.errno = errno
        self.msg = msg or STRERROR.get(errno, "Unspecified error")
        super().__init__(self.msg)


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
    ``gres``, ``gpus``, ``script``, ``environment`` (a dict), ``stats``, ``to_dict()``,
    ``as_dict()``. Not there: ``tres_alloc_str`` and the other raw C names.
    """

    __slots__ = ("_account", "_array_job_id", "_array_task_id", "_array_task_str", "_cluster",
                 "_derived_es", "_eligible", "_end", "_env", "_exitcode", "_het_job_id",
                 "_het_job_offset", "_jobid", "_jobname", "_nodes", "_partition", "_qos",
                 "_script", "_start", "_state", "_state_reason_prev", "_submit", "_timelimit",
                 "_tres_alloc_str", "_tres_req_str", "_user", "_work_dir", "stats", "steps")

    def __init__(self, jobid: int, *, cluster: str = LOCAL_CLUSTER, jobname: str = "",
                 user: str = "", account: str = "", partition: str = "", qos: str = "normal",
                 work_dir: str = "", derived_es: str = "", state: str = "COMPLETED",
                 state_reason_prev: str = "None", submit: int = 0, eligible: int = 0,
                 start: int = 0, end: int = 0, timelimit: int = NO_VAL, exitcode: int = 0,
                 array_job_id: int = 0, array_task_id: int = NO_VAL, array_task_str: str = "",
                 het_job_id: int = 0, het_job_offset: int = NO_VAL, nodes: str = "",
                 tres_alloc_str: str = "", tres_req_str: str = "", script: str = "",
                 env: str = "", max_rss: int = 0) -> None:
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
        self._script, self._env = script, env
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
    script = property(lambda self: self._script or None)
    environment = property(lambda self: _env_dict(self._env))

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


# --- pyslurm/core/job/job.pyx: Jobs, Job (slurmctld) -------------------------------------


class Job:
    """``pyslurm.Job``: ``id``, ``cluster``, ``state``, ``state_reason``, ``user_name``,
    ``start_time`` (the estimate while pending), ``array_id``, ``array_task_id``,
    ``array_tasks_waiting`` (a range: libslurm translates the bitmap), ``exit_code``,
    ``exit_code_signal``, ``allocated_nodes``, ``get_resource_layout_per_node()`` (``{node:
    {"cpu_ids", "gres", "memory"}}``, gres from the node's ``gres_detail`` entry) and
    ``cancel()`` (SIGKILL; "already done", and "invalid job id" for SIGKILL, are ignored)."""

    __slots__ = ("_array_job_id", "_array_task_id", "_array_task_str", "_cluster", "_gres",
                 "_hosts", "_job_id", "_start", "_state", "_state_desc", "_user")

    def __init__(self, job_id: int, *, state: str = "RUNNING", state_desc: str = "None",
                 user: str = "", start: int = 0, array_job_id: int = 0,
                 array_task_id: int = NO_VAL, array_task_str: str = "",
                 hosts: list[str] | None = None, gres_detail: list[str] | None = None) -> None:
        self._job_id, self._cluster, self._state, self._state_desc = job_id, LOCAL_CLUSTER, \
            state, state_desc
        self._user, self._start = user, start
        self._array_job_id, self._array_task_id = array_job_id, array_task_id
        self._array_task_str = array_task_str
        self._hosts, self._gres = list(hosts or []), list(gres_detail or [])

    id = property(lambda self: self._job_id)
    cluster = property(lambda self: self._cluster)
    state = property(lambda self: self._state)
    state_reason = property(lambda self: self._state_desc)
    user_name = property(lambda self: self._user or None)
    start_time = property(lambda self: _raw_time(self._start))
    array_id = property(lambda self: _u32_parse(self._array_job_id))
    array_task_id = property(lambda self: _u32_parse(self._array_task_id))
    array_tasks_waiting = property(lambda self: self._array_task_str.split("%")[0] or None)
    allocated_nodes = property(lambda self: ",".join(self._hosts) or None)
    exit_code = property(lambda self: 0)
    exit_code_signal = property(lambda self: 0)

    def get_resource_layout_per_node(self) -> dict[str, Any]:
        STATE.call("Job.get_resource_layout_per_node", self._job_id)
        return {host: {"cpu_ids": "0-3", "memory": 16384,
                       "gres": gres_dict(self._gres[i]) if i < len(self._gres) else {}}
                for i, host in enumerate(self._hosts)}

    def cancel(self) -> None:
        STATE.call("Job.cancel", self._job_id)
        errno = STATE.kill_errno.get(self._job_id, 0)
        if errno and errno not in (2021, 2017):  # ESLURM_ALREADY_DONE, INVALID_JOB_ID + SIGKILL
            raise RPCError(errno)

    def to_dict(self, recursive: bool = False) -> dict[str, Any]:
        return _public(self)


class Jobs(MultiClusterMap):
    """``pyslurm.Jobs.load(preload_passwd_info=False, frozen=False)``: every job slurmctld
    holds (loaded with SHOW_DETAIL), a multi-cluster map by job id."""

    __slots__ = ()

    @staticmethod
    def load(preload_passwd_info: bool = False, frozen: bool = False) -> Jobs:
        STATE.call("Jobs.load")
        return Jobs(STATE.jobs)


# --- pyslurm/core/node.pyx, core/partition.pyx -------------------------------------------


class Node:
    """``pyslurm.Node``: ``name``, ``state`` (complete state string, ``IDLE+DRAIN``),
    ``partitions`` (list), ``total_cpus``, ``real_memory`` (MiB), ``reason``,
    ``configured_gres`` (a dict from the node's gres string), ``allocated_tres`` (a dict
    from alloc_tres_fmt_str) and ``allocated_gres`` (its ``gres/`` items, prefix dropped)."""

    __slots__ = ("_alloc_tres", "_cluster", "_cpus", "_gres", "_name", "_partitions",
                 "_real_memory", "_reason", "_state")

    def __init__(self, name: str, *, state: str = "IDLE", partitions: str = "",
                 cpus: int = 64, real_memory: int = 512000, gres: str = "",
                 alloc_tres: str = "", reason: str = "") -> None:
        self._name, self._cluster, self._state, self._partitions = name, LOCAL_CLUSTER, state, \
            partitions
        self._cpus, self._real_memory, self._gres = cpus, real_memory, gres
        self._alloc_tres, self._reason = alloc_tres, reason

    name = property(lambda self: self._name)
    cluster = property(lambda self: self._cluster)
    state = property(lambda self: self._state)
    partitions = property(lambda self: self._partitions.split(",") if self._partitions else [])
    total_cpus = property(lambda self: self._cpus)
    real_memory = property(lambda self: _u32_parse(self._real_memory))
    reason = property(lambda self: self._reason or None)
    configured_gres = property(lambda self: gres_dict(self._gres))
    allocated_tres = property(lambda self: _key_values(self._alloc_tres))
    allocated_gres = property(lambda self: {k.replace("gres/", ""): v for k, v in
                                            self.allocated_tres.items() if "gres/" in k})

    def to_dict(self, recursive: bool = False) -> dict[str, Any]:
        return _public(self)


class Nodes(MultiClusterMap):
    """``pyslurm.Nodes.load(preload_passwd_info=False)``: a multi-cluster map by node name."""

    __slots__ = ()

    @staticmethod
    def load(preload_passwd_info: bool = False) -> Nodes:
        STATE.call("Nodes.load")
        return Nodes(STATE.nodes, id_attr="name")


class Partition:
    """``pyslurm.Partition``: ``name``, ``state`` (``UP``, ``DOWN``, ``DRAIN``,
    ``INACTIVE``), ``is_default``, ``nodes`` (a host list), ``max_time`` (minutes,
    ``"UNLIMITED"``, or None)."""

    __slots__ = ("_cluster", "_default", "_max_time", "_name", "_nodes", "_state")

    def __init__(self, name: str, *, state: str = "UP", default: bool = False,
                 max_time: int = INFINITE, nodes: str = "") -> None:
        self._name, self._cluster, self._state, self._default = name, LOCAL_CLUSTER, state, \
            default
        self._max_time, self._nodes = max_time, nodes

    name = property(lambda self: self._name)
    cluster = property(lambda self: self._cluster)
    state = property(lambda self: self._state)
    is_default = property(lambda self: self._default)
    max_time = property(lambda self: _raw_time(self._max_time, on_inf=UNLIMITED))
    nodes = property(lambda self: self._nodes or None)


class Partitions(MultiClusterMap):
    """``pyslurm.Partitions.load()``: a multi-cluster map by partition name."""

    __slots__ = ()

    @staticmethod
    def load() -> Partitions:
        STATE.call("Partitions.load")
        return Partitions(STATE.partitions, id_attr="name")


# --- pyslurm/core/slurmctld/stats.pyx: diag() --------------------------------------------


class Statistics:
    """``pyslurm.slurmctld.Statistics``: of sdiag's fields, ``request_time``,
    ``data_since`` and the ``jobs_*`` counters."""

    __slots__ = ("data_since", "jobs_canceled", "jobs_completed", "jobs_failed",
                 "jobs_pending", "jobs_running", "jobs_started", "jobs_submitted",
                 "request_time")

    def __init__(self, **counters: int) -> None:
        for name in self.__slots__:
            setattr(self, name, counters.get(name, 0))


def diag() -> Statistics:
    STATE.call("slurmctld.diag")
    return Statistics(**STATE.diag)


# --- the package ---------------------------------------------------------------------------


def module(version: str = VERSION) -> types.ModuleType:
    """The stand-in ``pyslurm`` package, with its ``db`` and ``slurmctld`` modules."""
    db = types.ModuleType("pyslurm.db")
    db.__dict__.update(Job=DbJob, Jobs=DbJobs, JobFilter=JobFilter, JobSearchFilter=JobFilter,
                       JobStatistics=JobStatistics, Association=Association,
                       Associations=Associations, AssociationFilter=AssociationFilter,
                       TrackableResources=TrackableResources,
                       TrackableResource=TrackableResource, GPU=GPU)
    slurmctld = types.ModuleType("pyslurm.slurmctld")
    slurmctld.__dict__.update(diag=diag, Statistics=Statistics)
    ps = types.ModuleType("pyslurm")
    ps.__dict__.update(__version__=version, db=db, slurmctld=slurmctld, Job=Job, Jobs=Jobs,
                       Node=Node, Nodes=Nodes, Partition=Partition, Partitions=Partitions,
                       PyslurmError=PyslurmError, RPCError=RPCError)
    return ps
