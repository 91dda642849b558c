"""What a job asked for (issue 26), read from JSON as each Slurm release prints it: the
recorded sacct/squeue/slurmrestd documents of 22.05 (v0.0.37, v0.0.38), 24.11 (v0.0.40 to
v0.0.42) and 26.05 (v0.0.42 to v0.0.45), stored on the job and shown on a pending job's page."""

from __future__ import annotations

import copy
import io
import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.clusters.adapters.slurm import ResourceRequest, requested
from apps.clusters.adapters.slurm.values import job_state
from apps.clusters.importer import import_sacct
from apps.clusters.live_fields import apply_live_fields
from apps.jobs.models import Job
from tests.conftest import make_job
from tests.fake import FIXTURES

# 24.11 and 26.05's big_pending (job 22): -N4 --gres=gpu:8 --time=10, pending on Resources,
# 2000 MB per CPU (the site's DefMemPerCPU), one CPU per node
BIG = ResourceRequest(gpus=32, cpus=4, memory_mb=8000, nodes=4, time_limit_min=10,
                      tres="cpu=4,mem=8000M,node=4,billing=261,gres/gpu=32")
# 22.05's job 1: --gres=gpu:h100:8 -c 16 --mem=64G --time=30
ONE = ResourceRequest(gpus=8, cpus=16, memory_mb=65536, nodes=1, time_limit_min=30)
# 22.05's array 28, its pending remainder: --gres=gpu:1 --time=10
ARRAY = ResourceRequest(gpus=1, cpus=1, memory_mb=2000, nodes=1, time_limit_min=10,
                        tres="cpu=1,mem=2000M,node=1,billing=9,gres/gpu=1")

SACCT = "sacct"  # accounting's shape: sacct --json, /slurmdb/vX/...
CTLD = "slurmctld"  # slurmctld's: squeue --json, /slurm/vX/...
CASES = [
    ("sacct_window.json", SACCT, 1, ONE),  # 22.05 CLI, v0.0.38
    ("squeue.json", CTLD, 1, ONE),
    ("rest/v0.0.37_job_28.json", CTLD, 28, ARRAY),
    ("rest/v0.0.38_job_28.json", CTLD, 28, ARRAY),
    ("rest/dbv0.0.37_job_28.json", SACCT, 28, ARRAY),
    ("rest/dbv0.0.38_job_28.json", SACCT, 28, ARRAY),
    ("24.11/sacct_by_id.json", SACCT, 22, BIG),  # CLI, v0.0.42
    ("24.11/squeue.json", CTLD, 22, BIG),
    *[(f"24.11/rest/v0.0.{v}_jobs.json", CTLD, 22, BIG) for v in (40, 41, 42)],
    *[(f"24.11/rest/dbv0.0.{v}_jobs.json", SACCT, 22, BIG) for v in (40, 41, 42)],
    ("26.05/sacct_by_id.json", SACCT, 22, BIG),  # CLI, v0.0.45
    ("26.05/squeue.json", CTLD, 22, BIG),
    *[(f"26.05/rest/v0.0.{v}_jobs.json", CTLD, 22, BIG) for v in (42, 43, 44, 45)],
    *[(f"26.05/rest/dbv0.0.{v}_jobs.json", SACCT, 22, BIG) for v in (42, 43, 44, 45)],
]


def _pending(path: str, job_id: int) -> dict:
    """The pending record of ``job_id`` in a recorded document."""
    for rec in json.loads((FIXTURES / path).read_text())["jobs"]:
        state = rec["state"]["current"] if "state" in rec else rec["job_state"]
        if rec["job_id"] == job_id and job_state(state) == "PENDING":
            return rec
    raise AssertionError(f"no pending job {job_id} in {path}")


def _read(kind: str, rec: dict) -> ResourceRequest:
    return requested.from_sacct(rec) if kind == SACCT else requested.from_slurmctld(rec)


def _without_tres(request: ResourceRequest) -> tuple:
    return (request.gpus, request.cpus, request.memory_mb, request.nodes,
            request.time_limit_min)


@pytest.mark.parametrize(("path", "kind", "job_id", "expected"), CASES)
def test_every_release_and_version_says_what_a_pending_job_asked_for(path, kind, job_id,
                                                                      expected):
    found = _read(kind, _pending(path, job_id))
    assert _without_tres(found) == _without_tres(expected)
    assert found.is_known and "gres/gpu=" in found.tres


# --- The other request fields, where the TRES totals are missing ------------------------------


def test_accounting_without_its_tres_list_reads_required_and_the_time():
    """v0.0.39+: ``required.memory_per_cpu`` (a number object) times the CPUs."""
    rec = _pending("24.11/sacct_by_id.json", 22)
    del rec["tres"]["requested"]
    assert _without_tres(requested.from_sacct(rec)) == (None, 4, 8000, None, 10)


@pytest.mark.parametrize(("memory", "expected"), [
    (65536, 65536),  # --mem=64G: per node, one node
    ((1 << 63) | 4000, 4000 * 16),  # --mem-per-cpu=4000: Slurm's MEM_PER_CPU bit set
])
def test_22_05_required_memory_is_per_node_or_per_cpu(memory, expected):
    rec = _pending("sacct_window.json", 1)
    rec["tres"]["requested"] = [t for t in rec["tres"]["requested"] if t["type"] != "mem"]
    rec["required"]["memory"] = memory
    assert requested.from_sacct(rec).memory_mb == expected


@pytest.mark.parametrize(("path", "expected"), [
    ("squeue.json", (8, 16, 65536, 1, 30)),  # 22.05: plain numbers, tres_per_node gres:gpu:h100:8
    ("24.11/squeue.json", (32, 4, 8000, 4, 10)),  # number objects, gres/gpu:8 on 4 nodes
    ("26.05/squeue.json", (32, 4, 8000, 4, 10)),
])
def test_slurmctld_without_tres_req_str_reads_its_other_fields(path, expected):
    rec = _pending(path, 1 if path == "squeue.json" else 22)
    rec["tres_req_str"] = ""
    assert _without_tres(requested.from_slurmctld(rec)) == expected


def test_a_site_that_accounts_no_gpus_still_says_what_was_asked():
    """24.11 with no gres/gpu in AccountingStorageTRES: the command line (accounting) and
    tres_per_* (slurmctld) say it."""
    folder = "24.11/no_gpu_accounting"
    sacct = {r["job_id"]: requested.from_sacct(r).gpus
             for r in json.loads((FIXTURES / folder / "sacct_window.json").read_text())["jobs"]}
    # --gres=gpu:2, --gpus=4, --gres=gpu:a100:2, two models 1+2, -N2 --gres=gpu:2, 2 x 1 per task
    assert sacct == {1: 2, 2: 4, 3: 2, 4: 3, 5: 4, 6: 2}
    queue = {r["job_id"]: requested.from_slurmctld(r).gpus
             for r in json.loads((FIXTURES / folder / "squeue.json").read_text())["jobs"]}
    assert queue == {3: 2, 4: 3, 5: 4}


def test_a_record_without_any_request_is_unknown_not_zero():
    rec = _pending("24.11/sacct_by_id.json", 22)
    del rec["tres"]
    rec.pop("required")
    found = requested.from_sacct(rec)
    assert not found.is_known and found.gpus is None


# --- Stored on the job, shown on its page ----------------------------------------------------


@pytest.fixture
def imported(world):
    from apps.clusters.models import Cluster

    Cluster.objects.filter(pk=world.cluster.pk).update(name="dev2411")  # the recording's
    world.cluster.refresh_from_db()
    data = (FIXTURES / "24.11" / "sacct_by_id.json").read_bytes()
    import_sacct(world.cluster, io.BytesIO(data))
    job = Job.objects.get(cluster=world.cluster, job_id=22)
    return world, job


@pytest.mark.django_db
def test_the_import_stores_the_request(imported):
    _, job = imported
    assert (job.state, job.gpus, job.cpus) == ("PENDING", 0, 0)
    assert (job.req_gpus, job.req_cpus, job.req_memory_mb, job.req_nodes) == (32, 4, 8000, 4)
    assert job.tres_req == BIG.tres and job.time_limit_min == 10


@pytest.mark.django_db
def test_the_queue_sync_follows_a_changed_request(imported):
    """``scontrol update`` of a pending job: slurmctld's record is what it asks for now."""
    world, job = imported
    rec = copy.deepcopy(_pending("24.11/squeue.json", 22))
    rec["tres_req_str"] = "cpu=4,mem=8000M,node=4,billing=261,gres/gpu=16"
    rec["time_limit"] = {"set": True, "infinite": False, "number": 20}
    from apps.clusters.adapters.slurm.parse import parse_squeue_json

    entries = parse_squeue_json({"jobs": [rec]})
    assert apply_live_fields(world.cluster, entries, {22}) == 1
    job.refresh_from_db()
    assert (job.req_gpus, job.time_limit_min) == (16, 20)


@pytest.mark.django_db
def test_a_pending_jobs_page_shows_what_it_asked_for(world, login):
    make_job(world.cluster, 900, world.users["bob"], world.team_a, state="PENDING",
             start_time=None, end_time=None, gpus=0, gpu_equivalent=0, cpus=0, memory_mb=0,
             gpu_types={}, req_gpus=32, req_cpus=4, req_memory_mb=8000, req_nodes=4,
             time_limit_min=10, tres_req=BIG.tres)
    html = login("bob").get(reverse("jobs-detail", args=["testcluster", 900])).content.decode()
    section = html[html.index('id="requested"'):]
    section = section[:section.index("</section>")]
    for shown in ("<dt>GPUs</dt><dd>32</dd>", "<dt>CPUs</dt><dd>4</dd>", "<dt>Nodes</dt><dd>4</dd>",
                  "<dt>Time limit</dt><dd>10m 00s</dd>", "(2 GB per node)", BIG.tres):
        assert shown in section, shown
    assert "none held yet" in html and "<dt>CPUs / memory</dt>" not in html
    api = login("bob").get(reverse("api:job-detail", args=[Job.objects.get(job_id=900).pk]))
    assert api.json()["requested"] == {"gpus": 32, "cpus": 4, "memory_mb": 8000, "nodes": 4,
                                       "time_limit_min": 10, "tres": BIG.tres}
    assert (api.json()["gpus"], api.json()["cpus"]) == (0, 0)  # nothing held yet


@pytest.mark.django_db
def test_a_started_job_keeps_its_allocation_and_a_silent_backend_shows_no_section(world, login):
    bob = login("bob")
    make_job(world.cluster, 901, world.users["bob"], world.team_a, req_gpus=8, req_cpus=16)
    html = bob.get(reverse("jobs-detail", args=["testcluster", 901])).content.decode()
    assert 'id="requested"' not in html and "<dt>CPUs / memory</dt>" in html
    make_job(world.cluster, 902, world.users["bob"], world.team_a, state="PENDING",
             start_time=None, end_time=None, submit_time=timezone.now() - timedelta(hours=1))
    html = bob.get(reverse("jobs-detail", args=["testcluster", 902])).content.decode()
    assert 'id="requested"' not in html and "<dt>CPUs / memory</dt>" in html
