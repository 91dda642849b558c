"""Binding AMD GPUs to jobs (issue 28 item 5): by the exporter's ``job_id`` label or by the
held (host, GPU) intervals, on a cluster that also runs dcgm-exporter. Prometheus is faked
at the client boundary (the real one: tests/integration/test_real_exporters_amd.py)."""

from __future__ import annotations

import io

import pytest

from apps.analysis.timeseries import GpuKey, Series, Window
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.adapters.prometheus import QueryResult
from apps.clusters.adapters.telemetry import GpuInterval, fetch_by_host, fetch_by_label
from apps.jobs.adapters.openmetrics import JobRequest, jobs_series
from apps.security.adapters.telemetry import from_openmetrics, gpu_queries
from tests.fake import StreamedRange

MIXED = Catalogue.from_config({"exporters": ["dcgm", "amd"], "scrape_interval": 30})
T0 = 1_790_000_000.0
AMD = {"hostname": "mi01", "gpu_id": "2", "card_model": "AMD Instinct MI300X",
       "serial_number": "6922", "job_id": "501"}
NVIDIA = {"Hostname": "h01", "gpu": "0", "UUID": "GPU-h01-0", "hpc_job": "500"}


class Prom(StreamedRange):
    """Answers each exporter's query in that exporter's labels and units."""

    base_url = "http://prom.test"

    def __init__(self) -> None:
        self.queries: list[str] = []

    def query_range(self, expr, start, end, step, stats=False):
        self.queries.append(expr)
        times = [start + i * step for i in range(int((end - start) / step) + 1)]

        def one(labels, value):
            return QueryResult("matrix", [Series("", labels, tuple((t, value) for t in times))])

        if expr.startswith("avg_over_time(gpu_gfx_activity{"):
            return one(AMD, 80.0)  # percent
        if "gpu_xgmi_link_tx" in expr:
            return one(AMD, 2e6)  # KB/s, summed over the links by the query
        if expr.startswith("avg_over_time(DCGM_FI_DEV_GPU_UTIL{"):
            return one(NVIDIA, 60.0)
        return QueryResult("matrix", [])


def test_by_label_each_exporter_is_asked_with_its_own_job_label():
    prom = Prom()
    telemetry = fetch_by_label(prom, MIXED, "501", Window(T0, T0 + 600),  # type: ignore[arg-type]
                               ("gpu_util", "nvlink_tx"))
    assert 'avg_over_time(gpu_gfx_activity{job_id="501"}[29999ms])' in prom.queries
    assert 'avg_over_time(DCGM_FI_DEV_GPU_UTIL{hpc_job="501"}[29999ms])' in prom.queries
    assert 'sum without (link_index) (rate(gpu_xgmi_link_tx{job_id="501"}[59999ms]))' \
        in prom.queries
    amd = telemetry.gpus[GpuKey("mi01", 2)]
    assert [v for _, v in amd["gpu_util"].points] == pytest.approx([0.8] * 20)
    assert {v for _, v in amd["nvlink_tx"].points} == {2e6 * 1024}
    assert telemetry.vendors == {GpuKey("mi01", 2): "amd", GpuKey("h01", 0): "nvidia"}


def test_by_host_an_amd_gpu_is_selected_by_hostname_and_gpu_id():
    prom = Prom()
    held = [GpuInterval("mi01", 2, T0, T0 + 600), GpuInterval("h01", 0, T0, T0 + 600,
                                                              "GPU-h01-0")]
    telemetry = fetch_by_host(prom, MIXED, held, Window(T0, T0 + 600),  # type: ignore[arg-type]
                              ("gpu_util",))
    [amd_query] = [q for q in prom.queries if "gpu_gfx_activity" in q]
    assert 'gpu_gfx_activity{hostname=~"mi01",gpu_id=~"2"}' in amd_query
    [dcgm_query] = [q for q in prom.queries if "DCGM" in q]
    assert 'UUID=~"GPU-h01-0"' in dcgm_query  # dcgm's UUID still picks Slurm's GPU
    assert set(telemetry.gpus) == {GpuKey("mi01", 2), GpuKey("h01", 0)}
    assert telemetry.vendors[GpuKey("mi01", 2)] == "amd"


def test_security_asks_every_exporter_and_names_the_second_one():
    queries = gpu_queries(MIXED, 60)
    assert queries["fb_used"].startswith("last_over_time(DCGM_FI_DEV_FB_USED")
    assert queries["fb_used (amd)"] == "last_over_time(gpu_used_vram[44999ms])"
    assert queries["nvlink_tx (amd)"] == \
        "sum without (link_index) (rate(gpu_xgmi_link_tx[90000ms]))"


FILE = "".join(
    [f'gpu_gfx_activity{{hostname="mi01",gpu_id="{g}",job_id="{j}"}} {v} {t}\n'
     for g, j, v in (("0", "501", 90), ("1", "", 5)) for t in (T0 + 30, T0 + 60, T0 + 90)]
    + [f'gpu_used_vram{{hostname="mi01",gpu_id="1"}} 150000 {t}\n'
       for t in (T0 + 30, T0 + 60, T0 + 90)]
    + [f'gpu_xgmi_link_tx{{hostname="mi01",gpu_id="0",job_id="501",link_index="{k}"}} '
       f'{k * 1000 * i} {T0 + 30 * i}\n' for k in (1, 2) for i in (1, 2, 3)]) + "# EOF\n"


def test_a_file_binds_amd_gpus_by_job_id_or_by_held_gpu():
    window = Window(T0, T0 + 90)
    read = jobs_series(io.StringIO(FILE), MIXED, [
        JobRequest("501", window), JobRequest("77", window, by_label=False,
                                              held=((GpuKey("mi01", 1), T0, T0 + 90),))])
    mine = read["501"].gpus[GpuKey("mi01", 0)]
    assert read["501"].binding == "label" and list(read["501"].gpus) == [GpuKey("mi01", 0)]
    assert [v for _, v in mine["gpu_util"].points] == pytest.approx([0.9] * 3)
    # links 1 and 2 grow by 1000 and 2000 KB per 30 s: 100 KB/s together
    assert [v for _, v in mine["nvlink_tx"].points] == pytest.approx([100 * 1024] * 2)
    held = read["77"].gpus[GpuKey("mi01", 1)]
    assert read["77"].binding == "host"
    assert [v for _, v in held["fb_used"].points] == [150000.0] * 3


def test_security_reads_amd_gpus_from_files(tmp_path):
    path = tmp_path / "t.om"
    path.write_text(FILE)
    raw = from_openmetrics([path], MIXED, T0, T0 + 90)
    by = {(m, s.labels.get("gpu_id")): s for m, s in raw.gpus}
    assert [v for _, v in by[("gpu_util", "1")].points] == pytest.approx([0.05] * 3)
    assert "link_index" not in by[("nvlink_tx", "0")].labels
    assert [v for _, v in by[("nvlink_tx", "0")].points] == pytest.approx([100 * 1024] * 2)
