"""Per-job telemetry against the real Prometheus and VictoriaMetrics, on data with known
answers.

The data set (``telemetry_data``) is generated here, backfilled with the real promtool (or
imported into VictoriaMetrics), queried through the adapter, and the efficiency figures are
checked against values the test computes straight from the generator's functions.
"""

from __future__ import annotations

import pytest

from apps.analysis.efficiency import summarise_job
from apps.analysis.timeseries import GpuKey, Window
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.adapters.telemetry import (
    GpuInterval,
    fetch_by_host,
    fetch_by_label,
    fetch_nodes,
    peak_samples,
)
from apps.jobs.adapters.openmetrics import job_gpu_series
from tests.integration import prom
from tests.integration import telemetry_data as data

pytestmark = pytest.mark.integration("prometheus")


@pytest.fixture(scope="module")
def cat(store: prom.Store) -> Catalogue:
    """The site's catalogue, naming the store its queries are written for."""
    return Catalogue.from_config({"store": store.kind})


@pytest.fixture(scope="module")
def client(store: prom.Store) -> PrometheusClient:
    store.ensure_loaded(data.NAME, data.T0, "".join(data.openmetrics()))
    return PrometheusClient(store.url, timeout=10)


def _window(job: data.JobSpec) -> Window:
    return Window(job.start, job.end)


def _intervals(job: data.JobSpec) -> list[GpuInterval]:
    return [GpuInterval(h, g, start, end) for h, g, start, end in job.intervals]


@pytest.mark.parametrize("job_id", sorted(data.JOBS))
def test_binding_by_label_and_by_host_give_the_same_series(cat, client, job_id):
    job = data.JOBS[job_id]
    by_label = fetch_by_label(client, cat, str(job_id), _window(job))
    by_host = fetch_by_host(client, cat, _intervals(job), _window(job))
    assert sorted(by_label.gpus) == sorted(by_host.gpus) == sorted(GpuKey(h, g)
                                                                   for h, g in job.gpus)
    for key, measures in by_label.gpus.items():
        assert measures.keys() == by_host.gpus[key].keys()
        for measure, series in measures.items():
            other = by_host.gpus[key][measure].points
            assert len(series.points) == len(other) > 0
            for (t1, v1), (t2, v2) in zip(series.points, other, strict=True):
                assert t1 == t2 and v1 == pytest.approx(v2, abs=1e-9), (key, measure, t1)
    assert by_label.uuids[GpuKey(*job.gpus[0])] == f"GPU-{job.gpus[0][0]}-{job.gpus[0][1]:02d}"


def test_a_gpu_held_for_part_of_the_window_is_cut_to_that_part(cat, client):
    """5004 holds gpu01:4 only from 3 h, after 5005 had it: its series by host must not
    carry 5005's samples (nor the free time), and must equal the label binding's."""
    job = data.JOBS[5004]
    (_, _, held_from, _), = job.partly
    by_host = fetch_by_host(client, cat, _intervals(job), _window(job))
    shared = by_host.gpus[GpuKey("gpu01", 4)]["sm_active"].points
    whole = by_host.gpus[GpuKey("gpu01", 6)]["sm_active"].points
    step = by_host.plan.step
    assert shared and all(t - step / 2 >= held_from for t, _ in shared)
    assert len(shared) < len(whole) == by_host.plan.n
    # Without the cut, gpu01:4 would read 5005's light load (SM 0.30) for 40 minutes.
    assert min(v for _, v in shared) >= 0.70
    # Unbound by any interval, the same query does see 5005 there: the cut is what matters.
    uncut = fetch_by_host(client, cat, [GpuInterval("gpu01", 4, job.start, job.end)],
                          _window(job))
    assert min(v for _, v in uncut.gpus[GpuKey("gpu01", 4)]["sm_active"].points) \
        == pytest.approx(0.30, abs=1e-6)


def test_two_jobs_sharing_a_gpu_in_turn_each_get_their_own_part(cat, client):
    first, second = data.JOBS[5005], data.JOBS[5004]
    key = GpuKey("gpu01", 4)
    for job in (first, second):
        by_label = fetch_by_label(client, cat, str(job.job_id), _window(job))
        by_host = fetch_by_host(client, cat, _intervals(job), _window(job))
        assert by_label.gpus[key]["gpu_util"].points == by_host.gpus[key]["gpu_util"].points
    mine = fetch_by_host(client, cat, _intervals(first), _window(first)).gpus[key]
    theirs = fetch_by_host(client, cat, _intervals(second), _window(second)).gpus[key]
    assert all(v == pytest.approx(0.55) for _, v in mine["gpu_util"].points)
    assert all(v == pytest.approx(0.97) for _, v in theirs["gpu_util"].points)
    assert max(t for t, _ in mine["gpu_util"].points) < min(t for t, _ in
                                                           theirs["gpu_util"].points)


def test_intervals_that_know_the_uuid_bind_by_it_even_when_the_index_differs(cat, client):
    """Slurm's GPU index and NVML's can differ: here every recorded index is wrong (7 - i),
    the UUIDs right. Binding by UUID finds each GPU's series and files it under the
    interval's (host, GPU)."""
    job = data.JOBS[5002]
    by_label = fetch_by_label(client, cat, "5002", _window(job))
    intervals = [GpuInterval(h, 11 - g, job.start, job.end, uuid=f"GPU-{h}-{g:02d}")
                 for h, g in job.gpus]  # gpu01:4..7 recorded as 7..4
    by_uuid = fetch_by_host(client, cat, intervals, _window(job))
    assert sorted(by_uuid.gpus) == sorted(i.key for i in intervals)
    for interval in intervals:
        true_key = GpuKey(interval.host, 11 - interval.gpu)
        assert by_uuid.uuids[interval.key] == interval.uuid
        assert by_uuid.gpus[interval.key]["sm_active"].points == \
            by_label.gpus[true_key]["sm_active"].points
    # By index alone the same wrong indices read the wrong GPUs (the wave's phase differs).
    wrong = fetch_by_host(client, cat, [GpuInterval(i.host, i.gpu, i.start, i.end)
                                        for i in intervals], _window(job))
    assert wrong.gpus[GpuKey("gpu01", 7)]["sm_active"].points != \
        by_uuid.gpus[GpuKey("gpu01", 7)]["sm_active"].points


@pytest.mark.parametrize("job_id", sorted(data.JOBS))
def test_every_query_stays_within_300_points_and_the_sample_bound(cat, store, client, job_id):
    job = data.JOBS[job_id]
    telemetry = fetch_by_label(client, cat, str(job_id), _window(job), stats=True)
    assert telemetry.plan.n <= 300
    for measures in telemetry.gpus.values():
        assert all(len(s.points) <= 300 for s in measures.values())
    if store.kind == "victoriametrics":
        # It ignores stats=all: no sample counts to check (docs/metrics.md, "Stores")
        assert telemetry.peak_samples == 0
        return
    bound = peak_samples(len(job.gpus), telemetry.plan, data.SCRAPE)
    assert 0 < telemetry.peak_samples <= bound  # measured by Prometheus (stats=all)


@pytest.mark.parametrize(("job_id", "measure"), [
    (5001, "gr_engine_active"),  # gpu02 has no SM_ACTIVE: the job names its weakest measure
    (5002, "sm_active"),
    (5003, "gr_engine_active"),
    (5004, "sm_active"),  # one GPU held for part of the window
    (5005, "sm_active"),
])
def test_job_efficiency_matches_independent_values(cat, client, job_id, measure):
    job = data.JOBS[job_id]
    want = data.expected(job)
    telemetry = fetch_by_label(client, cat, str(job_id), _window(job))
    result = summarise_job(telemetry.gpus, _window(job), want["gpu_hours"],
                           expected=[GpuKey(h, g) for h, g in job.gpus])
    assert result.measure == measure and not result.missing
    for name in ("useful", "waiting", "held_idle", "no_process"):
        assert getattr(result.fractions, name) == pytest.approx(want[name], abs=0.01), name
    assert result.hours.total == pytest.approx(want["gpu_hours"])  # hours from Slurm
    assert result.hours.useful == pytest.approx(want["gpu_hours"] * want["useful"], rel=0.02)
    assert result.means["gpu_util"] == pytest.approx(want["gpu_util"], abs=0.01)
    assert result.means["tensor_active"] == pytest.approx(want["tensor"], abs=0.01)


def test_the_nccl_waiting_job_reads_busy_but_not_computing(cat, client):
    job = data.JOBS[5001]
    telemetry = fetch_by_label(client, cat, "5001", _window(job))
    want = data.expected(job)
    result = summarise_job(telemetry.gpus, _window(job), want["gpu_hours"])
    busy, computing = want["useful"] + want["waiting"], want["useful"]
    assert busy > 0.85 and computing < 0.3  # the data set's premise
    assert result.verdict == (f"GPUs were busy {busy * 100:.0f}% of the time but computing "
                              f"{computing * 100:.0f}%: most busy time was waiting.")
    waiting = [g for g in result.gpus if g.key.host == "gpu01" and g.key.gpu > 0]
    assert all(g.waiting_with_traffic == pytest.approx(1.0) for g in waiting)


@pytest.mark.parametrize("job_id", sorted(data.JOBS))
def test_an_openmetrics_file_and_prometheus_give_the_same_efficiency(cat, client, job_id):
    job = data.JOBS[job_id]
    hours = data.expected(job)["gpu_hours"]
    live = fetch_by_label(client, cat, str(job_id), _window(job))
    from_file = job_gpu_series(data.openmetrics(), cat, _window(job), job_id=str(job_id))
    a = summarise_job(live.gpus, _window(job), hours)
    b = summarise_job(from_file, _window(job), hours)
    assert a.measure == b.measure
    assert [g.key for g in a.gpus] == [g.key for g in b.gpus]
    for name in ("useful", "waiting", "held_idle", "no_process"):
        assert getattr(a.fractions, name) == pytest.approx(getattr(b.fractions, name),
                                                           abs=0.01), name


def test_node_series_cover_the_jobs_hosts(cat, client):
    job = data.JOBS[5001]
    telemetry = fetch_by_label(client, cat, "5001", _window(job))
    fetch_nodes(client, cat, ["gpu01", "gpu02"], telemetry)
    assert set(telemetry.nodes) == {"gpu01", "gpu02"}
    for host in data.NODES:
        want = data.expected_node(job, host)
        node = telemetry.nodes[host]
        for measure in ("cpu_busy", "cpu_iowait", "net_rx", "ib_rx", "fs_read"):  # net_rx: no lo
            points = node[measure].points
            assert points and all(v == pytest.approx(want[measure], rel=1e-6)
                                  for _, v in points), (host, measure)
        assert max(v for _, v in node["mem_used"].points) == want["mem_used_peak"]


def test_node_series_from_prometheus_and_from_a_file_agree(cat, client):
    """The archive's node summary (CPU, memory, traffic) is the same by either path."""
    from apps.analysis.health import node_health
    from apps.jobs.adapters.openmetrics import job_series

    job = data.JOBS[5003]
    live = fetch_by_label(client, cat, "5003", _window(job))
    fetch_nodes(client, cat, ["gpu02"], live)
    from_file = job_series(data.openmetrics(), cat, _window(job), job_id="5003")
    a = node_health("gpu02", live.nodes["gpu02"], _window(job))
    b = node_health("gpu02", from_file.nodes["gpu02"], _window(job))
    want = data.expected_node(job, "gpu02")
    for h in (a, b):
        assert h.cpu_busy == pytest.approx(want["cpu_busy"], rel=1e-6)
        assert h.cpu_iowait == pytest.approx(want["cpu_iowait"], rel=1e-6)  # same family, 2 modes
        assert h.mem_used_bytes == want["mem_used_peak"]
        assert h.net_rx_bps == pytest.approx(want["net_rx"], rel=1e-6)
        assert h.ib_rx_bps == pytest.approx(want["ib_rx"], rel=1e-6)
        assert h.fs_read_bps == pytest.approx(want["fs_read"], rel=1e-6)


def test_an_unknown_job_has_no_series_and_says_so(cat, client):
    window = Window(data.T0, data.T0 + 3600)
    telemetry = fetch_by_label(client, cat, "999999", window)
    assert telemetry.gpus == {}
    result = summarise_job(telemetry.gpus, window, 8.0, expected=[GpuKey("gpu01", 0)])
    assert not result.has_data and result.missing == (GpuKey("gpu01", 0),)
