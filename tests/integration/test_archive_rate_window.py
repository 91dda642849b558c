"""The job archive's node rates start with the job: the traffic of the job before it on the
same node does not leak into its first minutes (the rate window is the bucket plus one scrape,
as the file path counts each adjacent pair of samples once; it was 4 scrapes, which spread the
previous job's InfiniBand traffic over the next job's first three points)."""

from __future__ import annotations

import pytest

from apps.analysis.timeseries import Window
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.adapters.telemetry import JobTelemetry, fetch_nodes, plan
from tests.integration import prom

pytestmark = pytest.mark.integration("prometheus")
NAME = "archive-rate-window-v1"
T0 = 1_791_331_200  # 2026-10-07 00:00:00 UTC, a day no other data set uses
SCRAPE = 30
BOUNDARY = T0 + 1800  # one job ends, the next begins on the same node
BEFORE, AFTER = 5e9, 1e6  # bytes/s received over InfiniBand, each direction


def _openmetrics() -> str:
    lines = []
    for family, help_text in (("node_infiniband_port_data_received_bytes", "received"),
                              ("node_infiniband_port_data_transmitted_bytes", "transmitted")):
        lines.append(f"# HELP {family} InfiniBand bytes {help_text}.\n# TYPE {family} counter\n")
        labels = {"instance": "gpu09:9100", "device": "mlx5_0", "port": "1"}
        for t in range(T0 + SCRAPE, T0 + 3600 + 1, SCRAPE):
            value = min(t - T0, BOUNDARY - T0) * BEFORE + max(t - BOUNDARY, 0) * AFTER
            lines.append(f"{prom.om_series(family + '_total', labels)} {value:f} {t}\n")
    lines += [prom.marker_lines(NAME, T0 + 3600), "# EOF\n"]
    return "".join(lines)


@pytest.fixture(scope="module")
def client(store: prom.Store) -> PrometheusClient:
    store.ensure_loaded(NAME, T0 + 3600, _openmetrics())
    return PrometheusClient(store.url, timeout=10)


def _cat(store: prom.Store) -> Catalogue:
    return Catalogue.from_config({"store": store.kind})


def test_the_next_jobs_traffic_is_its_own_from_its_first_point(store, client):
    window = Window(BOUNDARY, BOUNDARY + 600)
    telemetry = JobTelemetry(plan(window, SCRAPE), "host")
    fetch_nodes(client, _cat(store), ["gpu09"], telemetry)
    points = telemetry.nodes["gpu09"]["ib_rx"].points
    assert len(points) == 20
    assert [round(v) for _, v in points] == [round(AFTER)] * 20


def test_the_previous_job_still_sees_all_of_its_own(store, client):
    window = Window(BOUNDARY - 600, BOUNDARY)
    telemetry = JobTelemetry(plan(window, SCRAPE), "host")
    fetch_nodes(client, _cat(store), ["gpu09"], telemetry)
    points = telemetry.nodes["gpu09"]["ib_rx"].points
    assert [round(v) for _, v in points] == [round(BEFORE)] * 20
