"""Fixtures of the integration tests: one real Slurm dev cluster per release."""

from __future__ import annotations

import pytest

from tests.integration.slurm import RELEASES, SlurmDev


@pytest.fixture(scope="module", params=RELEASES, ids=lambda release: f"slurm-{release}")
def slurm(request: pytest.FixtureRequest) -> SlurmDev:
    """The release's dev cluster (``RELEASE=<r> deploy/dev/slurm.sh up``); skips when it is
    down, which fails the test under CI=true. Module scope: a module's tests run release by
    release, so each release's module-wide wave is built once."""
    dev = SlurmDev.load(request.param)
    dev.require()
    return dev


@pytest.fixture(params=["cli", "rest"])
def backend(request: pytest.FixtureRequest) -> str:
    """The Beacon backend that reads the cluster: the command-line tools or slurmrestd."""
    return str(request.param)
