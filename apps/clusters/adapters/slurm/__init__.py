"""The Slurm adapter: one typed interface, four backends (CLI, slurmrestd, pyslurm, files).

| module | what it holds |
|---|---|
| ``types`` | the frozen dataclasses every backend returns and the ``SlurmClient`` protocol |
| ``parse``, ``parse_cluster``, ``parse_gpus`` | pure parsers: job records; the cluster; GPUs held |
| ``requested`` | what a job asked for (GPUs, CPUs, memory, nodes, time), every data parser |
| ``cli``, ``rest``, ``pyslurm``, ``files`` | the backends, one module each |
| ``registry`` | backend name -> factory, and :func:`~registry.slurm_client` to build one |

The package re-exports the types, so callers write ``from apps.clusters.adapters.slurm import
SlurmJob``; the backends import ``types`` as a namespace (``st.SlurmJob``). Imports go one way
(types <- parsers <- backends <- registry): nothing imports the registry but the cluster
services (``apps.clusters.services.client_for``) and tests.
"""

from apps.clusters.adapters.slurm.types import (
    ACTIVE_STATES,
    Action,
    Association,
    ExitStatus,
    GpuBinding,
    GpuSource,
    JobAllocation,
    LimitChange,
    Qos,
    QueueEntry,
    RecordError,
    Reservation,
    ResourceRequest,
    ShareRow,
    SlurmClient,
    SlurmJob,
    SlurmNode,
    SlurmPartition,
    UsageRow,
    change_time,
)

__all__ = [
    "ACTIVE_STATES", "Action", "Association", "ExitStatus", "GpuBinding", "GpuSource",
    "JobAllocation", "LimitChange", "Qos", "QueueEntry", "RecordError", "Reservation",
    "ResourceRequest", "ShareRow",
    "SlurmClient", "SlurmJob", "SlurmNode", "SlurmPartition", "UsageRow", "change_time",
]
