"""Fixtures of the integration tests: one real Slurm dev cluster per release, each telemetry
store, each store's view of a module's real exporters."""

from __future__ import annotations

import pytest

from tests.integration.exporters import STORE_KINDS, Scrape, Site
from tests.integration.prom import STORES, Store
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


@pytest.fixture(scope="module", params=STORES, ids=lambda store: store.kind)
def store(request: pytest.FixtureRequest) -> Store:
    """Each telemetry store Beacon supports (docs/metrics.md): the loopback Prometheus
    (``deploy/dev/prometheus.sh up``) and VictoriaMetrics (``deploy/dev/victoria-metrics.sh
    up``); skips when it is down, which fails the test under CI=true. Module scope: a
    module's tests run store by store, each data set loaded once per store."""
    chosen: Store = request.param
    chosen.require()
    return chosen


@pytest.fixture(scope="module", params=STORE_KINDS)
def site(request: pytest.FixtureRequest, scrape: Scrape) -> Site:
    """Each store's view of the module's ``scrape`` (real exporters scraped by a private
    Prometheus and a private VictoriaMetrics at once, ``exporters.scraped_site``): the
    module's tests run on one, then on the other, against the same samples."""
    return scrape.site(str(request.param))
