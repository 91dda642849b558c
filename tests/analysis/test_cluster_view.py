"""The live cluster view's pure readings (issue 30): a GPU's state and a partition's free GPUs."""

from __future__ import annotations

import pytest

from apps.analysis.cluster_view import (
    GpuState,
    NodeFree,
    Reading,
    gpu_state,
    node_free,
    node_unavailable,
    partition_free,
)
from apps.analysis.idleness import IdleRules


@pytest.mark.parametrize(("state", "unavailable"), [
    ("idle", False), ("mixed", False), ("allocated", False), ("idle+planned", False),
    ("idle+drain", True), ("mixed+drain", True), ("down", True), ("down*", True),
    ("idle*", True), ("allocated+draining", True), ("idle+not_responding", True),
    ("gone", True), ("", False), ("idle+maint", False), ("idle~", False),
    ("powered_down+idle", True), ("IDLE+DRAIN", True),
])
def test_which_node_states_take_no_new_job(state, unavailable):
    assert node_unavailable(state) is unavailable


BUSY, IDLE_MEM, IDLE_BARE = Reading(0.9, 40_000), Reading(0.01, 40_000), Reading(0.01, 300)


@pytest.mark.parametrize(("unavailable", "reserved", "held", "reading", "expected"), [
    (False, False, False, None, GpuState.FREE),
    (False, True, False, None, GpuState.RESERVED),
    (True, True, True, BUSY, GpuState.DOWN),  # a drained node's GPUs are down, held or not
    (False, False, True, BUSY, GpuState.BUSY),
    (False, False, True, IDLE_MEM, GpuState.IDLE_MEMORY),
    (False, False, True, IDLE_BARE, GpuState.ALLOCATED_IDLE),
    (False, False, True, Reading(0.01, None), GpuState.ALLOCATED_IDLE),
    (False, False, True, None, GpuState.ALLOCATED),
    (False, False, True, Reading(None, 40_000), GpuState.ALLOCATED),
    (False, True, True, BUSY, GpuState.BUSY),  # a job in the reservation is still busy
])
def test_a_gpus_state(unavailable, reserved, held, reading, expected):
    assert gpu_state(unavailable=unavailable, reserved=reserved, held=held,
                     reading=reading) == expected


def test_the_sites_thresholds_decide_busy_and_memory_held():
    rules = IdleRules(idle_below=0.2, mostly_idle_below=0.3, memory_held_mib=50_000)
    reading = Reading(0.1, 40_000)
    assert gpu_state(unavailable=False, reserved=False, held=True, reading=reading,
                     rules=rules) == GpuState.ALLOCATED_IDLE
    assert gpu_state(unavailable=False, reserved=False, held=True,
                     reading=reading) == GpuState.BUSY


@pytest.mark.parametrize(("args", "free"), [
    (({"h100": 8}, "h100", 8, 3, True), {"h100": 5}),
    (({"h100": 8}, "h100", 8, 8, True), {}),
    (({"h100": 8}, "h100", 8, 0, False), {}),  # drained or reserved: nothing to give
    (({}, "", 4, 1, True), {"untyped": 3}),
    (({"h100": 2, "h200": 4}, "h100+h200", 6, 0, True), {"h100": 2, "h200": 4}),
    (({"h100": 2, "h200": 4}, "h100+h200", 6, 3, True), {"h100+h200": 3}),  # split unknown
    (({}, "", 0, 0, True), {}),
])
def test_a_nodes_free_gpus(args, free):
    assert node_free("n", *args).free == free


def test_a_partition_sums_its_nodes_and_keeps_the_most_on_one_node():
    free = partition_free([NodeFree("a", {"h100": 5}), NodeFree("b", {"h100": 2, "a100": 8}),
                           NodeFree("c", {})])
    assert free.by_model == {"a100": 8, "h100": 7} and free.largest_on_one_node == 10
    assert free.total == 15
    assert partition_free([]).largest_on_one_node == 0
