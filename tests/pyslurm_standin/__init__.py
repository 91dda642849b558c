"""A stand-in for the ``pyslurm`` package, release 25.11.2, for unit tests only.

pyslurm 25.11 builds only against libslurm 25.11, which no Slurm here is, so the backend is
tested against this package instead, injected as ``sys.modules["pyslurm"]``. Each class here
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

import types

from tests.pyslurm_standin.base import (
    INFINITE,
    NO_VAL,
    STATE,
    VERSION,
    PyslurmError,
    RPCError,
    State,
    reset,
)
from tests.pyslurm_standin.core import (
    Job,
    Jobs,
    Node,
    Nodes,
    Partition,
    Partitions,
    Statistics,
    diag,
)
from tests.pyslurm_standin.db import (
    GPU,
    Association,
    AssociationFilter,
    Associations,
    DbJob,
    DbJobs,
    JobFilter,
    JobStatistics,
    TrackableResource,
    TrackableResources,
)

__all__ = ["INFINITE", "NO_VAL", "STATE", "Association", "DbJob", "Job", "Node", "Partition",
           "RPCError", "State", "module", "reset"]


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
