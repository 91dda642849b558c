"""The streaming OpenMetrics reader: the same Series as Prometheus, clear errors by line."""

from __future__ import annotations

import io
import math

import pytest

from apps.analysis.timeseries import GpuKey, Window
from apps.clusters.adapters.catalogue import Catalogue
from apps.jobs.adapters.openmetrics import (
    OpenMetricsError,
    iter_samples,
    job_gpu_series,
    read_series,
)

GOOD = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="gpu01",hpc_job="7"} 90.000000 1000
DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="gpu01",hpc_job="7"} 80 1030.5
DCGM_FI_DEV_GPU_UTIL{gpu="1",hostname="gpu02"} NaN 1000
# HELP odd Escapes and an exemplar.
# TYPE odd counter
odd_total{v="a\\"b\\\\c\\nd",w="jöb-β 😀"} 1 1000 # {trace_id="x"} 1 999
# EOF
"""


def test_it_reads_samples_with_escapes_nan_and_exemplars():
    samples = list(iter_samples(io.StringIO(GOOD)))
    assert [s.name for s in samples] == ["DCGM_FI_DEV_GPU_UTIL"] * 3 + ["odd_total"]
    assert samples[1].timestamp == 1030.5 and samples[1].value == 80.0
    assert math.isnan(samples[2].value)
    assert samples[3].labels == {"v": 'a"b\\c\nd', "w": "jöb-β 😀"}


def test_it_groups_kept_samples_into_series_in_time_order():
    series = read_series(io.StringIO(GOOD), keep=lambda name, labels: labels.get("gpu") == "0")
    [util] = series
    assert util.labels == {"gpu": "0", "Hostname": "gpu01", "hpc_job": "7"}
    assert util.points == ((1000.0, 90.0), (1030.5, 80.0))


@pytest.mark.parametrize(("text", "words"), [
    ("m 1 1000\n", "no '# EOF' after line 1"),
    ("m 1\n# EOF\n", "line 1: expected 'value timestamp'"),
    ('m{a="1} 1 1000\n# EOF\n', "line 1: unterminated"),
    ('m{a="\\q"} 1 1000\n# EOF\n', "line 1: bad escape"),
    ("ok 1 1\n{a=\"1\"} 1 1000\n# EOF\n", "line 2: expected a metric name"),
    ("m x 1000\n# EOF\n", "line 1: value and timestamp must be numbers"),
    ('m{1a="x"} 1 1000\n# EOF\n', "line 1: bad label"),
    ("# EOF\nm 1 1000\n", "line 2: content after # EOF"),
])
def test_bad_input_names_the_line(text, words):
    with pytest.raises(OpenMetricsError, match=words.replace("'", ".").replace("(", ".")):
        list(iter_samples(io.StringIO(text)))


SEEN_THEN_BAD = [  # a series' later lines take read_series' fast path: the same errors
    "m 1 1000\nm x 1030\n# EOF\n", "m 1 1000\nm 1 inf\n# EOF\n", "m 1 1000\nm 1\n# EOF\n",
    "m 1 1000\n# EOF\nm 1 1030\n", "m 1 1000\nm 1 1030\n", "m 1 1000\nm # 1030\n# EOF\n",
]


@pytest.mark.parametrize("text", SEEN_THEN_BAD)
def test_read_series_fails_as_iter_samples_does(text):
    with pytest.raises(OpenMetricsError) as full:
        list(iter_samples(io.StringIO(text)))
    with pytest.raises(OpenMetricsError) as fast:
        read_series(io.StringIO(text))
    assert (str(fast.value), fast.value.detail) == (str(full.value), full.value.detail)


def test_read_series_reads_an_exemplar_on_a_seen_series():
    text = 'm{a="1"} 1 1000\nm{a="1"} 2 1030 # {t="x"} 5 1029\nm{a="1"} 3 1060\n# EOF\n\n'
    [series] = read_series(io.StringIO(text))
    assert series.points == ((1000.0, 1.0), (1030.0, 2.0), (1060.0, 3.0))


def test_it_binds_a_job_by_label_or_by_held_gpus_in_portal_units():
    cat = Catalogue()
    window = Window(900, 1100)
    by_label = job_gpu_series(io.StringIO(GOOD), cat, window, job_id="7")
    assert by_label[GpuKey("gpu01", 0)]["gpu_util"].points == ((1000.0, 0.9), (1030.5, 0.8))
    by_host = job_gpu_series(io.StringIO(GOOD), cat, window, held=[GpuKey("gpu02", 1)])
    assert list(by_host) == [GpuKey("gpu02", 1)]
    with pytest.raises(ValueError, match="bind by"):
        job_gpu_series(io.StringIO(GOOD), cat, window)


# --- Node series and per-window files --------------------------------------------------


def _window_file(start: int, job: str = "7") -> str:
    lines = []
    for k in range(3):
        t = start + 30 * k
        lines += [f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="gpu01",hpc_job="{job}"}} 90 {t}',
                  f'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{gpu="0",Hostname="gpu01",hpc_job="{job}"}}'
                  f' 96 {t}']
    for dev, rate in (("mlx5_0", 50e9), ("mlx5_1", 12.5e9)):
        for k in range(3):
            t = start + 30 * k
            lines += [f'node_infiniband_port_data_transmitted_bytes_total{{device="{dev}",'
                      f'port="1",instance="gpu01:9100"}} {int(1e9 * (start + 30 * k))} {t}',
                      f'node_infiniband_rate_bytes_per_second{{device="{dev}",port="1",'
                      f'instance="gpu01:9100"}} {int(rate)} {t}']
    return "\n".join(lines) + "\n# EOF\n"


def test_job_series_reads_gpus_and_node_rates_in_one_pass():
    from apps.jobs.adapters.openmetrics import job_series

    read = job_series(io.StringIO(_window_file(1000)), Catalogue(), Window(900, 2000),
                      job_id="7")
    gpu = read.gpus[GpuKey("gpu01", 0)]
    assert set(gpu) == {"gpu_util", "throttle_reasons"}  # the old throttle name is an alias
    node = read.nodes["gpu01"]
    assert [v for _, v in node["ib_tx"].points] == [2e9, 2e9]  # two ports at 1 GB/s each
    assert node["ib_rate_min"].points[0][1] == 12.5e9
    assert node["ib_rate_max"].points[0][1] == 50e9


def test_node_cpu_memory_and_network_read_as_the_prometheus_queries_do():
    """cpu_busy = 1 - mean idle rate over CPUs (other modes ignored), cpu_iowait the mean
    iowait rate from the same family; mem_used = MemTotal -
    MemAvailable; the loopback device is not network traffic; NFS reads sum over mounts."""
    from apps.jobs.adapters.openmetrics import job_series

    host = 'instance="gpu01:9100"'
    lines = [f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="gpu01",hpc_job="7"}} 90 {t}'
             for t in (1000, 1030, 1060)]
    for k, t in enumerate((1000, 1030, 1060)):
        lines += [f'node_cpu_seconds_total{{cpu="0",mode="idle",{host}}} {0.2 * 30 * k} {t}',
                  f'node_cpu_seconds_total{{cpu="1",mode="idle",{host}}} {0.6 * 30 * k} {t}',
                  f'node_cpu_seconds_total{{cpu="0",mode="user",{host}}} {0.7 * 30 * k} {t}',
                  f'node_cpu_seconds_total{{cpu="0",mode="iowait",{host}}} {0.1 * 30 * k} {t}',
                  f'node_cpu_seconds_total{{cpu="1",mode="iowait",{host}}} {0.3 * 30 * k} {t}',
                  f'node_memory_MemTotal_bytes{{{host}}} {2**40} {t}',
                  f'node_memory_MemAvailable_bytes{{{host}}} {2**40 - (k + 1) * 2**30} {t}',
                  f'node_network_receive_bytes_total{{device="eth0",{host}}} {1e6 * 30 * k} {t}',
                  f'node_network_receive_bytes_total{{device="lo",{host}}} {9e9 * 30 * k} {t}',
                  f'node_mountstats_nfs_read_bytes_total{{export="nfs01:/data",{host}}} '
                  f'{3e7 * 30 * k} {t}',
                  f'node_mountstats_nfs_read_bytes_total{{export="nfs02:/home",{host}}} '
                  f'{2e7 * 30 * k} {t}']
    read = job_series(io.StringIO("\n".join(lines) + "\n# EOF\n"), Catalogue(),
                      Window(900, 2000), job_id="7")
    node = read.nodes["gpu01"]
    assert [v for _, v in node["cpu_busy"].points] == pytest.approx([0.6, 0.6])  # 1 - 0.4
    assert [v for _, v in node["cpu_iowait"].points] == pytest.approx([0.2, 0.2])  # mean
    assert [v for _, v in node["mem_used"].points] == [2**30, 2 * 2**30, 3 * 2**30]
    assert [v for _, v in node["net_rx"].points] == pytest.approx([1e6, 1e6])
    assert [v for _, v in node["fs_read"].points] == pytest.approx([5e7, 5e7])  # both mounts


def test_a_sites_own_file_system_counter_is_read_from_files_too():
    from apps.jobs.adapters.openmetrics import job_series

    cat = Catalogue.from_config({"file_system": {"read": "lustre_client_read_bytes_total"}})
    lines = [f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="gpu01",hpc_job="7"}} 90 {t}'
             for t in (1000, 1030, 1060)]
    lines += [f'lustre_client_read_bytes_total{{target="scratch",instance="gpu01:9100"}} '
              f'{4e8 * (t - 1000)} {t}' for t in (1000, 1030, 1060)]
    read = job_series(io.StringIO("\n".join(lines) + "\n# EOF\n"), cat, Window(900, 2000),
                      job_id="7")
    assert [v for _, v in read.nodes["gpu01"]["fs_read"].points] == pytest.approx([4e8, 4e8])


def test_the_source_reads_only_the_files_of_the_job_window(tmp_path):
    from apps.jobs.archive_sources import OpenMetricsSource

    for start in (0, 21600, 43200):
        (tmp_path / f"{start:06d}.om").write_text(_window_file(start))
    source = OpenMetricsSource([tmp_path], Catalogue())
    names = [p.name for p in source.files_for(Window(22000, 30000))]
    assert names == ["021600.om"]
    assert [p.name for p in source.files_for(Window(21000, 44000))] == \
        ["000000.om", "021600.om", "043200.om"]
    telemetry = source.fetch("7", Window(0, 50000), [])
    assert len(telemetry.gpus[GpuKey("gpu01", 0)]["gpu_util"].points) == 8  # (0, end]
    assert set(telemetry.nodes) == {"gpu01"}


@pytest.mark.parametrize("text", [
    'm{a="1",b="2"}', 'm{a="1",b="2",}', "m", 'm{}', 'm{a="x\\"y",b="\\\\",c="l\\nm"}',
    'm{w="jöb-β 😀",x="a,b",y="}{"}', 'm{a="1"b="2"}', 'm{a="1",,b="2"}', 'm{a=1}',
    'm{a="1"', 'm{1a="x"}', 'm{a="bad\\q"}', '9m{a="1"}',
])
def test_the_fast_series_parser_agrees_with_the_careful_one(text):
    from apps.jobs.adapters import openmetrics as om

    try:
        careful = om._sample(1, f"{text} 1 1")
        expected = (careful.name, tuple(sorted(careful.labels.items())))
    except OpenMetricsError:
        expected = None
    try:
        fast = om._parse_series_text(text)
    except om._BadSeries:
        fast = None
    assert fast == expected
