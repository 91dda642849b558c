"""The pyslurm backend end to end, against a stand-in ``pyslurm`` 25.11 (tests/pyslurm_standin/:
each class shaped as pyslurm 25.11.2's source defines it, raw fields converted as pyslurm does).

pyslurm 25.11 builds only against libslurm 25.11, so these tests are all Beacon has: they
check the backend against pyslurm's classes as written, not against a running Slurm.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import pytest

from apps.clusters.adapters.slurm import (
    Action,
    Association,
    ExitStatus,
    GpuBinding,
    GpuSource,
    QueueEntry,
    RecordError,
    ResourceRequest,
    SlurmJob,
    SlurmNode,
    SlurmPartition,
)
from apps.clusters.adapters.slurm.pyslurm import NOTE, SlurmPyslurm
from apps.clusters.adapters.slurm.registry import slurm_client
from apps.core.errors import AdapterError, TransientAdapterError
from tests import pyslurm_standin as standin
from tests.pyslurm_standin import NO_VAL, DbJob

T0 = 1796022987  # 2026-12-01 08:36:27 UTC


def _utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


@pytest.fixture
def slurm(monkeypatch):
    """The stand-in daemons' state, with the stand-in package importable as ``pyslurm``."""
    state = standin.reset()
    monkeypatch.setitem(sys.modules, "pyslurm", standin.module())
    return state


@pytest.fixture
def client(slurm) -> SlurmPyslurm:
    built = slurm_client("pyslurm", {"cluster": "devcluster"})
    assert isinstance(built, SlurmPyslurm)
    return built


def _finished(job_id: int, **raw) -> DbJob:
    fields = dict(jobname="train", user="alice", account="nlp", partition="gpu",
                  state="COMPLETED", submit=T0, eligible=T0, start=T0 + 3, end=T0 + 63,
                  timelimit=30, nodes="gpu01", tres_alloc_str="1=4,2=8192,4=1,5=4")
    return DbJob(job_id, **{**fields, **raw})


# --- accounting: db.Jobs ------------------------------------------------------------------


def test_a_finished_gpu_job_is_read_from_accounting(slurm, client):
    slurm.db_jobs = [_finished(41, state="FAILED", exitcode=3 << 8, work_dir="/home/alice",
                               derived_es="sweep 3", state_reason_prev="Priority",
                               tres_alloc_str="1=16,2=65536,4=1,5=16,1001=2,1002=2",
                               max_rss=3 * 2**30)]
    [job] = list(client.jobs_since(_utc(T0 - 60)))
    assert job == SlurmJob(
        job_id=41, display_id="41", cluster="devcluster", submit_time=_utc(T0), name="train",
        user_name="alice", account="nlp", partition="gpu", qos="normal",
        work_dir="/home/alice", comment="sweep 3", state="FAILED", reason="",
        wait_reason="Priority", exit=ExitStatus(3, 0), eligible_time=_utc(T0),
        start_time=_utc(T0 + 3), end_time=_utc(T0 + 63), time_limit_min=30, nodes="gpu01",
        node_count=1, cpus=16, memory_mb=65536, mem_peak_mb=3072.0, gpus=2,
        gpu_types={"h100": 2}, gpu_source=GpuSource.ACCOUNTING,
        tres_alloc="cpu=16,mem=65536M,node=1,billing=16,gres/gpu=2,gres/gpu:h100=2",
        requested=ResourceRequest(time_limit_min=30))  # slurmdbd kept no requested TRES
    [(name, flt)] = slurm.calls
    assert name == "db.Jobs.load" and flt.clusters == ["devcluster"]
    assert flt.start_time == T0 - 60 and flt.end_time >= T0 and flt.ids is None


def test_the_first_window_starts_in_2000_like_the_cli(slurm):
    list(SlurmPyslurm().jobs_since(None))  # no cluster option: pyslurm's local cluster
    [(_, flt)] = slurm.calls
    assert flt.start_time == 946684800 and flt.clusters is None


def test_signals_pending_jobs_and_unset_limits(slurm, client):
    slurm.db_jobs = [
        _finished(7, state="CANCELLED", exitcode=9),  # killed by SIGKILL: a raw wait status
        DbJob(8, jobname="wait", user="bob", account="nlp", state="PENDING", submit=T0,
              state_reason_prev="Priority", tres_req_str="1=4,2=8192,4=1,1001=4"),
        _finished(9, timelimit=standin.INFINITE),
    ]
    killed, waiting, unlimited = client.jobs_since(_utc(T0))
    assert (killed.exit, killed.state) == (ExitStatus(0, 9), "CANCELLED")
    assert (waiting.state, waiting.reason, waiting.start_time, waiting.exit) == (
        "PENDING", "Priority", None, None)
    # requested TRES are not an allocation: no GPUs while pending, as with sacct
    assert (waiting.gpus, waiting.gpu_source, waiting.cpus, waiting.time_limit_min) == (
        0, "", 0, None)  # "PartitionLimit" is no number
    assert unlimited.time_limit_min is None
    # ... but they are what the pending job asked for (issue 26: not "GPUs 0, CPUs 0")
    assert waiting.requested == ResourceRequest(gpus=4, cpus=4, memory_mb=8192, nodes=1,
                                                 tres="cpu=4,mem=8192M,node=1,gres/gpu=4")


def test_a_request_without_accounted_gpus_reads_the_submit_line(slurm, client):
    """A site whose accounting has no gres/gpu: slurmdbd's request names none, the command
    line does (as sacct's ``submit_line`` for the cli backend)."""
    slurm.db_jobs = [DbJob(8, state="PENDING", submit=T0, timelimit=90,
                           tres_req_str="1=16,2=65536,4=2",
                           submit_line="sbatch -N2 --gpus-per-node=4 train.sh")]
    [job] = client.jobs_since(_utc(T0))
    assert job.requested == ResourceRequest(gpus=8, cpus=16, memory_mb=65536, nodes=2,
                                            time_limit_min=90,
                                            tres="cpu=16,mem=65536M,node=2")


def test_array_task_zero_and_the_pending_remainder(slurm, client):
    """pyslurm's u32_parse makes task 0 None, and slurmdbd keeps the remainder as a hex
    bitmap (0x38 = tasks 3-5; after ``%`` the throttle)."""
    slurm.db_jobs = [
        _finished(41, array_job_id=40, array_task_id=0),
        _finished(42, array_job_id=40, array_task_id=1),
        DbJob(40, state="PENDING", submit=T0, array_job_id=40, array_task_str="0x38%2"),
    ]
    ids = [(j.job_id, j.display_id, j.array_task_id, j.array_tasks_pending)
           for j in client.jobs_since(_utc(T0))]
    assert ids == [(41, "40_0", 0, ""), (42, "40_1", 1, ""), (40, "40_[3-5]", None, "3-5")]


def test_heterogeneous_jobs_and_the_offset_pyslurm_leaks(slurm, client):
    slurm.db_jobs = [_finished(19, het_job_id=19, het_job_offset=0),
                     _finished(20, het_job_id=19, het_job_offset=1),
                     _finished(21)]  # not heterogeneous: pyslurm returns offset 4294967294
    leader, member, plain = client.jobs_since(_utc(T0))
    assert (leader.display_id, leader.het_job_id, leader.het_job_offset) == ("19+0", 19, 0)
    assert (member.display_id, member.het_job_offset) == ("19+1", 1)
    assert (plain.display_id, plain.het_job_id, plain.het_job_offset) == ("21", None, None)


def test_a_site_whose_accounting_does_not_track_gpus_gets_no_gpu_count(slurm, client):
    """db.Job holds accounted TRES only: without gres/gpu in AccountingStorageTRES nothing
    in it says how many GPUs a job had (docs/slurm.md §2)."""
    slurm.db_jobs = [_finished(5, tres_alloc_str="1=8,2=16384,4=1,5=8")]
    [job] = client.jobs_since(_utc(T0))
    assert (job.gpus, job.gpu_types, job.gpu_source) == (0, {}, "")


def test_shards_and_a_gpu_total_without_types(slurm, client):
    slurm.db_jobs = [_finished(6, tres_alloc_str="1=2,2=4096,4=1,1004=3"),
                     _finished(7, tres_alloc_str="1=2,2=4096,4=1,1001=4")]
    shards, untyped = client.jobs_since(_utc(T0))
    assert (shards.gpus, shards.gpu_shards, shards.gpu_source) == (0, 3, GpuSource.ACCOUNTING)
    assert (untyped.gpus, dict(untyped.gpu_types)) == (4, {})


def test_a_record_that_cannot_be_mapped_is_a_record_error(slurm, client):
    slurm.db_jobs = [_finished(3), DbJob(4, state="COMPLETED")]  # no submit time
    good, bad = client.jobs_since(_utc(T0))
    assert isinstance(good, SlurmJob) and isinstance(bad, RecordError)
    assert (bad.index, bad.job_id) == (1, 4) and "submit" in bad.message


def test_jobs_by_id_and_exit_codes(slurm, client):
    slurm.db_jobs = [_finished(3, exitcode=2 << 8), _finished(4, state="RUNNING", end=0)]
    assert [j.job_id for j in client.jobs_by_id([3, 4])] == [3, 4]
    assert slurm.calls[-1][1].ids == [3, 4]
    assert client.exit_codes([3, 4]) == {3: ExitStatus(2, 0)}  # 4 is still running
    slurm.calls.clear()
    # a JobFilter without ids would load today's jobs: no ids, no call
    assert list(client.jobs_by_id([])) == [] and client.exit_codes([]) == {}
    assert client.job_scripts([]) == {} and slurm.calls == []


def test_scripts_and_environments_by_display_id(slurm, client):
    slurm.db_jobs = [
        _finished(23, array_job_id=4, array_task_id=0, script="#!/bin/sh\ntorchrun",
                  env="HF_TOKEN=hf_x\nRANK=0"),
        _finished(5, script="#!/bin/sh\nexit 3"),
        DbJob(9, script="#!/bin/sh\nbroken record")]  # no submit time: its raw id
    assert client.job_scripts([23, 5, 9]) == {
        "4_0": "#!/bin/sh\ntorchrun", "5": "#!/bin/sh\nexit 3", "9": "#!/bin/sh\nbroken record"}
    assert slurm.calls[-1][1].with_script is True and slurm.calls[-1][1].ids == [23, 5, 9]
    assert client.job_environments([23, 5]) == {"4_0": "HF_TOKEN=hf_x\nRANK=0\n"}
    assert slurm.calls[-1][1].with_env is True


# --- slurmctld: Jobs, Nodes, Partitions, diag ---------------------------------------------


def test_the_live_queue(slurm, client):
    slurm.jobs = [
        standin.Job(12, state="PENDING", state_desc="Priority", user="bob", start=T0 + 600,
                    tres_req_str="cpu=32,mem=256G,node=2,gres/gpu=8", time_limit=120),
        standin.Job(13, state="RUNNING", user="alice", start=T0, array_job_id=13,
                    array_task_id=0),
        standin.Job(14, state="COMPLETED", user="alice"),
        standin.Job(15, state="PENDING", state_desc="None", array_job_id=15,
                    array_task_str="0-9%2"),
    ]
    assert client.queue() == [
        QueueEntry(job_id=12, state="PENDING", reason="Priority", user_name="bob",
                   estimated_start=_utc(T0 + 600),
                   requested=ResourceRequest(gpus=8, cpus=32, memory_mb=262144, nodes=2,
                                             time_limit_min=120,
                                             tres="cpu=32,mem=262144M,node=2,gres/gpu=8")),
        QueueEntry(job_id=13, state="RUNNING", user_name="alice", array_job_id=13,
                   array_task_id=0),
        QueueEntry(job_id=15, state="PENDING", array_job_id=15),
    ]


def test_gpu_bindings_from_slurmctlds_gres_detail(slurm, client):
    slurm.jobs = [
        standin.Job(21, hosts=["gpu01", "gpu02"],
                    gres_detail=["gpu:h100:8(IDX:0-7)", "gpu:h100:2(IDX:0,2)"]),
        standin.Job(22, hosts=["gpu05"], gres_detail=["gpu:h100:2(IDX:0-1),gpu:h200:4(IDX:2-5)"]),
        standin.Job(23, hosts=["cpu01"], gres_detail=[""]),  # no GPUs
        standin.Job(24, state="PENDING"),
    ]
    assert client.gpu_bindings() == [
        GpuBinding(21, "gpu01", tuple(range(8)), "h100"),
        GpuBinding(21, "gpu02", (0, 2), "h100"),
        GpuBinding(22, "gpu05", (0, 1), "h100"),  # a node with two models: both kept
        GpuBinding(22, "gpu05", (2, 3, 4, 5), "h200"),
    ]
    asked = [arg for name, arg in slurm.calls if name == "Job.get_resource_layout_per_node"]
    assert asked == [21, 22, 23]  # only running jobs


def test_nodes_with_one_model_two_models_and_untyped_gpus(slurm, client):
    slurm.nodes = [
        standin.Node("gpu01", state="MIXED", partitions="gpu,all", cpus=128,
                     real_memory=1024000, gres="gpu:h100:8(S:0-1)",
                     alloc_tres="cpu=32,mem=256G,gres/gpu=3,gres/gpu:h100=3"),
        standin.Node("gpu05", state="IDLE+DRAIN", partitions="multi",
                     gres="gpu:h100:2(S:0),gpu:h200:4(S:1)", reason="fan"),
        standin.Node("old01", gres="gpu:4"),
        standin.Node("cpu01", gres=""),
    ]
    one, two, untyped, cpu = client.nodes()
    assert one == SlurmNode(name="gpu01", state="mixed", partitions=("gpu", "all"), cpus=128,
                            memory_mb=1024000, gpu_type="h100", gpu_count=8, gpus_used=3,
                            gpu_types={"h100": 8})
    assert (two.state, two.gpu_type, two.gpu_count, dict(two.gpu_types), two.reason) == (
        "idle+drain", "h100+h200", 6, {"h100": 2, "h200": 4}, "fan")
    assert (untyped.gpu_type, untyped.gpu_count, dict(untyped.gpu_types)) == ("", 4, {})
    assert (cpu.gpu_count, cpu.gpus_used, cpu.partitions) == (0, 0, ())


def test_partitions(slurm, client):
    slurm.partitions = [standin.Partition("gpu", default=True, max_time=2880,
                                          nodes="gpu[01-04]"),
                        standin.Partition("debug", state="DRAIN")]
    assert client.partitions() == [
        SlurmPartition(name="gpu", state="up", is_default=True, max_time_min=2880,
                       nodes="gpu[01-04]"),
        SlurmPartition(name="debug", state="drain", max_time_min=None)]  # UNLIMITED


def test_the_change_marker_moves_with_the_job_counters(slurm, client):
    slurm.diag = {"data_since": T0, "jobs_submitted": 10, "jobs_started": 8,
                  "jobs_completed": 5, "jobs_running": 3}
    first = client.change_marker()
    assert first == ("data_since=1796022987;jobs_submitted=10;jobs_started=8;"
                     "jobs_completed=5;jobs_canceled=0;jobs_failed=0;jobs_running=3;"
                     "jobs_pending=0")
    slurm.diag["jobs_completed"] = 6
    assert client.change_marker() != first
    assert [name for name, _ in slurm.calls] == ["slurmctld.diag", "slurmctld.diag"]


# --- associations and limits ----------------------------------------------------------------


def _associations() -> list[standin.Association]:
    return [
        standin.Association(1, acct="root", shares_raw=1),
        standin.Association(2, acct="nlp", parent_acct="root", shares_raw=10,
                            grp_tres="1001=16", grp_tres_mins="1001=60000,1=100000",
                            max_tres_pj="1001=8", grp_jobs=50, max_wall_pj=2880,
                            qos=["normal", "high"]),
        standin.Association(3, acct="nlp", user="alice", shares_raw=0x7FFFFFFF),
        standin.Association(4, acct="nlp", user="alice", partition="debug"),
        standin.Association(5, cluster="other", acct="nlp", grp_tres="1001=2"),
    ]


def test_associations_and_their_tres_limits(slurm, client):
    slurm.associations = _associations()
    root, nlp, alice = client.associations()  # other cluster and partition rows left out
    assert nlp == Association(cluster="devcluster", account="nlp", parent="root", shares="10",
                              grp_tres={"gres/gpu": 16},
                              grp_tres_mins={"cpu": 100000, "gres/gpu": 60000},
                              max_tres={"gres/gpu": 8}, grp_jobs=50, max_wall_min=2880,
                              qos=("normal", "high"))
    # pyslurm 25.11 fills group_tres_run_mins from GrpTRESMins: not trusted, left empty
    assert nlp.grp_tres_run_mins == {}
    assert (alice.user, alice.shares, alice.grp_jobs, alice.max_wall_min) == (
        "alice", "parent", None, None)  # INFINITE limits come back as "UNLIMITED"
    assert root.account == "root" and root.parent == ""


def test_account_limits(slurm, client):
    slurm.associations = _associations()
    limits = client.account_limits("nlp")
    assert limits is not None and (limits.user, limits.grp_tres_mins["gres/gpu"]) == ("", 60000)
    assert client.account_limits("vision") is None


# --- what pyslurm cannot do, said before a button is pressed ----------------------------------


def test_cancel_goes_through_pyslurm_job_cancel(slurm, client):
    assert client.cannot(Action.CANCEL) == ""
    client.cancel_job(4242)
    assert ("Job.cancel", 4242) in slurm.calls
    slurm.kill_errno[7] = 2021  # already completing or completed: pyslurm ignores it
    client.cancel_job(7)
    slurm.kill_errno[8] = 2002
    with pytest.raises(AdapterError, match="permission denied") as refused:
        client.cancel_job(8)
    assert not isinstance(refused.value, TransientAdapterError)
    slurm.kill_errno[9] = 1800
    with pytest.raises(TransientAdapterError, match="Unable to contact slurm controller"):
        client.cancel_job(9)


@pytest.mark.parametrize("action", [Action.QUOTA_PREVIEW, Action.QUOTA_WRITE, Action.RECONCILE])
def test_what_pyslurm_cannot_do_is_said_first_and_refused(client, action):
    assert "pyslurm" in client.cannot(action) and "use cli" in client.cannot(action)


def test_refusals_name_the_reason(client):
    when = _utc(T0)
    with pytest.raises(AdapterError, match=r"Associations\.modify"):
        client.set_account_limit("nlp", "gres/gpu", 600, dry_run=True)
    with pytest.raises(AdapterError, match="sreport"):
        client.usage_report(when, when, "gres/gpu")
    with pytest.raises(AdapterError, match="sreport"):
        client.job_allocations(when, when)
    with pytest.raises(AdapterError, match="sshare"):
        client.shares()
    assert client.accounted_until() is None


# --- errors -----------------------------------------------------------------------------------


def test_daemons_down_are_transient_and_refusals_are_not(slurm, client):
    slurm.fail["db.Jobs.load"] = standin.RPCError(msg="Failed to open onnection to slurmdbd")
    with pytest.raises(TransientAdapterError, match="slurmdbd"):
        list(client.jobs_since(None))
    slurm.fail["Jobs.load"] = standin.RPCError(1800)
    with pytest.raises(TransientAdapterError, match=r"errno 1800"):
        client.queue()
    slurm.fail["db.Associations.load"] = standin.RPCError(2002)
    with pytest.raises(AdapterError) as denied:
        client.associations()
    assert not isinstance(denied.value, TransientAdapterError)
    slurm.fail["slurmctld.diag"] = standin.RPCError(7000)
    with pytest.raises(TransientAdapterError):
        client.change_marker()


def test_a_shape_pyslurm_does_not_have_is_an_adapter_error(slurm, client):
    def _gone(node: standin.Node) -> int:
        raise AttributeError("'pyslurm.core.node.Node' object has no attribute 'total_cpus'")

    class Renamed(standin.Node):  # a later pyslurm that renamed total_cpus
        __slots__ = ()
        total_cpus = property(_gone)

    slurm.nodes = [Renamed("gpu01")]
    with pytest.raises(AdapterError, match="unexpected shape"):
        client.nodes()


def test_another_pyslurm_release_is_refused_clearly(monkeypatch):
    standin.reset()
    monkeypatch.setitem(sys.modules, "pyslurm", standin.module(version="24.5.0"))
    with pytest.raises(AdapterError, match=r"against pyslurm 25\.11 only; this is pyslurm 24"):
        slurm_client("pyslurm", {})


# --- the stand-in keeps pyslurm's shapes (what the backend before issue 25 got wrong) --------


def test_the_standin_has_pyslurms_shapes(slurm):
    """The old backend iterated db.Jobs for jobs, read ``tres_alloc_str`` and parsed
    ``configured_gres`` as a string; pyslurm 25.11 (and its stand-in) allow none of it."""
    ps = standin.module()
    slurm.db_jobs = [_finished(41, tres_alloc_str="1=4,1002=2")]
    jobs = ps.db.Jobs.load(db_filter=ps.db.JobFilter(ids=[41]))
    assert list(jobs) == [41] and [j.id for j in jobs.values()] == [41]
    job = jobs.values()[0]
    with pytest.raises(AttributeError):
        job.tres_alloc_str  # noqa: B018
    assert job.allocated_tres.gres["gpu:h100"].count == 2 and "tres_alloc_str" not in job.to_dict()
    node = standin.Node("gpu05", gres="gpu:h100:2(S:0),gpu:h200:4(S:1)")
    assert node.configured_gres == {"gpu:h100": 2, "gpu:h200": 4}
    with pytest.raises(AttributeError):
        ps.db.JobFilter(cluster="devcluster")  # the attribute is ``clusters``
    assert DbJob(1, het_job_offset=NO_VAL).heterogeneous_offset == NO_VAL


def test_the_cluster_page_note_says_it_never_ran_against_slurm():
    assert "has not run against a real libslurm 25.11" in NOTE
