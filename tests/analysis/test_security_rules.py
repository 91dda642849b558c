"""Every security rule on positive and negative fixtures, near misses included (the
false-positive notes of docs/security-rules.md). Pure: no database, milliseconds each.

``CASES`` is the fixture table: (rule, case name, builder, expected hit count). A rule
without at least one positive and one negative case fails ``test_every_rule_has_...``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import time

import pytest

from apps.analysis.recurrence import Recurrence
from apps.analysis.security_rules import ATTACK, RULES, RUNNERS, check_params, config
from apps.analysis.security_types import (
    SEVERITIES,
    Allow,
    IbBaseline,
    Inputs,
    JobText,
    NodeSoftware,
    ProbeResult,
    QuietWindow,
    SshEvent,
    SshSource,
)
from apps.analysis.versions import Advisory
from tests.analysis.security_builders import (
    A100,
    STEP,
    T0,
    gpu,
    hf_token,
    inputs,
    job,
    node,
    node_points,
    points,
    run,
    t,
)

HOUR = 3600.0


@dataclass(frozen=True)
class Case:
    rule: str
    name: str
    build: Callable[[], tuple[Inputs, Allow]]
    hits: int
    params: dict[str, object] = field(default_factory=dict)


def _plain(data: Inputs) -> tuple[Inputs, Allow]:
    return data, Allow()


# --- 1. GPU activity without a job -------------------------------------------------------------


def busy_free_gpu(minutes: int = 15, **fields: object) -> Inputs:
    base = {"util": 0.97, "fb_mib": 24000.0, "owners": ()}
    base.update(fields)
    return inputs([gpu(points(minutes, **base))])


def memory_after_job(minutes: int = 20, fb: float = 41000.0, util: float = 0.0) -> Inputs:
    held = points(10, util=0.9, fb_mib=60000.0, owners=("42",))
    after = points(minutes, start=t(9), util=util, fb_mib=fb)
    return inputs([gpu(held + after)], allocations=[job(42, "alice", end=t(9))])


CASES: list[Case] = [
    Case("gpu_activity_without_job", "busy GPU, no job, 15 min",
         lambda: _plain(busy_free_gpu()), 1),
    Case("gpu_activity_without_job", "memory held by no job, never a job before",
         lambda: _plain(busy_free_gpu(util=0.0)), 1),
    Case("gpu_activity_without_job", "same GPU held by a job",
         lambda: _plain(busy_free_gpu(owners=("4242",))), 0),
    Case("gpu_activity_without_job", "prolog race: 5 minutes", lambda: _plain(busy_free_gpu(5)), 0),
    Case("gpu_activity_without_job", "idle GPU holding 500 MiB",
         lambda: _plain(busy_free_gpu(util=0.0, fb_mib=500.0)), 0),
    Case("gpu_activity_without_job", "ownership unknown (no mapping, jobs on node)",
         lambda: _plain(busy_free_gpu(bound=False)), 0),
    Case("gpu_activity_without_job", "drained node in a quiet window",
         lambda: (busy_free_gpu(), Allow(quiet=(QuietWindow("gpu0*", reason="drain"),))), 0),
    Case("gpu_activity_without_job", "memory left after a job is rule 7's",
         lambda: _plain(memory_after_job()), 0),
    Case("gpu_activity_without_job", "busy right after a job is still rule 1's",
         lambda: _plain(memory_after_job(util=0.95)), 1),
    Case("gpu_activity_without_job", "the run ended before the window (look-back only)",
         lambda: _plain(Inputs(T0 + 86400, T0 + 2 * 86400, busy_free_gpu().frame)), 0),
]

# --- 7. Memory left after a job; GPUs shared between users ----------------------------------------

CASES += [
    Case("gpu_memory_left_after_job", "41 GB kept for 20 min after job 42",
         lambda: _plain(memory_after_job()), 1),
    Case("gpu_memory_left_after_job", "freed within 5 minutes", lambda: _plain(memory_after_job(5)),
         0),
    Case("gpu_memory_left_after_job", "persistence daemon's 500 MiB",
         lambda: _plain(memory_after_job(fb=500.0)), 0),
    Case("gpu_memory_left_after_job", "busy afterwards: rule 1, not 7",
         lambda: _plain(memory_after_job(util=0.95)), 0),
    Case("gpu_memory_left_after_job", "memory with no job before it",
         lambda: _plain(busy_free_gpu(util=0.0)), 0),
]


def shared(users: tuple[str, str], mig: bool = False, minutes: int = 15,
           at_once: bool = True) -> Inputs:
    pts = points(minutes, util=0.5, fb_mib=10000.0, owners=("1", "2"), mig=mig,
                 together=("1", "2") if at_once else ())
    return inputs([gpu(pts)], allocations=[job(1, users[0], end=T0 + HOUR),
                                           job(2, users[1], end=T0 + HOUR)])


CASES += [
    Case("gpu_shared_between_users", "two users on one GPU",
         lambda: _plain(shared(("bob", "carol"))), 1),
    Case("gpu_shared_between_users", "one user, two jobs", lambda: _plain(shared(("bob", "bob"))),
         0),
    Case("gpu_shared_between_users", "MIG instances (policy mig)",
         lambda: _plain(shared(("bob", "carol"), mig=True)), 0),
    Case("gpu_shared_between_users", "for a few minutes only",
         lambda: _plain(shared(("bob", "carol"), minutes=3)), 0),
    Case("gpu_shared_between_users", "one job ends and the next starts in each bucket",
         lambda: _plain(shared(("bob", "carol"), at_once=False)), 0),
]

# --- 2. Miner-like compute in a job ---------------------------------------------------------------


def miner(*, util: float = 1.0, tensor: float = 0.0, sm: float | None = 0.98,
          fb: float = 3300.0, power: float = 380.0, egress: float = 4e6, nvlink: float = 0.0,
          minutes: int = 60, gpus: int = 1, bound: bool = True, owners: tuple[str, ...] = ("7",),
          user: str = "alice", allocations: list | None = None,
          cpu: float | None = None) -> Inputs:
    # ten idle buckets after the run: its end is seen, not cut off by the data's end
    tracks = [gpu(points(minutes, util=util, tensor=tensor, sm=sm, fb_mib=fb, power_w=power,
                         nvlink_bps=nvlink, owners=owners, bound=bound)
                  + points(10, start=t(minutes - 1), util=0.0, tensor=0.0, fb_mib=0.0,
                           bound=bound), index=i, model=A100)
              for i in range(gpus)]
    nodes = [node(node_points(minutes, egress_bps=egress, **_cpu(cpu))),
             node(node_points(minutes, egress_bps=2e6), host="gpu02"),
             node(node_points(minutes, egress_bps=2e6), host="gpu03")]
    allocs = allocations if allocations is not None else [
        job(7, user, start=T0 - 30, end=t(minutes - 1) + 20, gpus=gpus)]
    return inputs(tracks, nodes, allocs)


def _cpu(share: float | None, cores: int = 96) -> dict[str, float]:
    """Node CPU fields: ``share`` of ``cores`` busy (none: not collected)."""
    return {} if share is None else {"cpu_busy": share * cores, "cpu_cores": float(cores)}


def multi_node_miner(ib: float, fb: float = 3300.0) -> Inputs:
    """One GPU on each of two nodes (NVLink has nothing to carry), mining; ``ib`` on both."""
    tracks = [gpu(points(60, util=1.0, tensor=0.0, sm=0.98, fb_mib=fb, power_w=248.0,
                         nvlink_bps=0.0, owners=("7",)), host=host, model=A100)
              for host in ("gpu01", "gpu02")]
    nodes = [node(node_points(60, egress_bps=2e6, ib_bps=ib, ib_device="mlx5_0"), host=host)
             for host in ("gpu01", "gpu02", "gpu03")]
    return inputs(tracks, nodes, [job(7, "alice", nodes=("gpu01", "gpu02"), start=T0 - 30,
                                      end=t(59) + 7200, gpus=2)])


def cpu_miner(cpu: float = 0.99, util: float = 0.0, egress: float = 4e6, minutes: int = 60,
              tensor: float = 0.0) -> Inputs:
    """Job 7 holds two GPUs on gpu01 while the node's CPU runs at ``cpu``."""
    tracks = [gpu(points(minutes, util=util, tensor=tensor, sm=util * 0.3, fb_mib=500.0,
                         power_w=70.0, owners=("7",)) + points(10, start=t(minutes - 1),
                                                               util=0.0, owners=()),
                  index=i, model=A100) for i in range(2)]
    nodes = [node(node_points(minutes, egress_bps=egress, **_cpu(cpu))
                  + node_points(10, start=t(minutes - 1), egress_bps=2e6, **_cpu(0.02))),
             node(node_points(minutes + 10, egress_bps=2e6, **_cpu(0.3)), host="gpu02"),
             node(node_points(minutes + 10, egress_bps=2e6, **_cpu(0.3)), host="gpu03")]
    return inputs(tracks, nodes, [job(7, "alice", start=T0 - 30, end=t(minutes - 1) + 20,
                                      gpus=2)])


CASES += [
    Case("miner_in_job", "every signal, egress included", lambda: _plain(miner()), 1),
    Case("miner_in_job", "no egress: two signals still", lambda: _plain(miner(egress=2e6)), 1),
    Case("miner_in_job", "no_tensor_cores pathology: SM active 0.70",
         lambda: _plain(miner(sm=0.70, fb=56000.0, power=248.0, egress=2e6)), 0),
    Case("miner_in_job", "CFD code: big memory, NVLink, no egress",
         lambda: _plain(miner(sm=None, fb=60000.0, power=360.0, egress=2e6, nvlink=5e9,
                              gpus=2)), 0),
    Case("miner_in_job", "training: tensor pipe busy", lambda: _plain(miner(tensor=0.45)), 0),
    Case("miner_in_job", "20 minutes only", lambda: _plain(miner(minutes=20)), 0),
    Case("miner_in_job", "burn-in account (exempt)",
         lambda: (miner(user="burnin"), Allow(exempt_users=frozenset({"burnin"}))), 0),
    Case("miner_in_job", "no job at all: rule 1's", lambda: _plain(miner(owners=())), 0),
    Case("miner_in_job", "GPU signature, small memory, its node's CPU pegged",
         lambda: _plain(miner(power=248.0, egress=2e6, cpu=0.98)), 1),
    Case("miner_in_job", "GPU signature, small memory, CPU at 80 %: one signal only",
         lambda: _plain(miner(power=248.0, egress=2e6, cpu=0.80)), 0),
    Case("miner_in_job", "multi-node, no NVLink and only storage on InfiniBand",
         lambda: _plain(multi_node_miner(ib=5e7)), 1),
    Case("miner_in_job", "multi-node, NCCL over InfiniBand (one GPU per node, no NVLink)",
         lambda: _plain(multi_node_miner(ib=14e9)), 0),
    Case("miner_in_job", "CPU pegged while its GPUs idle, with egress",
         lambda: _plain(cpu_miner()), 1),
    Case("miner_in_job", "CPU-heavy preprocessing: CPU pegged, GPUs idle, no egress",
         lambda: _plain(cpu_miner(egress=2e6)), 0),
    Case("miner_in_job", "input pipeline: CPU pegged, GPUs busy",
         lambda: _plain(cpu_miner(util=0.87, tensor=0.09)), 0),
    Case("miner_in_job", "CPU at 80 % while its GPUs idle, with egress",
         lambda: _plain(cpu_miner(cpu=0.80)), 0),
    Case("miner_in_job", "CPU pegged with idle GPUs for 20 minutes only",
         lambda: _plain(cpu_miner(minutes=20)), 0),
    Case("miner_in_job", "no mapping: the job whose start and end line up",
         lambda: _plain(miner(owners=(), bound=False, allocations=[
             job(7, "alice", start=T0 - 30, end=t(59) + 20),
             job(8, "bob", start=T0 - 30, end=t(59) + 7200)])), 1),
]

# A health check runs daily at 14:13 UTC for 20 minutes on GPU 0 of gpu0* (T0 is 14:13:20).
HEALTH_CHECK = QuietWindow("gpu0*", reason="daily health check", gpus=frozenset({"0"}),
                           every=Recurrence(time(14, 13), 20))
CASES += [
    Case("gpu_activity_without_job", "daily health check window on that GPU",
         lambda: (busy_free_gpu(), Allow(quiet=(HEALTH_CHECK,))), 0),
    Case("gpu_activity_without_job", "daily health check window on another GPU",
         lambda: (inputs([gpu(points(15, util=0.97, fb_mib=24000.0), index=1)]),
                  Allow(quiet=(HEALTH_CHECK,))), 1),
    Case("gpu_activity_without_job", "busy past the end of the daily window",
         lambda: (busy_free_gpu(minutes=40), Allow(quiet=(HEALTH_CHECK,))), 1),
]

# --- 3. InfiniBand --------------------------------------------------------------------------------


def ib(rate: float, allocations: list | None = None, minutes: int = 120) -> Inputs:
    return inputs(nodes=[node(node_points(minutes, ib_bps=rate, ib_device="mlx5_0"))],
                  allocations=allocations or [job(5, "bob")])


CASES += [
    Case("ib_traffic_without_multinode_job", "9.5 GB/s, single-node jobs only",
         lambda: _plain(ib(9.5e9)), 1),
    Case("ib_traffic_without_multinode_job", "a multi-node job holds the node",
         lambda: _plain(ib(9.5e9, [job(6, "bob", ("gpu01", "gpu02"), end=T0 + 3 * HOUR)])), 0),
    Case("ib_traffic_without_multinode_job", "storage traffic below the baseline",
         lambda: _plain(ib(4e8)), 0),
    Case("ib_traffic_without_multinode_job", "9.5 GB/s under its node group's 12 GB/s baseline",
         lambda: (ib(9.5e9), Allow(ib_baselines=(IbBaseline(1.2e10, hosts="gpu0*"),))), 0),
    Case("ib_traffic_without_multinode_job", "under its partition's baseline",
         lambda: (ib(9.5e9), Allow(ib_baselines=(IbBaseline(1.2e10, partition="io"),),
                                   partitions={"gpu01": frozenset({"io"})})), 0),
    Case("ib_traffic_without_multinode_job", "another partition's baseline does not apply",
         lambda: (ib(9.5e9), Allow(ib_baselines=(IbBaseline(1.2e10, partition="io"),),
                                   partitions={"gpu01": frozenset({"gpu"})})), 1),
    Case("ib_traffic_without_multinode_job", "a multi-node job ended 3 min before (grace)",
         lambda: _plain(ib(9.5e9, [job(6, "bob", ("gpu01", "gpu02"), end=T0 - 180)],
                           minutes=8)), 0),
    Case("rdma_transport_errors", "500 out-of-sequence/s, links clean",
         lambda: _plain(inputs(nodes=[node(node_points(10, transport_errors_ps=500.0,
                                                       link_errors_ps=0.0))])), 1),
    Case("rdma_transport_errors", "flapping link: link errors too",
         lambda: _plain(inputs(nodes=[node(node_points(10, transport_errors_ps=500.0,
                                                       link_errors_ps=2.0))])), 0),
    Case("rdma_transport_errors", "a few retransmits",
         lambda: _plain(inputs(nodes=[node(node_points(10, transport_errors_ps=20.0,
                                                       link_errors_ps=0.0))])), 0),
    Case("ib_partition_key_violation", "3 constraint errors in one bucket",
         lambda: _plain(inputs(nodes=[node(node_points(5, pkey_errors=lambda i: 3.0 if i == 2
                                                       else 0.0))])), 1),
    Case("ib_partition_key_violation", "no constraint errors",
         lambda: _plain(inputs(nodes=[node(node_points(5, pkey_errors=0.0))])), 0),
]

# --- 4. Secrets -----------------------------------------------------------------------------------


def script(line: str) -> Inputs:
    text = f"#!/bin/bash\n#SBATCH --gres=gpu:1\n{line}\npython train.py\n"
    return inputs(texts=(JobText(99, "ivan", "vision", "batch script", text, T0),),
                  secret_key=b"site key")


CASES += [
    Case("secret_in_job_script", "Hugging Face token exported",
         lambda: _plain(script(f"export HF_TOKEN={hf_token(random.Random(1))}")), 1),
    Case("secret_in_job_script", "token read from a file (the safe pattern)",
         lambda: _plain(script("export HF_TOKEN=$(cat ~/.cache/huggingface/token)")), 0),
    Case("secret_in_job_script", "a variable reference", lambda: _plain(script(
        "git clone https://$GITHUB_TOKEN@github.com/acme/x.git")), 0),
    Case("secret_in_job_script", "placeholder hf_ + 34 x",
         lambda: _plain(script("export HF_TOKEN=hf" + "_" + "x" * 34)), 0),
    Case("secret_in_job_script", "owner of the job is an exempt service account",
         lambda: (script(f"export HF_TOKEN={hf_token(random.Random(2))}"),
                  Allow(exempt_users=frozenset({"ivan"}))), 0),
]

# --- 5. SSH ---------------------------------------------------------------------------------------


def ssh(events: list[SshEvent], allocations: list | None = None, **kw: object) -> Inputs:
    return inputs(allocations=allocations or [], ssh=tuple(events),
                  user_teams={"mallory": "multimodal"}, **kw)


def login(user: str, at: float, host: str = "gpu04", source: str = "10.20.1.5") -> SshEvent:
    return SshEvent(at, host, "accepted", user, source, "publickey")


ADMINS = Allow(admin_users=frozenset({"root", "slurmadm"}))
CASES += [
    Case("ssh_without_allocation", "mallory with no job on gpu04",
         lambda: (ssh([login("mallory", T0 + 100)], [job(1, "mallory", ("gpu01",))]), ADMINS), 1),
    Case("ssh_without_allocation", "during her job", lambda: (ssh(
        [login("bob", T0 + 100)], [job(1, "bob", ("gpu04",))]), ADMINS), 0),
    Case("ssh_without_allocation", "job ended 30 s earlier (grace)", lambda: (ssh(
        [login("bob", T0 + HOUR + 30)], [job(1, "bob", ("gpu04",))]), ADMINS), 0),
    Case("ssh_without_allocation", "job ended 20 min earlier", lambda: (ssh(
        [login("bob", T0 + HOUR + 1200)], [job(1, "bob", ("gpu04",))]), ADMINS), 1),
    Case("ssh_without_allocation", "an admin anywhere",
         lambda: (ssh([login("slurmadm", T0 + 100)]), ADMINS), 0),
    Case("ssh_without_allocation", "a job of hers on another node", lambda: (ssh(
        [login("bob", T0 + 100, host="gpu02")], [job(1, "bob", ("gpu04",))]), ADMINS), 1),
]


def denials(count: int, every: float) -> list[SshEvent]:
    return [SshEvent(T0 + i * every, "gpu03", "denied", "eve", "10.9.9.9") for i in range(count)]


CASES += [
    Case("ssh_repeated_denials", "5 denials in 8 minutes", lambda: _plain(ssh(denials(5, 120))), 1),
    Case("ssh_repeated_denials", "4 denials", lambda: _plain(ssh(denials(4, 60))), 0),
    Case("ssh_repeated_denials", "5 denials over 40 minutes",
         lambda: _plain(ssh(denials(5, 600))), 0),
]


LOGIN_NETS: dict[str, object] = {"allowed_sources": ["10.20.0.0/16", "fd00::/8"]}


def sourced(source: str) -> Inputs:
    return ssh([login("bob", T0 + 100, source=source)], [job(1, "bob", ("gpu04",))])


def admin_from(source: str) -> Inputs:
    return ssh([login("slurmadm", T0 + 100, source=source)])


SITE_SOURCES = Allow(admin_users=frozenset({"slurmadm"}), ssh_sources=(
    SshSource("10.20.0.0/16", "everyone", "login nodes"),
    SshSource("10.30.0.5/32", "admins", "admin bastion")))


CASES += [
    Case("ssh_unexpected_source", "from outside the login network",
         lambda: _plain(sourced("192.168.7.7")), 1, LOGIN_NETS),
    Case("ssh_unexpected_source", "from the login network", lambda: _plain(sourced("10.20.1.5")), 0,
         LOGIN_NETS),
    Case("ssh_unexpected_source", "no networks configured: the rule is off",
         lambda: _plain(sourced("192.168.7.7")), 0),
    Case("ssh_unexpected_source", "a user from the admin bastion",
         lambda: (sourced("10.30.0.5"), SITE_SOURCES), 1),
    Case("ssh_unexpected_source", "an admin from the admin bastion",
         lambda: (admin_from("10.30.0.5"), SITE_SOURCES), 0),
    Case("ssh_unexpected_source", "an admin from a login node",
         lambda: (admin_from("10.20.1.5"), SITE_SOURCES), 0),
    Case("ssh_unexpected_source", "an admin from elsewhere, a bastion being listed",
         lambda: (admin_from("192.168.7.7"), SITE_SOURCES), 1),
    Case("ssh_unexpected_source", "an admin from elsewhere, no admin source listed",
         lambda: (admin_from("192.168.7.7"), Allow(
             admin_users=frozenset({"slurmadm"}),
             ssh_sources=(SshSource("10.20.0.0/16", "everyone", "login nodes"),))), 0),
    Case("ssh_unexpected_source", "a user from a login node", lambda: (sourced("10.20.1.5"),
                                                                    SITE_SOURCES), 0),
]

# --- 6. Exposed services --------------------------------------------------------------------------


def probe(status: int | None, auth: bool | None, service: str = "ray-dashboard",
          port: int = 8265, at: float = T0 + 100) -> Inputs:
    return inputs(probes=(ProbeResult(at, "gpu07", port, status, auth, service,
                                      f"http://gpu07:{port}/api/jobs/", 2035, "kate",
                                      "multimodal"),))


CASES += [
    Case("exposed_service", "Ray jobs API: 200 without auth", lambda: _plain(probe(200, False)), 1),
    Case("exposed_service", "TensorBoard open", lambda: _plain(probe(200, False, "tensorboard",
                                                                     6006)), 1),
    Case("exposed_service", "Jupyter asks for a token (403)",
         lambda: _plain(probe(403, True, "jupyter", 8888)), 0),
    Case("exposed_service", "behind an authenticating proxy (302)",
         lambda: _plain(probe(302, None)), 0),
    Case("exposed_service", "port closed", lambda: _plain(probe(None, None)), 0),
    Case("exposed_service", "probed before the window", lambda: _plain(probe(200, False,
                                                                            at=T0 - 100)), 0),
]

# --- 8. Vulnerable software -----------------------------------------------------------------------

ADVISORIES = (
    Advisory("slurm", ("22.05.11", "23.02.7", "23.11.1"), ("CVE-2023-49933",)),
    Advisory("munge", ("0.5.18",), ("CVE-2026-25506",), affected_from="0.5"),
    Advisory("nvidia_container_toolkit", ("1.16.2",), ("CVE-2024-0132",)),
    Advisory("nvidia_container_toolkit", ("1.17.8",), ("CVE-2025-23266",)),
    Advisory("pytorch", ("2.6.0",), ("CVE-2025-32434",)),
)


def inventory(*nodes: dict[str, str]) -> Inputs:
    return inputs(software=tuple(NodeSoftware(f"gpu0{i + 1}", T0, sw)
                                 for i, sw in enumerate(nodes)), advisories=ADVISORIES)


CASES += [
    Case("vulnerable_software", "toolkit 1.17.7 on one node",
         lambda: _plain(inventory({"nvidia_container_toolkit": "1.17.7"},
                                  {"nvidia_container_toolkit": "1.17.8"})), 1),
    Case("vulnerable_software", "every version fixed",
         lambda: _plain(inventory({"slurm": "23.11.1", "munge": "0.5.18", "pytorch": "2.6.0"},
                                  {"slurm": "24.05.1", "munge": "0.4.9"})), 0),
    Case("vulnerable_software", "distribution backport allow-listed",
         lambda: (inventory({"munge": "0.5.15-2+deb12u1"}),
                  Allow(versions=frozenset({("munge", "0.5.15-2+deb12u1")}))), 0),
    Case("vulnerable_software", "torch 2.5.1 (the advisory says pytorch)",
         lambda: _plain(inventory({"torch": "2.5.1"})), 1),
    Case("vulnerable_software", "nvidia-container-toolkit 1.17.7 spelled with dashes",
         lambda: _plain(inventory({"nvidia-container-toolkit": "1.17.7"},
                                  {"nvidia_container_toolkit": "1.17.8"})), 1),
    Case("vulnerable_software", "backport allow-listed under another spelling",
         lambda: (inventory({"munged": "0.5.15-2+deb12u1"}),
                  Allow(versions=frozenset({("MUNGE", "0.5.15-2+deb12u1")}))), 0),
    Case("vulnerable_software", "odd strings are skipped, not guessed",
         lambda: _plain(inventory({"slurm": "main-d5e5f51", "pytorch": ""})), 0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.rule}: {c.name}")
def test_rule_fixture(case: Case) -> None:
    data, allow = case.build()
    hits = run(case.rule, data, allow, **case.params)
    assert len(hits) == case.hits, [h.title for h in hits]
    for hit in hits:
        assert hit.rule == case.rule and hit.severity in SEVERITIES and hit.dedup


@pytest.mark.parametrize("key", sorted(RULES))
def test_every_rule_has_a_positive_and_a_negative_case(key: str) -> None:
    counts = [c.hits for c in CASES if c.rule == key]
    assert any(n > 0 for n in counts), f"{key}: no positive fixture"
    assert any(n == 0 for n in counts), f"{key}: no negative fixture"


def test_the_registry_is_complete_and_well_formed() -> None:
    assert set(RULES) == set(RUNNERS)
    assert {spec.number for spec in RULES.values()} == set(range(1, 9))
    for spec in RULES.values():
        assert spec.severity in SEVERITIES
        assert spec.attack == "" or spec.attack in ATTACK, spec.key
        assert spec.signal and spec.false_positives and spec.title
        assert check_params(spec.key, spec.params) == []


@pytest.mark.parametrize(("params", "problem"), [
    ({"util_min": -1}, "util_min: expected a number"),
    ({"util_min": "high"}, "util_min: expected a number"),
    ({"util_min": math.nan}, "util_min: expected a number"),
    ({"util_min": True}, "util_min: expected a number"),
    ({"utilmin": 0.3}, "unknown threshold 'utilmin'"),
])
def test_bad_thresholds_are_named(params: dict[str, object], problem: str) -> None:
    assert any(problem in p for p in check_params("gpu_activity_without_job", params))


def test_admin_thresholds_override_the_defaults_and_unknown_ones_are_dropped() -> None:
    cfg = config("gpu_activity_without_job", severity="critical",
                 params={"min_minutes": 30, "nonsense": 1})
    assert cfg.params["min_minutes"] == 30 and "nonsense" not in cfg.params
    assert cfg.severity == "critical"
    assert config("gpu_activity_without_job", severity="bogus").severity == "high"
    # the same busy GPU is now too short to report
    assert run("gpu_activity_without_job", busy_free_gpu(), min_minutes=30) == []


# --- What the hits say ----------------------------------------------------------------------------


def test_activity_without_job_names_the_gpu_and_the_window() -> None:
    [hit] = run("gpu_activity_without_job", busy_free_gpu())
    assert (hit.node, hit.gpu, hit.uuid, hit.severity) == ("gpu01", 0, "GPU-gpu01-0", "high")
    assert hit.start == T0 and hit.end == t(14) and hit.job_id is None
    assert hit.evidence["mean_util"] == pytest.approx(0.97)


def test_memory_left_names_the_job_that_left_it() -> None:
    [hit] = run("gpu_memory_left_after_job", memory_after_job())
    assert (hit.job_id, hit.user, hit.team, hit.severity) == (42, "alice", "nlp", "medium")
    assert hit.evidence["after_job"] == "42" and hit.start == t(9)


def test_miner_confidence_and_severity_follow_the_signals() -> None:
    [full] = run("miner_in_job", miner())
    assert (full.job_id, full.user, full.severity, full.confidence) == (7, "alice", "critical",
                                                                        "high")
    assert full.evidence["signals"]["egress"]["met"] is True
    [quiet_net] = run("miner_in_job", miner(egress=2e6))
    assert (quiet_net.severity, quiet_net.confidence) == ("high", "medium")
    assert run("miner_in_job", miner(egress=2e6), min_confidence="high") == []


def test_a_cpu_miner_in_a_gpu_job_is_raised_low_and_says_why() -> None:
    [hit] = run("miner_in_job", cpu_miner())
    assert (hit.job_id, hit.severity, hit.confidence) == (7, "low", "medium")
    signals = hit.evidence["signals"]
    assert signals["core"]["pattern"] == "CPU pegged while the allocated GPUs idle"
    assert (signals["cpu_pegged"]["met"], signals["egress"]["met"]) == (True, True)
    assert signals["high_power"]["met"] is False and "node" in hit.evidence["node_level"]
    assert (hit.start, hit.end) == (T0, t(59))
    assert run("miner_in_job", cpu_miner(), cpu_only_severity="medium")[0].severity == "medium"


def test_no_interconnect_counts_infiniband_on_the_jobs_nodes() -> None:
    [quiet] = run("miner_in_job", multi_node_miner(ib=5e7))
    signal = quiet.evidence["signals"]["no_interconnect"]
    assert signal["met"] is True and signal["ib_bps"] == pytest.approx(5e7)
    assert run("miner_in_job", multi_node_miner(ib=5e7), ib_quiet_bps=1e7) == []


def test_miner_noise_does_not_split_a_run() -> None:
    [hit] = run("miner_in_job", miner(util=0.0) if False else inputs(
        [gpu(points(60, util=lambda i: 0.93 if i % 7 == 0 else 1.0, tensor=0.0, sm=0.98,
                    fb_mib=3000.0, power_w=390.0, owners=("7",)), model=A100)],
        [node(node_points(60, egress_bps=4e6)), node(node_points(60, egress_bps=2e6), "x")],
        [job(7, "alice", end=T0 + 2 * HOUR)]))
    assert hit.start == T0 and hit.end == t(59)


def test_miner_time_alignment_picks_the_job_that_lines_up() -> None:
    data = miner(owners=(), bound=False, allocations=[
        job(7, "alice", start=T0 - 30, end=t(59) + 20), job(8, "bob", start=T0 - 30,
                                                            end=t(59) + 7200)])
    [hit] = run("miner_in_job", data)
    assert hit.job_id == 7 and hit.evidence["attribution"] == "time alignment"


def test_miner_on_a_node_with_two_jobs_lining_up_is_a_node_finding() -> None:
    data = miner(owners=(), bound=False, allocations=[
        job(7, "alice", start=T0 - 30, end=t(59) + 20), job(8, "bob", start=T0 - 20,
                                                            end=t(59) + 10)])
    [hit] = run("miner_in_job", data)
    assert hit.job_id is None and hit.node == "gpu01" and hit.confidence == "medium"
    assert hit.evidence["candidates"] == [7, 8]


def test_ib_finding_says_the_counters_are_node_level() -> None:
    [hit] = run("ib_traffic_without_multinode_job", ib(9.5e9, [job(5, "bob"), job(9, "carol")]))
    assert hit.node == "gpu01" and hit.evidence["device"] == "mlx5_0"
    assert "per node" in hit.evidence["node_level"]
    assert {j["user"] for j in hit.evidence["other_jobs"]} == {"bob", "carol"}


def test_ssh_hit_carries_the_users_team() -> None:
    [hit] = run("ssh_without_allocation", ssh([login("mallory", T0 + 100)]), ADMINS)
    assert (hit.node, hit.user, hit.team, hit.severity) == ("gpu04", "mallory", "multimodal",
                                                            "high")


def test_exposed_service_severity_depends_on_code_execution() -> None:
    assert [h.severity for h in run("exposed_service", probe(200, False))] == ["critical"]
    assert [h.severity for h in run("exposed_service", probe(200, False, "tensorboard",
                                                             6006))] == ["medium"]
    assert [h.severity for h in run("exposed_service", probe(200, False, "", 8888))] == \
        ["critical"]  # the service named from its port


def test_unexpected_source_needs_the_sites_networks() -> None:
    data = sourced("192.168.7.7")
    assert run("ssh_unexpected_source", data, allowed_sources=[]) == []
    outcome = RUNNERS["ssh_unexpected_source"](
        data, config("ssh_unexpected_source", params={"allowed_sources": ["not-a-net",
                                                                          "10.0.0.0/8"]}),
        Allow())
    assert len(outcome.hits) == 1 and "not-a-net" in outcome.skipped[0]


def test_a_version_on_every_node_is_one_cluster_finding() -> None:
    data = inventory({"slurm": "22.05.8", "munge": "0.5.15"}, {"slurm": "22.05.8",
                                                                 "munge": "0.5.15"},
                     {"slurm": "22.05.8", "munge": "0.5.16", "pytorch": "2.5.1"})
    hits = {(h.evidence["software"], h.evidence["version"], h.node) for h in
            run("vulnerable_software", data)}
    assert hits == {("slurm", "22.05.8", ""), ("munge", "0.5.15", "gpu01"),
                    ("munge", "0.5.15", "gpu02"), ("munge", "0.5.16", "gpu03"),
                    ("pytorch", "2.5.1", "gpu03")}


def test_odd_version_strings_are_recorded_as_skipped() -> None:
    outcome = RUNNERS["vulnerable_software"](inventory({"slurm": "main-d5e5f51"}),
                                             config("vulnerable_software"), Allow())
    assert outcome.hits == [] and "main-d5e5f51" in outcome.skipped[0]


def test_toolkit_versions_list_every_cve_they_miss() -> None:
    [hit] = run("vulnerable_software", inventory({"nvidia_container_toolkit": "1.16.1"},
                                                 {"nvidia_container_toolkit": "1.17.8"}))
    assert hit.evidence["cves"] == ["CVE-2024-0132", "CVE-2025-23266"] and hit.node == "gpu01"


def test_site_module_versions_name_the_module() -> None:
    hits = run("vulnerable_software", inventory(
        {"pytorch:ml/2024.1": "2.5.1", "torch:ml/2025.1": "2.6.0"},
        {"torch:ml/2024.1-cuda": "2.5.1+cu121", "pytorch:ml/2025.1": "2.6.0"}))
    assert {(h.node, h.evidence["version"], tuple(h.evidence["provided_by"])) for h in hits} == \
        {("gpu01", "2.5.1", ("ml/2024.1",)), ("gpu02", "2.5.1+cu121", ("ml/2024.1-cuda",))}
    assert {h.evidence["software"] for h in hits} == {"pytorch"}


def test_unexpected_source_says_whose_source_it_was() -> None:
    [hit] = run("ssh_unexpected_source", sourced("10.30.0.5"), SITE_SOURCES)
    assert hit.evidence["user_kind"] == "users"
    assert hit.evidence["why"] == "admin bastion is for admins only"


def test_ib_finding_names_the_baseline_it_used() -> None:
    allow = Allow(ib_baselines=(IbBaseline(5e9, hosts="gpu0*", name="rack 0"),))
    [hit] = run("ib_traffic_without_multinode_job", ib(9.5e9), allow)
    assert (hit.evidence["baseline_bps"], hit.evidence["baseline_from"]) == (5e9, "rack 0")


def test_disabled_rules_find_nothing() -> None:
    from apps.analysis.security_rules import run as run_rule
    from apps.analysis.security_types import RuleConfig

    off = RuleConfig(False, "high", config("gpu_activity_without_job").params)
    assert run_rule("gpu_activity_without_job", busy_free_gpu(), off, Allow()).hits == []


def test_step_constant_is_a_minute() -> None:
    assert STEP == 60.0  # the fixtures above count minutes as buckets
