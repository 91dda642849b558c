"""Guardrails on AMD Instinct GPUs (issue 28 item 5): idle GPUs and memory held, read from
the Device Metrics Exporter's own names (GFX activity, VRAM) through the catalogue."""

from __future__ import annotations

from datetime import timedelta

from django.core import mail

from apps.guardrails import services
from apps.guardrails.models import Alert
from apps.jobs.archive_sources import OpenMetricsSource, catalogue_for
from apps.jobs.models import Job, JobMetrics
from tests.conftest import make_job
from tests.guardrails.conftest import START


def _amd_file(path, job: str, hours: float):
    """mi01's GPUs 0-3 for ``hours``: 0-1 busy throughout; 2-3 busy for 30 minutes, then
    idle with 18 GB of VRAM still held (a process that kept its memory)."""
    times = [START.timestamp() + 60 * (k + 1) for k in range(int(hours * 60))]
    lines = []
    for gpu in range(4):
        labels = f'gpu_id="{gpu}",hostname="mi01",card_model="AMD Instinct MI300X",' \
                 f'job_id="{job}"'
        idle = [gpu >= 2 and t > START.timestamp() + 1800 for t in times]
        lines += [f"gpu_gfx_activity{{{labels}}} {0 if i else 96} {t}"
                  for t, i in zip(times, idle, strict=True)]
        lines += [f"gpu_used_vram{{{labels}}} {18000 if i else 150000} {t}"
                  for t, i in zip(times, idle, strict=True)]
    path.write_text("\n".join(lines) + "\n# EOF\n")
    return path


def test_idle_mi300x_gpus_holding_memory_are_alerted_like_nvidia_ones(world, tmp_path):
    cluster = world.cluster
    cluster.metric_labels = {"exporters": ["dcgm", "amd"], "scrape_interval": 60}
    cluster.save()
    bob = world.users["bob"]
    bob.email = "bob@example.org"
    bob.save()
    job = make_job(cluster, 556, bob, world.team_a, state=Job.State.RUNNING, end_time=None,
                   start_time=START, submit_time=START - timedelta(minutes=5), gpus=4,
                   gpu_equivalent=4.0, gpu_types={"mi300x": 4}, nodes="mi01",
                   partition="mi300x", name="llm-train")
    source = OpenMetricsSource([_amd_file(tmp_path / "amd.om", "556", 2)],
                               catalogue_for(cluster))
    stats = services.run_checks(now=START + timedelta(hours=2), source=source,
                                jobs=Job.objects.filter(pk=job.pk))
    assert stats["measured"] == 1
    alerts = {a.kind: a for a in Alert.objects.filter(job=job)}
    assert set(alerts) == {"gpus_idle", "memory_held"}
    assert alerts["gpus_idle"].gpus == ["mi01:2", "mi01:3"]
    [message] = mail.outbox
    assert "2 of the job's 4 GPUs (mi01:2, mi01:3) did no work" in message.body
    assert JobMetrics.objects.get(job=job).gpu_vendor == "amd"
