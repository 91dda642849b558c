"""Security detection against the real Prometheus: the same findings as from the same
data read as OpenMetrics files (the demo path).

The data set (its own hosts and time, so other data sets never meet it): on ``sec01`` a
GPU no job holds is busy for an hour, and on ``sec02`` InfiniBand runs at 9 GB/s with no
job on the node and 2 partition-key errors arrive at ``PKEY``. ``sec01``'s partition-key
counter stands at 3 from the first sample on and never moves: no violation (VictoriaMetrics'
``increase`` read it as 3 new errors at the window's first minute, issue 29). Loaded once
into each store (``store`` fixture): promtool blocks, or VictoriaMetrics' import API.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from apps.clusters.models import Cluster
from apps.security.detection import Sources, detect
from apps.security.models import Finding
from tests.integration import prom

pytestmark = [pytest.mark.integration("prometheus"), pytest.mark.django_db]
NAME = "security-v2"
T0 = 1_791_676_800  # 2026-10-11T00:00:00Z (v1 was on 2026-10-10)
SCRAPE = 30
STEPS = 2 * 3600 // SCRAPE
BUSY = (T0 + 1800, T0 + 5400)  # the free GPU's busy hour
IB = (T0 + 3600, T0 + 6000)  # the unexplained InfiniBand traffic
PKEY = T0 + 4020  # sec02's partition-key errors arrive


def _gpu(host: str, gpu: int, t: int) -> tuple[dict[str, str], float, float]:
    labels = {"gpu": str(gpu), "UUID": f"GPU-{host}-{gpu}", "modelName": "NVIDIA H100 80GB HBM3",
              "Hostname": host}
    if gpu == 1:  # a job's GPU, busy: not a finding
        return {**labels, "hpc_job": "9001"}, 95.0, 60000.0
    busy = BUSY[0] < t <= BUSY[1] and host == "sec01"
    return labels, (97.0 if busy else 0.0), (24000.0 if busy else 0.0)


def openmetrics() -> str:
    times = [T0 + SCRAPE * (i + 1) for i in range(STEPS)]
    out = []
    for metric, index in (("DCGM_FI_DEV_GPU_UTIL", 1), ("DCGM_FI_DEV_FB_USED", 2)):
        out.append(f"# TYPE {metric} gauge\n")
        for host in ("sec01", "sec02"):
            for gpu in (0, 1):
                for t in times:
                    sample = _gpu(host, gpu, t)
                    out.append(f"{prom.om_series(metric, sample[0])} {sample[index]} {t}\n")
    family = "node_infiniband_port_data_received_bytes"
    out.append(f"# TYPE {family} counter\n")
    for host in ("sec01", "sec02"):
        total = 0.0
        for t in [T0, *times]:
            labels = {"instance": f"{host}:9100", "device": "mlx5_0", "port": "1"}
            out.append(f"{prom.om_series(family + '_total', labels)} {total:.0f} {t}\n")
            total += (9e9 if host == "sec02" and IB[0] < t + SCRAPE <= IB[1] else 4e7) * SCRAPE
    family = "node_infiniband_port_constraint_errors_received"
    out.append(f"# TYPE {family} counter\n")
    for host in ("sec01", "sec02"):
        labels = {"instance": f"{host}:9100", "device": "mlx5_0", "port": "1"}
        for t in [T0, *times]:
            errors = 3 if host == "sec01" else (2 if t >= PKEY else 0)
            out.append(f"{prom.om_series(family + '_total', labels)} {errors} {t}\n")
    out.append(prom.marker_lines(NAME, T0))
    out.append("# EOF\n")
    return "".join(out)


def _findings() -> set[tuple[str, str, int | None]]:
    return {(f.rule_key, f.node_name, f.gpu_index) for f in Finding.objects.all()}


def test_prometheus_and_openmetrics_give_the_same_findings(tmp_path: Path,
                                                           store: prom.Store) -> None:
    url = store.url
    text = openmetrics()
    store.ensure_loaded(NAME, T0, text)
    (tmp_path / "data.om").write_text(text)
    since = datetime.fromtimestamp(T0, UTC)
    until = since + timedelta(hours=2)
    cluster = Cluster.objects.create(name="secdet", prometheus_url=url,
                                     metric_labels={"scrape_interval": SCRAPE,
                                                    "store": store.kind})

    live = detect(cluster, since, until, Sources())
    assert live.telemetry_ok and live.sources["telemetry"].startswith(f"prometheus {url}")
    from_prometheus = _findings()
    by_rule = {f.rule_key: f for f in Finding.objects.all()}
    busy = by_rule["gpu_activity_without_job"]
    assert abs(busy.first_seen.timestamp() - BUSY[0]) <= 120
    assert abs(busy.last_seen.timestamp() - BUSY[1]) <= 120

    Finding.objects.all().delete()
    files = detect(cluster, since, until, Sources(openmetrics=tmp_path))
    assert files.telemetry_ok
    assert _findings() == from_prometheus == {
        ("gpu_activity_without_job", "sec01", 0),
        ("ib_traffic_without_multinode_job", "sec02", None),
        ("ib_partition_key_violation", "sec02", None)}
    pkey = Finding.objects.get(rule_key="ib_partition_key_violation")
    assert abs(pkey.first_seen.timestamp() - PKEY) <= 120
