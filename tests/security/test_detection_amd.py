"""Security rules on a cluster mixing AMD and NVIDIA nodes (issue 28 item 5): an MI300X busy
with no job and one keeping its VRAM after its job, read in the AMD exporter's names and
labels beside a dcgm-exporter node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from apps.analysis import security_rules
from apps.clusters.models import Node
from apps.security.detection import Sources, detect
from apps.security.models import Finding, SecurityRule
from tests.security.telemetry_files import gpu_lines, merge, write

pytestmark = pytest.mark.django_db
START = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
STEP, MINUTES = 60.0, 20


def amd_lines(gpu: int, values, job=None) -> dict[str, list[str]]:
    """mi01's GPU ``gpu`` as the AMD exporter writes it (Slurm integration: job_id)."""
    out: dict[str, list[str]] = {}
    for i in range(MINUTES):
        t = START.timestamp() + (i + 1) * STEP
        labels = f'gpu_id="{gpu}",serial_number="6922{gpu}",card_model="AMD Instinct MI300X",' \
                 f'hostname="mi01"'
        if job and job(i):
            labels += f',job_id="{job(i)}",job_user="bob",job_partition="mi300x"'
        for family, value in values(i).items():
            out.setdefault(family, []).append(f"{family}{{{labels}}} {value} {t:.0f}")
    return out


def files(folder: Path) -> Path:
    busy = amd_lines(0, lambda i: {"gpu_gfx_activity": 98, "gpu_used_vram": 40000})
    # job 4243 until minute 5, then 90 GB of VRAM stays behind on an idle GPU
    left = amd_lines(1, lambda i: {"gpu_gfx_activity": 95 if i < 5 else 0,
                                   "gpu_used_vram": 150000 if i < 5 else 90000},
                     job=lambda i: "4243" if i < 5 else "")
    quiet = amd_lines(2, lambda i: {"gpu_gfx_activity": 0, "gpu_used_vram": 10})
    nvidia = gpu_lines("gpu01", 0, START.timestamp(), MINUTES, STEP,
                       lambda i: {"util": 97, "fb": 24000, "tensor": 0.0})
    return write(folder / "20261102T1200Z.om", merge(busy, left, quiet, nvidia))


def test_amd_and_nvidia_gpus_busy_without_a_job_and_memory_left_are_found(world, tmp_path):
    from tests.conftest import make_job

    cluster = world.cluster
    cluster.metric_labels = {"exporters": ["dcgm", "amd"], "scrape_interval": 60}
    cluster.save()
    Node.objects.create(cluster=cluster, name="mi01", gpu_type="mi300x", gpu_count=8)
    make_job(cluster, 4243, world.users["bob"], world.team_a, nodes="mi01",
             start_time=START - timedelta(hours=1), end_time=START + timedelta(minutes=5),
             gpu_types={"mi300x": 1}, gpus=1, gpu_equivalent=1.0, partition="mi300x")
    spec = security_rules.RULES["gpu_memory_left_after_job"]
    SecurityRule.objects.update_or_create(key=spec.key, defaults={
        "number": spec.number, "title": spec.title, "severity": spec.severity,
        "params": {"min_minutes": 5}})
    files(tmp_path)
    report = detect(cluster, START, START + timedelta(minutes=30),
                    Sources(openmetrics=tmp_path))
    assert report.telemetry_ok
    found = {(f.rule_key, f.node_name, f.gpu_index) for f in Finding.objects.all()}
    assert ("gpu_activity_without_job", "mi01", 0) in found
    assert ("gpu_activity_without_job", "gpu01", 0) in found
    assert ("gpu_memory_left_after_job", "mi01", 1) in found
    assert not any(node == "mi01" and gpu == 2 for _, node, gpu in found)
    left = Finding.objects.get(rule_key="gpu_memory_left_after_job")
    assert left.job_id_raw == 4243 and left.evidence["min_fb_mib"] == 90000
