"""Security detection rules: the registry, the admins' configuration, and one runner.

Each rule has a stable key, a spec in ``RULES`` (the threat number from the issue,
severity, ATT&CK technique, default thresholds, false positives) and a pure function
``rule(inputs, config, allow) -> Outcome`` in ``security_gpu``, ``security_net`` or
``security_host``. Thresholds and allow-lists are data admins edit (``apps/security``);
the defaults below are the starting points documented in docs/security-rules.md, with
each rule's signal, false positives and tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from apps.analysis import security_gpu, security_host, security_miner, security_net
from apps.analysis.security_types import SEVERITIES, Allow, Inputs, Outcome, RuleConfig

Rule = Callable[[Inputs, RuleConfig, Allow], Outcome]

# ATT&CK techniques the rules cite, pinned (Enterprise v16): a test checks every rule's.
ATTACK = {
    "T1496.001": "Resource Hijacking: Compute Hijacking",
    "T1599": "Network Boundary Bridging",
    "T1552.001": "Unsecured Credentials: Credentials In Files",
    "T1021.004": "Remote Services: SSH",
    "T1078": "Valid Accounts",
    "T1190": "Exploit Public-Facing Application",
    "T1068": "Exploitation for Privilege Escalation",
}


@dataclass(frozen=True)
class RuleSpec:
    """What a rule is: its key, the issue's threat number, words, and default data."""

    key: str
    number: int
    title: str
    severity: str
    attack: str
    signal: str
    false_positives: str
    params: Mapping[str, Any]


# --- The registry -------------------------------------------------------------------------

GPU_POWER_W = {"H100 PCIe": 350, "H100 NVL": 400, "H100": 700, "H200": 700, "GH200": 900,
               "B200": 1000, "A100": 400, "A10": 150, "L40S": 350, "L40": 300, "L4": 72,
               "V100": 300}
SERVICE_PORTS = {"8265": "ray-dashboard", "10001": "ray-client", "8888": "jupyter",
                 "6006": "tensorboard", "5000": "mlflow", "7860": "gradio"}

RULES: dict[str, RuleSpec] = {spec.key: spec for spec in (
    RuleSpec("gpu_activity_without_job", 1, "GPU activity that belongs to no job", "high",
             "T1496.001",
             "A GPU no job holds (no hpc_job label, no GPU binding) is busy or holds memory "
             "for several minutes.",
             "Prolog/epilog races (min_minutes), health checks and burn-in (quiet windows), "
             "drained nodes (quiet windows), an index mismatch between Slurm and NVML.",
             {"util_min": 0.20, "fb_min_mib": 2048, "min_minutes": 10}),
    RuleSpec("miner_in_job", 2, "Miner-like compute inside a job", "critical", "T1496.001",
             "A job's GPUs run flat out with no tensor-pipe work, and at least two of: a "
             "small memory footprint, high steady power, node egress well above the "
             "cluster's, no NVLink or InfiniBand traffic in a multi-GPU job, off-hours, its "
             "nodes' CPU pegged. The confidence is stated; without the egress signal the "
             "severity is one lower. Or its nodes' CPU is pegged while its GPUs idle, with "
             "egress: raised at cpu_only_severity (low).",
             "Non-tensor GPU codes (CFD, molecular dynamics): large memory, interconnect "
             "traffic, no egress, so they stay below the confidence floor. CPU-heavy "
             "preprocessing with idle GPUs: no egress, so below the floor; low otherwise.",
             {"util_min": 0.95, "tensor_max": 0.02, "sm_min": 0.85, "min_minutes": 30,
              "fb_small_mib": 8192, "power_share_min": 0.85, "gpu_power_w": GPU_POWER_W,
              "egress_ratio": 1.5, "nvlink_quiet_bps": 1e8, "ib_quiet_bps": 1e9,
              "offhours_start": 20, "offhours_end": 7, "min_confidence": "medium",
              "cpu_busy_min": 0.95, "gpu_idle_max": 0.05, "cpu_only_severity": "low"}),
    RuleSpec("ib_traffic_without_multinode_job", 3,
             "InfiniBand traffic with no multi-node job", "medium", "T1599",
             "InfiniBand bytes on a node above the storage baseline while no multi-node job "
             "holds it. Counters are node-level: the evidence names the jobs sharing it.",
             "Lustre o2ib / GPFS verbs traffic of single-node jobs (raise baseline_bps), a "
             "multi-node job's first or last minutes (grace_minutes).",
             {"baseline_bps": 2e9, "min_minutes": 10, "grace_minutes": 5}),
    RuleSpec("rdma_transport_errors", 3, "RDMA transport errors without link errors",
             "medium", "T1599",
             "Out-of-sequence and duplicate-request packets on a node whose links report no "
             "symbol errors or recoveries: traffic nobody's link explains.",
             "Congestion and retransmits (a per-node baseline), link flaps (excluded: the "
             "rule needs flat link errors), firmware quirks.",
             {"errors_per_s": 100.0, "min_minutes": 5}),
    RuleSpec("ib_partition_key_violation", 3, "InfiniBand partition-key violations", "high",
             "T1599",
             "Any increase of a port's partition-key constraint errors: a port sending into "
             "a partition it is not a member of.",
             "Subnet-manager reconfiguration while P_Keys change (quiet windows).",
             {"min_errors": 1.0}),
    RuleSpec("secret_in_job_script", 4, "Secret in a job script or environment", "high",
             "T1552.001",
             "A token shape (Hugging Face, GitHub, cloud keys, Slack, private keys) or a "
             "password in a URL in a stored batch script or job environment. Only the "
             "kind, the line and a keyed fingerprint are kept.",
             "Placeholders and variable references are skipped; revoked or test tokens are "
             "resolved by their owner as such.",
             {"kinds": []}),
    RuleSpec("ssh_without_allocation", 5, "SSH login to a compute node without an allocation",
             "high", "T1021.004",
             "An accepted sshd login of a user with no job on that node at that time (give or "
             "take grace_minutes): the pam_slurm_adopt bypass.",
             "Admins and service accounts (allow-list), a job that ended moments before "
             "(grace_minutes), MPI over ssh (adopted into the job, so inside an allocation).",
             {"grace_minutes": 5}),
    RuleSpec("ssh_repeated_denials", 5, "Repeated pam_slurm_adopt denials", "medium",
             "T1021.004",
             "At least `count` pam_slurm_adopt denials (or failed passwords) from one source "
             "within `window_minutes`.",
             "A user retrying after their job ended; raise `count`.",
             {"count": 5, "window_minutes": 10}),
    RuleSpec("ssh_unexpected_source", 5, "SSH login from an unexpected source", "medium",
             "T1078",
             "An accepted login from an address outside the site's login and transfer nodes "
             "(`allowed_sources`, CIDRs; the rule is off while the list is empty).",
             "Admin jump hosts and Open OnDemand nodes: add their networks.",
             {"allowed_sources": []}),
    RuleSpec("exposed_service", 6, "Exposed code-execution service on a compute node",
             "critical", "T1190",
             "A probe of an allocated node's Ray (8265/10001), Jupyter (8888), TensorBoard, "
             "MLflow or Gradio port answered without authentication. Unauthenticated code "
             "execution (Ray jobs API, Jupyter kernels) is critical; other open services two "
             "levels lower; services that ask for authentication are not findings.",
             "Services behind an authenticating proxy answer 302/401/403: not findings.",
             {"code_exec_services": ["ray-dashboard", "ray-jobs", "ray-client", "jupyter"],
              "ports": SERVICE_PORTS}),
    RuleSpec("gpu_memory_left_after_job", 7, "GPU memory left after a job ended", "medium",
             "",
             "Right after a job's last bucket on a GPU, with no job holding it, the GPU keeps "
             "memory in use (a leftover process) for several minutes while idle.",
             "The persistence daemon holds a few hundred MiB (below fb_min_mib); an epilog "
             "that cleans up slowly (min_minutes).",
             {"fb_min_mib": 2048, "util_below": 0.20, "min_minutes": 10}),
    RuleSpec("gpu_shared_between_users", 7, "GPU shared between users without MIG", "medium",
             "",
             "One GPU held by jobs of different users at once, outside MIG. Policy `mig` "
             "allows MIG only, `exclusive` flags MIG sharing too, `shared` turns this off.",
             "One user running several jobs on a GPU (same user: not flagged).",
             {"policy": "mig", "min_minutes": 10}),
    RuleSpec("vulnerable_software", 8, "Vulnerable component version", "high", "T1068",
             "A node inventory reports a version the advisory table lists as affected. A "
             "version found on every inventoried node is one cluster-wide finding.",
             "Distribution backports keep old version strings: allow-list the exact string.",
             {"cluster_wide_share": 1.0}),
)}


def check_params(key: str, params: Mapping[str, Any]) -> list[str]:
    """Problems with admin-edited thresholds: unknown names, wrong types, negative numbers."""
    expected = RULES[key].params
    problems = [f"unknown threshold {name!r} (known: {', '.join(sorted(expected))})"
                for name in params if name not in expected]
    for name, value in params.items():
        if name in expected:
            problems += _type_problems(name, value, expected[name])
    return problems


def _type_problems(name: str, value: Any, default: Any) -> list[str]:
    if isinstance(default, bool | str):
        ok = isinstance(value, type(default))
    elif isinstance(default, int | float):
        ok = isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value) and value >= 0
    else:
        ok = isinstance(value, type(default))
    return [] if ok else [f"{name}: expected {_kind(default)}, got {value!r}"]


def _kind(default: Any) -> str:
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int | float):
        return "a number >= 0"
    names: dict[type, str] = {str: "text", list: "a list", dict: "an object"}
    return names.get(type(default), "a value")


RUNNERS: dict[str, Rule] = {
    "gpu_activity_without_job": security_gpu.gpu_activity_without_job,
    "miner_in_job": security_miner.miner_in_job,
    "ib_traffic_without_multinode_job": security_net.ib_traffic_without_multinode_job,
    "rdma_transport_errors": security_net.rdma_transport_errors,
    "ib_partition_key_violation": security_net.ib_partition_key_violation,
    "secret_in_job_script": security_host.secret_in_job_script,
    "ssh_without_allocation": security_net.ssh_without_allocation,
    "ssh_repeated_denials": security_net.ssh_repeated_denials,
    "ssh_unexpected_source": security_net.ssh_unexpected_source,
    "exposed_service": security_net.exposed_service,
    "gpu_memory_left_after_job": security_gpu.gpu_memory_left_after_job,
    "gpu_shared_between_users": security_gpu.gpu_shared_between_users,
    "vulnerable_software": security_host.vulnerable_software,
}
# What each rule reads, so a run can say which rules a missing source silenced.
NEEDS: dict[str, str] = {
    "gpu_activity_without_job": "telemetry", "miner_in_job": "telemetry",
    "ib_traffic_without_multinode_job": "telemetry", "rdma_transport_errors": "telemetry",
    "ib_partition_key_violation": "telemetry", "gpu_memory_left_after_job": "telemetry",
    "gpu_shared_between_users": "telemetry", "secret_in_job_script": "job scripts",
    "ssh_without_allocation": "sshd logs", "ssh_repeated_denials": "sshd logs",
    "ssh_unexpected_source": "sshd logs", "exposed_service": "service probes",
    "vulnerable_software": "node inventory",
}


def config(key: str, *, enabled: bool = True, severity: str = "",
           params: Mapping[str, Any] | None = None) -> RuleConfig:
    """A rule's effective configuration: the defaults with the admins' changes on top."""
    spec = RULES[key]
    merged = {**spec.params, **{k: v for k, v in (params or {}).items() if k in spec.params}}
    return RuleConfig(enabled, severity if severity in SEVERITIES else spec.severity, merged)


def run(key: str, inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Run one rule (a disabled rule finds nothing)."""
    return RUNNERS[key](inputs, cfg, allow) if cfg.enabled else Outcome()
