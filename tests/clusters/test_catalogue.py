"""The metric catalogue: per-cluster names, both host label spellings, grouping per GPU."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from apps.analysis.timeseries import GpuKey, Series
from apps.clusters.adapters.catalogue import (
    ACTIVITY_FALLBACK,
    GPU_METRICS,
    Catalogue,
    CatalogueError,
    group_by_gpu,
)
from apps.clusters.adapters.promql import Matcher

ROOT = Path(__file__).resolve().parents[2]


def test_the_defaults_are_dcgm_exporter_names():
    cat = Catalogue.from_config({})
    assert cat.job_label == "hpc_job"
    assert cat.host_labels == ("Hostname", "hostname")
    assert cat.metric("sm_active").name == "DCGM_FI_PROF_SM_ACTIVE"
    assert ACTIVITY_FALLBACK == ("sm_active", "gr_engine_active", "gpu_util")


@pytest.mark.parametrize(("config", "attr", "expected"), [
    ({"job": "jobid"}, "job_label", "jobid"),
    ({"hostname": "hostname"}, "host_labels", ("hostname",)),
    ({"uuid": "uuid"}, "uuid_labels", ("uuid",)),
    ({"cluster": "cluster", "cluster_value": "alpha"}, "cluster_value", "alpha"),
    ({"scrape_interval": 15}, "scrape_interval", 15.0),
])
def test_a_cluster_overrides_label_names(config, attr, expected):
    assert getattr(Catalogue.from_config(config), attr) == expected


def test_a_cluster_overrides_a_metric_name_and_keeps_its_unit():
    cat = Catalogue.from_config({"metrics": {"gpu_util": "nvidia_gpu_duty_cycle"}})
    assert cat.metric("gpu_util").name == "nvidia_gpu_duty_cycle"
    assert cat.metric("gpu_util").scale == 0.01
    assert cat.measure_of("nvidia_gpu_duty_cycle") == "gpu_util"


@pytest.mark.parametrize(("config", "words"), [
    ({"jobb": "x"}, "unknown key"),
    ({"job": "bad label"}, "not a valid label"),
    ({"hostname": []}, "at least one"),
    ({"metrics": {"nope": "x"}}, "unknown measure"),
    ({"metrics": {"sm_active": "bad name"}}, "not a valid metric"),
    ({"scrape_interval": 0}, "positive"),
    ({"scrape_interval": "fast"}, "expected seconds"),
    ({"file_system": ["x"]}, "expected"),
    ({"file_system": {"reads": "x"}}, "unknown key 'reads'"),
    ({"file_system": {"read": []}}, "needs a counter name"),
    ({"file_system": {"read": 'x"}[1m]) or up{a="'}}, "not a valid metric"),
    ({"store": "thanos"}, "store 'thanos' is not one of prometheus, victoriametrics"),
])
def test_bad_config_names_the_key(config, words):
    with pytest.raises(CatalogueError, match=words):
        Catalogue.from_config(config)


def test_file_system_reads_default_to_nfs_mountstats_and_a_site_names_its_own():
    """One query sums every named counter per node, each name its own selector (rate drops
    the name: one regex over two names is refused); the raw-sample path reads the same."""
    default = Catalogue.from_config({})
    sel = [Matcher.host("instance", ["gpu01"])]
    query, unit = default.node_queries(sel, "2m")["fs_read"]
    assert unit == "B/s" and query == (
        'sum by (instance) (avg without (job) (rate(node_mountstats_nfs_read_bytes_total'
        '{instance=~"(gpu01)(:[0-9]+)?"}[2m])))')
    lustre = Catalogue.from_config({"file_system": {
        "read": ["lustre_client_read_bytes_total", "gpfs_fs_bytes_read_total"]}})
    query = lustre.node_queries(sel, "2m")["fs_read"][0]
    assert "__name__" not in query
    assert query.count("label_replace(rate(") == 2
    assert 'rate(gpfs_fs_bytes_read_total{instance=~"(gpu01)(:[0-9]+)?"}[2m])' in query
    assert lustre.node_families["gpfs_fs_bytes_read_total"] == "fs_read"
    assert lustre.node_families["node_mountstats_nfs_write_bytes_total"] == "fs_write"
    assert "node_mountstats_nfs_read_bytes_total" not in lustre.node_families
    assert set(default.node_queries()) == set(default.node_samples)  # both paths, same measures
    # one family, two modes: each key reads its own (cpu_busy idle, cpu_iowait iowait)
    assert default.node_keys["node_cpu_seconds_total"] == (
        "node_cpu_seconds_total", "node_cpu_seconds_total#iowait")


@pytest.mark.parametrize(("measure", "expected"), [
    ("cpu_busy", '1 - avg by (instance) (sum by (instance, cpu) (avg without (job) ('
                 'rate(node_cpu_seconds_total{cluster="a",mode="idle"}[2m]))))'),
    ("cpu_iowait", 'avg by (instance) (sum by (instance, cpu) (avg without (job) ('
                   'rate(node_cpu_seconds_total{cluster="a",mode="iowait"}[2m]))))'),
    ("mem_used", 'max by (instance) (avg without (job) (node_memory_MemTotal_bytes'
                 '{cluster="a"}) - avg without (job) (node_memory_MemAvailable_bytes'
                 '{cluster="a"}))'),
    ("net_tx", 'sum by (instance) (avg without (job) (rate(node_network_transmit_bytes_total'
               '{cluster="a",device!="lo"}[2m])))'),
    ("ib_rate_min", 'min by (instance) (node_infiniband_rate_bytes_per_second{cluster="a"})'),
    ("ib_errors", 'sum by (instance) (avg without (job) (label_replace(increase('
                  'node_infiniband_link_error_recovery_total{cluster="a"}[2m]), "beacon_name", '
                  '"node_infiniband_link_error_recovery_total", "", "") or label_replace('
                  'increase(node_infiniband_link_downed_total{cluster="a"}[2m]), "beacon_name",'
                  ' "node_infiniband_link_downed_total", "", "")))'),
])
def test_node_queries_are_built_from_the_raw_sample_table(measure, expected):
    queries = Catalogue().node_queries([Matcher.eq("cluster", "a")], "2m")
    assert queries[measure][0] == expected
    assert not any("__name__" in q for q, _ in queries.values())


def test_it_reads_the_host_from_either_spelling_or_the_scrape_target():
    cat = Catalogue()
    upper = Series("m", {"Hostname": "gpu01", "gpu": "3"})
    lower = Series("m", {"hostname": "gpu02", "gpu": "0"})
    target = Series("m", {"instance": "gpu03:9400", "gpu": "1"})
    nogpu = Series("m", {"Hostname": "gpu01"})
    assert [cat.gpu_key(s) for s in (upper, lower, target, nogpu)] == [
        GpuKey("gpu01", 3), GpuKey("gpu02", 0), GpuKey("gpu03", 1), None]


def test_grouping_merges_label_changes_and_shared_copies_and_scales_util():
    cat = Catalogue()
    base = {"Hostname": "gpu01", "gpu": "0"}
    before = Series("DCGM_FI_DEV_GPU_UTIL", base, ((30.0, 10.0), (60.0, 20.0)))
    job_a = Series("DCGM_FI_DEV_GPU_UTIL", {**base, "hpc_job": "7"}, ((90.0, 50.0),))
    job_b = Series("DCGM_FI_DEV_GPU_UTIL", {**base, "hpc_job": "8"}, ((90.0, 50.0),))
    grouped = group_by_gpu([("gpu_util", s) for s in (job_b, before, job_a)], cat)
    assert list(grouped) == [GpuKey("gpu01", 0)]
    assert grouped[GpuKey("gpu01", 0)]["gpu_util"].points == ((30.0, 0.1), (60.0, 0.2),
                                                               (90.0, 0.5))


def test_the_collectors_file_turns_on_every_profiling_field_beacon_reads():
    path = ROOT / "deploy" / "prometheus" / "dcgm-collectors.csv"
    rows = [r for r in csv.reader(path.read_text().splitlines())
            if r and not r[0].startswith("#")]
    fields = {r[0].strip() for r in rows}
    assert all(len(r) == 3 for r in rows), "FIELD, type, help on every line"
    wanted = {spec.name for spec in GPU_METRICS.values()}
    assert wanted <= fields, sorted(wanted - fields)
    assert {"DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_NVLINK_RX_BYTES"} <= fields


def test_a_victoriametrics_cluster_reads_its_counters_as_prometheus_would():
    """metric_labels "store" writes the node counters for the store (promql.counter_call);
    Prometheus's spelling is the default (Thanos and Mimir run its engine)."""
    sel = [Matcher.eq("cluster", "a")]
    prom = Catalogue().node_queries(sel, 60.0)
    vm = Catalogue.from_config({"store": "victoriametrics"}).node_queries(sel, 60.0)
    assert "rate(node_infiniband_port_data_received_bytes_total" in prom["ib_rx"][0]
    assert "[60000ms]" in prom["ib_rx"][0]
    assert "increase_prometheus(node_infiniband_port_data_received_bytes_total" in vm["ib_rx"][0]
    assert "[60001ms]" in vm["ib_rx"][0] and "rate(" not in vm["ib_rx"][0]
    assert "increase(" not in vm["ib_errors"][0] and "* (60.000 / (" in vm["ib_errors"][0]
