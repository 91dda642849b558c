"""Chargeback on a cluster mixing AMD and NVIDIA GPUs (issue 28 item 5): each model at its
rate, the MI300X job's split measured from the AMD exporter's series like the H100 job's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from apps.chargeback import services
from apps.chargeback.models import Rate, Statement
from apps.clusters.models import Node
from apps.jobs import archive
from apps.jobs.archive_sources import OpenMetricsSource, catalogue_for
from tests.chargeback.conftest import NOV
from tests.conftest import T0, make_job
from tests.jobs.vendor_telemetry import write_job

AFTER = datetime(2026, 12, 3, tzinfo=UTC)


def test_mi300x_and_h100_hours_are_priced_by_model_and_measured_alike(world, tmp_path):
    cluster = world.cluster
    cluster.metric_labels = {"exporters": ["dcgm", "amd"], "scrape_interval": 30}
    cluster.save()
    Node.objects.create(cluster=cluster, name="mi01", gpu_type="mi300x", gpu_count=8)
    Rate.objects.create(price=Decimal("3.0000"), gpu_model="h100", valid_from=NOV)
    Rate.objects.create(price=Decimal("2.5000"), gpu_model="mi300x", valid_from=NOV)
    bob, team = world.users["bob"], world.team_a
    start = T0 + timedelta(days=3)
    end = start + timedelta(minutes=60)
    jobs = {"nvidia": make_job(cluster, 601, bob, team, nodes="gpu01", start_time=start,
                               end_time=end),
            "amd": make_job(cluster, 602, bob, team, nodes="mi01", start_time=start,
                            end_time=end, partition="mi300x", gpu_types={"mi300x": 8})}
    for vendor, job in jobs.items():
        path = write_job(tmp_path / f"{vendor}.om", vendor, job.nodes, str(job.job_id),
                         start.timestamp(), 60, hot_gpu=5)
        archive.archive_job(job, OpenMetricsSource([path], catalogue_for(cluster)))
    services.refresh_statements(NOV, now=AFTER)
    statement = Statement.objects.get(team=team, period__month=NOV)
    lines = {(line.partition, line.gpu_model): line for line in statement.lines.all()
             if line.user_name == "bob"}
    mi300x, h100 = lines[("mi300x", "mi300x")], lines[("gpu", "h100")]
    assert (mi300x.allocated_hours, mi300x.amount) == (Decimal("8.0000"), Decimal("20.00"))
    # with bob's other H100 job of the world (not archived: unmeasured)
    assert (h100.allocated_hours, h100.amount) == (Decimal("16.0000"), Decimal("48.00"))
    # the same job on either vendor: 7 GPUs waiting in collectives, one hot GPU computing
    assert mi300x.useful_hours == h100.useful_hours > Decimal("3")
    assert mi300x.unmeasured_hours == Decimal("0")
