"""The diagnosis service: facts from the archive, the seeded rules, routing to contacts."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest

from apps.accounts.models import Contact
from apps.analysis.timeseries import GpuKey
from apps.clusters.models import Cluster, Node
from apps.jobs import archive
from apps.jobs.diagnosis import diagnose_job, job_facts
from apps.jobs.diagnosis_defaults import DEFAULT_RULES
from apps.jobs.models import DiagnosisRule, JobFinding, JobMetricSummary, TraceRankPhases, TraceRun
from tests.conftest import make_job
from tests.jobs.fake_telemetry import FakeSource

pytestmark = pytest.mark.django_db

HEALTHY = {"gpu_util": 0.97, "sm_active": 0.76, "tensor_active": 0.45, "fb_used": 60000.0,
           "power": 500.0, "pcie_rx": 6e8, "nvlink_tx": 3e10, "temperature": 68.0,
           "sm_clock": 1980.0, "throttle_reasons": 0.0, "xid": 0.0}
STALL = {**HEALTHY, "gpu_util": 0.87, "sm_active": 0.19, "tensor_active": 0.09,
         "pcie_rx": 2.5e9}


HEAVIEST = {"sm_active": 0.86, "throttle_reasons": 0x4, "sm_clock": 1410.0, "temperature": 81.0}


def archived(job, per_gpu=None, n=8, node=None, **values):
    gpus = {GpuKey("gpu01", i): {**HEALTHY, **values} for i in range(n)}
    for index, extra in (per_gpu or {}).items():
        gpus[GpuKey("gpu01", index)].update(extra)
    nodes = {"gpu01": node} if node else {}
    archive.archive_job(job, FakeSource(gpus, nodes=nodes), force=True)
    return list(job.findings.order_by("key"))


def keys(findings):
    return sorted(f.key for f in findings)


def test_the_migration_seeds_every_default_rule_with_its_conditions():
    rows = {r.key: r for r in DiagnosisRule.objects.prefetch_related("conditions")}
    assert set(rows) == {spec["key"] for spec in DEFAULT_RULES}
    for spec in DEFAULT_RULES:
        assert len(rows[spec["key"]].conditions.all()) == len(spec["conditions"])


def test_a_healthy_job_gets_no_finding(world):
    assert archived(world.jobs["bob"]) == []


@pytest.mark.parametrize(("per_gpu", "values", "expected"), [
    ({}, STALL, ["input-stall"]),
    ({}, {"tensor_active": 0.0}, ["no-tensor-cores"]),
    ({i: {"gpu_util": 0.0, "sm_active": 0.0, "tensor_active": 0.0} for i in range(4)}, {},
     ["idle-gpus"]),
    # two GPUs held and never used move no NVLink data: idle, not a degraded link (issue 28)
    ({i: {"gpu_util": 0.0, "sm_active": 0.0, "tensor_active": 0.0, "nvlink_tx": 0.0}
      for i in (6, 7)}, {}, ["idle-gpus"]),
    ({6: {"nvlink_tx": 1e8}}, {}, ["nvlink-degraded"]),  # a GPU that ran: the link's
    ({3: {"xid": 79.0}}, {}, ["xid"]),
    ({3: {"xid": 13.0}}, {}, []),  # an application error, not the hardware
    ({2: {"throttle_reasons": 0x40, "temperature": 90.0}}, {}, ["thermal-throttling"]),
    ({i: {"sm_active": 0.41} for i in range(8) if i != 5}
     | {5: {"sm_active": 0.86, "throttle_reasons": 0x60, "sm_clock": 1150.0}}, {"gpu_util": 0.98},
     ["slow-gpu-hardware"]),
    ({i: {"sm_active": 0.41} for i in range(8) if i != 5} | {5: {"sm_active": 0.86}},
     {"gpu_util": 0.98}, ["straggler-no-hardware"]),
    ({}, {"gpu_util": 0.01, "sm_active": 0.005, "tensor_active": 0.0}, []),  # 1 h: too short
    # the busiest GPU at its software power limit (clocks lowered by it, hotter than the
    # waiting peers): the slowest stage, the owner's; a power brake is the hardware's
    ({i: {"sm_active": 0.41} for i in range(8) if i != 5} | {5: HEAVIEST}, {"gpu_util": 0.98},
     ["straggler-no-hardware"]),
    ({i: {"sm_active": 0.41} for i in range(8) if i != 5}
     | {5: {**HEAVIEST, "throttle_reasons": 0x8C}}, {"gpu_util": 0.98}, ["slow-gpu-hardware"]),
])
def test_each_pathology_fires_its_rule(world, per_gpu, values, expected):
    assert keys(archived(world.jobs["bob"], per_gpu, **values)) == expected


def test_the_nvlink_finding_names_the_running_gpus_it_compared(world):
    idle = {"gpu_util": 0.0, "sm_active": 0.0, "tensor_active": 0.0, "nvlink_tx": 0.0}
    found = {f.key: f for f in archived(world.jobs["bob"], {0: idle, 6: {"nvlink_tx": 1e8}})}
    assert set(found) == {"nvlink-degraded"}  # gpu01:0 (1 of 8 idle) is under the idle rule's 25 %
    assert found["nvlink-degraded"].text.startswith("1 GPU(s) that ran (gpu01:6) moved far less")


def test_a_pipeline_stage_at_its_power_limit_is_named_the_slowest_stage(world):
    Contact.objects.create(area="hardware", name="HW on-call")
    per_gpu = {i: {"sm_active": 0.41} for i in range(8) if i != 5} | {5: HEAVIEST}
    [found] = archived(world.jobs["bob"], per_gpu, gpu_util=0.98)
    assert found.route == "researcher" and found.contact is None
    assert found.title.startswith("The slowest stage")
    assert found.text.startswith("GPU gpu01:5 is the slowest stage: 7 GPUs waited for it")
    assert "it works hardest and so runs at its software power limit" in found.text


def test_an_allocation_held_idle_for_hours_is_flagged(world):
    start = world.jobs["bob"].start_time
    job = make_job(world.cluster, 900, world.users["bob"], world.team_a, start_time=start,
                   end_time=start + timedelta(hours=6))
    found = archived(job, gpu_util=0.01, sm_active=0.005, tensor_active=0.0)
    assert keys(found) == ["idle-allocation"]
    assert found[0].text.startswith("The GPUs were busy 1% of the time over 6.")


@pytest.mark.parametrize(("hours", "values", "expected"), [
    # issue 19: busy 8 % over hours, the rest idle with memory held: one finding, not zero
    (10, {"gpu_util": 0.08, "sm_active": 0.04, "tensor_active": 0.01}, ["idle-memory-held"]),
    (10, {"gpu_util": 0.14, "sm_active": 0.07, "tensor_active": 0.02}, ["idle-memory-held"]),
    # no memory held: the GPUs were free to be taken back (no process), not this finding
    (10, {"gpu_util": 0.08, "sm_active": 0.04, "fb_used": 0.0}, []),
    # under 3 %: the idle allocation's finding alone, never both
    (10, {"gpu_util": 0.02, "sm_active": 0.01, "tensor_active": 0.0}, ["idle-allocation"]),
    (10, {"gpu_util": 0.30, "sm_active": 0.2, "tensor_active": 0.1}, []),  # working
    (2, {"gpu_util": 0.08, "sm_active": 0.04, "tensor_active": 0.01}, []),  # 2 h: too short
])
def test_a_mostly_idle_allocation_with_memory_held_is_a_finding(world, hours, values,
                                                                 expected):
    start = world.jobs["bob"].start_time
    job = make_job(world.cluster, 901, world.users["bob"], world.team_a, start_time=start,
                   end_time=start + timedelta(hours=hours), gpus=1, gpu_equivalent=1.0)
    found = archived(job, n=1, **values)
    assert keys(found) == expected
    if expected == ["idle-memory-held"]:
        assert found[0].text.startswith(
            f"The GPUs were busy only {values['gpu_util']:.0%} of the time over 10.0 h and sat "
            f"idle with their memory held {1 - values['gpu_util']:.0%} of it")
        assert {e["fact"] for e in found[0].evidence} >= {"busy", "held_idle", "run_hours"}


# What the node did during an input stall: CPUs pegged by preprocessing, or idle while the
# network file system delivers little. The job holds 16 CPUs; the node's count varies.
PEGGED = {"cpu_busy": 0.97, "fs_read": 2.8e8}
STARVED = {"cpu_busy": 0.12, "fs_read": 9e7}


@pytest.mark.parametrize(("node_cpus", "node", "expected"), [
    (16, PEGGED, ["input-stall", "input-stall-cpu"]),
    (16, STARVED, ["input-stall", "input-stall-storage"]),
    (16, {"cpu_busy": 0.6, "fs_read": 2e8}, ["input-stall"]),  # neither reading is clear
    (16, {"cpu_busy": 0.12}, ["input-stall"]),  # no file-system series: no storage reading
    # reads block on the node's disk (I/O wait): the archived node row carries it to the rule
    (16, {"cpu_busy": 0.3, "cpu_iowait": 0.25}, ["input-stall", "input-stall-iowait"]),
    (16, {"cpu_busy": 0.3, "cpu_iowait": 0.01}, ["input-stall"]),
    (64, {"cpu_busy": 0.3, "cpu_iowait": 0.25}, ["input-stall"]),  # shared node
    (64, PEGGED, ["input-stall"]),  # a quarter of a shared node: its CPU is not the job's
    (64, STARVED, ["input-stall"]),
    (0, PEGGED, ["input-stall"]),  # the node's CPUs unknown
])
def test_an_input_stall_is_read_from_the_nodes_cpu_and_file_system(world, node_cpus, node,
                                                                    expected):
    Node.objects.filter(name="gpu01").update(cpus=node_cpus)
    assert keys(archived(world.jobs["bob"], node=node, **STALL)) == expected


def test_the_node_readings_cite_the_file_system_rate(world):
    Node.objects.filter(name="gpu01").update(cpus=16)
    found = {f.key: f for f in archived(world.jobs["bob"], node=STARVED, **STALL)}
    storage = found["input-stall-storage"]
    assert storage.area == "data" and "delivered 90 MB/s per node" in storage.text
    facts = {e["fact"]: e for e in storage.evidence}
    assert facts["cpu_busy"]["shown"] == "12%" and facts["fs_read_gbs"]["anchor"] == "network"
    assert facts["node_cpu_share"]["shown"] == "100%"
    cpu = {f.key: f for f in archived(world.jobs["bob"], node=PEGGED, **STALL)}
    assert cpu["input-stall-cpu"].area == "code" and cpu["input-stall-cpu"].route == "researcher"


# Two whole nodes x 4 GPUs, each GPU receiving 6.8 GB/s over PCIe (the issue-28 job).
WIRE = {**STALL, "pcie_rx": 6.8e9}
GPUDIRECT = {"ib_rx": 4 * 6.8e9, "cpu_busy": 0.2, "fs_read": 5e7}


def two_nodes(world, node, **values):
    """bob's 8-GPU job on gpu01 and gpu02 (4 GPUs and 16 of 16 CPUs on each), archived."""
    Node.objects.filter(name="gpu01").update(cpus=16)
    Node.objects.create(cluster=world.cluster, name="gpu02", gpu_type="h100", gpu_count=4,
                        cpus=16)
    job = make_job(world.cluster, 902, world.users["bob"], world.team_a, nodes="gpu[01-02]",
                   node_count=2, cpus=32)
    gpus = {GpuKey(host, i): {**HEALTHY, **values} for host in ("gpu01", "gpu02")
            for i in range(4)}
    nodes = {host: node for host in ("gpu01", "gpu02")} if node is not None else {}
    archive.archive_job(job, FakeSource(gpus, nodes=nodes), force=True)
    return list(job.findings.order_by("key"))


@pytest.mark.parametrize(("node", "values", "expected"), [
    # PCIe receive the InfiniBand ports account for: GPUDirect collectives, not input
    (GPUDIRECT, WIRE, ["communication-bound-gpudirect"]),
    # the ports received a third of it: the rest are host copies, an input stall (CPUs
    # idle, the file system read: its storage reading)
    ({**GPUDIRECT, "ib_rx": 9e9}, WIRE, ["input-stall", "input-stall-storage"]),
    ({**GPUDIRECT, "ib_rx": 9e9, "cpu_busy": 0.6}, WIRE, ["input-stall"]),
    # what the ports received was the file system's (the dataset over InfiniBand)
    ({**GPUDIRECT, "fs_read": 4 * 6.8e9}, WIRE, ["input-stall", "input-stall-storage"]),
    # CPUs pegged on whole nodes: the host's data path points at input, whatever PCIe says
    ({**GPUDIRECT, "cpu_busy": 0.97}, WIRE, ["input-stall-cpu"]),
    # no InfiniBand/RoCE counters on the nodes: GPUDirect cannot be told apart, no verdict
    ({"cpu_busy": 0.2, "fs_read": 5e7}, WIRE, []),
    (None, WIRE, []),  # no node_exporter at all
    # little received over PCIe: the collectives' own rule, over NVLink
    (GPUDIRECT, STALL | {"pcie_rx": 6e8}, ["allreduce-dominated"]),
])
def test_a_multi_node_job_is_an_input_stall_only_with_host_side_evidence(world, node, values,
                                                                         expected):
    assert keys(two_nodes(world, node, **values)) == expected


def test_the_communication_verdict_says_what_was_seen_and_what_else_it_could_be(world):
    Contact.objects.create(area="network", name="Fabric team")
    [found] = two_nodes(world, GPUDIRECT, **WIRE)
    assert found.area == "network" and found.contact.name == "Fabric team"
    assert "received 6.8 GB/s per GPU over PCIe" in found.text
    assert "ports received 27.2 GB/s per node, which explains 100% of it" in found.text
    assert "It could also be input read over the network" in found.text
    facts = {e["fact"]: e["shown"] for e in found.evidence}
    assert facts["host_rx_gbs"] == "12 MB/s"  # the file system's 50 MB/s per node
    assert facts["ib_rx_gbs"] == "27.2 GB/s"


def test_the_single_node_stall_reads_its_host_copies(world):
    [found] = archived(world.jobs["bob"], **STALL)
    assert found.key == "input-stall"
    assert "host-to-GPU copies ran at 2.5 GB/s per GPU (PCIe receive 2.5 GB/s" in found.text
    assert "It could also be other copies from host memory" in found.text


def test_the_migration_revises_shipped_rules_only_where_admins_left_them(world):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("apps.jobs.migrations.0020_gpudirect_receive")
    stall = DiagnosisRule.objects.get(key="input-stall")
    storage = DiagnosisRule.objects.get(key="input-stall-storage")
    for rule in (stall, storage):  # as 0005 seeded them before issue 28
        rule.conditions.filter(fact="host_rx_gbs").update(fact="pcie_rx_gbs")
    stall.text = migration.OLD_STALL_TEXT
    stall.save()
    storage.conditions.filter(fact="pcie_rx_gbs").update(value=2.0)  # an admin's edit
    DiagnosisRule.objects.filter(key="communication-bound-gpudirect").delete()
    migration.forwards(apps, None)
    stall.refresh_from_db()
    assert ("host_rx_gbs", 1.0) in stall.conditions.values_list("fact", "value")
    assert "{host_rx_gbs}" in stall.text
    assert ("pcie_rx_gbs", 2.0) in storage.conditions.values_list("fact", "value")  # kept
    assert DiagnosisRule.objects.filter(key="communication-bound-gpudirect").exists()


def test_findings_cite_their_evidence_and_route_to_the_area_contact(world):
    global_storage = Contact.objects.create(area="data", name="Storage (all)")
    mine = Contact.objects.create(area="data", name="Storage here", cluster=world.cluster)
    Contact.objects.create(area="data", name="Storage elsewhere",
                           cluster=Cluster.objects.create(name="other"))
    [finding] = archived(world.jobs["bob"], **STALL)
    assert finding.route == "contact" and finding.contact == mine
    facts = {e["fact"]: e for e in finding.evidence}
    assert facts["busy"]["shown"] == "87%" and facts["busy"]["anchor"] == "efficiency"
    assert facts["pcie_rx_gbs"]["shown"] == "2.5 GB/s"
    mine.delete()
    [finding] = archived(world.jobs["bob"], **STALL)
    assert finding.contact == global_storage


def test_code_findings_go_to_the_researcher_and_a_rule_may_override(world):
    [finding] = archived(world.jobs["bob"], tensor_active=0.0)
    assert finding.route == "researcher" and finding.contact is None
    helpdesk = Contact.objects.create(area="code", name="ML help desk")
    DiagnosisRule.objects.filter(key="no-tensor-cores").update(contact=helpdesk)
    [finding] = archived(world.jobs["bob"], tensor_active=0.0)
    assert finding.route == "contact" and finding.contact == helpdesk


def test_without_a_contact_the_finding_says_nobody_is_configured(world):
    [finding] = archived(world.jobs["bob"], **STALL)
    assert finding.route == "none"


def test_rules_are_data_admins_edit(world):
    job = world.jobs["bob"]
    assert keys(archived(job, **STALL)) == ["input-stall"]
    DiagnosisRule.objects.filter(key="input-stall").update(enabled=False)
    assert archived(job, **STALL) == []
    rule = DiagnosisRule.objects.get(key="input-stall")
    rule.enabled = True
    rule.save()
    rule.conditions.filter(fact="computing_share").update(value=0.1)
    assert archived(job, **STALL) == []


def test_diagnosing_twice_replaces_the_findings(world):
    job = world.jobs["bob"]
    archived(job, **STALL)
    diagnose_job(job)
    diagnose_job(job)
    assert JobFinding.objects.filter(job=job).count() == 1


def test_a_gpu_named_in_other_jobs_is_flagged_for_hardware(world):
    waiting = {i: {"sm_active": 0.41} for i in range(8) if i != 5} | {5: {"sm_active": 0.86}}
    for n in range(3):
        earlier = make_job(world.cluster, 500 + n, world.users["tom"], world.team_a)
        archived(earlier, waiting, gpu_util=0.98)
    assert JobMetricSummary.objects.filter(straggler=True, gpu_index=5).count() == 3
    found = archived(world.jobs["bob"])
    assert keys(found) == ["gpu-slow-across-jobs"]
    assert "GPU gpu01:5 was also named the straggler in 3 other jobs" in found[0].text


def test_trace_phases_are_facts(world):
    job = world.jobs["bob"]
    run = TraceRun.objects.create(job=job, fingerprint="x", world_size=2, steps=10,
                                  straggler_rank=1, straggler_phase="data_loading",
                                  straggler_excess_ms=94.3, waiting_ranks=[0])
    for rank, data in ((0, 2.0), (1, 96.3)):
        TraceRankPhases.objects.create(trace_run=run, rank=rank, step_ms=150, forward_ms=40,
                                       backward_ms=60, data_loading_ms=data)
    facts = job_facts(job)
    assert facts["trace_straggler_data"] == 1.0 and facts["trace_straggler_rank"] == "1"
    assert facts["trace_data_share"] == pytest.approx(98.3 / 300)
    assert keys(diagnose_job(job)) == ["data-loading-dominant", "slow-data-rank"]


def _traced(job, straggler=1, phase="backward", host="gpu01", device=5, idle=None, **run):
    """A stored 2-rank GPU trace analysis whose straggler rank ran on GPU ``host:device``."""
    trace = TraceRun.objects.create(job=job, fingerprint="t", world_size=2, steps=10,
                                    timeline="gpu", straggler_rank=straggler,
                                    straggler_phase=phase, straggler_excess_ms=42.0,
                                    waiting_ranks=[] if straggler is None else [1 - straggler],
                                    gpu_idle_share=idle, **run)
    for rank in (0, 1):
        TraceRankPhases.objects.create(
            trace_run=trace, rank=rank, step_ms=150, forward_ms=40, backward_ms=60,
            device_host=host if rank == straggler else "gpu01",
            device_index=device if rank == straggler else 0,
            gpu_idle_ms=None if idle is None else idle * 150, gpu_compute_ms=90,
            gpu_communication_ms=30, gpu_exposed_communication_ms=10)
    return trace


SLOW_5 = {i: {"sm_active": 0.41} for i in range(8) if i != 5}
THERMAL_5 = {5: {"sm_active": 0.86, "throttle_reasons": 0x60, "sm_clock": 1150.0}}


@pytest.mark.parametrize(("per_gpu", "trace", "expected", "area", "words"), [
    # the same GPU, thermally throttled: one hardware story, not "hardware" and "code"
    (SLOW_5 | THERMAL_5, {}, ["straggler-story"], "hardware",
     "rank 1 runs on GPU gpu01:5, which shows"),
    # the same GPU, no hardware sign: one code story
    (SLOW_5 | {5: {"sm_active": 0.86}}, {}, ["straggler-story"], "code",
     "which shows no sign of a hardware problem"),
    # Kineto's host_name is often the FQDN
    (SLOW_5 | THERMAL_5, {"host": "gpu01.cluster.example.org"}, ["straggler-story"],
     "hardware", "rank 1 runs on GPU gpu01:5"),
    # different GPUs: one story that follows the trace and says they disagree
    (SLOW_5 | THERMAL_5, {"device": 2}, ["straggler-story"], "code",
     "Telemetry names GPU gpu01:5"),
    # the trace cannot say where the rank ran (a CPU trace): both findings stay
    (SLOW_5 | THERMAL_5, {"host": "", "device": None}, ["slow-compute-rank",
                                                          "slow-gpu-hardware"], None, ""),
])
def test_telemetry_and_a_trace_naming_one_straggler_give_one_story(world, per_gpu, trace,
                                                                   expected, area, words):
    job = world.jobs["bob"]
    _traced(job, **trace)
    found = archived(job, per_gpu, gpu_util=0.98)
    assert keys(found) == expected
    if area:
        (story,) = found
        assert story.area == area and words in story.text and story.rule is None
        assert story.route == ("researcher" if area == "code" else "none")
        assert {e["anchor"] for e in story.evidence} == {"stragglers", "phases"}


def test_a_starved_gpu_in_the_trace_is_a_finding_with_what_to_check(world):
    job = world.jobs["bob"]
    _traced(job, straggler=None, phase="", idle=0.46)
    found = {f.key: f for f in diagnose_job(job)}
    assert "gpu-starved-trace" in found
    starved = found["gpu-starved-trace"]
    assert "the GPU is idle 46% of each step" in starved.text
    assert "CUDA graphs" in starved.hint and starved.route == "researcher"


def test_the_shipped_rules_can_be_put_back(world):
    from django.core.management import call_command

    rule = DiagnosisRule.objects.get(key="input-stall")
    rule.conditions.all().delete()
    rule.enabled = False
    rule.save()
    call_command("diagnosis_rules", "--reset", "input-stall", stdout=io.StringIO())
    rule.refresh_from_db()
    assert rule.enabled and rule.conditions.count() == 5


def test_diagnose_jobs_reruns_the_rules_after_an_edit(world):
    from django.core.management import call_command

    job = world.jobs["bob"]
    archived(job, **STALL)
    DiagnosisRule.objects.filter(key="input-stall").update(enabled=False)
    out = io.StringIO()
    call_command("diagnose_jobs", "--cluster", world.cluster.name, str(job.job_id), stdout=out)
    assert "1 job(s) diagnosed: 0 finding(s)" in out.getvalue()
    assert not job.findings.exists()


def test_admins_edit_rules_in_the_admin(world, login):
    from django.urls import reverse

    staff = login("staff")
    staff.force_login(world.users["staff"])
    world.users["staff"].is_superuser = True
    world.users["staff"].save()
    rule = DiagnosisRule.objects.get(key="input-stall")
    assert staff.get(reverse("admin:jobs_diagnosisrule_changelist")).status_code == 200
    page = staff.get(reverse("admin:jobs_diagnosisrule_change", args=[rule.pk]))
    assert page.status_code == 200 and "{pcie_rx_gbs}" in page.content.decode()
    bad = {"key": "x", "title": "t", "area": "data", "severity": "warning", "text": "{nope}",
           "hint": "", "enabled": "on", "order": 1,
           "conditions-TOTAL_FORMS": 0, "conditions-INITIAL_FORMS": 0}
    response = staff.post(reverse("admin:jobs_diagnosisrule_add"), bad)
    assert response.status_code == 200 and "unknown placeholder {nope}" in response.content.decode()
