"""The demo with an MI300X partition (issue 28 item 5): a mixed cluster loaded through the
real paths; the AMD straggler's page names it in AMD's words; the security incidents are
found on both vendors' GPUs with no false alarm."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from apps.clusters.models import Cluster, Node
from apps.demo import findings as report
from apps.demo import loader as demo
from apps.jobs.models import JobMetrics

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("amddemo")
    call_command("simulate", out=str(out), nodes=4, amd_nodes=1, days=3, seed=7,
                 now="2026-10-20T00:00:00Z", telemetry_step=900, cluster="amddemo",
                 stdout=io.StringIO())
    return out


def test_the_demo_shows_an_mi300x_partition_with_its_straggler(folder):
    demo.load(folder)
    cluster = Cluster.objects.get(name="amddemo")
    assert cluster.metric_labels["exporters"] == ["dcgm", "amd"]
    assert Node.objects.get(cluster=cluster, name="mi01").gpu_type == "mi300x"
    truth = json.loads((folder / "ground_truth.json").read_text())
    planted = [f for f in truth["findings"] if f["kind"] == "straggler_gpu"
               and f["entity"]["node"] == "mi01"]
    assert planted
    for one in planted:
        metrics = JobMetrics.objects.get(job__cluster=cluster, job__job_id=one["entity"]["job_id"])
        assert (metrics.gpu_vendor, metrics.straggler_status) == ("amd", "found")
        [named] = metrics.straggler_detail["stragglers"]
        assert (named["gpu"], named["cause"]) == (f"mi01:{one['entity']['gpu']}", "thermal")
    planted = planted[0]
    client = Client()
    client.force_login(User.objects.create_user("viewer", is_staff=True))
    html = client.get(reverse("jobs-detail", kwargs={
        "cluster": cluster.name, "job_id": planted["entity"]["job_id"]})).content.decode()
    assert "AMD GPUs" in html and "GFX clock busy" in html and "XGMI" in html
    result = report.report(truth, cluster)
    assert result.all_found and result.false_alarms == 0, report.render(result)
