"""Files a node-side collector would gather: sshd logs, software inventories, exposed services,
and the job scripts Slurm stores with ``AccountingStoreFlags=job_script``."""

from __future__ import annotations

import json
import random
import string
import time
from pathlib import Path
from typing import Any

from apps.simulator.cluster import ADMINS, Cluster
from apps.simulator.truth import Truth
from apps.simulator.workload import Job

BASE_VERSIONS = {"os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0-28-amd64",
                 "nvidia_driver": "550.127.05", "cuda": "12.4", "slurm": "22.05.8",
                 "munge": "0.5.15", "nvidia_container_toolkit": "1.17.8", "pytorch": "2.6.0",
                 "dcgm_exporter": "4.2.3-4.1.3"}
# What a patched site runs instead of BASE_VERSIONS' vulnerable Slurm and MUNGE (the
# releases that fixed CVE-2023-49933..49938 and CVE-2026-25506): a month without incidents.
PATCHED_VERSIONS = {"slurm": "22.05.11", "munge": "0.5.18"}
_ALNUM = string.ascii_letters + string.digits


# --- job scripts ---------------------------------------------------------------------


def token(rng: random.Random, kind: str) -> str:
    """A token-SHAPED random string, made at run time (never a literal in the repo)."""
    if kind == "huggingface":
        return "hf" + "_" + "".join(rng.choice(string.ascii_letters) for _ in range(34))
    return "gh" + "p_" + "".join(rng.choice(_ALNUM) for _ in range(36))


def script(job: Job, nodes: int, kind: str | None, rng: random.Random) -> str:
    """The batch script as ``sacct --batch-script`` would print it."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job.name}", f"#SBATCH --account={job.account}",
             f"#SBATCH --partition={job.partition}", f"#SBATCH --qos={job.qos}",
             f"#SBATCH --nodes={nodes}", f"#SBATCH --gres=gpu:{min(8, job.gpus)}",
             f"#SBATCH --time={job.time_limit_min // 60:02d}:{job.time_limit_min % 60:02d}:00",
             "#SBATCH --output=%x-%j.out"]
    if job.array_spec:
        lines.append(f"#SBATCH --array={job.array_spec}")
    if job.after:
        lines.append(f"#SBATCH --dependency=afterok:{job.after}")
    if job.hold_until is not None:
        lines.append("#SBATCH --hold")
    lines += ["", "source ~/venvs/torch/bin/activate", "export NCCL_IB_HCA=mlx5_0,mlx5_1"]
    if kind == "huggingface":
        lines.append(f"export HF_TOKEN={token(rng, kind)}")
    elif kind == "github":
        lines.append(f"git clone https://{token(rng, kind)}@github.com/acme/{job.name}.git")
    else:
        lines.append("export HF_TOKEN=$(cat ~/.cache/huggingface/token)")  # the safe pattern
    if job.kind in ("train", "train1"):
        lines.append("srun torchrun --nnodes=$SLURM_NNODES --nproc-per-node=8 "
                     "--rdzv-backend=c10d --rdzv-endpoint=$(hostname):29500 train.py "
                     "--config configs/run.yaml")
    else:
        lines.append(f"python {job.kind}.py --task-id ${{SLURM_ARRAY_TASK_ID:-0}}")
    return "\n".join(lines) + "\n"


def write_scripts(directory: Path, jobs: list[Job], truth: Truth, seed: int) -> int:
    rng = random.Random(f"{seed}:scripts")
    directory.mkdir(parents=True, exist_ok=True)
    count = 0
    for job in jobs:
        if job.batch:
            (directory / f"{job.job_id}.sh").write_text(
                script(job, job.nodes_wanted, truth.secrets.get(job.job_id), rng))
            count += 1
    return count


# --- sshd logs -------------------------------------------------------------------------


def write_sshd_logs(directory: Path, cluster: Cluster, jobs: list[Job], truth: Truth,
                    t0: int, now: int, seed: int) -> int:
    """``logs/sshd-<node>.log``: users reaching their jobs, denials, and the intrusion."""
    rng = random.Random(f"{seed}:sshd")
    directory.mkdir(parents=True, exist_ok=True)
    lines: dict[int, list[tuple[int, str]]] = {n.index: [] for n in cluster.nodes}
    for job in jobs:
        if job.start is not None and (job.end or now) > t0 and rng.random() < 0.25:
            node = job.alloc[0][0]
            first = max(job.start, t0)  # within the job's first 10 minutes, while it runs
            t = rng.randrange(first, max(first + 1, min(first + 600, (job.end or now) - 1)))
            lines[node] += _session(rng, cluster, job.user, t, rng.randint(60, 3600))
    for _ in range(max(2, len(cluster.nodes) // 2)):  # someone tries a node they have no job on
        node, t = rng.randrange(len(cluster.nodes)), rng.randrange(t0, now)
        user = rng.choice(cluster.users)
        lines[node].append((t, f"sshd[{rng.randint(2000, 60000)}]: pam_slurm_adopt: "
                               f"Access denied by pam_slurm_adopt: you have no active jobs on "
                               f"this node"))
        lines[node].append((t, f"sshd[{rng.randint(2000, 60000)}]: Connection closed by "
                               f"authenticating user {user} {_ip(rng)} port "
                               f"{rng.randint(30000, 60000)} [preauth]"))
    for index in range(len(cluster.nodes)):  # admins may log in anywhere
        lines[index] += _session(rng, cluster, ADMINS[1], rng.randrange(t0, now), 300)
    for index, user, t in truth.ssh_intrusions:
        lines[index] += _session(rng, cluster, user, t, 1800)
    for host in cluster.nodes:
        entries = sorted(lines[host.index])
        text = "".join(f"{time.strftime('%b %e %H:%M:%S', time.gmtime(t))} {host.name} {msg}\n"
                       for t, msg in entries)
        (directory / f"sshd-{host.name}.log").write_text(text)
    return sum(len(v) for v in lines.values())


def _ip(rng: random.Random) -> str:
    return f"10.20.{rng.randint(0, 3)}.{rng.randint(2, 250)}"


def _session(rng: random.Random, cluster: Cluster, user: str, t: int,
             length: int) -> list[tuple[int, str]]:
    pid = rng.randint(2000, 60000)
    uid = cluster.uid(user) if user in cluster.users else 990
    fingerprint = "".join(rng.choice(_ALNUM + "+/") for _ in range(43))
    ip, port = _ip(rng), rng.randint(30000, 60000)
    return [
        (t, f"sshd[{pid}]: Accepted publickey for {user} from {ip} port {port} ssh2: "
            f"ED25519 SHA256:{fingerprint}"),
        (t, f"sshd[{pid}]: pam_unix(sshd:session): session opened for user {user}(uid={uid}) "
            f"by (uid=0)"),
        (t + length, f"sshd[{pid}]: Received disconnect from {ip} port {port}:11: "
                     f"disconnected by user"),
        (t + length, f"sshd[{pid}]: pam_unix(sshd:session): session closed for user {user}"),
    ]


# --- inventory and exposed services -------------------------------------------------------


def write_inventory(directory: Path, cluster: Cluster, truth: Truth, now: int,
                    patched: bool = False) -> None:
    """``inventory/<node>.json``: the baseline versions (vulnerable Slurm and MUNGE unless
    ``patched``) with the planted per-node vulnerable ones."""
    directory.mkdir(parents=True, exist_ok=True)
    base = {**BASE_VERSIONS, **PATCHED_VERSIONS} if patched else BASE_VERSIONS
    for node in cluster.nodes:
        versions = {**base, **truth.vulnerable.get(node.index, {})}
        if not node.group.job_mapping or node.group.name == "newer":
            versions["dcgm_exporter"] = "main-d5e5f51" if node.group.name == "newer" else "3.3.9"
        doc = {"node": node.name, "collected_at": now, "software": versions}
        (directory / f"{node.name}.json").write_text(json.dumps(doc, indent=2) + "\n")


def services(cluster: Cluster, jobs: dict[int, Job], truth: Truth, now: int,
             seed: int) -> dict[str, Any]:
    """``collector/services.json``: allow-listed probes of allocated nodes."""
    rng = random.Random(f"{seed}:services")
    probes = []
    for s in truth.services:
        job = jobs[int(s["job"])]  # type: ignore[call-overload]
        node = cluster.nodes[int(s["node"])]  # type: ignore[call-overload]
        path = "/api/jobs/" if s["service"] == "ray-dashboard" else "/api/kernels"
        probes.append({"node": node.name, "port": s["port"], "service": s["service"],
                       "url": f"http://{node.name}:{s['port']}{path}", "status": 200,
                       "auth_required": False, "job_id": job.job_id, "user": job.user,
                       "observed_at": now - rng.randint(60, 1700)})
    running = sorted((j for j in jobs.values() if j.end is None and j.start is not None),
                     key=lambda j: j.job_id)
    for job in running[:3]:  # authenticated servers: not findings
        node = cluster.nodes[job.alloc[0][0]]
        probes.append({"node": node.name, "port": 8888, "service": "jupyter",
                       "url": f"http://{node.name}:8888/api/kernels", "status": 403,
                       "auth_required": True, "job_id": job.job_id, "user": job.user,
                       "observed_at": now - rng.randint(60, 1700)})
    return {"collected_at": now, "ports": [8265, 10001, 8888, 6006, 5000, 7860],
            "probes": probes}
