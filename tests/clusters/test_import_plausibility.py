"""Plausibility at the door (issue 25): implausible sacct records are stored flagged,
reported, and checked again when they change; an admin's acceptance survives re-imports."""

from __future__ import annotations

import copy
import io
import json
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from apps.clusters.adapters.slurm.parse_cluster import parse_sinfo_json
from apps.clusters.importer import import_sacct
from apps.clusters.models import Cluster, Node
from apps.core.models import TaskRun
from apps.jobs import plausibility
from apps.jobs.models import Job
from tests.fake import FIXTURES

pytestmark = pytest.mark.django_db

WINDOW = json.loads((FIXTURES / "sacct_window.json").read_text())
TEMPLATE = next(j for j in WINDOW["jobs"] if j["job_id"] == 9)  # a finished 2-GPU job
SUBMIT = int(datetime(2026, 11, 10, 9, 0, tzinfo=UTC).timestamp())
Y2400 = int(datetime(2400, 1, 1, tzinfo=UTC).timestamp())
TEMPLATE_TIME = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
FLAGGED = "stored flagged, kept out of chargeback and SLOs until an admin accepts it"


def record(job_id: int, gpus: int = 2, start: int = SUBMIT + 60, end: int = SUBMIT + 3660,
           **fields) -> dict:
    """A sacct --json record (the recorded 22.05 shape) of a finished job on devcluster."""
    rec = copy.deepcopy(TEMPLATE)
    rec.update(job_id=job_id, **fields)
    rec["time"].update(submission=SUBMIT, eligible=SUBMIT, start=start, end=end, limit=120)
    rec["tres"]["allocated"] = [
        {"type": "cpu", "name": None, "id": 1, "count": 8},
        {"type": "node", "name": None, "id": 4, "count": 1},
        {"type": "gres", "name": "gpu", "id": 1001, "count": gpus},
        {"type": "gres", "name": "gpu:h100", "id": 1002, "count": gpus}]
    return rec


def dump(*records: dict) -> bytes:
    return json.dumps({"meta": WINDOW["meta"], "errors": [], "jobs": list(records)}).encode()


@pytest.fixture
def cluster() -> Cluster:
    cluster = Cluster.objects.create(name="devcluster")
    for i in range(16):  # 16 nodes of 8 GPUs: 128 GPUs
        Node.objects.create(cluster=cluster, name=f"gpu{i:02}", gpu_type="h100", gpu_count=8)
    return cluster


def _import(cluster: Cluster, *records: dict):
    return import_sacct(cluster, io.BytesIO(dump(*records)))


def test_implausible_records_are_stored_flagged_and_reported(cluster):
    result = _import(cluster, record(1), record(2, gpus=10**12),
                     record(3, start=SUBMIT + 7200, end=SUBMIT + 3600),
                     record(4, start=Y2400, end=Y2400 + 60))
    assert (result.created, result.error_count, result.implausible) == (4, 0, 3)
    assert result.flagged == [
        f"job 2: claims 1,000,000,000,000 GPUs; the cluster has 128 — {FLAGGED}",
        "job 3: ends before it starts (end 2026-11-10 10:00, start 2026-11-10 11:00 UTC) — "
        f"{FLAGGED}",
        f"job 4: starts in 2400, centuries from now; ends in 2400, centuries from now — {FLAGGED}"]
    rows = {j.job_id: j for j in Job.objects.all()}
    assert rows[1].implausible == [] and not rows[1].is_held_back
    assert rows[2].implausible == ["claims 1,000,000,000,000 GPUs; the cluster has 128"]
    assert rows[2].is_held_back and rows[2].implausible_accepted_at is None
    # the claim is kept in the reasons and the TRES text; the count column holds a clamp
    assert rows[2].gpus == 2**31 - 1 and "gres/gpu=1000000000000" in rows[2].tres_alloc
    assert rows[2].gpu_equivalent == 1e12
    assert set(Job.objects.countable().values_list("job_id", flat=True)) == {1}
    assert set(Job.objects.held_back().values_list("job_id", flat=True)) == {2, 3, 4}
    run = TaskRun.objects.get(kind="slurm.import_sacct")
    assert run.stats["implausible"] == 3 and len(run.stats["implausible_lines"]) == 3


def test_without_synced_nodes_only_bounds_above_any_cluster_apply():
    bare = Cluster.objects.create(name="devcluster")
    result = _import(bare, record(1, gpus=4096), record(2, gpus=10**12))
    assert result.implausible == 1
    assert Job.objects.get(job_id=2).implausible == [
        "claims 1,000,000,000,000 GPUs; more than any cluster has (this cluster's GPUs are "
        "not known: none of its synced nodes reports them)"]


def test_flagged_is_not_rejected_the_command_lists_them_and_exits_0(cluster, tmp_path):
    path = tmp_path / "dump.json"
    path.write_bytes(dump(record(1), record(2, gpus=10**12)))
    out, err = io.StringIO(), io.StringIO()
    call_command("import_sacct", str(path), cluster="devcluster", stdout=out, stderr=err)
    text = out.getvalue()
    assert "created 2, updated 0, skipped 0, errors 0" in text
    assert "implausible: 1 record(s) stored flagged (not rejected" in text
    assert f"flagged: job 2: claims 1,000,000,000,000 GPUs; the cluster has 128 — {FLAGGED}" \
        in text
    assert err.getvalue() == ""


def _accept(job_id: int) -> User:
    admin = User.objects.create_user(f"admin{job_id}", is_staff=True)
    job = Job.objects.select_related("cluster").get(job_id=job_id)
    assert plausibility.accept(job, admin, "two racks were moved to another cluster since")
    return admin


def test_a_record_reimported_unchanged_keeps_its_acceptance(cluster):
    _import(cluster, record(2, gpus=200))
    admin = _accept(2)
    again = _import(cluster, record(2, gpus=200))
    assert (again.skipped, again.implausible) == (1, 0)
    job = Job.objects.get(job_id=2)
    assert job.implausible_accepted_by == admin and not job.is_held_back


def test_a_changed_record_with_the_same_reasons_stays_accepted(cluster):
    _import(cluster, record(2, gpus=200))
    admin = _accept(2)
    renamed = _import(cluster, record(2, gpus=200, name="renamed"))
    assert (renamed.updated, renamed.implausible) == (1, 0)
    job = Job.objects.get(job_id=2)
    assert (job.name, job.implausible_accepted_by) == ("renamed", admin)


def test_a_changed_record_whose_reasons_change_must_be_accepted_again(cluster):
    _import(cluster, record(2, gpus=200))
    _accept(2)
    changed = _import(cluster, record(2, gpus=300))
    assert changed.flagged == [f"job 2: claims 300 GPUs; the cluster has 128 — {FLAGGED}"]
    job = Job.objects.get(job_id=2)
    assert job.is_held_back and job.implausible_accepted_by is None


def test_a_corrected_record_is_plausible_again(cluster):
    _import(cluster, record(2, gpus=200))
    _accept(2)
    _import(cluster, record(2, gpus=8))
    job = Job.objects.get(job_id=2)
    assert (job.implausible, job.implausible_accepted_at, job.gpus) == ([], None, 8)


def test_accepting_twice_or_a_plausible_record_does_nothing(cluster):
    _import(cluster, record(1), record(2, gpus=200))
    admin = _accept(2)
    job = Job.objects.select_related("cluster").get(job_id=2)
    assert not plausibility.accept(job, admin, "again")
    assert not plausibility.accept(Job.objects.select_related("cluster").get(job_id=1), admin,
                                   "nothing to accept")


def test_a_record_that_cannot_be_right_cannot_be_accepted(cluster):
    _import(cluster, record(2, gpus=10**12))
    job = Job.objects.select_related("cluster").get(job_id=2)
    admin = User.objects.create_user("admin", is_staff=True)
    with pytest.raises(plausibility.NotAcceptable, match="claims more than any cluster has"):
        plausibility.accept(job, admin, "looks fine to me")
    assert Job.objects.get(job_id=2).is_held_back


# --- Real recordings are never flagged -------------------------------------------------------

RECORDINGS = sorted(
    p for p in FIXTURES.rglob("*.json")
    if p.name.startswith("sacct_") or (p.parent.name == "rest" and p.name.startswith("dbv")
                                       and "_job" in p.name))


def _cluster_as_recorded(path) -> Cluster:
    """The recording's cluster with the nodes its release's sinfo shows (its capacity)."""
    doc = json.loads(path.read_text())
    name = next((j.get("cluster") for j in doc.get("jobs", []) if j.get("cluster")), "dev")
    cluster = Cluster.objects.create(name=name)
    release = next((d for d in path.parents if (d / "sinfo.json").exists()), FIXTURES)
    for node in parse_sinfo_json(json.loads((release / "sinfo.json").read_text())):
        Node.objects.get_or_create(cluster=cluster, name=node.name, defaults={
            "gpu_count": node.gpu_count, "gpu_types": dict(node.gpu_types)})
    return cluster


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_no_record_recorded_on_a_real_slurm_is_flagged(path):
    cluster = _cluster_as_recorded(path)
    assert cluster.capacity().gpus  # the check ran against the recorded cluster's GPUs
    with open(path, "rb") as stream:
        result = import_sacct(cluster, stream)
    assert result.created > 0 and result.implausible == 0, result.flagged


# --- Records stored before the check existed ------------------------------------------------


def test_records_stored_before_the_check_are_checked_by_the_command(cluster):
    _import(cluster, record(1), record(2, gpus=200), record(3, gpus=300))
    Job.objects.update(implausible=[])  # as an older Beacon stored them
    Job.objects.filter(job_id=3).update(implausible=["an older wording"],
                                        implausible_accepted_at=TEMPLATE_TIME)
    out = io.StringIO()
    call_command("check_plausibility", cluster="devcluster", stdout=out)
    assert out.getvalue() == "devcluster: 3 checked, 1 flagged, 0 cleared\n"
    rows = {j.job_id: j for j in Job.objects.all()}
    assert rows[2].implausible == ["claims 200 GPUs; the cluster has 128"]
    assert rows[3].implausible == ["an older wording"]  # still flagged: kept, and accepted
    assert rows[3].implausible_accepted_at == TEMPLATE_TIME
    again = io.StringIO()
    call_command("check_plausibility", stdout=again)
    assert again.getvalue() == "devcluster: 3 checked, 0 flagged, 0 cleared\n"
    run = TaskRun.objects.filter(kind="jobs.check_plausibility").first()
    assert run.stats == {"checked": 3, "flagged": 0, "cleared": 0}


def test_a_flag_that_no_longer_holds_is_cleared_once_the_nodes_are_synced():
    bare = Cluster.objects.create(name="devcluster")
    Node.objects.create(cluster=bare, name="gpu01", gpu_count=8)
    _import(bare, record(2, gpus=16))
    assert Job.objects.get(job_id=2).is_held_back
    Node.objects.create(cluster=bare, name="gpu02", gpu_count=8)  # the node sync caught up
    assert plausibility.check_stored(bare) == {"checked": 1, "flagged": 0, "cleared": 1}
    assert Job.objects.get(job_id=2).implausible == []
