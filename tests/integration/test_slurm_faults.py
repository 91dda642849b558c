"""Faults against the REAL Slurm dev clusters (22.05, 24.11, 26.05), each in the middle of an
operation:

- a sync SIGKILLed mid-run, restarted: nothing lost, nothing duplicated;
- slurmdbd stopped while a job sync streams the window;
- slurmctld stopped while a queue sync imports jobs, then a job sync with it down.

Each fault must fail the run with a clear message (a TaskRun, the cluster's error), retry with
growing countdowns, keep the pages up with a "may be out of date" banner; after a restart
(``deploy/dev/slurm.sh up``) Beacon's rows equal sacct's. The stalls come from a stand-in
``sacct`` that holds its output back mid-stream. The sync runs in another thread or process,
so these tests need a database both share: PostgreSQL (``DATABASE_URL``), as in CI.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from celery.exceptions import Retry
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.clusters import sync, tasks
from apps.clusters.adapters.slurm.cli import WINDOW_STATES
from apps.clusters.models import Cluster
from apps.core.errors import TransientAdapterError
from apps.core.models import TaskRun
from apps.jobs.models import Job
from tests.integration.services import require
from tests.integration.slurm import ROOT, SlurmDev, wait_for

pytestmark = [pytest.mark.integration("slurm"), pytest.mark.slow]

SLURM_COMMANDS = ("sdiag", "squeue", "sinfo", "scontrol", "sacctmgr", "sshare")


def _gated_sacct_bin(slurm: SlurmDev, tmp_path: Path,
                     after_bytes: int = 150_000) -> tuple[Path, Path]:
    """The release's real Slurm commands, except that ``sacct --json`` hands over ``after_bytes`` of
    its output, then stalls (mid-stream) until the gate file exists (at most 120 s).

    Returns (bin_dir, gate). sacct itself has read everything from slurmdbd by then: only
    its output waits.
    """
    bin_dir, gate = tmp_path / "bin", tmp_path / "gate"
    bin_dir.mkdir()
    for name in SLURM_COMMANDS:
        (bin_dir / name).symlink_to(f"{slurm.bin_dir}/{name}")
    sacct = f"{slurm.bin_dir}/sacct"
    script = bin_dir / "sacct"
    script.write_text(
        f'#!/bin/bash\nset -o pipefail\ncase "$*" in *--json*) {sacct} "$@" | '
        f'{{ head -c {after_bytes}; i=0; while [ ! -e {gate} ] && [ $i -lt 600 ]; '
        f'do sleep 0.2; i=$((i+1)); done; cat; }};; *) exec {sacct} "$@";; esac\n')
    script.chmod(0o755)
    return bin_dir, gate


def _database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _window_ids(slurm: SlurmDev) -> set[int]:
    """The raw ids of sacct's window as the sync asks for it (every state: held jobs too)."""
    days = settings.SLURM_SYNC_INITIAL_DAYS
    out = slurm.run("sacct", "-a", "-X", "-n", "-P", "-o", "JobIDRaw", "-M", slurm.cluster,
                    "-S", f"now-{days}days", "-E", "now", "-s", WINDOW_STATES)
    return {int(x) for x in out.split()}


def _stored_ids(cluster: Cluster) -> list[int]:
    return list(Job.objects.filter(cluster=cluster).values_list("job_id", flat=True))


@pytest.mark.django_db(transaction=True)
def test_a_sync_killed_mid_run_loses_and_duplicates_nothing(slurm, tmp_path):
    _require_postgresql()
    # Enough records that the stalled sacct (~150 KB) stops the sync halfway, even on a
    # fresh cluster: 40 tiny jobs.
    array = slurm.sbatch("bob", "--qos=high", "--time=2", "--array=0-39", "-J", "it-many",
                         "--wrap", "true")
    wait_for(lambda: len(tasks := slurm.array_task_ids(array)) == 40
             and slurm.finished_in_accounting(tasks), 120, "40 tiny jobs", every=2)
    expected = _window_ids(slurm)
    bin_dir, gate = _gated_sacct_bin(slurm, tmp_path)  # opened only after the kill
    cluster = slurm.new_cluster("cli", slurm_settings={"bin_dir": str(bin_dir), "timeout": 300})
    env = {**os.environ, "DATABASE_URL": _database_url(), "SLURM_SYNC_BATCH": "5",
           "DJANGO_SETTINGS_MODULE": "portal.settings"}
    worker = subprocess.Popen([sys.executable, "manage.py", "sync_cluster", slurm.cluster,
                               "--only", "jobs"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: Job.objects.filter(cluster=cluster).count() >= 5, 60,
                 "the first batches", every=0.2)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        gate.touch()  # the dead worker's sacct pipeline drains into a closed pipe and ends
    partial = Job.objects.filter(cluster=cluster).count()
    assert 0 < partial < len(expected)

    # The dead worker still holds the claim: a restart right away backs off ...
    cluster.slurm_settings = slurm.cli_settings(timeout=120)
    cluster.save(update_fields=["slurm_settings"])
    assert sync.sync_cluster(cluster).claimed is False
    # ... and takes over once the claim has expired.
    expired = timezone.now() - timedelta(seconds=settings.SLURM_SYNC_CLAIM_EXPIRY + 1)
    Cluster.objects.filter(pk=cluster.pk).update(sync_claimed_at=expired)
    result = sync.sync_cluster(Cluster.objects.get(pk=cluster.pk))
    assert result.claimed and result.jobs.error_count == 0
    stored = list(Job.objects.filter(cluster=cluster).values_list("job_id", flat=True))
    assert len(stored) == len(set(stored))  # none duplicated
    assert expected <= set(stored)  # none lost
    assert result.jobs.created == len(stored) - partial  # the first worker's rows were kept


def _pending_job_the_window_misses(cluster: Cluster, above: int) -> Job:
    """A job Beacon holds as pending that no window returns (as one purged from accounting
    would be), so the sync asks slurmdbd for it by id after the window: the call that meets
    the stopped slurmdbd on 24.11 and later, whose accounting exit codes need no second read.
    (Not on 22.05: its sacct --json answers an unknown id with an ``errors`` entry, "Nothing
    found", which fails the read; it meets slurmdbd through the exit codes anyway.)"""
    job_id = above + 1_000_000
    return Job.objects.create(cluster=cluster, job_id=job_id, display_id=str(job_id),
                              name="it-not-in-slurm", user_name="bob", account="nlp",
                              partition="gpu", state=Job.State.PENDING,
                              submit_time=timezone.now() - timedelta(minutes=5))


def _stop(slurm: SlurmDev, name: str) -> None:
    """Stop a Slurm daemon by its pid file, as ``slurm.sh down`` does, and wait for it."""
    pid = int(slurm.pidfile(name).read_text())
    assert Path(f"/proc/{pid}/comm").read_text().strip() == name
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists()
             or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", 30,
             f"{name} to stop", every=0.2)


def _require_postgresql() -> None:
    require(connection.vendor == "postgresql", "PostgreSQL",
            "export DATABASE_URL=postgres://postgres@127.0.0.1:5432/beacon")


def _in_thread(task, cluster: Cluster) -> tuple[threading.Thread, dict]:
    """Run the Celery task eagerly in a thread of its own (its own database connection)."""
    outcome: dict = {}

    def body() -> None:
        try:
            task.apply(args=[cluster.pk])
        except BaseException as exc:  # handed to the test
            outcome["exc"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread, outcome


def _countdowns(task, cluster: Cluster, first: Retry, more: int = 2) -> list[float]:
    """The countdown of the first failed attempt and of ``more`` retries after it."""
    countdowns = [first.when]
    for retries in range(1, more + 1):
        with pytest.raises(Retry) as retry:
            task.apply(args=[cluster.pk], retries=retries)
        countdowns.append(retry.value.when)
    return countdowns


def _assert_pages_stay_up_and_say_stale(cluster: Cluster, job: Job) -> None:
    staff = User.objects.get_or_create(username="ops", defaults={"is_staff": True})[0]
    client = Client()
    client.force_login(staff)
    for url in (reverse("jobs-detail", args=[cluster.name, job.job_id]),
                reverse("clusters-detail", args=[cluster.name]), reverse("jobs-list"),
                reverse("core-home")):
        page = client.get(url)
        assert page.status_code == 200, url
        assert "may be out of date" in page.content.decode(), url


def _queued_ids(slurm: SlurmDev) -> set[int]:
    """Jobs slurmctld still queues: sacct windows drop those never eligible (held)."""
    out = slurm.run("squeue", "-h", "-t", "PD", "-o", "%A")
    return {int(x) for x in out.split()}


def _assert_recovered(slurm: SlurmDev, cluster: Cluster, queued: set[int] = frozenset()) -> None:
    """The cluster's rows are sacct's window (plus the ``queued`` jobs the queue sync
    imported by id): every id, once; the error is cleared."""
    stored = _stored_ids(cluster)
    assert len(stored) == len(set(stored))  # none duplicated
    assert set(stored) == _window_ids(slurm) | queued  # none lost, none extra
    cluster.refresh_from_db()
    assert cluster.last_sync_error == "" and not cluster.is_stale
    assert cluster.sync_state == Cluster.SyncState.IDLE


@pytest.mark.django_db(transaction=True)
def test_slurmdbd_stopped_mid_sync_fails_clearly_and_recovery_matches_sacct(
        slurm, tmp_path, settings):
    _require_postgresql()
    array = slurm.sbatch("bob", "--qos=high", "--time=2", "--array=0-39", "-J", "it-dbd-many",
                         "--wrap", "true")
    # on 22.05 its exit code needs the text sacct (slurmdbd) after the window
    failed = slurm.sbatch("bob", "--qos=high", "--time=2", "-J", "it-dbd-exit3",
                          "--wrap", "exit 3")
    wait_for(lambda: len(ids := slurm.array_task_ids(array)) == 40
             and slurm.finished_in_accounting([*ids, failed]), 150, "41 tiny jobs", every=2)
    ours = [*slurm.array_task_ids(array), failed]
    expected = _window_ids(slurm)
    bin_dir, gate = _gated_sacct_bin(slurm, tmp_path)
    cluster = slurm.new_cluster("cli", slurm_settings={"bin_dir": str(bin_dir), "timeout": 120})
    # 22.05 reads exit codes from slurmdbd while the window streams; a newer release reads
    # nothing from slurmdbd after the window unless a job must be re-read by id
    phantom = None if slurm.release == "22.05" else _pending_job_the_window_misses(
        cluster, max(expected))
    stored = Job.objects.filter(cluster=cluster).exclude(job_id__gt=max(expected) + 999_999)
    settings.SLURM_SYNC_BATCH = 5
    thread, outcome = _in_thread(tasks.sync_cluster, cluster)
    try:
        wait_for(lambda: stored.count() >= 5, 90, "the first batches", every=0.2)
        _stop(slurm, "slurmdbd")  # while sacct's output is held back mid-stream
    finally:
        gate.touch()
        thread.join(180)
    try:
        retry = outcome.get("exc")
        assert isinstance(retry, Retry), outcome  # the task asks Celery for a retry
        assert isinstance(retry.exc, TransientAdapterError)
        message = str(retry.exc)
        assert message.startswith("sacct failed"), message
        assert any(word in message.lower() for word in (
            "slurmdbd", "database", "connection refused", "persistent connection")), message
        if phantom is None:  # the exit-code read failed in the middle of the window
            assert 0 < stored.count() < len(expected)
        else:  # the window was read whole before the by-id read met the stopped slurmdbd
            assert stored.count() >= len(expected)
        run = TaskRun.objects.get(kind="slurm.sync_jobs", status=TaskRun.Status.FAILED)
        assert message in run.error
        cluster.refresh_from_db()
        assert message in cluster.last_sync_error and cluster.sync_state == "idle"
        assert _countdowns(tasks.sync_cluster, cluster, retry) == [1, 2, 4]  # backoff
        _assert_pages_stay_up_and_say_stale(cluster, stored[0])
    finally:
        slurm.start()
    tasks.sync_cluster.apply(args=[cluster.pk], retries=3)  # the retry, now that it is back
    assert TaskRun.objects.filter(kind="slurm.sync_jobs").latest("pk").status == "succeeded"
    if phantom is not None:  # Slurm has no such job: the comparison is about the others
        phantom.delete()
    _assert_recovered(slurm, cluster)
    slurm.assert_matches_sacct(ours)


@pytest.mark.django_db(transaction=True)
def test_slurmctld_stopped_mid_queue_sync_fails_clearly_and_recovery_matches_sacct(
        slurm, tmp_path, settings):
    _require_postgresql()
    # held jobs: only the queue knows them, so the queue sync imports them by id (sacct),
    # then asks slurmctld for GPU bindings
    held = [slurm.sbatch("bob", "--hold", "--time=2", "-J", f"it-ctld-held-{i}",
                         "--wrap", "true") for i in range(24)]
    try:
        wait_for(lambda: set(held) <= set(slurm.sacct_text(held)), 90,
                 "the held jobs in accounting", every=2)
        cluster = slurm.new_cluster("cli")
        sync.sync_cluster(cluster)  # a first job sync while all is well
        Job.objects.filter(cluster=cluster, job_id__in=held).delete()  # as if not yet seen
        # half of what sacct prints for the held jobs (records grow with the release)
        size = len(slurm.run("sacct", "-a", "--json", "-j", ",".join(map(str, held))))
        bin_dir, gate = _gated_sacct_bin(slurm, tmp_path, after_bytes=size // 2)
        cluster.slurm_settings = slurm.cli_settings(bin_dir=str(bin_dir))
        cluster.save(update_fields=["slurm_settings"])
        rest = slurm.client("rest", timeout=10)  # its token comes from slurmctld: while it is up
        settings.SLURM_SYNC_BATCH = 5
        thread, outcome = _in_thread(tasks.sync_queue, cluster)
        try:
            wait_for(lambda: Job.objects.filter(job_id__in=held).count() >= 5, 90,
                     "the first held jobs imported", every=0.2)
            _stop(slurm, "slurmctld")
        finally:
            gate.touch()
            thread.join(180)
        try:
            retry = outcome.get("exc")
            assert isinstance(retry, Retry), outcome
            assert isinstance(retry.exc, TransientAdapterError)
            assert "Unable to contact slurm controller" in str(retry.exc)
            assert str(retry.exc).startswith("scontrol failed")  # the GPU bindings, last
            run = TaskRun.objects.get(kind="slurm.sync_queue", status=TaskRun.Status.FAILED)
            assert "Unable to contact slurm controller" in run.error
            assert Job.objects.filter(job_id__in=held).count() == len(held)  # kept
            assert _countdowns(tasks.sync_queue, cluster, retry) == [1, 2, 4]
            # the job sync fails at its first call (sdiag), with the same clear message
            with pytest.raises(Retry) as jobs_retry:
                tasks.sync_cluster.apply(args=[cluster.pk])
            assert "Unable to contact slurm controller" in str(jobs_retry.value.exc)
            cluster.refresh_from_db()
            assert "Unable to contact slurm controller" in cluster.last_sync_error
            assert cluster.sync_state == Cluster.SyncState.IDLE
            with pytest.raises(TransientAdapterError):
                rest.nodes()
            _assert_pages_stay_up_and_say_stale(cluster, Job.objects.get(job_id=held[0]))
        finally:
            slurm.start()
        tasks.sync_queue.apply(args=[cluster.pk], retries=3)
        tasks.sync_cluster.apply(args=[cluster.pk])
        _assert_recovered(slurm, cluster, queued=_queued_ids(slurm))
        assert set(held) <= _queued_ids(slurm)
        assert set(Job.objects.filter(job_id__in=held).values_list("state", flat=True)) == {
            "PENDING"}
    finally:
        slurm.run("scancel", *map(str, held), check=False)
