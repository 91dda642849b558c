"""import_sacct and the shared upsert: the recorded sacct JSON into Job rows."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from apps.accounts.models import Team
from apps.clusters.adapters.slurm import ACTIVE_STATES
from apps.clusters.adapters.slurm import parse as slurm_parse
from apps.clusters.importer import JobImporter, close_gpu_intervals, import_sacct
from apps.clusters.models import Cluster, Node, SlurmAccount
from apps.core.models import TaskRun
from apps.jobs.models import Job, JobGpu
from tests.fake import FIXTURES, fixture_jobs

pytestmark = pytest.mark.django_db

WINDOW = (FIXTURES / "sacct_window.json").read_bytes()
EXIT_CODES = slurm_parse.parse_exit_codes((FIXTURES / "sacct_exitcodes.txt").read_text())


@pytest.fixture
def cluster() -> Cluster:
    return Cluster.objects.create(name="devcluster")


def _import(cluster: Cluster, data: bytes = WINDOW, **kwargs):
    return import_sacct(cluster, io.BytesIO(data), **kwargs)


def _raw_jobs() -> list[dict]:
    return json.loads(WINDOW)["jobs"]


def _file(jobs: list[dict]) -> bytes:
    return json.dumps({"meta": json.loads(WINDOW)["meta"], "errors": [], "jobs": jobs}).encode()


def test_it_reproduces_sacct_field_by_field(cluster):
    result = _import(cluster, exit_codes=EXIT_CODES)
    assert (result.created, result.updated, result.error_count) == (30, 0, 0)
    for job in fixture_jobs():
        row = Job.objects.get(cluster=cluster, job_id=job.job_id)
        assert (row.display_id, row.state, row.gpus, row.submit_time, row.start_time,
                row.end_time, row.nodes) == (job.display_id, job.state, job.gpus,
                                             job.submit_time, job.start_time, job.end_time,
                                             job.nodes)
        if job.job_id in EXIT_CODES and job.state not in ACTIVE_STATES:
            assert row.exit_text == str(EXIT_CODES[job.job_id])


def test_a_second_import_writes_nothing(cluster):
    _import(cluster)
    before = dict(Job.objects.values_list("job_id", "updated_at"))
    again = _import(cluster)
    assert (again.created, again.updated, again.skipped) == (0, 0, 30)
    assert dict(Job.objects.values_list("job_id", "updated_at")) == before


def test_a_changed_record_is_updated(cluster):
    _import(cluster)
    jobs = _raw_jobs()
    running = next(j for j in jobs if j["job_id"] == 2)
    running["state"]["current"] = "COMPLETED"
    running["time"]["end"] = running["time"]["start"] + 600
    result = _import(cluster, _file(jobs))
    assert (result.updated, result.skipped) == (1, 29)
    assert Job.objects.get(job_id=2).state == "COMPLETED"
    assert result.finished_pks == [Job.objects.get(job_id=2).pk]


def test_exit_codes_the_json_gets_wrong(cluster):
    _import(cluster)
    assert Job.objects.get(job_id=5).exit_code is None  # JSON said SUCCESS/0 for exit 3
    _import(cluster, exit_codes=EXIT_CODES)
    assert Job.objects.get(job_id=5).exit_text == "3:0"
    _import(cluster)  # a later import without the fix source keeps what we know
    assert Job.objects.get(job_id=5).exit_text == "3:0"
    assert Job.objects.get(job_id=6).exit_text == "0:9"  # signals are right in the JSON


def test_users_and_teams_are_linked_through_names_and_account_rows(cluster):
    dave = User.objects.create_user("dave")
    vision = Team.objects.create(slug="vision", name="Vision")
    SlurmAccount.objects.create(cluster=cluster, name="vision", team=vision)
    _import(cluster)
    job = Job.objects.get(job_id=5)  # dave's bad-config in account vision
    assert (job.user, job.team) == (dave, vision)
    assert Job.objects.get(job_id=1).user is None  # alice has no portal account
    assert Job.objects.get(job_id=1).team is None  # account nlp is not mapped


def test_a_requeued_job_keeps_its_latest_instance(cluster):
    _import(cluster, (FIXTURES / "sacct_by_id.json").read_bytes())
    assert Job.objects.get(job_id=29).state == "PENDING"
    again = _import(cluster)  # the window only has the older REQUEUED instance
    assert Job.objects.get(job_id=29).state == "PENDING"
    assert again.skipped >= 1


def test_the_pending_array_remainder_becomes_the_last_task(cluster):
    _import(cluster, (FIXTURES / "sacct_by_id.json").read_bytes())
    assert Job.objects.get(job_id=28).display_id == "28_[2-9]"
    jobs = [j for j in json.loads((FIXTURES / "sacct_by_id.json").read_text())["jobs"]
            if j["job_id"] == 28]
    jobs[0]["array"].update(task_id=9, task=None)
    jobs[0]["state"]["current"] = "RUNNING"
    jobs[0]["time"]["start"] = jobs[0]["time"]["submission"] + 60
    _import(cluster, _file(jobs))
    row = Job.objects.get(job_id=28)
    assert (row.display_id, row.array_task_id, row.array_tasks_pending) == ("28_9", 9, "")


def test_bad_records_are_reported_and_good_ones_kept(cluster):
    jobs = _raw_jobs()
    jobs[3].pop("job_id")
    jobs[7]["time"]["submission"] = 0
    result = _import(cluster, _file(jobs))
    assert result.created == 28 and result.error_count == 2
    assert result.errors[0].startswith("record #3 (job id unknown): missing field 'job_id'")
    assert result.errors[1].startswith(f"record #7 (job {jobs[7]['job_id']})")
    run = TaskRun.objects.get(kind="slurm.import_sacct")
    assert run.status == TaskRun.Status.SUCCEEDED and run.stats["errors"] == 2


def test_a_truncated_file_keeps_the_complete_records(cluster):
    result = _import(cluster, WINDOW[: len(WINDOW) // 2])
    assert result.created > 0 and result.error_count == 1
    assert Job.objects.count() == result.created
    assert "invalid JSON" in result.errors[0]


def test_a_record_the_database_refuses_is_reported_alone(cluster):
    jobs = _raw_jobs()
    jobs[2]["time"]["limit"] = 1e30  # no database column holds this
    importer = JobImporter(cluster, batch_size=10)
    result = importer.run(slurm_parse.iter_sacct_json(io.BytesIO(_file(jobs))))
    assert result.created == 29 and result.error_count == 1
    assert result.errors[0].startswith(f"job {jobs[2]['job_id']} ")
    assert not Job.objects.filter(job_id=jobs[2]["job_id"]).exists()


def test_hostile_text_is_stored_verbatim_and_long_text_cut_with_a_warning(cluster):
    jobs = _raw_jobs()
    jobs[0]["name"] = "<script>alert(1)</script>" + "x" * 600
    result = _import(cluster, _file(jobs))
    row = Job.objects.get(job_id=jobs[0]["job_id"])
    assert row.name.startswith("<script>alert(1)</script>") and len(row.name) == 512
    assert result.warnings == [f"job {jobs[0]['job_id']}: field name cut from 625 to 512 "
                               "characters"]
    assert Job.objects.get(job_id=30).comment == "'; DROP TABLE jobs; -- <b>bold</b>"


def test_records_of_other_clusters_are_skipped_with_a_warning(cluster):
    jobs = _raw_jobs()[:3]
    jobs[1]["cluster"] = "elsewhere"
    result = _import(cluster, _file(jobs))
    assert (result.created, result.skipped) == (2, 1)
    assert "1 records of cluster 'elsewhere' skipped" in result.warnings[0]


def test_shards_count_as_a_fraction_of_a_gpu(cluster):
    cluster.gpu_types = [{"name": "h100", "shards_per_gpu": 4}]
    cluster.save()
    jobs = _raw_jobs()[:1]
    jobs[0]["state"]["current"] = "COMPLETED"
    submitted = jobs[0]["time"]["submission"]
    jobs[0]["time"].update(start=submitted, end=submitted + 5)
    jobs[0]["tres"]["allocated"] = [{"type": "gres", "name": "shard", "id": 1010, "count": 2},
                                    {"type": "gres", "name": "gpu", "id": 1001, "count": 1}]
    _import(cluster, _file(jobs))
    row = Job.objects.get(job_id=jobs[0]["job_id"])
    assert (row.gpus, row.gpu_shards, row.gpu_equivalent) == (1, 2, 1.5)


def _finished_with(jobs: list[dict], tres: list[dict]) -> list[dict]:
    jobs[0]["state"]["current"] = "COMPLETED"
    submitted = jobs[0]["time"]["submission"]
    jobs[0]["time"].update(start=submitted, end=submitted + 5)
    jobs[0]["tres"]["allocated"] = tres
    return jobs


def test_mig_slices_count_by_their_fraction_of_the_parent_gpu(cluster):
    jobs = _finished_with(_raw_jobs()[:1], [
        {"type": "gres", "name": "gpu", "id": 1001, "count": 3},
        {"type": "gres", "name": "gpu:a100_3g.20gb", "id": 1003, "count": 2},
        {"type": "gres", "name": "gpu:a100_1g.5gb", "id": 1004, "count": 1}])
    _import(cluster, _file(jobs))
    row = Job.objects.get(job_id=jobs[0]["job_id"])
    # Slurm's device count stays (reconciliation and quotas count gres/gpu devices)
    assert row.gpus == 3
    assert row.gpu_equivalent == pytest.approx(1.0)  # 3/7 + 3/7 + 1/7 of one A100
    assert row.gpu_types == {"a100": 1}
    assert "gres/gpu:a100_1g.5gb=1" in row.tres_alloc


def test_a_clusters_gpu_types_name_the_parent_of_a_bare_profile(cluster):
    cluster.gpu_types = [{"name": "h100", "shards_per_gpu": 1},
                         {"name": "1g.10gb", "parent": "h100"},
                         {"name": "3g.39gb", "parent": "a100", "fraction": "3/7"}]
    cluster.full_clean()
    cluster.save()
    jobs = _finished_with(_raw_jobs()[:1], [
        {"type": "gres", "name": "gpu", "id": 1001, "count": 4},
        {"type": "gres", "name": "gpu:h100", "id": 1002, "count": 1},
        {"type": "gres", "name": "gpu:1g.10gb", "id": 1003, "count": 2},
        {"type": "gres", "name": "gpu:3g.39gb", "id": 1004, "count": 1}])
    _import(cluster, _file(jobs))
    row = Job.objects.get(job_id=jobs[0]["job_id"])
    assert row.gpu_equivalent == pytest.approx(1 + 2 / 7 + 3 / 7)
    assert row.gpu_types == pytest.approx({"h100": 1 + 2 / 7, "a100": 3 / 7})


def test_an_unknown_bare_profile_keeps_its_own_name_as_the_model(cluster):
    jobs = _finished_with(_raw_jobs()[:1], [{"type": "gres", "name": "gpu:1g.10gb", "id": 3,
                                            "count": 1}])
    _import(cluster, _file(jobs))
    row = Job.objects.get(job_id=jobs[0]["job_id"])
    assert (row.gpus, row.gpu_types) == (1, pytest.approx({"1g.10gb": 1 / 7}))
    assert row.gpu_equivalent == pytest.approx(1 / 7)


@pytest.mark.parametrize("gpu_types", [
    [{"name": "1g.10gb", "parent": "h100", "fraction": "8/7"}],
    [{"name": "1g.10gb", "fraction": "one seventh"}],
    {"name": "h100"},
])
def test_a_bad_gpu_type_list_is_refused_with_a_message(cluster, gpu_types):
    cluster.gpu_types = gpu_types
    with pytest.raises(ValidationError) as caught:
        cluster.full_clean()
    assert "gpu_types" in caught.value.message_dict


def test_finishing_closes_the_jobs_gpu_intervals_at_its_end(cluster):
    _import(cluster)
    job = Job.objects.get(job_id=2)  # running in the recording
    node = Node.objects.create(cluster=cluster, name="gpu03")
    JobGpu.objects.create(job=job, node=node, gpu_index=0, start=job.start_time)
    end = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    Job.objects.filter(pk=job.pk).update(end_time=end, state="COMPLETED")
    assert close_gpu_intervals([job.pk]) == 1
    assert JobGpu.objects.get().end == end


def test_an_older_dump_never_moves_a_job_backwards(cluster):
    jobs = _raw_jobs()
    running = next(j for j in jobs if j["job_id"] == 2)
    running["state"]["current"] = "COMPLETED"
    running["time"]["end"] = running["time"]["start"] + 600
    _import(cluster, _file(jobs))
    again = _import(cluster)  # the recording, where job 2 still runs
    assert Job.objects.get(job_id=2).state == "COMPLETED"
    assert (again.updated, again.skipped) == (0, 30)


@pytest.mark.parametrize("batch_size", [1, 3, 1000])
def test_batches_give_the_same_rows_whatever_their_size(cluster, batch_size):
    """The range of stored ids (which spares the lookup of a batch of new jobs) and the
    user cache must not change what a batch sees: a requeued job's two instances in
    different batches, and a job already stored, come out as with one batch."""
    alice = User.objects.create_user("alice")
    _import(cluster, _file([j for j in _raw_jobs() if j["job_id"] in (1, 2)]))
    data = (FIXTURES / "sacct_by_id.json").read_bytes()
    importer = JobImporter(cluster, batch_size=batch_size)
    result = importer.run(slurm_parse.iter_sacct_json(io.BytesIO(data)))
    stored = {j.job_id: j for j in Job.objects.filter(cluster=cluster)}
    assert stored[29].state == "PENDING"  # the later instance, whichever batch it came in
    assert result.created == len(stored) - 2
    assert stored[1].user == alice  # job 1 is alice's
    # what one big batch would write is what is stored: nothing to change
    again = JobImporter(cluster, batch_size=1000).run(
        slurm_parse.iter_sacct_json(io.BytesIO(data)))
    assert (again.created, again.updated) == (0, 0)


def test_rows_stored_behind_the_importers_back_are_upserted_not_lost(cluster):
    """The importer reads the stored id range once; jobs another writer stores after that
    make the fast path (a plain COPY) fail on the unique key, and the batch goes through
    the upsert row by row instead: every row ends as the newer record says."""
    importer = JobImporter(cluster, batch_size=1000)
    assert importer._existing([1, 2]) == {}  # reads the range: nothing stored yet
    _import(cluster, _file([j for j in _raw_jobs() if j["job_id"] in (1, 2)]))
    jobs = _raw_jobs()
    running = next(j for j in jobs if j["job_id"] == 2)
    running["state"]["current"] = "COMPLETED"
    running["time"]["end"] = running["time"]["start"] + 600
    result = importer.run(slurm_parse.iter_sacct_json(io.BytesIO(_file(jobs))))
    assert result.error_count == 0 and result.created + result.updated == 30
    assert Job.objects.filter(cluster=cluster).count() == 30
    assert Job.objects.get(cluster=cluster, job_id=2).state == "COMPLETED"


def test_the_copy_path_writes_every_field_the_importer_syncs():
    """PostgreSQL's COPY writes ``upsert.COLUMNS`` only: a synced field missing there is
    stored by SQLite's path and silently dropped by PostgreSQL's (gpu_source once was)."""
    from apps.clusters.importer import SYNCED_FIELDS
    from apps.clusters.upsert import COLUMNS

    synced = {Job._meta.get_field(name).attname for name in SYNCED_FIELDS}
    assert synced - set(COLUMNS) == set()
