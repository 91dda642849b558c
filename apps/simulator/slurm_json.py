"""Slurm 22.05 output shapes: ``sacct -a --json``, ``squeue --json``, ``sinfo --json``.

Key names, nesting, key order and null rules follow the 22.05 ``openapi/dbv0.0.38``
(sacct) and ``openapi/v0.0.38`` (squeue, sinfo) dumpers, including their quirks:
sacct's ``exit_code`` says ``SUCCESS``/0 for any normal exit (the real code only shows in
text ``sacct -P -o JobIDRaw,ExitCode``, also written here), and ``reservation.name`` is 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import IO, Any

from apps.analysis.hostlist import compress, compress_ranges
from apps.simulator.cluster import GPU_MODELS, Cluster
from apps.simulator.workload import Job, NodeOutage

SLURM_VERSION = {"major": 22, "micro": 8, "minor": 5}
RELEASE = "22.05.8"
TRES_IDS = {("cpu", ""): 1, ("mem", ""): 2, ("energy", ""): 3, ("node", ""): 4,
            ("billing", ""): 5, ("fs", "disk"): 6, ("vmem", ""): 7, ("pages", ""): 8,
            ("gres", "gpu"): 1001, ("gres", "gpu:h100"): 1002, ("gres", "gpu:a100"): 1003,
            ("gres", "gpu:h200"): 1004, ("gres", "gpu:mi300x"): 1005}
SUBMIT_REASONS = ("Dependency", "DependencyNeverSatisfied", "JobHeldUser", "JobArrayTaskLimit")
SIGNAL_NAMES = {9: "Killed", 15: "Terminated", 125: "Unknown signal 125"}


def meta(plugin: str, name: str) -> dict[str, Any]:
    return {"plugin": {"type": plugin, "name": name},
            "Slurm": {"version": dict(SLURM_VERSION), "release": RELEASE}}


# --- sacct --------------------------------------------------------------------------


def write_sacct(out: IO[str], cluster: Cluster, jobs: Iterable[Job], now: int) -> int:
    """Stream ``sacct -a --json`` (one job object per line): with ``-S/-E`` the period's
    jobs that were ever eligible (a window drops held and dependent jobs until they are:
    ``in_window``), with ``-j`` any jobs given."""
    head = {"meta": meta("openapi/dbv0.0.38", "Slurm OpenAPI DB v0.0.38"), "errors": []}
    out.write(json.dumps(head)[:-1] + ', "jobs": [\n')
    count = 0
    for job in jobs:
        out.write((",\n" if count else "") + json.dumps(sacct_job(cluster, job, now)))
        count += 1
    out.write("\n]}\n")
    return count


def sacct_job(cluster: Cluster, job: Job, now: int) -> dict[str, Any]:
    """One job record as ``/slurmdb/v0.0.38/jobs`` dumps it (order of parse_job[])."""
    started = job.start is not None
    end = job.end or 0
    elapsed = ((job.end or now) - job.start) if job.start is not None else 0
    cpu_user, cpu_sys = int(elapsed * job.cpus * 0.55), int(elapsed * job.cpus * 0.04)
    return {
        "account": job.account,
        "comment": {"administrator": None, "job": None, "system": None},
        "allocation_nodes": len(job.alloc),
        "array": {"job_id": job.array_job_id,  # the throttle shows on the raw id's record
                  "limits": {"max": {"running": {"tasks": job.array_limit
                                                 if job.job_id == job.array_job_id else 0}}},
                  "task": None, "task_id": job.array_task_id},
        "association": {"account": job.account, "cluster": cluster.name,
                        "partition": None, "user": job.user},
        "cluster": cluster.name,
        "constraints": "",
        "container": None,
        "derived_exit_code": {"status": "SUCCESS", "return_code": 0},
        "time": {"elapsed": elapsed, "eligible": job.eligible or 0, "end": end,
                 "start": _start_time(job), "submission": job.submit, "suspended": 0,
                 "system": {"seconds": cpu_sys, "microseconds": 0},
                 "limit": job.time_limit_min,
                 "total": {"seconds": cpu_user + cpu_sys, "microseconds": 0},
                 "user": {"seconds": cpu_user, "microseconds": 0}},
        "exit_code": exit_dict(job),
        "flags": ["CLEAR_SCHEDULING",
                  "STARTED_ON_BACKFILL" if job.backfilled else "STARTED_ON_SCHEDULE"]
        if started else [],
        "group": job.user,  # the user's primary group, named after the user
        "het": {"job_id": job.het_job_id, "job_offset": job.het_offset},
        "job_id": job.job_id,
        "name": job.name,
        "mcs": {"label": ""},
        "nodes": node_list(cluster, job) or "None assigned",
        "partition": job.partition,
        "priority": job.priority,
        "qos": job.qos,
        "required": {"CPUs": job.cpus, "memory": job.memory_mb},
        "kill_request_user": job.user if job.state == "CANCELLED" else None,
        "reservation": {"id": 0, "name": 0},
        "state": {"current": job.state, "reason": db_reason(job)},
        "steps": steps(cluster, job, now) if started else [],
        "tres": {"allocated": tres_list(cluster, job, allocated=True) if started else [],
                 "requested": tres_list(cluster, job, allocated=False)},
        "user": job.user,
        "wckey": {"wckey": "", "flags": []},
        "working_directory": f"/home/{job.user}/{job.name}",
    }


def db_reason(job: Job) -> str:
    """``state.reason`` as slurmdbd stores it: once started, the last pending reason that was
    not plain priority or resources (``state_reason_prev_db``); before that, the reason the
    job was queued with (recorded: a job held by a quota still says ``None``)."""
    if job.start is not None or job.wait_reason in SUBMIT_REASONS:
        return job.wait_reason
    return "None"


def in_window(job: Job) -> bool:
    """``sacct -S/-E`` lists a job only once it has an eligible time (22.05: no held job,
    no job waiting on a dependency, even once cancelled)."""
    return job.eligible is not None


def _start_time(job: Job) -> int:
    if job.start is not None:
        return job.start
    return job.end or 0  # cancelled while pending: start = end (recorded on 22.05.8)


def exit_dict(job: Job) -> dict[str, Any]:
    """dbv0.0.38 ``_dump_job_exit_code``: SUCCESS/0 for any normal exit, even exit 3.

    Recorded 22.05.8 output: pending and cancelled jobs say SUCCESS too; only kills
    (9) and the OOM status (125) come out SIGNALED.
    """
    signal = job.signal if job.signal in (9, 125) else 0
    if signal:
        return {"status": "SIGNALED", "return_code": None,
                "signal": {"signal_id": signal, "name": SIGNAL_NAMES.get(signal, str(signal))}}
    return {"status": "SUCCESS", "return_code": 0}


def exit_text(job: Job) -> str:
    """Text sacct's ``ExitCode`` column (``3:0``), which keeps the real exit code."""
    return f"{job.exit_code}:{job.signal}"


def node_list(cluster: Cluster, job: Job) -> str:
    return compress(cluster.nodes[n].name for n in job.nodes_used)


def tres_list(cluster: Cluster, job: Job, allocated: bool) -> list[dict[str, Any]]:
    nodes = max(1, len(job.alloc) if allocated else job.nodes_wanted)
    items = [("cpu", "", job.cpus), ("mem", "", job.memory_mb), ("node", "", nodes),
             ("billing", "", job.cpus + 8 * job.gpus), ("gres", "gpu", job.gpus),
             ("gres", f"gpu:{gpu_type(cluster, job)}", job.gpus)]
    return [_tres(t, n, TRES_IDS[(t, n)], c) for t, n, c in items]


def gpu_type(cluster: Cluster, job: Job) -> str:
    """The job's GPU model: from its first node, or its partition's while pending."""
    node = job.alloc[0][0] if job.alloc else cluster.partition(job.partition).node_indices[0]
    return cluster.nodes[node].gpu_type


def steps(cluster: Cluster, job: Job, now: int) -> list[dict[str, Any]]:
    """The batch step and, for training, step 0 (srun torchrun on every node)."""
    names = [cluster.nodes[n].name for n in job.nodes_used]
    gres = tres_list(cluster, job, allocated=True)[-2:]
    out = []
    if job.batch:
        out.append(_step(job, "batch", "batch", names[:1], 1, now, gres))
    if job.kind in ("train", "train1") or not job.batch:
        out.append(_step(job, 0, "torchrun" if job.batch else "bash", names, len(names), now,
                         gres))
    return out


def _max_rss(job: Job) -> int:
    """A step's MaxRSS in bytes: the job's peak per node (``Job.rss_per_node_bytes``, the
    figure the node exporter's memory in use adds up too)."""
    return job.rss_per_node_bytes()


def _step(job: Job, step_id: int | str, name: str, nodes: list[str], tasks: int,
          now: int, gres: list[dict[str, Any]]) -> dict[str, Any]:
    assert job.start is not None
    end = job.end or 0
    elapsed = (job.end or now) - job.start
    running = job.end is None
    state = "RUNNING" if running else job.state
    cpus = job.cpus if step_id != "batch" else max(1, job.cpus // max(1, len(job.alloc)))
    mem = _max_rss(job)
    usage_max = [_nct("cpu", "", 1, cpus * elapsed // 2, nodes[0]),
                 _nct("mem", "", 2, mem, nodes[-1]), _nct("vmem", "", 7, mem * 2, nodes[-1])]
    return {
        "nodes": {"list": nodes, "count": len(nodes), "range": compress(nodes)},
        "tres": {"requested": {"max": usage_max, "min": usage_max,
                               "average": [_tres("cpu", "", 1, cpus * elapsed // 2),
                                           _tres("mem", "", 2, mem)],
                               "total": [_tres("cpu", "", 1, cpus * elapsed),
                                         _tres("mem", "", 2, mem * len(nodes))]},
                 "consumed": {"max": [_nct("energy", "", 3, 0, nodes[0])],
                              "min": [_nct("energy", "", 3, 0, nodes[0])],
                              "average": [_tres("energy", "", 3, 0)],
                              "total": [_tres("energy", "", 3, 0)]},
                 "allocated": [_tres("cpu", "", 1, cpus), _tres("mem", "", 2, job.memory_mb),
                               _tres("node", "", 4, len(nodes)), *gres]},
        "time": {"elapsed": elapsed, "end": end, "start": job.start, "suspended": 0,
                 "system": {"seconds": elapsed // 50, "microseconds": 0},
                 "total": {"seconds": elapsed // 2, "microseconds": 0},
                 "user": {"seconds": elapsed // 2 - elapsed // 50, "microseconds": 0}},
        "exit_code": exit_dict(job),
        "tasks": {"count": tasks},
        "pid": None,
        "CPU": {"requested_frequency": {"min": 0, "max": 0}, "governor": []},
        "kill_request_user": None,
        "state": state,
        "statistics": {"CPU": {"actual_frequency": 0}, "energy": {"consumed": 0}},
        "step": {"job_id": job.job_id, "het": {"component": None}, "id": step_id, "name": name},
        "task": {"distribution": "Block" if tasks > 1 else "Unknown"},
    }


def _tres(t: str, name: str, tres_id: int, count: int) -> dict[str, Any]:
    """A TRES entry; unnamed TRES (cpu, mem, node, billing) carry ``name: null``."""
    return {"type": t, "name": name or None, "id": tres_id, "count": count}


def _nct(t: str, name: str, tres_id: int, count: int, node: str) -> dict[str, Any]:
    return {**_tres(t, name, tres_id, count), "task": 0, "node": node}


# --- squeue --------------------------------------------------------------------------


def squeue(cluster: Cluster, jobs: list[Job], now: int) -> dict[str, Any]:
    """``squeue --json`` at "now": live jobs plus those ended within MinJobAge (300 s)."""
    live = [j for j in jobs if j.end is None or now - j.end < 300]
    return {"meta": meta("openapi/v0.0.38", "Slurm OpenAPI v0.0.38"), "errors": [],
            "jobs": [squeue_job(cluster, j, now) for j in live]}


def squeue_job(cluster: Cluster, job: Job, now: int) -> dict[str, Any]:
    """One job as ``/slurm/v0.0.38/jobs`` dumps it (order of dump_job_info)."""
    nodes = node_list(cluster, job)
    gtype = gpu_type(cluster, job)
    running = job.start is not None
    alloc_str = (f"cpu={job.cpus},mem={job.memory_mb}M,node={len(job.alloc)},"
                 f"billing={job.cpus + 8 * job.gpus},gres/gpu={job.gpus},"
                 f"gres/gpu:{gtype}={job.gpus}") if running else None
    per_node = max(1, job.gpus // max(1, job.nodes_wanted))
    return {
        "account": job.account, "accrue_time": job.eligible or 0, "admin_comment": "",
        "array_job_id": job.array_job_id, "array_task_id": job.array_task_id,
        "array_max_tasks": job.array_limit,  # squeue shows it on every task
        "array_task_string": "", "association_id": 0,
        "batch_features": "", "batch_flag": job.batch, "batch_host": nodes.split(",")[0]
        if running and len(job.alloc) == 1 else (cluster.nodes[job.alloc[0][0]].name
                                                 if running else ""),
        "flags": ["JOB_CPUS_SET", "JOB_MEM_SET"] if running else [],
        "burst_buffer": "", "burst_buffer_state": "", "cluster": cluster.name,
        "cluster_features": "", "command": f"/home/{job.user}/{job.name}/run.sh"
        if job.batch else "/bin/bash",
        "comment": "", "container": "", "contiguous": False, "core_spec": None, "thread_spec": None,
        "cores_per_socket": None, "billable_tres": float(job.cpus + 8 * job.gpus),
        "cpus_per_task": None, "cpu_frequency_minimum": None, "cpu_frequency_maximum": None,
        "cpu_frequency_governor": None, "cpus_per_tres": "", "deadline": 0,
        "delay_boot": 0, "dependency": _dependency(job), "derived_exit_code": 0,
        "eligible_time": job.eligible or 0,
        "end_time": job.end or ((job.start or 0) + job.time_limit_min * 60 if running else 0),
        "excluded_nodes": "", "exit_code": (job.exit_code << 8) | job.signal,
        "features": "", "federation_origin": "", "federation_siblings_active": "",
        "federation_siblings_viable": "",
        "gres_detail": [f"gpu:{gtype}:{len(g)}(IDX:{_idx(g)})" for _, g in job.alloc],
        "group_id": cluster.uid(job.user), "group_name": job.user, "job_id": job.job_id,
        **({"job_resources": _job_resources(cluster, job)} if running else {}),
        "job_state": job.state, "last_sched_evaluation": job.start or now,
        "licenses": "", "max_cpus": 0, "max_nodes": 0, "mcs_label": "",
        "memory_per_tres": "", "name": job.name, "nodes": nodes, "nice": None,
        "tasks_per_core": None, "tasks_per_node": 0, "tasks_per_socket": None,
        "tasks_per_board": 0, "cpus": job.cpus, "node_count": max(1, job.nodes_wanted),
        "tasks": max(1, job.nodes_wanted), "het_job_id": job.het_job_id,
        "het_job_id_set": "", "het_job_offset": job.het_offset or 0,
        "partition": job.partition, "prefer": "",
        "memory_per_node": job.memory_mb // max(1, job.nodes_wanted),
        "memory_per_cpu": None, "minimum_cpus_per_node": job.cpus // max(1, job.nodes_wanted),
        "minimum_tmp_disk_per_node": 0, "preempt_time": 0, "pre_sus_time": 0,
        "priority": job.priority, "profile": None, "qos": job.qos, "reboot": False,
        "required_nodes": "", "requeue": True, "resize_time": 0, "restart_cnt": 0,
        "resv_name": "", "shared": None, "show_flags": ["SHOW_ALL", "SHOW_DETAIL", "SHOW_LOCAL"],
        "sockets_per_board": 0, "sockets_per_node": None,
        "start_time": job.start or (now + 3600 if job.reason == "Resources" else 0),
        "state_description": "", "state_reason": job.reason,
        "standard_error": f"/home/{job.user}/{job.name}/%x-%j.out",
        "standard_input": "/dev/null",
        "standard_output": f"/home/{job.user}/{job.name}/%x-%j.out",
        "submit_time": job.submit, "suspend_time": 0, "system_comment": "",
        "time_limit": job.time_limit_min, "time_minimum": 0, "threads_per_core": None,
        "tres_bind": "", "tres_freq": "", "tres_per_job": "",
        "tres_per_node": f"gres:gpu:{per_node}", "tres_per_socket": "", "tres_per_task": "",
        "tres_req_str": f"cpu={job.cpus},mem={job.memory_mb}M,node={max(1, job.nodes_wanted)},"
                        f"billing={job.cpus + 8 * job.gpus},gres/gpu={job.gpus}",
        "tres_alloc_str": alloc_str or "",
        "user_id": cluster.uid(job.user), "user_name": job.user, "wckey": "",
        "current_working_directory": f"/home/{job.user}/{job.name}",
    }


def _dependency(job: Job) -> str:
    """squeue's ``dependency`` while one holds the job (cleared once it is satisfied)."""
    if not job.after or job.eligible is not None:
        return ""
    state = "failed" if job.reason == "DependencyNeverSatisfied" else "unfulfilled"
    return f"afterok:{job.after}({state})"


def _idx(gpus: tuple[int, ...]) -> str:
    return compress_ranges(gpus)


def _job_resources(cluster: Cluster, job: Job) -> dict[str, Any]:
    per_node_cpus = job.cpus // max(1, len(job.alloc))
    return {"nodes": node_list(cluster, job), "allocated_cores": job.cpus,
            "allocated_hosts": len(job.alloc),
            "allocated_nodes": [
                {"sockets": {str(sock): {"cores": {str(c): "allocated_and_in_use"
                                                   for c in range(per_node_cpus // 2)}}
                             for sock in (0, 1)},
                 "nodename": cluster.nodes[n].name, "cpus_used": 0, "memory_used": 0,
                 "memory_allocated": job.memory_mb // max(1, len(job.alloc))}
                for n, _ in job.alloc]}


# --- sinfo ---------------------------------------------------------------------------


def sinfo(cluster: Cluster, jobs: list[Job], outages: list[NodeOutage],
          now: int) -> dict[str, Any]:
    """``sinfo --json`` at "now" (the ``/slurm/v0.0.38/nodes`` shape)."""
    used: dict[int, list[int]] = {}
    cpus: dict[int, int] = {}
    mem: dict[int, int] = {}
    for job in jobs:
        if job.running_at(now):
            for node, gpus in job.alloc:
                used.setdefault(node, []).extend(gpus)
                cpus[node] = cpus.get(node, 0) + job.cpus // len(job.alloc)
                mem[node] = mem.get(node, 0) + job.memory_mb // len(job.alloc)
    down = {o.node: o for o in outages if o.start <= now < o.end}
    return {"meta": meta("openapi/v0.0.38", "Slurm OpenAPI v0.0.38"), "errors": [],
            "nodes": [_sinfo_node(n, sorted(used.get(n.index, [])), cpus.get(n.index, 0),
                                  mem.get(n.index, 0), down.get(n.index), now)
                      for n in cluster.nodes]}


def _sinfo_node(node: Any, gpus: list[int], alloc_cpus: int, alloc_mem: int,
                outage: NodeOutage | None, now: int) -> dict[str, Any]:
    gtype = GPU_MODELS[node.gpu_type].gres
    state = "down" if outage else ("idle" if not gpus else
                                  "allocated" if len(gpus) == 8 else "mixed")
    used = f"gpu:{gtype}:{len(gpus)}(IDX:{_idx(tuple(gpus)) if gpus else 'N/A'})"
    return {
        "architecture": "x86_64", "burstbuffer_network_address": None, "boards": 1,
        "boot_time": now - 40 * 86400, "comment": None, "cores": 24, "cpu_binding": 0,
        "cpu_load": alloc_cpus * 100 // 2, "extra": None, "free_memory": node.memory_mb - alloc_mem,
        "cpus": node.cpus, "last_busy": now, "features": gtype, "active_features": gtype,
        "gres": f"gpu:{gtype}:8", "gres_drained": "N/A", "gres_used": used, "mcs_label": None,
        "name": node.name, "next_state_after_reboot": "invalid", "address": node.name,
        "hostname": node.name, "state": state,
        "state_flags": ["NOT_RESPONDING"] if outage and "respond" in outage.reason else
        (["DRAIN"] if outage else []),
        "next_state_after_reboot_flags": [], "operating_system": "Linux 6.1.0-28-amd64 #1 SMP "
        "PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)", "owner": None,
        "partitions": list(node.partitions), "port": 6818, "real_memory": node.memory_mb,
        "reason": outage.reason if outage else "", "reason_changed_at": outage.start if outage
        else 0, "reason_set_by_user": "root" if outage else None,
        "slurmd_start_time": now - 40 * 86400, "sockets": 4, "threads": 1,
        "temporary_disk": 0, "weight": 1, "tres": f"cpu={node.cpus},mem={node.memory_mb}M,"
        f"billing={node.cpus + 64},gres/gpu=8,gres/gpu:{gtype}=8", "slurmd_version": RELEASE,
        "alloc_memory": alloc_mem, "alloc_cpus": alloc_cpus,
        "idle_cpus": node.cpus - alloc_cpus,
        "tres_used": f"cpu={alloc_cpus},mem={alloc_mem}M,gres/gpu={len(gpus)},"
        f"gres/gpu:{gtype}={len(gpus)}" if gpus else None,
        "tres_weighted": float(alloc_cpus + 8 * len(gpus)),
    }


# --- Text outputs: partitions and the prolog's GPU history ---------------------------------


def scontrol_partitions(cluster: Cluster) -> str:
    """``scontrol show partition -o``: one ``Key=Value`` line per partition."""
    lines = []
    for p in cluster.partitions:
        nodes = compress(cluster.nodes[i].name for i in p.node_indices)
        default = "YES" if p.default else "NO"
        lines.append(f"PartitionName={p.name} AllowGroups=ALL Default={default}"
                     f" DefaultTime=01:00:00 MaxTime={_dhms(p.max_time_min)} Nodes={nodes}"
                     f" State=UP TotalNodes={len(p.node_indices)}\n")
    return "".join(lines)


def scontrol_reservations(cluster: Cluster, outages: list[NodeOutage], now: int) -> str:
    """``scontrol show reservation -o`` (``TZ=UTC``, ISO times) at now: the maintenance
    reservation an admin puts on each node still out (``Flags=MAINT,SPEC_NODES
    Users=root``, as ``scontrol create reservation ... flags=maint users=root`` prints it
    on 22.05), from the outage's start to its end."""
    lines = []
    for outage in sorted(outages, key=lambda o: (o.start, o.node)):
        if outage.end <= now:
            continue
        node = cluster.nodes[outage.node]
        start, end = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
                      for t in (outage.start, outage.end))
        lines.append(
            f"ReservationName=maint_{node.name} StartTime={start} EndTime={end} "
            f"Duration={_dhms((outage.end - outage.start) // 60)} Nodes={node.name} NodeCnt=1 "
            f"CoreCnt={node.cpus} Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES "
            f"TRES=cpu={node.cpus} Users=root Groups=(null) Accounts=(null) Licenses=(null) "
            f"State={'ACTIVE' if outage.start <= now else 'INACTIVE'} BurstBuffer=(null) "
            "Watts=n/a MaxStartDelay=(null)\n")
    return "".join(lines) or "No reservations in the system\n"


def _dhms(minutes: int) -> str:
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else \
        f"{rest // 60:02d}:{rest % 60:02d}:00"


def gpu_map_log(cluster: Cluster, jobs: list[Job], now: int) -> list[str]:
    """The history Beacon's prolog/epilog append when ``JOBMAP_LOG`` is set (deploy/slurm):
    ``<epoch> start|end <job id> <node> <gpu,gpu,...>``, in time order.

    The epilog writes ``end`` when a job leaves the node; running jobs have no end yet.
    """
    events: list[tuple[int, int, str]] = []
    for job in jobs:
        if job.start is None:
            continue
        for node, gpus in job.alloc:
            if not gpus:
                continue
            where = f"{job.job_id} {cluster.nodes[node].name} {','.join(map(str, gpus))}"
            events.append((job.start, 0, f"{job.start} start {where}\n"))
            if job.end is not None and job.end <= now:
                events.append((job.end, 1, f"{job.end} end {where}\n"))
    return [line for _, _, line in sorted(events)]
