"""The demo runs through the real data paths: the simulator's month is loaded by the same
importers as a real cluster, loading twice changes nothing, and the same telemetry read back
from a real Prometheus or VictoriaMetrics gives the same job figures as the files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.clusters.models import Cluster, Node
from apps.demo import loader as demo
from apps.jobs import archive
from apps.jobs.models import Job, JobGpu, JobMetrics, JobMetricSummary, TraceRun
from tests.integration import prom

NOW = "2026-10-20T00:00:00Z"
NOW_TS = 1792454400


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    call_command("simulate", out=str(out), nodes=4, days=2, seed=3, now=NOW,
                 telemetry_step=900, cluster="simdemo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    return out


@pytest.fixture
def loaded(db, folder: Path) -> demo.LoadResult:
    return demo.load(folder)


def _truth(folder: Path) -> dict[str, dict[str, object]]:
    return {str(j): v for j, v in json.loads((folder / "ground_truth.json").read_text())
            ["jobs"].items()}


def test_every_sacct_record_arrives_with_its_real_exit_code(loaded, folder):
    records = json.loads((folder / "slurm" / "sacct.json").read_text())["jobs"]
    # jobs never eligible are outside sacct's time window (as on a real Slurm); the queue
    # sync reads them by id, from what `sacct -j` printed (sacct_by_id.json)
    by_id = folder / "slurm" / "sacct_by_id.json"
    records += json.loads(by_id.read_text())["jobs"] if by_id.exists() else []
    jobs = {j.job_id: j for j in Job.objects.filter(cluster__name="simdemo")}
    assert set(jobs) == {r["job_id"] for r in records}
    truth = _truth(folder)
    wrong = [(job_id, job.exit_code, info.get("exit_code")) for job_id, job in jobs.items()
             if (info := truth.get(str(job_id))) and job.state == info.get("state")
             and not job.is_active and job.exit_code != info["exit_code"]]
    assert wrong == []
    assert Cluster.objects.get(name="simdemo").is_simulated


def test_the_gpu_history_archives_and_traces_are_loaded(loaded, folder):
    gpu_jobs = Job.objects.filter(cluster__name="simdemo", gpu_equivalent__gt=0,
                                  start_time__isnull=False)
    assert JobGpu.objects.filter(job__in=gpu_jobs).exists()
    metrics = JobMetrics.objects.filter(job__in=gpu_jobs)
    assert metrics.count() == gpu_jobs.count()
    finished = metrics.exclude(job__state__in=Job.ACTIVE_STATES)
    assert finished.filter(status="complete").count() > 0.8 * finished.count()
    assert set(metrics.filter(job__state="RUNNING").values_list("status", flat=True)) == {"live"}
    # the no-job-mapping node group is bound through the prolog's history
    unlabelled = [n["name"] for n in json.loads((folder / "cluster.json").read_text())["nodes"]
                  if not n["job_mapping"]]
    assert metrics.filter(binding="host", job__nodes__contains=unlabelled[0]).exists()
    assert TraceRun.objects.filter(job__cluster__name="simdemo").count() == len(
        [d for d in (folder / "traces").iterdir() if d.is_dir()])


def test_loading_the_same_folder_again_changes_nothing(loaded, folder):
    def state() -> tuple[object, ...]:
        return (Job.objects.count(), JobGpu.objects.count(), JobMetricSummary.objects.count(),
                TraceRun.objects.count(), Node.objects.count(),
                sorted(JobMetrics.objects.values_list("job_id", "status", "useful_hours",
                                                      "computed_at")))

    before = state()
    again = demo.load(folder)
    assert state() == before
    assert again.stages["jobs"]["created"] == 0
    # only running jobs are archived again (live snapshots), to the same figures
    running = Job.objects.filter(cluster__name="simdemo", gpu_equivalent__gt=0,
                                 state="RUNNING").count()
    assert again.stages["archive"]["jobs"] == running


def test_a_folder_that_is_not_a_simulation_is_refused(db, tmp_path):
    with pytest.raises(demo.DemoError, match=r"cluster\.json"):
        demo.load(tmp_path)


@pytest.mark.integration("prometheus")
def test_each_store_serves_the_same_job_figures_as_the_files(loaded, folder, store: prom.Store):
    """Load the simulated telemetry into the real store (promtool blocks for Prometheus, the
    import API for VictoriaMetrics), archive a job from it through the adapter, and compare
    with the archive made from the files."""
    files = sorted((folder / "telemetry").glob("*.om"))
    # The data set is named by what the simulator wrote: a changed simulator is a new set.
    name = "simdemo-seed3-" + hashlib.sha256(
        (folder / "ground_truth.json").read_bytes()).hexdigest()[:12]
    marker = folder / "marker.om"
    marker.write_text(prom.marker_lines(name, NOW_TS - 60) + "# EOF\n")
    if not store.is_loaded(name, NOW_TS - 60):
        stale = store.loaded_like("simdemo-seed3", NOW_TS - 60)
        assert not stale, (
            f"{store.kind} at {store.url} holds an older simulation ({stale}) at the same "
            "times; its samples would mix with this one's. Start from an empty data folder: "
            f"{store.script} down, remove its data folder (var/), {store.script} up")
        store.load(name, [*files, marker])
    cluster = Cluster.objects.get(name="simdemo")
    cluster.prometheus_url = store.url
    cluster.metric_labels = {**(cluster.metric_labels or {}), "store": store.kind}
    cluster.save()
    stored = (JobMetrics.objects.filter(job__cluster=cluster, status="complete",
                                        binding="label", job__end_time__isnull=False)
              .order_by("-allocated_gpu_hours").select_related("job").first())
    assert stored is not None
    from_files = (stored.useful_hours, stored.waiting_hours, stored.held_idle_hours)
    live = archive.archive_job(stored.job, force=True)
    assert live.source == "prometheus" and live.status == "complete"
    assert (live.useful_hours, live.waiting_hours, live.held_idle_hours) == pytest.approx(
        from_files, rel=0.03, abs=0.05)
