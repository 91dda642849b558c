"""Telemetry files are valid OpenMetrics in dcgm-exporter's and node_exporter's naming."""

from __future__ import annotations

import shutil
import subprocess
from itertools import pairwise
from pathlib import Path

import pytest

from tests.integration.services import require
from tests.simulator.conftest import run
from tests.simulator.openmetrics import read, series


def _files(root: Path) -> list[Path]:
    return sorted((root / "telemetry").glob("*.om"))


def test_every_window_file_is_valid_openmetrics(small_run):
    files = _files(small_run)
    assert len(files) == 5  # 1 day, aligned down to 6 h windows, up to now
    for path in files:
        for family in read(path).values():
            assert family.kind in ("gauge", "counter") and family.help
            for _ in series(family):  # asserts contiguity and time order
                pass


def test_the_reader_rejects_a_series_out_of_time_order(tmp_path):
    bad = tmp_path / "bad.om"
    bad.write_text('# HELP m x\n# TYPE m gauge\nm{a="1"} 1 20\nm{a="1"} 1 10\n# EOF\n')
    with pytest.raises(AssertionError, match="out of order"):
        list(series(read(bad)["m"]))


def test_labels_follow_each_exporter_group(small_run):
    families = read(_files(small_run)[2])
    util = families["DCGM_FI_DEV_GPU_UTIL"].samples
    hosts = {labels.get("Hostname") or labels.get("hostname"): labels for _, labels, _, _ in util}
    assert set(hosts) == {"gpu01", "gpu02", "gpu03", "gpu04"}
    assert "hostname" in hosts["gpu02"] and "Hostname" not in hosts["gpu02"]  # newer exporter
    assert {"gpu", "UUID", "device", "modelName"} <= set(hosts["gpu01"])
    sm_hosts = {labels.get("Hostname") or labels.get("hostname")
                for _, labels, _, _ in families["DCGM_FI_PROF_SM_ACTIVE"].samples}
    assert "gpu03" not in sm_hosts  # default counters: no SM_ACTIVE, no NVLink bytes
    assert not any(labels.get("Hostname") == "gpu04" and "hpc_job" in labels
                   for _, labels, _, _ in util)  # no job mapping on gpu04


def test_hpc_job_labels_name_jobs_that_held_the_gpu(small_run):
    import json

    jobs = {j["job_id"]: j for j in
            json.loads((small_run / "slurm/sacct.json").read_text())["jobs"]}
    for path in _files(small_run):
        for _, labels, _, ts in read(path)["DCGM_FI_DEV_FB_USED"].samples:
            if "hpc_job" in labels:
                job = jobs[int(labels["hpc_job"])]
                end = job["time"]["end"] or float("inf")
                assert job["time"]["start"] <= ts < end


def test_counters_keep_growing_across_windows(small_run):
    last: dict[tuple[tuple[str, str], ...], float] = {}
    for path in _files(small_run):
        family = read(path)["node_infiniband_port_data_received_bytes"]
        for key, points in series(family):
            values = [v for v, _ in points]
            assert values == sorted(values)
            assert values[0] >= last.get(key, 0)
            last[key] = values[-1]


@pytest.mark.integration("prometheus")
def test_promtool_backfills_every_window_and_reads_it_back(tmp_path):
    require(shutil.which("promtool") is not None, "promtool",
            "apt-get install -y --no-install-recommends prometheus")
    out = run(tmp_path / "sim", nodes=2, days=1.0, telemetry_step=3600, telemetry_days=1.0)
    blocks = tmp_path / "blocks"
    for path in _files(out):
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q",
                        "--max-block-duration=6h", str(path), str(blocks)],
                       check=True, capture_output=True, timeout=120)
    (blocks / "wal").mkdir()  # dump opens the folder as a whole TSDB, WAL included
    dump = subprocess.run(["promtool", "tsdb", "dump", "--match=DCGM_FI_DEV_GPU_TEMP",
                           str(blocks)], check=True,
                          capture_output=True, text=True, timeout=120).stdout
    expected = {(line.split(" ")[-2], int(line.split(" ")[-1]) * 1000)
                for path in _files(out) for line in path.read_text().splitlines()
                if line.startswith("DCGM_FI_DEV_GPU_TEMP{")}
    got = {(line.split(" ")[-2], int(line.split(" ")[-1])) for line in dump.splitlines()
           if '__name__="DCGM_FI_DEV_GPU_TEMP"' in line}
    assert expected and got == expected


def test_nfs_reads_are_per_mount_counters_that_follow_the_jobs_on_the_node(small_run):
    """node_exporter's mountstats names and labels; the reads grow faster while a job holds
    GPUs on the node (its dataset) than on an empty node; writes are a small share."""
    from apps.simulator.telemetry import FS_WRITE_SHARE

    families = read(_files(small_run)[2])
    reads, writes = (families[f"node_mountstats_nfs_{op}_bytes"] for op in ("read", "write"))
    assert reads.kind == writes.kind == "counter"
    held: dict[tuple[str, int], int] = {}
    for _, labels, _, ts in families["DCGM_FI_DEV_FB_USED"].samples:
        if "hpc_job" in labels:
            host = labels.get("Hostname") or labels.get("hostname")
            held[(host, ts)] = held.get((host, ts), 0) + 1
    by_host: dict[str, list[tuple[int, float]]] = {}
    for name, labels, value, ts in reads.samples:
        assert name == "node_mountstats_nfs_read_bytes_total"
        assert {"export", "mountaddr", "protocol", "instance"} <= set(labels)
        by_host.setdefault(labels["instance"].split(":")[0], []).append((ts, value))
    busy, empty = [], []
    for host, points in by_host.items():
        for (t0, v0), (t1, v1) in pairwise(sorted(points)):
            assert v1 >= v0  # a counter
            if host != "gpu04":  # no job mapping there: held GPUs carry no label
                (busy if held.get((host, t1)) else empty).append((v1 - v0) / (t1 - t0))
    assert busy and empty and min(busy) > 10 * max(empty)
    total = {op: sum(v for _, _, v, _ in fam.samples) for op, fam in
             (("read", reads), ("write", writes))}
    assert total["write"] == pytest.approx(FS_WRITE_SHARE * total["read"], rel=0.05)


def test_node_exporter_cpu_and_memory_follow_the_jobs_on_the_node(small_run):
    """CPU seconds per core and mode add up to wall time; memory in use is 24 GiB plus each
    job's peak on the node, the MaxRSS sacct reports for it (issue 26: one figure, varying by
    job, so right-sizing reads the job's own peak), jobs counted from the dcgm series'
    hpc_job labels."""
    import json

    from apps.simulator.telemetry import MEMORY_BASE_GIB

    families = read(_files(small_run)[2])
    cpu = families["node_cpu_seconds"]
    assert cpu.kind == "counter"
    per_core: dict[tuple[str, str], dict[int, float]] = {}
    for _, labels, value, ts in cpu.samples:
        assert labels["mode"] in ("idle", "user") and labels["instance"].endswith(":9100")
        per_core.setdefault((labels["instance"], labels["cpu"]), {}).setdefault(ts, 0.0)
        per_core[(labels["instance"], labels["cpu"])][ts] += value
    for totals in per_core.values():  # idle + user grows by one step of wall time per step
        stamps = sorted(totals)
        steps = {round(totals[b] - totals[a], 1) - (b - a) for a, b in pairwise(stamps)}
        assert steps == {0.0}
    total = {labels["instance"]: v for _, labels, v, _ in
             families["node_memory_MemTotal_bytes"].samples}
    rss = {str(j["job_id"]): max(t["count"] for step in j["steps"]
                                 for t in step["tres"]["requested"]["max"] if t["type"] == "mem")
           for j in json.loads((small_run / "slurm/sacct.json").read_text())["jobs"]
           if j["steps"]}
    held: dict[tuple[str, int], dict[str, int]] = {}
    for _, labels, _, ts in families["DCGM_FI_DEV_FB_USED"].samples:
        host = labels.get("Hostname") or labels.get("hostname")
        if "hpc_job" in labels:
            jobs = held.setdefault((host, ts), {})
            jobs[labels["hpc_job"]] = jobs.get(labels["hpc_job"], 0) + 1
    checked, peaks = 0, set()
    for _, labels, free, ts in families["node_memory_MemAvailable_bytes"].samples:
        host = labels["instance"].split(":")[0]
        if host == "gpu04":
            continue  # no job mapping there: its held GPUs carry no label
        used = total[labels["instance"]] - free
        jobs = held.get((host, ts), {})
        assert used == pytest.approx(MEMORY_BASE_GIB * 2**30 + sum(rss[j] for j in jobs),
                                     rel=1e-6)
        checked += bool(jobs)
        peaks |= {rss[j] for j in jobs}
    assert len(peaks) > 3  # the jobs' peaks differ: no constant
    assert checked > 0  # some samples had jobs on the node
