"""The job page's efficiency card: archive first, banners when Prometheus fails, no 500."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.analysis.figures import gpu_hours_text
from apps.analysis.timeseries import GpuKey
from apps.jobs import archive
from apps.jobs.models import JobMetrics
from tests.clusters.test_prometheus_adapter import _free_port
from tests.jobs.fake_telemetry import FakeSource

WAITING = {"gpu_util": 0.87, "sm_active": 0.19, "tensor_active": 0.05, "fb_used": 60000.0,
           "power": 300.0}


def _url(job, name="jobs-detail"):
    return reverse(name, kwargs={"cluster": job.cluster.name, "job_id": job.job_id})


def _archive(job, values=WAITING, n=8):
    return archive.archive_job(job, FakeSource({GpuKey("gpu01", i): dict(values)
                                                for i in range(n)}))


def test_the_card_says_busy_but_not_computing_and_carries_the_figures(world, login):
    job = world.jobs["bob"]
    _archive(job)
    html = login("bob").get(_url(job)).content.decode()
    assert "GPUs were busy 87% of the time but computing 19%: most busy time was waiting." in html
    for fig in ("fig-activity", "fig-split", "fig-heatmap"):
        assert f'data-figure="{fig}"' in html and f'id="{fig}"' in html
    assert "vendor/plotly.min.js" in html and "js/charts.js" in html


def test_the_page_has_no_inline_script(world, login):
    job = world.jobs["bob"]
    _archive(job)
    html = login("bob").get(_url(job)).content.decode()
    for tag in re.findall(r"<script[^>]*>", html):
        assert "src=" in tag or 'type="application/json"' in tag, tag


def test_duty_cycle_only_is_named_an_upper_bound(world, login):
    job = world.jobs["bob"]
    _archive(job, {"gpu_util": 0.6, "fb_used": 1000.0})
    html = login("bob").get(_url(job)).content.decode()
    assert "profiling metrics unavailable: efficiency is an upper bound" in html


def test_prometheus_down_serves_the_archive_with_a_banner(world, login):
    job = world.jobs["bob"]
    _archive(job)
    JobMetrics.objects.filter(job=job).update(
        last_error="TransientAdapterError: cannot reach Prometheus at http://x",
        last_error_at=timezone.now() + timedelta(seconds=1))
    response = login("bob").get(_url(job))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Metrics could not be refreshed" in html and "cannot reach Prometheus" in html
    assert "most busy time was waiting" in html
    computed = JobMetrics.objects.get(job=job).computed_at
    assert f"stale since {computed:%Y-%m-%d %H:%M} UTC" in html


def test_warnings_of_a_partial_answer_are_a_banner_saying_it_will_be_fetched_again(world,
                                                                                    login):
    job = world.jobs["bob"]
    warning = "remote_read: connection refused (data may be partial)"
    archive.archive_job(job, FakeSource({GpuKey("gpu01", i): dict(WAITING) for i in range(8)},
                                        warnings=[warning]))
    html = login("bob").get(_url(job)).content.decode()
    assert 'id="metrics-warnings"' in html and warning in html
    assert f"it will be fetched again (attempt 1 of {archive.PARTIAL_ATTEMPTS})" in html
    assert "most busy time was waiting" in html  # the partial figures are still shown
    JobMetrics.objects.filter(job=job).update(status="complete",
                                              partial_attempts=archive.PARTIAL_ATTEMPTS)
    html = login("bob").get(_url(job)).content.decode()
    assert f"kept as it is after {archive.PARTIAL_ATTEMPTS} attempts" in html


def test_a_clean_answer_shows_no_warnings_banner(world, login):
    job = world.jobs["bob"]
    _archive(job)
    assert 'id="metrics-warnings"' not in login("bob").get(_url(job)).content.decode()


def test_a_job_whose_gpus_have_no_series_shows_no_zeros(world, login):
    job = world.jobs["bob"]
    archive.archive_job(job, FakeSource({}))
    html = login("bob").get(_url(job)).content.decode()
    assert "had no series" in html and "fig-heatmap" not in html


@pytest.mark.integration("prometheus")
def test_an_unreachable_prometheus_never_makes_a_500(world, login,
                                                      django_capture_on_commit_callbacks):
    world.cluster.prometheus_url = f"http://127.0.0.1:{_free_port()}"
    world.cluster.save()
    job = world.jobs["bob"]
    with django_capture_on_commit_callbacks(execute=True):
        response = login("bob").get(_url(job))  # eager: the archive task runs in-process
    assert response.status_code == 200
    assert "cannot reach Prometheus" in JobMetrics.objects.get(job=job).last_error
    assert "Metrics unavailable" in login("bob").get(_url(job)).content.decode()


def test_the_partial_polls_while_a_refresh_is_pending(world, login):
    job = world.jobs["bob"]
    JobMetrics.objects.create(job=job, refresh_requested_at=timezone.now())
    html = login("bob").get(_url(job, "jobs-metrics")).content.decode()
    assert 'hx-trigger="every 5s"' in html and "<html" not in html
    _archive(job)
    html = login("bob").get(_url(job, "jobs-metrics")).content.decode()
    assert "hx-trigger" not in html and "most busy time was waiting" in html


def _running(job):
    job.state, job.end_time = "RUNNING", None
    job.save()
    return job


def test_viewing_a_running_job_asks_for_a_refresh(world, login, monkeypatch,
                                                  django_capture_on_commit_callbacks):
    from apps.jobs import tasks

    world.cluster.prometheus_url = "http://127.0.0.1:9"  # never reached: the task is patched
    world.cluster.save()
    asked = []
    monkeypatch.setattr(tasks.archive_job, "apply_async", lambda args, **kw: asked.append(args))
    job = _running(world.jobs["bob"])
    with django_capture_on_commit_callbacks(execute=True):
        html = login("bob").get(_url(job)).content.decode()
        login("bob").get(_url(job))
    assert asked == [(job.pk,)]
    assert 'id="no-live-source"' not in html


def test_without_prometheus_a_running_job_shows_its_stored_metrics_and_queues_nothing(
        world, login, monkeypatch, django_capture_on_commit_callbacks, settings):
    from apps.core.models import TaskRun
    from apps.jobs import tasks

    settings.PROMETHEUS_URL = ""
    asked = []
    monkeypatch.setattr(tasks.archive_job, "apply_async", lambda args, **kw: asked.append(args))
    job = _running(world.jobs["bob"])
    _archive(job)
    with django_capture_on_commit_callbacks(execute=True):
        html = login("bob").get(_url(job)).content.decode()
    assert asked == [] and not TaskRun.objects.filter(status="failed").exists()
    assert 'id="no-live-source"' in html and "Live refresh needs Prometheus" in html
    # issue 26: not "GPU efficiency · live" beside it, but what is shown
    status = html.split('id="efficiency-status">')[1].split("</span>")[0]
    assert "live" not in status.replace("\n", " ").split(",")[0]
    assert "a snapshot of the running job" in status and "not refreshed" in status
    assert "most busy time was waiting" in html  # the stored archive is shown
    assert "Metrics could not be refreshed" not in html
    world.cluster.is_simulated = True
    world.cluster.save()
    assert "make demo-full" in login("bob").get(_url(job)).content.decode()


def test_a_running_jobs_header_and_charts_say_why_their_gpu_hours_differ(world, login):
    import time_machine

    job = _running(world.jobs["bob"])
    with time_machine.travel(timezone.now(), tick=False):  # the clock stops: exact hours
        metrics = _archive(job)
        JobMetrics.objects.filter(job=job).update(
            window_end=metrics.window_end - timedelta(hours=3),
            allocated_gpu_hours=metrics.allocated_gpu_hours - 8 * 3)  # a snapshot 3 h old
        html = login("bob").get(_url(job)).content.decode()
        header = gpu_hours_text(job.gpu_hours)  # the one way GPU-hours print (issue 26)
    assert re.search(rf"<dd>{header}\s+<span class=\"muted\">so far \(Slurm's allocation until "
                     r"now\)", html)
    note = html.split('id="hours-gap">')[1].split("</p>")[0]
    assert f"The header's {header} count until now" in note
    assert "the 24.0 GPU-h since are not measured yet" in note


def test_a_finished_jobs_header_and_charts_agree(world, login):
    job = world.jobs["bob"]
    metrics = _archive(job)
    html = login("bob").get(_url(job)).content.decode()
    assert f"{job.gpu_hours:.1f}" == f"{metrics.allocated_gpu_hours:.1f}"
    assert 'id="hours-gap"' not in html and "so far" not in html


def test_the_card_says_how_much_of_the_waiting_was_communication(world, login):
    job = world.jobs["bob"]
    values = {GpuKey("gpu01", i): {**WAITING, "nvlink_tx": 3e10 if i < 6 else 0.0}
              for i in range(8)}
    archive.archive_job(job, FakeSource(values))
    html = login("bob").get(_url(job)).content.decode()
    # six GPUs of eight wait with NVLink traffic, two without: 75 % of the waiting
    assert "75% of it with NVLink/PCIe traffic: communication" in html
    archive.archive_job(job, FakeSource({GpuKey("gpu01", i): dict(WAITING) for i in range(8)}),
                        force=True)  # no traffic series at all
    html = login("bob").get(_url(job)).content.decode()
    assert "communication not measured" in html


def test_a_one_gpu_job_never_talks_about_nvlink_or_communication(world, login):
    job = world.jobs["bob"]
    job.gpus, job.gpu_equivalent, job.gpu_types = 1, 1.0, {"h100": 1}
    job.save()
    archive.archive_job(job, FakeSource({GpuKey("gpu01", 0): {**WAITING, "nvlink_tx": 3e10,
                                                              "pcie_rx": 2e9}}))
    html = login("bob").get(_url(job)).content.decode()
    assert "waiting" in html and "one GPU: no peer to wait for" in html
    assert "NVLink" not in html and "communication" not in html.lower().split(
        'id="communication-share"')[1].split("</span>")[0]
    assert 'data-figure="fig-gpu-nvlink"' not in html


def test_a_short_jobs_charts_show_its_samples_as_points_and_say_why(world, login):
    job = world.jobs["bob"]
    _archive(job)
    # a 49-minute job under hourly telemetry: one point, stored at the job's own length
    JobMetrics.objects.filter(job=job).update(points=1, step_s=49 * 60.0)
    world.cluster.metric_labels = {"scrape_interval": 3600}
    world.cluster.save()
    html = login("bob").get(_url(job)).content.decode()
    note = html.split('id="sparse-note">')[1].split("</p>")[0]
    assert note == ("The telemetry holds one sample every 1 h: this job has 1 sample per GPU, "
                    "drawn as points (a single reading, not a trend).")
    world.cluster.metric_labels = {}  # no interval configured: the stored step says it
    world.cluster.save()
    JobMetrics.objects.filter(job=job).update(points=3, step_s=300.0)
    html = login("bob").get(_url(job)).content.decode()
    assert "one sample every 5 min: this job has 3 samples per GPU, drawn as points." in html
    JobMetrics.objects.filter(job=job).update(points=120, step_s=30.0)
    assert 'id="sparse-note"' not in login("bob").get(_url(job)).content.decode()


@pytest.mark.parametrize(("source", "said"), [
    ("accounting", None),
    ("gres_detail", "from the GPUs slurmctld gave it (gres_detail): this cluster's accounting"),
    ("submit_line", "from read from its sbatch command line"),
    ("tres_per_job", "from what it asked for (--gpus, tres_per_job)"),
])
def test_the_page_says_where_a_gpu_count_came_from_when_not_accounting(world, login, source,
                                                                        said):
    job = world.jobs["bob"]
    job.gpu_source = source
    job.save(update_fields=["gpu_source"])
    html = login("bob").get(_url(job)).content.decode()
    if said is None:
        assert 'id="gpu-source"' not in html
    else:
        assert said in unescape(html).replace("\n      ", " ")
