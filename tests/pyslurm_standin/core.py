"""The stand-in slurmctld side: core/job/job.pyx, core/node.pyx, core/partition.pyx,
core/slurmctld/stats.pyx."""

from __future__ import annotations

from typing import Any

from tests.pyslurm_standin.base import (
    INFINITE,
    LOCAL_CLUSTER,
    NO_VAL,
    STATE,
    UNLIMITED,
    MultiClusterMap,
    RPCError,
    _key_values,
    _public,
    _raw_time,
    _u32_parse,
    gres_dict,
)
from tests.pyslurm_standin.db import _tres as _db_tres

# --- pyslurm/core/job/job.pyx: Jobs, Job (slurmctld) -------------------------------------


class Job:
    """``pyslurm.Job``: ``id``, ``cluster``, ``state``, ``state_reason``, ``user_name``,
    ``start_time`` (the estimate while pending), ``array_id``, ``array_task_id``,
    ``array_tasks_waiting`` (a range: libslurm translates the bitmap), ``exit_code``,
    ``exit_code_signal``, ``allocated_nodes``, ``requested_tres`` (a TrackableResources from
    slurmctld's ``tres_req_str``, by name: ``cpu=4,mem=8G,node=1,gres/gpu=4``; None when
    empty), ``time_limit`` (minutes), ``get_resource_layout_per_node()`` (``{node:
    {"cpu_ids", "gres", "memory"}}``, gres from the node's ``gres_detail`` entry) and
    ``cancel()`` (SIGKILL; "already done", and "invalid job id" for SIGKILL, are ignored)."""

    __slots__ = ("_array_job_id", "_array_task_id", "_array_task_str", "_cluster", "_gres",
                 "_hosts", "_job_id", "_start", "_state", "_state_desc", "_time_limit",
                 "_tres_req_str", "_user")

    def __init__(self, job_id: int, *, state: str = "RUNNING", state_desc: str = "None",
                 user: str = "", start: int = 0, array_job_id: int = 0,
                 array_task_id: int = NO_VAL, array_task_str: str = "",
                 hosts: list[str] | None = None, gres_detail: list[str] | None = None,
                 tres_req_str: str = "", time_limit: int = NO_VAL) -> None:
        self._job_id, self._cluster, self._state, self._state_desc = job_id, LOCAL_CLUSTER, \
            state, state_desc
        self._user, self._start = user, start
        self._array_job_id, self._array_task_id = array_job_id, array_task_id
        self._array_task_str = array_task_str
        self._hosts, self._gres = list(hosts or []), list(gres_detail or [])
        self._tres_req_str, self._time_limit = tres_req_str, time_limit

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
    requested_tres = property(lambda self: _db_tres(self._tres_req_str))
    time_limit = property(lambda self: _raw_time(self._time_limit))
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
