"""The catalogue on AMD Instinct GPUs: the Device Metrics Exporter's names and labels, its
site prefix, and a cluster mixing it with dcgm-exporter (issue 28 item 5)."""

from __future__ import annotations

import pytest

from apps.analysis.timeseries import GpuKey, Series
from apps.clusters.adapters.catalogue import Catalogue, CatalogueError, group_by_gpu, windowed
from apps.clusters.adapters.fields import AMD_METRICS, JOB_MEASURES
from apps.clusters.adapters.promql import Matcher

MIXED = {"exporters": ["dcgm", "amd"]}
AMD_LABELS = {"hostname": "mi01", "gpu_id": "3", "serial_number": "692251001124",
              "card_model": "AMD Instinct MI300X", "gpu_partition_id": "0"}


# --- Names: which exporter series stand for which measure --------------------------------


@pytest.mark.parametrize(("prefix", "name", "measure", "scale"), [
    ("", "gpu_gfx_activity", "gpu_util", 0.01),
    ("", "gpu_prof_sm_active", "sm_active", 0.01),
    ("", "gpu_prof_tensor_active_percent", "tensor_active", 0.01),
    ("", "gpu_prof_occupancy_percent", "sm_occupancy", 0.01),
    ("", "gpu_umc_activity", "dram_active", 0.01),
    ("", "gpu_used_vram", "fb_used", 1.0),
    ("", "gpu_free_vram", "fb_free", 1.0),
    ("", "gpu_package_power", "power", 1.0),
    ("", "gpu_average_package_power", "power", 1.0),  # MI2xx
    ("", "gpu_power_usage", "power", 1.0),
    ("", "gpu_junction_temperature", "temperature", 1.0),
    ("", "gpu_edge_temperature", "temperature", 1.0),  # MI2xx
    ("", "gpu_clock", "sm_clock", 1.0),
    ("", "gpu_violation_socket_thermal_residency_percentage", "thermal_throttle", 0.01),
    ("", "gpu_violation_ppt_residency_percentage", "power_throttle", 0.01),
    ("", "gpu_violation_processor_hot_residency_percentage", "hw_slowdown", 0.01),
    ("", "gpu_ecc_uncorrect_total", "ecc_dbe", 1.0),
    ("", "gpu_ecc_correct_total", "ecc_sbe", 1.0),
    ("", "gpu_xgmi_link_tx", "nvlink_tx", 1024.0),  # kilobytes
    ("", "gpu_xgmi_link_rx", "nvlink_rx", 1024.0),
    ("amd_", "amd_gpu_gfx_activity", "gpu_util", 0.01),
    ("amd_", "amd_gpu_edge_temperature", "temperature", 1.0),
    ("amd_", "amd_gpu_xgmi_link_rx", "nvlink_rx", 1024.0),
])
def test_the_amd_exporter_names_map_to_the_portal_measures(prefix, name, measure, scale):
    cat = Catalogue.from_config({**MIXED, "amd": {"prefix": prefix}})
    assert cat.measure_of(name) == measure
    dialect, spec = cat.spec_of(name)
    assert (dialect.name, dialect.vendor, spec.scale) == ("amd", "amd", scale)
    if prefix:
        assert cat.measure_of(name.removeprefix(prefix)) is None  # the prefix is the name


def test_without_the_amd_exporter_listed_its_names_are_nobodys():
    assert Catalogue().measure_of("gpu_gfx_activity") is None
    assert Catalogue().dialects[0].name == "dcgm" and len(Catalogue().dialects) == 1


def test_pcie_bandwidth_is_not_read_as_host_to_gpu_copies():
    """It has no direction: the input-stall evidence reads host-to-GPU bytes (pcie_rx)."""
    cat = Catalogue.from_config(MIXED)
    assert cat.measure_of("pcie_bandwidth") is None
    assert "pcie_rx" not in AMD_METRICS and "xid" not in AMD_METRICS


def test_each_exporter_is_asked_only_for_what_it_has():
    mixed = Catalogue.from_config(MIXED).pairs(JOB_MEASURES)
    by = {(m, d.name) for m, d, _ in mixed}
    assert ("gpu_util", "dcgm") in by and ("gpu_util", "amd") in by
    assert ("throttle_reasons", "amd") not in by and ("thermal_throttle", "dcgm") not in by
    assert ("gr_engine_active", "amd") not in by and ("pcie_rx", "amd") not in by
    amd_only = Catalogue.from_config({"exporters": ["amd"]}).pairs(JOB_MEASURES)
    assert {d.name for _, d, _ in amd_only} == {"amd"}


# --- Labels: which GPU and which job ------------------------------------------------------


def test_an_amd_series_is_keyed_by_hostname_and_gpu_id_and_bound_by_job_id():
    cat = Catalogue.from_config(MIXED)
    amd = Series("gpu_gfx_activity", {**AMD_LABELS, "job_id": "4242"})
    dcgm = Series("DCGM_FI_DEV_GPU_UTIL", {"Hostname": "h01", "gpu": "1", "hpc_job": "17",
                                           "UUID": "GPU-1", "modelName": "NVIDIA H100"})
    assert (cat.gpu_key(amd), cat.job_of(amd), cat.model_of(amd)) == (
        GpuKey("mi01", 3), "4242", "AMD Instinct MI300X")
    assert (cat.gpu_key(dcgm), cat.job_of(dcgm), cat.uuid_of(dcgm)) == (
        GpuKey("h01", 1), "17", "GPU-1")
    # a function's answer has no name: the GPU label says which exporter it came from
    assert cat.gpu_key(Series("", AMD_LABELS)) == GpuKey("mi01", 3)
    assert cat.vendor_of({"gpu_util": amd}) == "amd"
    assert cat.vendor_of({"gpu_util": dcgm}) == "nvidia"


def test_a_dcgm_only_cluster_does_not_read_the_amd_job_label():
    series = Series("DCGM_FI_DEV_GPU_UTIL", {"Hostname": "h01", "gpu": "1", "job_id": "9"})
    assert Catalogue().job_of(series) == ""


@pytest.mark.parametrize(("config", "attr", "expected"), [
    ({"amd": {"job": "slurm_job"}}, "job_label", "slurm_job"),
    ({"amd": {"hostname": ["hostname", "host"]}}, "host_labels", ("hostname", "host")),
    ({"amd": {"gpu": "card"}}, "gpu_label", "card"),
    ({"amd": {"uuid": "serial_number"}}, "uuid_labels", ("serial_number",)),
])
def test_a_cluster_overrides_the_amd_label_names(config, attr, expected):
    assert getattr(Catalogue.from_config({**MIXED, **config}).amd, attr) == expected


def test_a_cluster_overrides_an_amd_metric_name_and_keeps_its_unit():
    cat = Catalogue.from_config({**MIXED, "amd": {"prefix": "amd_",
                                                 "metrics": {"power": "site_gpu_watts"}}})
    assert cat.measure_of("site_gpu_watts") == "power"
    assert cat.measure_of("amd_gpu_used_vram") == "fb_used"  # the others keep the prefix


def test_the_site_default_exporters_and_prefix_apply_unless_the_cluster_says():
    site = {"exporters": ["dcgm", "amd"], "amd_prefix": "amd_"}
    assert Catalogue.from_config({}, site).measure_of("amd_gpu_gfx_activity") == "gpu_util"
    own = Catalogue.from_config({"exporters": ["dcgm"], "amd": {"prefix": ""}}, site)
    assert [d.name for d in own.dialects] == ["dcgm"]
    assert own.amd.metrics["gpu_util"].name == "gpu_gfx_activity"


@pytest.mark.parametrize(("config", "words"), [
    ({"exporters": ["dcgm", "nvml"]}, "exporters: expected a list of dcgm, amd"),
    ({"exporters": []}, "exporters: expected"),
    ({"exporters": ["amd", "amd"]}, "without repeats"),
    ({"amd": "amd_"}, "metric_labels.amd: expected"),
    ({"amd": {"prefx": "amd_"}}, "unknown key.*prefx"),
    ({"amd": {"prefix": "amd-"}}, "not a metric name prefix"),
    ({"amd": {"job": "bad label"}}, "not a valid label"),
    ({"amd": {"metrics": {"xid": "gpu_afid_errors"}}}, "amd.metrics: unknown measure 'xid'"),
])
def test_bad_amd_config_names_the_key(config, words):
    with pytest.raises(CatalogueError, match=words):
        Catalogue.from_config(config)


# --- Reading: PromQL and raw samples give the same per-GPU series -----------------------


def test_the_gfx_clock_is_read_from_its_clock_type_and_averaged_over_the_xcds():
    spec = Catalogue.from_config(MIXED).amd.metrics["sm_clock"]
    expr = windowed(spec, [[Matcher.eq("job_id", "42")]], "59999ms", "89999ms")
    assert expr == ('avg without (clock_index) (avg_over_time(gpu_clock{job_id="42",'
                    'clock_type=~"system|GPU_CLOCK_TYPE_SYSTEM"}[59999ms]))')


def test_xgmi_totals_are_rates_summed_over_the_links():
    spec = Catalogue.from_config(MIXED).amd.metrics["nvlink_tx"]
    expr = windowed(spec, [[Matcher.eq("job_id", "42")]], "59999ms", "89999ms")
    assert expr == ('sum without (link_index) (rate(gpu_xgmi_link_tx{job_id="42"}'
                    '[89999ms]))')


def test_an_older_name_is_read_after_the_current_one():
    spec = Catalogue.from_config(MIXED).amd.metrics["temperature"]
    assert windowed(spec, [[]], "1m", "2m") == (
        "avg_over_time(gpu_junction_temperature[1m]) or avg_over_time(gpu_edge_temperature[1m])")


def test_raw_samples_become_the_same_per_gpu_series_as_promql():
    cat = Catalogue.from_config(MIXED)
    times = (30.0, 60.0, 90.0)

    def series(name, extra, values):
        return Series(name, {**AMD_LABELS, **extra}, tuple(zip(times, values, strict=True)))

    pairs = [
        ("gpu_util", series("gpu_gfx_activity", {}, (90, 95, 100))),
        # 8 links (two written here) accumulating kilobytes: 1000 KB/s and 3000 KB/s
        ("nvlink_tx", series("gpu_xgmi_link_tx", {"link_index": "1"}, (0, 30e3, 60e3))),
        ("nvlink_tx", series("gpu_xgmi_link_tx", {"link_index": "2"}, (0, 90e3, 180e3))),
        # two XCD clocks of the GFX domain, and a memory clock that must not count
        ("sm_clock", series("gpu_clock", {"clock_type": "system", "clock_index": "0"},
                            (2100, 2100, 1200))),
        ("sm_clock", series("gpu_clock", {"clock_type": "system", "clock_index": "1"},
                            (2100, 2100, 1400))),
        ("sm_clock", series("gpu_clock", {"clock_type": "memory", "clock_index": "8"},
                            (1300, 1300, 1300))),
    ]
    [(key, gpu)] = group_by_gpu(pairs, cat, raw=True).items()
    assert key == GpuKey("mi01", 3)
    assert [v for _, v in gpu["gpu_util"].points] == pytest.approx([0.9, 0.95, 1.0])
    assert gpu["nvlink_tx"].points == ((60.0, 4000 * 1024.0), (90.0, 4000 * 1024.0))
    assert gpu["sm_clock"].points == ((30.0, 2100.0), (60.0, 2100.0), (90.0, 1300.0))
    # PromQL answers are already combined: they are only merged and scaled
    answered = group_by_gpu([("nvlink_tx", Series("gpu_xgmi_link_tx", AMD_LABELS,
                                                   ((60.0, 4000.0),)))], cat)
    assert answered[key]["nvlink_tx"].points == ((60.0, 4000 * 1024.0),)


def test_a_bad_site_default_is_a_system_check_error(settings):
    from apps.clusters.checks import check_gpu_exporters

    assert check_gpu_exporters() == []
    settings.GPU_EXPORTERS = ["dcgm", "rocm"]
    [error] = check_gpu_exporters()
    assert error.id == "clusters.E003" and "rocm" in error.msg
    settings.GPU_EXPORTERS, settings.AMD_METRICS_PREFIX = ["amd"], "amd-"
    [error] = check_gpu_exporters()
    assert "not a metric name prefix" in error.msg
