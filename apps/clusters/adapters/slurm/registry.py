"""Which class serves which ``Cluster.slurm_backend``, and how a client is built.

Importing a backend module never imports its client library (``pyslurm`` is imported inside
the methods of its backend, only when one is used), so the registry can name every class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from apps.clusters.adapters.slurm.cli import SlurmCli
from apps.clusters.adapters.slurm.files import SlurmFiles
from apps.clusters.adapters.slurm.pyslurm import NOTE as PYSLURM_NOTE
from apps.clusters.adapters.slurm.pyslurm import SlurmPyslurm
from apps.clusters.adapters.slurm.rest import SlurmRest
from apps.clusters.adapters.slurm.types import SlurmClient
from apps.core.errors import AdapterError

# Each entry is typed as a factory of ``SlurmClient``: a backend missing a member of the
# protocol (or with a different signature) is a type error on its line here, which
# ``make lint`` (mypy) and tests/clusters/test_slurm_protocol.py report.
BACKENDS: dict[str, Callable[[Mapping[str, Any]], SlurmClient]] = {
    "cli": SlurmCli.from_options,
    "rest": SlurmRest.from_options,
    "pyslurm": SlurmPyslurm.from_options,
    "files": SlurmFiles.from_options,
}
# What a page says beside a backend that has not run against a real Slurm here
NOTES: dict[str, str] = {"pyslurm": PYSLURM_NOTE}


def slurm_client(backend: str, options: Mapping[str, Any]) -> SlurmClient:
    """Build the backend named ``backend`` ("cli", "rest", "pyslurm", "files") from its options.

    Options are ``Cluster.slurm_settings`` plus the cluster name; each backend documents
    its own keys. Unknown backends are an ``AdapterError``.
    """
    if backend not in BACKENDS:
        raise AdapterError(
            f"unknown Slurm backend {backend!r} (expected cli, rest, pyslurm or files)",
            service="slurm")
    return BACKENDS[backend](options)
