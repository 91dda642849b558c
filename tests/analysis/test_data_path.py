"""PCIe receive split into host copies and what the network wrote (GPUDirect RDMA)."""

from __future__ import annotations

import pytest

from apps.analysis.data_path import NodeReceive, ReceiveSplit, split_receive

G = 1e9


def node(host: str, gpus: int, rx: float, network: float | None = None,
         fs: float | None = None) -> NodeReceive:
    return NodeReceive(host, (rx,) * gpus, network, fs)


@pytest.mark.parametrize(("nodes", "multi", "host_gbs", "share"), [
    # one node: no inter-node collectives, every byte received is a host copy
    ([node("a", 8, 2.5 * G, network=20 * G)], False, 2.5, 0.0),
    # 2 nodes x 4 GPUs, 6.8 GB/s each over PCIe, the InfiniBand ports received all of it
    ([node("a", 4, 6.8 * G, 27.2 * G), node("b", 4, 6.8 * G, 27.2 * G)], True, 0.0, 1.0),
    # ... the ports received half of it: the rest came from host memory
    ([node("a", 4, 6.8 * G, 13.6 * G), node("b", 4, 6.8 * G, 13.6 * G)], True, 3.4, 0.5),
    # ... the ports received more than the GPUs took: never a negative host share
    ([node("a", 4, 1 * G, 30 * G), node("b", 4, 1 * G, 30 * G)], True, 0.0, 1.0),
    # file-system reads over InfiniBand land in host memory: input, not GPUDirect
    ([node("a", 4, 2 * G, 8 * G, fs=8 * G), node("b", 4, 2 * G, 8 * G, fs=8 * G)], True,
     2.0, 0.0),
    ([node("a", 4, 2 * G, 8 * G, fs=4 * G), node("b", 4, 2 * G, 8 * G, fs=4 * G)], True,
     1.0, 0.5),
    # one node without InfiniBand counters: its GPUs' receive is left to the host
    ([node("a", 4, 2 * G, 8 * G), node("b", 4, 2 * G, None)], True, 1.0, 0.5),
])
def test_the_network_explains_what_its_ports_received(nodes, multi, host_gbs, share):
    split = split_receive(nodes, multi)
    assert isinstance(split, ReceiveSplit)
    assert split.host_bps / G == pytest.approx(host_gbs)
    assert split.network_share == pytest.approx(share)
    assert (split.host_bps + split.from_network_bps) == pytest.approx(split.pcie_rx_bps)


@pytest.mark.parametrize(("nodes", "multi"), [
    ([], False),  # nothing measured
    ([NodeReceive("a", ())], False),
    # several nodes and no InfiniBand/RoCE counters anywhere: GPUDirect cannot be told apart
    ([node("a", 4, 2 * G), node("b", 4, 2 * G)], True),
])
def test_without_the_counters_there_is_no_split(nodes, multi):
    assert split_receive(nodes, multi) is None


def test_the_network_rate_is_per_node_and_pcie_per_gpu():
    split = split_receive([node("a", 8, 1 * G, 4 * G), node("b", 4, 4 * G, 2 * G)], True)
    assert split is not None
    assert split.pcie_rx_bps == pytest.approx(24 * G / 12)
    assert split.network_rx_bps == pytest.approx(3 * G)
    assert split.from_network_bps == pytest.approx(6 * G / 12)
