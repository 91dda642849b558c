"""Telemetry from Prometheus: the queries the adapter sends (scoped, label values quoted)
and how answers become the rules' frame. The client is faked at its boundary; the real
Prometheus is exercised in tests/integration/test_security_prometheus.py."""

from __future__ import annotations

import math

import pytest

from apps.analysis.timeseries import Series
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.adapters.prometheus import QueryResult
from apps.security.adapters.telemetry import from_openmetrics, from_prometheus
from apps.security.frames import Grid, build_frame
from tests.fake import StreamedRange
from tests.security.telemetry_files import cpu_lines, write

T0 = 1_790_000_000.0


class FakeProm(StreamedRange):
    base_url = "http://prom.test"

    def __init__(self) -> None:
        self.queries: list[str] = []

    def query_range(self, expr: str, start: float, end: float, step: float) -> QueryResult:
        self.queries.append(expr)
        times = [start + i * step for i in range(int((end - start) / step) + 1)]
        if "DCGM_FI_DEV_GPU_UTIL" in expr:
            free = Series("", {"Hostname": "gpu01", "gpu": "0", "UUID": "GPU-a"},
                          tuple((t, 97.0) for t in times))
            owned = Series("", {"Hostname": "gpu01", "gpu": "1", "hpc_job": "42"},
                           tuple((t, 95.0) for t in times))
            return QueryResult("matrix", [free, owned])
        if "node_infiniband_port_data" in expr:
            return QueryResult("matrix", [Series("", {"instance": "gpu01:9100",
                                                      "device": dev},
                                                 tuple((t, 4e9) for t in times))
                                          for dev in ("mlx5_0", "mlx5_1")])
        if "node_cpu_seconds_total" in expr:
            cores = expr.startswith("count by")  # else the idle cores' rate
            return QueryResult("matrix", [Series("", {"instance": "gpu01:9100"},
                                                 tuple((t, 96.0 if cores else 3.0)
                                                       for t in times))])
        return QueryResult("matrix", [])


def test_queries_cover_every_gpu_and_node_and_quote_label_values():
    prom = FakeProm()
    hostile = 'x"} or vector(1) #'
    catalogue = Catalogue.from_config({"cluster": "cluster", "cluster_value": hostile})
    raw = from_prometheus(prom, catalogue, T0, T0 + 1200, 60)  # type: ignore[arg-type]
    assert len(prom.queries) == 6 + 5 + 2
    cpu = [q for q in prom.queries if "node_cpu_seconds_total" in q]
    assert all('mode="idle"' in q for q in cpu) and len(cpu) == 2
    assert (raw.nodes["gpu01"]["cpu_cores"][0][1], raw.nodes["gpu01"]["cpu_busy"][0][1]) == (
        96.0, 93.0)
    assert all('cluster="x\\"} or vector(1) #"' in q for q in prom.queries)
    assert not any("hpc_job" in q for q in prom.queries)  # free GPUs are the point
    assert any('device!~"lo|ib.*"' in q for q in prom.queries)
    assert raw.nodes["gpu01"]["ib"][0][1] == 8e9  # both ports summed
    # rate() drops the name: never one regex over several counters (issue 17)
    assert not any("__name__" in q for q in prom.queries)
    [ib] = [q for q in prom.queries if "node_infiniband_port_data" in q]
    assert "rate(node_infiniband_port_data_received_bytes_total{" in ib
    assert "rate(node_infiniband_port_data_transmitted_bytes_total{" in ib
    [(measure, series)] = [(m, s) for m, s in raw.gpus if s.labels.get("gpu") == "0"]
    assert measure == "gpu_util" and series.points[0][1] == 0.97  # percent to ratio


def test_the_frame_marks_owners_and_free_gpus():
    raw = from_prometheus(FakeProm(), Catalogue(), T0, T0 + 600, 60)  # type: ignore[arg-type]
    frame, stats = build_frame(raw, Catalogue(), Grid(T0, 60, 10), [], {}, set())
    free, owned = frame.gpus
    assert free.points[0].free and free.points[0].util == 0.97 and free.uuid == "GPU-a"
    assert owned.points[0].owners == ("42",) and stats.unknown_buckets == 0
    [node] = frame.nodes
    assert node.points[0].ib_bps == 8e9 and node.points[0].ib_device in ("mlx5_0", "mlx5_1")
    assert node.points[0].cpu_share == 93 / 96


def test_cpu_from_files_is_cores_less_their_idle_seconds(tmp_path):
    """node_exporter's per-core idle counters: 4 cores, 90 % busy, then 10 % busy."""
    path = write(tmp_path / "20260921T1200Z.om", {"node_cpu_seconds_total": cpu_lines(
        "gpu01", T0, 20, 60, lambda i: 0.9 if i < 10 else 0.1)})
    raw = from_openmetrics([path], Catalogue(), T0, T0 + 1200)
    cores, busy = raw.nodes["gpu01"]["cpu_cores"], raw.nodes["gpu01"]["cpu_busy"]
    assert {v for _, v in cores} == {4.0}
    assert busy[0][1] == pytest.approx(3.6) and busy[-1][1] == pytest.approx(0.4)
    frame, _ = build_frame(raw, Catalogue(), Grid(T0, 60, 20), [], {}, set())
    [node] = frame.nodes
    assert node.points[0].cpu_share == pytest.approx(0.9)


def test_findings_carry_the_promql_that_shows_them():
    from apps.security.adapters.telemetry import evidence_queries

    queries = evidence_queries(Catalogue(), "gpu_activity_without_job", 'gpu"01', 3)
    assert 'DCGM_FI_DEV_GPU_UTIL{Hostname="gpu\\"01",gpu="3"}' in queries
    rx, tx = evidence_queries(Catalogue(), "ib_traffic_without_multinode_job", "gpu07", None)
    assert rx.startswith("rate(node_infiniband_port_data_received_bytes_total{instance=~")
    assert tx.startswith("rate(node_infiniband_port_data_transmitted_bytes_total{instance=~")
    assert evidence_queries(Catalogue(), "secret_in_job_script", "", None) == []


def test_the_sampling_interval_is_not_fooled_by_a_free_gpus_gaps():
    from apps.security.adapters.telemetry import _spacing

    free = [(t, 0.0) for t in (0, 3600, 40000, 43600, 120000)]  # written between jobs
    steady = [(t * 3600.0, 1.0) for t in range(10)]
    assert _spacing([free, steady, steady]) == 3600


def test_memory_is_read_at_instants_and_the_rest_averaged():
    prom = FakeProm()
    from_prometheus(prom, Catalogue(), T0, T0 + 600, 60)  # type: ignore[arg-type]
    [fb] = [q for q in prom.queries if "DCGM_FI_DEV_FB_USED" in q]
    # the last sample within 1.5 scrapes (45 s), not Prometheus' 5-minute lookback
    assert fb == "last_over_time(DCGM_FI_DEV_FB_USED[44999ms])" and "avg_over_time" not in fb
    hourly = Catalogue.from_config({"scrape_interval": 3600})
    from apps.security.adapters.telemetry import gpu_queries, node_queries

    assert gpu_queries(hourly, 3600)["fb_used"] == \
        "last_over_time(DCGM_FI_DEV_FB_USED[3599999ms])"  # one sample per hourly bucket
    assert "[7200000ms]" in node_queries(hourly, 3600)["ib"]  # the bucket + one scrape
    averaged = [q for q in prom.queries if "DCGM_FI" in q and q != fb]
    assert len(averaged) == 5 and all(q.startswith("avg_over_time(") for q in averaged)


def test_jobs_one_after_the_other_in_a_bucket_are_owners_not_sharers():
    from apps.analysis.timeseries import GpuKey
    from apps.security.adapters.telemetry import RawTelemetry

    raw = RawTelemetry(900)
    raw.gpus.append(("fb_used", Series("", {"Hostname": "n1", "gpu": "0"}, ((T0 + 900, 1.0),))))
    key = GpuKey("n1", 0)
    after = {key: [(T0, T0 + 300, "1"), (T0 + 400, T0 + 2000, "2")]}
    frame, _ = build_frame(raw, Catalogue(), Grid(T0, 900, 1), [], after, {1, 2})
    point = frame.gpus[0].points[0]
    assert point.owners == ("1", "2") and point.together == ()
    overlapping = {key: [(T0, T0 + 600, "1"), (T0 + 300, T0 + 2000, "2")]}
    frame, _ = build_frame(raw, Catalogue(), Grid(T0, 900, 1), [], overlapping, {1, 2})
    assert frame.gpus[0].points[0].together == ("1", "2")
    labelled = RawTelemetry(900)
    for job, t in (("1", T0 + 100), ("2", T0 + 700), ("1", T0 + 800), ("3", T0 + 800)):
        labelled.gpus.append(("fb_used", Series("", {"Hostname": "n1", "gpu": "0",
                                                     "hpc_job": job}, ((t, 5.0),))))
    frame, _ = build_frame(labelled, Catalogue(), Grid(T0, 900, 1), [], {}, set())
    point = frame.gpus[0].points[0]
    assert point.owners == ("1", "2", "3") and point.together == ("1", "3")


def test_a_frame_bucket_averages_each_measure_and_keeps_owners_mig_and_ties_apart():
    from apps.analysis.timeseries import GpuKey
    from apps.security.adapters.telemetry import RawTelemetry

    def gpu(measure: str, gpu_index: str, points: tuple[tuple[float, float], ...],
            **labels: str) -> tuple[str, Series]:
        return measure, Series("", {"Hostname": "n1", "gpu": gpu_index, **labels}, points)

    raw = RawTelemetry(60)
    raw.gpus += [
        # util: two values in bucket 0, a NaN and one value in bucket 1, one past the grid
        gpu("gpu_util", "0", ((T0 + 10, 0.2), (T0 + 60, 0.4), (T0 + 70, math.nan),
                              (T0 + 90, 0.9), (T0 + 400, 1.0)), hpc_job="7"),
        # memory at instants: job 7 alone, then 7 and 8 at T0+100, then 9 and 7 at T0+110
        gpu("fb_used", "0", ((T0 + 30, 100.0), (T0 + 100, 200.0), (T0 + 110, 300.0)),
            hpc_job="7"),
        gpu("fb_used", "0", ((T0 + 100, 50.0),), hpc_job="8"),
        gpu("fb_used", "0", ((T0 + 110, 10.0),), hpc_job="9"),
        gpu("power", "1", ((T0 + 150, 300.0),), GPU_I_ID="1"),  # a MIG instance, bucket 2
        gpu("power", "1", ((T0 + 20, 100.0),)),
        gpu("power", "2", ((T0 + 500, 100.0),)),  # nothing inside the grid: not in the frame
    ]
    frame, stats = build_frame(raw, Catalogue(), Grid(T0, 60, 3), [], {}, set())
    assert [(g.host, g.gpu) for g in frame.gpus] == [("n1", 0), ("n1", 1)] and stats.gpus == 2
    first, second = frame.gpus[0].points
    assert (first.t, first.util, first.fb_mib, first.owners) == (T0 + 60, 0.30000000000000004,
                                                                 100.0, ("7",))
    assert (second.util, second.fb_mib, second.sm) == (0.9, 140.0, None)
    assert second.owners == ("7", "8", "9") and second.together == ("7", "8")  # first tie
    mig = {p.t: p.mig for p in frame.gpus[1].points}
    assert mig == {T0 + 60: False, T0 + 180: True} and frame.gpus[1].points[0].free
    assert GpuKey("n1", 2) not in {GpuKey(g.host, g.gpu) for g in frame.gpus}
