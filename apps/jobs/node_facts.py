"""Diagnosis facts from a job's nodes: InfiniBand, CPU and file-system reads, and where the
GPUs' PCIe receive came from (host copies, or the network with GPUDirect RDMA).

Node-shared: node_exporter has no job label, so other jobs on a node add to its numbers;
the facts say how much of the nodes the job held (``node_cpu_share``). Read by
``apps.jobs.diagnosis`` (the rules) and ``apps.guardrails.live`` (the stall alert).
"""

from __future__ import annotations

from collections.abc import Sequence

from apps.analysis.data_path import NodeReceive, split_receive
from apps.analysis.diagnosis import Fact
from apps.jobs.models import JobMetricSummary, JobNodeMetrics


def network_facts(nodes: Sequence[JobNodeMetrics]) -> dict[str, Fact]:
    """Node-shared InfiniBand facts over the job's nodes (CPU and file system: host_facts)."""
    if not nodes:
        return {}
    degraded = [n.host for n in nodes if n.ib_degraded]
    facts: dict[str, Fact] = {}
    if any(n.ib_rate_max_bps is not None for n in nodes):
        facts["ib_degraded_nodes"] = float(len(degraded))
        if degraded:
            facts["ib_degraded_node"] = ", ".join(degraded)
    errors = [n.ib_errors for n in nodes if n.ib_errors is not None]
    if errors:
        facts["ib_errors"] = float(sum(errors))
    waits = [n.ib_wait_per_s for n in nodes if n.ib_wait_per_s is not None]
    if waits:
        facts["ib_wait_per_s"] = max(waits)
    return facts


def receive_facts(summaries: Sequence[JobMetricSummary], nodes: Sequence[JobNodeMetrics],
                  multi_node: bool) -> dict[str, Fact]:
    """PCIe receive split into host copies and what the network wrote (GPUDirect RDMA).

    A multi-node job whose nodes report no InfiniBand/RoCE receive (or no node rows: no
    node_exporter) cannot be split: the facts are absent, so no rule reads its PCIe receive
    as input (``apps/analysis/data_path.py``).
    """
    by_host: dict[str, list[float]] = {}
    for s in summaries:
        if s.pcie_rx_bps is not None:
            by_host.setdefault(s.host, []).append(s.pcie_rx_bps)
    rows = {n.host: n for n in nodes}
    split = split_receive([NodeReceive(
        host, tuple(rx), rows[host].ib_rx_bps if host in rows else None,
        rows[host].fs_read_bps if host in rows else None) for host, rx in by_host.items()],
        multi_node)
    if split is None:
        return {}
    facts: dict[str, Fact] = {"host_rx_gbs": split.host_bps / 1e9,
                              "network_rx_share": split.network_share}
    if split.network_rx_bps is not None:
        facts["ib_rx_gbs"] = split.network_rx_bps / 1e9
    return facts


def host_facts(nodes: Sequence[JobNodeMetrics], job_cpus: int,
               node_cpus: Sequence[int]) -> dict[str, Fact]:
    """What the job's nodes did while it ran: CPU, I/O wait and network file-system reads.

    Node-shared like InfiniBand: other jobs on a node add to its numbers, so
    ``node_cpu_share`` says how much of the nodes' CPUs the job held (1: whole nodes, where
    the nodes' numbers are the job's). File-system reads are the mean per node, since a
    data-parallel job reads its shards evenly.
    """
    facts: dict[str, Fact] = {}
    if nodes and job_cpus > 0 and all(node_cpus):
        facts["node_cpu_share"] = min(1.0, job_cpus / sum(node_cpus))
    busy = [n.cpu_busy for n in nodes if n.cpu_busy is not None]
    if busy:
        facts["cpu_busy"] = max(busy)
    # the worst node: one node whose reads block holds back every rank's step
    iowait = [n.cpu_iowait for n in nodes if n.cpu_iowait is not None]
    if iowait:
        facts["cpu_iowait"] = max(iowait)
    reads = [n.fs_read_bps for n in nodes if n.fs_read_bps is not None]
    if reads:
        facts["fs_read_gbs"] = sum(reads) / len(reads) / 1e9
    return facts
