"""The sync services against the in-memory Slurm of tests/fake.py (recorded records)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from apps.clusters import services, sync
from apps.clusters.adapters.slurm import GpuBinding, QueueEntry, SlurmJob, dumps
from apps.clusters.adapters.slurm import parse as slurm_parse
from apps.clusters.models import Cluster, Node, Partition, SlurmAssociation
from apps.core.errors import AdapterError, TransientAdapterError
from apps.core.models import TaskRun
from apps.jobs.models import Job, JobGpu
from tests.fake import FIXTURES, FakeSlurm, fixture_jobs

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster() -> Cluster:
    return Cluster.objects.create(name="devcluster", slurm_backend="cli")


@pytest.fixture
def slurm() -> FakeSlurm:
    return FakeSlurm.recorded()


# --- claims -------------------------------------------------------------------------------


def test_only_one_worker_holds_the_claim(cluster):
    now = timezone.now()
    other = Cluster.objects.get(pk=cluster.pk)
    assert sync.claim(cluster, now) is True
    assert sync.claim(other, now) is False
    sync.release(cluster, now)
    assert sync.claim(other, now + timedelta(seconds=1)) is True


def test_a_stale_claim_is_taken_over_and_the_old_worker_cannot_release_it(cluster, settings):
    old = timezone.now() - timedelta(seconds=settings.SLURM_SYNC_CLAIM_EXPIRY + 1)
    assert sync.claim(cluster, old)
    now = timezone.now()
    assert sync.claim(Cluster.objects.get(pk=cluster.pk), now)
    sync.release(cluster, old)  # the dead worker wakes up: not its claim any more
    assert Cluster.objects.get(pk=cluster.pk).sync_state == Cluster.SyncState.RUNNING


def test_a_claimed_cluster_is_not_synced_twice(cluster, slurm):
    sync.claim(Cluster.objects.get(pk=cluster.pk), timezone.now())
    result = sync.sync_cluster(cluster, slurm)
    assert result.claimed is False and slurm.calls == [] and not Job.objects.exists()


# --- sync_cluster ---------------------------------------------------------------------------


def test_a_first_sync_stores_the_window_and_fixes_exit_codes(cluster, slurm):
    result = sync.sync_cluster(cluster, slurm)
    assert result.jobs.created == len(slurm.window) == 30
    assert Job.objects.get(job_id=5).exit_text == "3:0"
    assert ("exit_codes", [3, 5, 7, 8, 33]) in slurm.calls
    cluster.refresh_from_db()
    assert cluster.last_sync_ok_at and cluster.last_sync_error == ""
    assert cluster.sync_state == Cluster.SyncState.IDLE
    assert cluster.sync_watermark == max(j.last_change for j in slurm.window)
    run = TaskRun.objects.get(kind="slurm.sync_jobs")
    assert run.status == TaskRun.Status.SUCCEEDED and run.stats["created"] > 0


def test_the_window_starts_an_overlap_behind_the_watermark(cluster, slurm, settings):
    sync.sync_cluster(cluster, slurm)
    cluster.refresh_from_db()
    slurm.marker, slurm.calls = "m2", []
    sync.sync_cluster(cluster, slurm)
    (since,) = [arg for name, arg in slurm.calls if name == "jobs_since"]
    assert since == cluster.sync_watermark - timedelta(seconds=settings.SLURM_SYNC_OVERLAP)


def test_active_jobs_the_window_missed_are_reread_by_id(cluster, slurm):
    held = [j for j in slurm.jobs if j.job_id in (13, 16)]
    slurm.window = [j for j in slurm.window if j.job_id not in (13, 16)] + held
    sync.sync_cluster(cluster, slurm)
    slurm.window = [j for j in slurm.window if j.job_id not in (13, 16)]  # sacct drops them
    slurm.set_job(16, state="CANCELLED", end_time=timezone.now(), exit_unresolved=True)
    slurm.marker, slurm.calls = "m2", []
    result = sync.sync_cluster(cluster, slurm)
    reread = [arg for name, arg in slurm.calls if name == "jobs_by_id"]
    assert reread and {13, 16} <= set(reread[0])
    assert Job.objects.get(job_id=16).state == "CANCELLED"
    assert result.reread == len(reread[0])


def test_nothing_new_costs_one_scheduler_call(cluster, slurm, settings):
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        sync.sync_cluster(cluster, slurm)
    with time_machine.travel(start + timedelta(seconds=settings.SLURM_SYNC_SETTLE + 1),
                             tick=False):
        sync.sync_cluster(cluster, slurm)  # counters unchanged, but not settled yet: full
        slurm.calls = []
        result = sync.sync_cluster(cluster, slurm)
    assert result.unchanged and slurm.call_names() == ["change_marker"]
    cluster.refresh_from_db()
    assert cluster.last_sync_ok_at > start


def test_a_full_pass_runs_anyway_after_full_every(cluster, slurm, settings):
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        sync.sync_cluster(cluster, slurm)
    with time_machine.travel(start + timedelta(seconds=settings.SLURM_SYNC_SETTLE + 1)):
        sync.sync_cluster(cluster, slurm)
    later = start + timedelta(seconds=settings.SLURM_SYNC_SETTLE + settings.SLURM_SYNC_FULL_EVERY
                              + 2)
    with time_machine.travel(later):
        slurm.calls = []
        result = sync.sync_cluster(cluster, slurm)
    assert not result.unchanged and "jobs_since" in slurm.call_names()


# --- the watermark ----------------------------------------------------------------------------


def _job(slurm: FakeSlurm, job_id: int, **times) -> SlurmJob:
    """A plain job shaped like recorded job 5 (one GPU, no array), with its own id and times."""
    template = next(j for j in fixture_jobs() if j.job_id == 5)
    return replace(template, job_id=job_id, display_id=str(job_id), exit=None,
                   exit_unresolved=False, **times)


def _live_slurm(slurm: FakeSlurm, jobs: list[SlurmJob]) -> FakeSlurm:
    slurm.jobs, slurm.window, slurm.windowed = list(jobs), list(jobs), True
    return slurm


def test_a_job_eligible_in_the_future_does_not_push_the_watermark_ahead(cluster, slurm):
    """A --begin=now+1h job (or a requeued one in its hold-off) is pending with an eligible
    time ahead; a short job that starts and ends between two syncs must still arrive."""
    t0 = timezone.now()
    later = _job(slurm, 901, state="PENDING", submit_time=t0 - timedelta(minutes=5),
                 eligible_time=t0 + timedelta(hours=1), start_time=None, end_time=None)
    _live_slurm(slurm, [later])
    with time_machine.travel(t0, tick=False):
        sync.sync_cluster(cluster, slurm)
    cluster.refresh_from_db()
    assert cluster.sync_watermark <= t0
    short = _job(slurm, 902, state="COMPLETED", submit_time=t0 + timedelta(minutes=20),
                 eligible_time=t0 + timedelta(minutes=20), start_time=t0 + timedelta(minutes=21),
                 end_time=t0 + timedelta(minutes=22))
    slurm.jobs.append(short)
    slurm.window.append(short)
    slurm.marker = "m2"
    with time_machine.travel(t0 + timedelta(minutes=40), tick=False):
        sync.sync_cluster(cluster, slurm)  # 40 min later: the short job has come and gone
    assert Job.objects.get(cluster=cluster, job_id=902).state == "COMPLETED"
    cluster.refresh_from_db()
    assert cluster.sync_watermark == short.end_time


def test_record_times_ahead_of_our_clock_are_clamped_to_now(cluster, slurm):
    t0 = timezone.now()
    skewed = _job(slurm, 903, state="COMPLETED", submit_time=t0 - timedelta(minutes=1),
                  start_time=t0, end_time=t0 + timedelta(hours=2))  # a Slurm host ahead of us
    _live_slurm(slurm, [skewed])
    with time_machine.travel(t0 + timedelta(seconds=5), tick=False):
        result = sync.sync_cluster(cluster, slurm)
    assert result.jobs.watermark <= t0 + timedelta(seconds=5)
    cluster.refresh_from_db()
    assert cluster.sync_watermark <= t0 + timedelta(seconds=5)


def test_a_watermark_stored_in_the_future_is_pulled_back(cluster, slurm, settings):
    t0 = timezone.now()
    short = _job(slurm, 904, state="COMPLETED", submit_time=t0 - timedelta(minutes=3),
                 start_time=t0 - timedelta(minutes=2), end_time=t0 - timedelta(minutes=1))
    _live_slurm(slurm, [short])
    Cluster.objects.filter(pk=cluster.pk).update(sync_watermark=t0 + timedelta(hours=3))
    cluster.refresh_from_db()
    with time_machine.travel(t0, tick=False):
        sync.sync_cluster(cluster, slurm)
    (since,) = [arg for name, arg in slurm.calls if name == "jobs_since"]
    assert since == t0 - timedelta(days=settings.SLURM_SYNC_INITIAL_DAYS)  # read again
    assert Job.objects.filter(cluster=cluster, job_id=904).exists()
    cluster.refresh_from_db()
    assert cluster.sync_watermark == short.end_time


def test_a_pending_job_cancelled_before_its_begin_time_is_stored_cancelled(cluster, slurm):
    """The stored record's future eligible time must not make it look newer than the
    cancellation (which ends the job before that time)."""
    t0 = timezone.now()
    pending = _job(slurm, 905, state="PENDING", submit_time=t0 - timedelta(minutes=5),
                   eligible_time=t0 + timedelta(hours=1), start_time=None, end_time=None)
    _live_slurm(slurm, [pending])
    sync.sync_cluster(cluster, slurm)
    slurm.set_job(905, state="CANCELLED", end_time=t0)
    slurm.marker = "m2"
    sync.sync_cluster(cluster, slurm)
    assert Job.objects.get(cluster=cluster, job_id=905).state == "CANCELLED"


def test_a_failing_scheduler_fails_the_run_and_frees_the_cluster(cluster, slurm):
    slurm.fail = TransientAdapterError("squeue: Unable to contact slurm controller")
    with pytest.raises(TransientAdapterError):
        sync.sync_cluster(cluster, slurm)
    cluster.refresh_from_db()
    assert "Unable to contact slurm controller" in cluster.last_sync_error
    assert cluster.sync_state == Cluster.SyncState.IDLE
    run = TaskRun.objects.get(kind="slurm.sync_jobs")
    assert run.status == TaskRun.Status.FAILED and "TransientAdapterError" in run.error


def test_finished_jobs_reach_the_hook_once_after_commit(
        cluster, slurm, caplog, django_capture_on_commit_callbacks):
    with (caplog.at_level(logging.INFO, logger="apps.clusters.sync"),
          django_capture_on_commit_callbacks(execute=True) as callbacks):
        first = sync.sync_cluster(cluster, slurm)
    assert callbacks and caplog.text.count("jobs finished") == 1  # after commit, once
    finished = Job.objects.exclude(state__in=Job.ACTIVE_STATES)
    assert sorted(first.jobs.finished_pks) == sorted(finished.values_list("pk", flat=True))
    assert f"{len(first.jobs.finished_pks)} jobs finished" in caplog.text
    slurm.set_job(2, state="COMPLETED", end_time=timezone.now())
    slurm.marker = "m2"
    second = sync.sync_cluster(cluster, slurm)
    assert second.jobs.finished_pks == [Job.objects.get(job_id=2).pk]


def test_a_cluster_without_backend_says_so(cluster):
    cluster.slurm_backend = Cluster.SlurmBackend.NONE
    with pytest.raises(AdapterError, match="no Slurm backend"):
        services.client_for(cluster)


# --- sync_queue and GPU bindings -------------------------------------------------------------


def test_the_queue_fills_reasons_and_imports_jobs_only_it_knows(cluster, slurm):
    slurm.window = [j for j in slurm.window if j.job_id not in (13, 16)]
    sync.sync_cluster(cluster, slurm)
    assert not Job.objects.filter(job_id__in=(13, 16)).exists()
    result = sync.sync_queue(cluster, slurm)
    assert set(Job.objects.filter(job_id__in=(13, 16)).values_list("job_id", flat=True)) == {
        13, 16}
    assert Job.objects.get(job_id=16).reason == "JobHeldUser"
    assert result.imported.created >= 2
    cluster.refresh_from_db()
    assert cluster.queue_synced_at is not None


def test_reasons_are_cleared_once_a_job_runs(cluster, slurm):
    sync.sync_cluster(cluster, slurm)
    sync.sync_queue(cluster, slurm)
    assert Job.objects.get(job_id=12).reason == "AssocGrpGRESMinutes"
    slurm.live = [QueueEntry(job_id=12, state="RUNNING")]
    sync.sync_queue(cluster, slurm)
    assert Job.objects.get(job_id=12).reason == ""


def test_gpu_intervals_open_and_close(cluster, slurm):
    sync.sync_cluster(cluster, slurm)
    sync.sync_queue(cluster, slurm)
    held = JobGpu.objects.filter(job__job_id=2, end__isnull=True)
    assert sorted(held.values_list("node__name", "gpu_index")) == [
        (n, i) for n in ("gpu03", "gpu04") for i in range(8)]
    assert all(g.start == g.job.start_time for g in held)
    slurm.bindings = [b for b in slurm.bindings if b.job_id != 2]
    sync.sync_queue(cluster, slurm)
    assert not JobGpu.objects.filter(job__job_id=2, end__isnull=True).exists()
    assert JobGpu.objects.filter(job__job_id=2).count() == 16


def test_a_backend_without_gpu_bindings_still_stores_the_queue(cluster, slurm):
    sync.sync_cluster(cluster, slurm)
    sync.sync_queue(cluster, slurm)
    held = JobGpu.objects.filter(end__isnull=True).count()
    assert held
    slurm.bindings = AdapterError("GPU index binding is not available through this "
                                  "backend: use cli")
    slurm.live = [QueueEntry(job_id=12, state="PENDING", reason="Priority")]
    result = sync.sync_queue(cluster, slurm)
    assert Job.objects.get(job_id=12).reason == "Priority"  # the queue was stored
    assert "this backend" in result.note and "this backend" in TaskRun.objects.filter(
        kind="slurm.sync_queue").latest("pk").stats["note"]
    assert JobGpu.objects.filter(end__isnull=True).count() == held  # nothing closed blindly
    cluster.refresh_from_db()
    assert cluster.queue_synced_at is not None


def test_a_transient_bindings_failure_fails_the_queue_run(cluster, slurm):
    slurm.bindings = TransientAdapterError("scontrol: Unable to contact slurm controller")
    with pytest.raises(TransientAdapterError):
        sync.sync_queue(cluster, slurm)
    assert TaskRun.objects.get(kind="slurm.sync_queue").status == TaskRun.Status.FAILED


def test_gpu_bindings_for_unknown_nodes_create_them(cluster, slurm):
    sync.sync_cluster(cluster, slurm)
    opened, closed = sync.sync_gpu_bindings(
        cluster, [GpuBinding(2, "gpu99", (0, 1), "h100")], timezone.now())
    assert (opened, closed) == (2, 0)
    assert Node.objects.filter(cluster=cluster, name="gpu99").exists()


# --- nodes and shares ------------------------------------------------------------------------


def test_nodes_and_partitions(cluster, slurm):
    stats = sync.sync_nodes(cluster, slurm)
    assert stats == {"nodes": 4, "partitions": 2, "gone": 0}
    gpu04 = Node.objects.get(cluster=cluster, name="gpu04")
    assert sorted(gpu04.partitions.values_list("name", flat=True)) == ["debug", "gpu"]
    assert Partition.objects.get(cluster=cluster, name="gpu").max_time_min == 2880
    slurm.node_list = slurm.node_list[:3]
    assert sync.sync_nodes(cluster, slurm)["gone"] == 1
    assert Node.objects.get(cluster=cluster, name="gpu04").state == "gone"


def test_shares_store_limits_and_usage(cluster, slurm):
    stats = sync.sync_shares(cluster, slurm)
    assert stats["associations"] == 13
    speech = SlurmAssociation.objects.get(cluster=cluster, account="speech", user_name="")
    assert speech.grp_tres_mins == {"gres/gpu": 20}
    assert "gres/gpu" in speech.usage_tres_mins and speech.level_fs is not None


def test_a_backend_without_fairshare_still_stores_limits(cluster, slurm):
    slurm.share_rows = AdapterError("fairshare (sshare) has no slurmrestd endpoint")
    stats = sync.sync_shares(cluster, slurm)
    assert stats["with_usage"] == 0 and "sshare" in stats["note"]
    assert SlurmAssociation.objects.get(account="vision", user_name="").grp_tres == {
        "gres/gpu": 16}


def test_a_transient_fairshare_failure_fails_the_run(cluster, slurm):
    slurm.share_rows = TransientAdapterError("sshare timed out")
    with pytest.raises(TransientAdapterError):
        sync.sync_shares(cluster, slurm)


@pytest.mark.parametrize("within_days", [36500, 0])
def test_recently_finished_gpu_jobs_get_their_archive_task(
        cluster, slurm, monkeypatch, django_capture_on_commit_callbacks, within_days):
    from apps.jobs import tasks

    cluster.prometheus_url = "http://127.0.0.1:9"  # never reached: the task is patched
    cluster.save()
    monkeypatch.setattr(sync, "ARCHIVE_AT_ONCE_WITHIN", timedelta(days=within_days))
    queued: list[tuple[int, int]] = []
    monkeypatch.setattr(tasks.archive_job, "apply_async",
                        lambda args, countdown: queued.append((args[0], countdown)))
    with django_capture_on_commit_callbacks(execute=True):
        sync.sync_cluster(cluster, slurm)  # the first sync: every recorded job at once
    finished_gpu = set(Job.objects.exclude(state__in=Job.ACTIVE_STATES).filter(
        gpu_equivalent__gt=0).values_list("pk", flat=True))
    assert finished_gpu, "the recorded jobs include finished GPU jobs"
    # recent ones are queued two minutes out; old ones are left to archive_pending
    assert {pk for pk, _ in queued} == (finished_gpu if within_days else set())
    assert {c for _, c in queued} <= {120}


def test_a_cluster_without_prometheus_queues_no_archive_that_could_only_fail(
        cluster, slurm, monkeypatch, django_capture_on_commit_callbacks, settings):
    from apps.jobs import tasks

    settings.PROMETHEUS_URL = ""
    monkeypatch.setattr(sync, "ARCHIVE_AT_ONCE_WITHIN", timedelta(days=36500))
    queued: list[int] = []
    monkeypatch.setattr(tasks.archive_job, "apply_async",
                        lambda args, countdown: queued.append(args[0]))
    with django_capture_on_commit_callbacks(execute=True):
        sync.sync_cluster(cluster, slurm)
    assert Job.objects.exclude(state__in=Job.ACTIVE_STATES).filter(gpu_equivalent__gt=0)
    assert queued == []


# --- a site whose accounting does not count GPUs (24.11, no AccountingStorageTRES) ----------

NO_GPU_TRES = FIXTURES / "24.11" / "no_gpu_accounting"


def _no_gpu_accounting() -> FakeSlurm:
    """The recorded 24.11 cluster without gres/gpu in accounting: its sacct records and
    the queue slurmctld showed at the same moment."""
    with (NO_GPU_TRES / "sacct_window.json").open("rb") as stream:
        dump = dumps.inspect(stream)
        jobs = [j for j in slurm_parse.iter_sacct_json(stream, parser=dump.parser)
                if isinstance(j, SlurmJob)]
    live = slurm_parse.parse_squeue_json(json.loads((NO_GPU_TRES / "squeue.json").read_text()))
    return FakeSlurm(jobs=jobs, live=live)


def test_without_gpu_accounting_jobs_get_the_gpus_slurm_says_they_hold():
    cluster = Cluster.objects.create(name="dev2411", slurm_backend="cli")  # as recorded
    slurm = _no_gpu_accounting()
    sync.sync_cluster(cluster, slurm)
    stored = {j.name: j for j in Job.objects.filter(cluster=cluster)}
    # from the command line in accounting: every job, also those that ended unseen
    assert {n: (j.gpus, j.gpu_source) for n, j in stored.items()} == {
        "nogpu-gres": (2, "submit_line"), "nogpu-gpus": (4, "submit_line"),
        "nogpu-typed": (2, "submit_line"), "nogpu-two-models": (3, "submit_line"),
        "nogpu-multinode": (4, "submit_line"), "nogpu-per-task": (2, "submit_line")}
    result = sync.sync_queue(cluster, slurm)
    # then slurmctld's gres_detail for the running ones: the same counts, with models
    running = {j.name: j for j in Job.objects.filter(cluster=cluster, state="RUNNING")}
    assert result.gpus_from_slurmctld == len(running) == 3
    assert {n: (j.gpus, j.gpu_source) for n, j in running.items()} == {
        "nogpu-typed": (2, "gres_detail"), "nogpu-two-models": (3, "gres_detail"),
        "nogpu-multinode": (4, "gres_detail")}
    assert running["nogpu-multinode"].gpu_types == {"h100": 4}
    assert running["nogpu-two-models"].gpu_equivalent == 3
    # and the next accounting pass, which still counts no GPU, keeps slurmctld's view
    cluster.refresh_from_db()
    cluster.sync_marker = ""
    cluster.save()
    sync.sync_cluster(cluster, slurm)
    assert Job.objects.get(cluster=cluster, name="nogpu-multinode").gpu_source == "gres_detail"


def test_accounting_that_counts_gpus_is_never_overridden_by_the_queue(cluster, slurm):
    sync.sync_cluster(cluster, slurm)
    before = dict(Job.objects.filter(cluster=cluster).values_list("job_id", "gpus"))
    assert sync.sync_queue(cluster, slurm).gpus_from_slurmctld == 0
    after = dict(Job.objects.filter(cluster=cluster).values_list("job_id", "gpus"))
    assert {k: after[k] for k in before} == before
    assert set(Job.objects.filter(cluster=cluster, gpus__gt=0)
               .values_list("gpu_source", flat=True)) == {"accounting"}


def test_a_count_from_slurmctld_is_checked_for_plausibility_like_an_import():
    cluster = Cluster.objects.create(name="dev2411", slurm_backend="cli")
    Node.objects.create(cluster=cluster, name="gpu01", gpu_count=8)
    slurm = _no_gpu_accounting()
    sync.sync_cluster(cluster, slurm)
    job = Job.objects.get(cluster=cluster, name="nogpu-typed")
    live = [replace(e, gpus=4096, gpu_types={"a100": 4096}) if e.job_id == job.job_id else e
            for e in slurm.live]
    sync.sync_queue(cluster, replace(slurm, live=live))
    job.refresh_from_db()
    assert job.gpus == 4096 and job.gpu_source == "gres_detail"
    assert job.implausible == ["claims 4,096 GPUs; the cluster has 8"]


def test_running_gpu_jobs_without_indices_are_said_not_hidden(cluster, slurm):
    slurm.bindings = [b for b in slurm.bindings if b.job_id != slurm.bindings[0].job_id]
    missing = FakeSlurm.recorded().bindings[0].job_id
    result = sync.sync_queue(cluster, slurm)
    assert f"came without GPU indices (e.g. {missing}" in result.note
    assert result.note in TaskRun.objects.filter(kind="slurm.sync_queue").latest("pk").stats[
        "note"]
    assert sync.sync_queue(cluster, FakeSlurm.recorded()).note == ""
