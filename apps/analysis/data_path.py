"""Where the bytes a job's GPUs receive over PCIe come from: the host or the network (pure).

dcgm's ``DCGM_FI_PROF_PCIE_RX_BYTES`` counts every PCIe transfer into a GPU. Host-to-GPU
copies (input batches) are one part. On a multi-node job with GPUDirect RDMA the network
card writes collective traffic straight into GPU memory: PCIe counts those bytes too, and so
do the node's InfiniBand receive counters (node_exporter's
``node_infiniband_port_data_received_bytes_total``; RoCE adapters are listed under
``/sys/class/infiniband`` as well, so the same family covers them). Reading all of PCIe
receive as input sent a communication-bound 2-node job to the storage team (issue 28).

So, per node, the network explains up to what its InfiniBand/RoCE ports received, less
what network file systems read there (those bytes land in host memory and reach the GPU as
copies: they are input, not communication). What the network does not explain is the
host-to-GPU copy rate. A single-node job has no inter-node collectives: its PCIe receive
is read as host copies, as before. A multi-node job whose nodes report no InfiniBand/RoCE
counters cannot be split: the answer is None and no verdict reads PCIe receive as input.

Node counters are node-shared (other jobs on a node add to them): the split is a reading,
and the verdicts built on it say what else it could be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeReceive:
    """One node of a job: its GPUs' PCIe receive and the node's network counters (B/s)."""

    host: str
    gpu_rx_bps: tuple[float, ...]  # each of the job's GPUs there with PCIe measured
    network_rx_bps: float | None = None  # InfiniBand/RoCE receive, every port; None: unseen
    fs_read_bps: float | None = None  # network file-system reads


@dataclass(frozen=True)
class ReceiveSplit:
    """PCIe receive per GPU, split into what the network explains and the host's copies."""

    pcie_rx_bps: float  # mean per GPU
    network_rx_bps: float | None  # mean per node (InfiniBand/RoCE), None: not measured
    from_network_bps: float  # per GPU: PCIe receive the network explains
    host_bps: float  # per GPU: the rest, host-to-GPU copies

    @property
    def network_share(self) -> float:
        """The share of PCIe receive the network explains (0 when nothing was received)."""
        return self.from_network_bps / self.pcie_rx_bps if self.pcie_rx_bps > 0 else 0.0


def split_receive(nodes: Sequence[NodeReceive], multi_node: bool) -> ReceiveSplit | None:
    """The split over the job's nodes; None when no GPU's PCIe receive was measured, or a
    multi-node job's nodes report no InfiniBand/RoCE counters (GPUDirect cannot be told
    from copies)."""
    gpus = sum(len(n.gpu_rx_bps) for n in nodes)
    if gpus == 0:
        return None
    total = sum(sum(n.gpu_rx_bps) for n in nodes)
    seen = [n.network_rx_bps for n in nodes if n.network_rx_bps is not None]
    network = sum(seen) / len(seen) if seen else None
    if not multi_node:
        return ReceiveSplit(total / gpus, network, 0.0, total / gpus)
    if network is None:
        return None
    explained = sum(min(sum(n.gpu_rx_bps), _to_gpus(n)) for n in nodes)
    return ReceiveSplit(total / gpus, network, explained / gpus, (total - explained) / gpus)


def _to_gpus(node: NodeReceive) -> float:
    """What the node's network could have written into its GPUs: its InfiniBand/RoCE
    receive, less the file-system reads that arrive in host memory (0 when unseen)."""
    return max(0.0, (node.network_rx_bps or 0.0) - (node.fs_read_bps or 0.0))
