"""Routing nodes to telemetry stores and what a fan-out covered (issue 29 item 2)."""

from __future__ import annotations

import pytest

from apps.analysis.stores import DEFAULT, Coverage, StoreRoute, coverage, route, store_of

A = StoreRoute("a", hosts=("gpu-a*",), order=1)
B = StoreRoute("b", hosts=("gpu-b0[1-4]",), partitions=("inference",), order=2)
CATCH_ALL = StoreRoute("all", hosts=("*",), order=9)
EARLY = StoreRoute("early", hosts=("gpu-a01",), order=0)


@pytest.mark.parametrize(("node", "partitions", "stores", "expected"), [
    ("gpu-a01", frozenset(), (A, B), "a"),
    ("gpu-b03", frozenset(), (A, B), "b"),
    ("gpu-b05", frozenset(), (A, B), DEFAULT),  # outside b's range
    ("gpu-b05", frozenset({"inference"}), (A, B), "b"),  # claimed by partition
    ("gpu-c01", frozenset({"train"}), (A, B), DEFAULT),
    ("gpu-a01", frozenset(), (A, EARLY), "early"),  # lower order claims first
    ("gpu-a02", frozenset(), (A, EARLY), "a"),
    ("gpu-c01", frozenset(), (A, CATCH_ALL), "all"),
    ("gpu-a01", frozenset({"inference"}), (B, A), "a"),  # by order, not by list position
    ("GPU-A01", frozenset(), (A,), DEFAULT),  # globs are case-sensitive, as host names
    ("login", frozenset(), (), DEFAULT),
])
def test_a_node_goes_to_the_first_store_claiming_it(node, partitions, stores, expected):
    assert store_of(node, stores, partitions) == expected


def test_ties_in_order_go_by_name():
    first, second = StoreRoute("x", hosts=("n*",)), StoreRoute("w", hosts=("n1",))
    assert store_of("n1", (first, second)) == "w"


def test_route_groups_sorted_nodes_and_leaves_out_empty_stores():
    nodes = ["gpu-b02", "gpu-a02", "gpu-a01", "gpu-c01", "gpu-a01"]
    assert route(nodes, (A, B), {"gpu-c01": frozenset({"inference"})}) == {
        "a": ("gpu-a01", "gpu-a02"), "b": ("gpu-b02", "gpu-c01")}
    assert route(["x1"], (A, B)) == {DEFAULT: ("x1",)}
    assert route([], (A, B)) == {}


@pytest.mark.parametrize(("routes", "failed", "checked", "unchecked", "notes"), [
    ({"a": ("n1", "n2"), DEFAULT: ("n3",)}, {}, ("n1", "n2", "n3"), (), []),
    ({"a": ("n1", "n2"), DEFAULT: ("n3",)}, {"a": "cannot reach Prometheus"}, ("n3",),
     ("n1", "n2"),
     ["telemetry store a failed (cannot reach Prometheus): 2 nodes not checked: n1, n2"]),
    ({"a": ("n1",)}, {"a": "HTTP 503"}, (), ("n1",),
     ["telemetry store a failed (HTTP 503): 1 node not checked: n1"]),
    ({}, {"b": "timeout"}, (), (), ["telemetry store b failed (timeout): its nodes not checked"]),
    ({"a": tuple(f"n{i:02d}" for i in range(12))}, {"a": "down"}, (),
     tuple(f"n{i:02d}" for i in range(12)),
     ["telemetry store a failed (down): 12 nodes not checked: n00, n01, n02, n03, n04, n05, "
      "n06, n07, n08, n09 and 2 more"]),
])
def test_a_failed_store_leaves_its_nodes_not_checked(routes, failed, checked, unchecked, notes):
    found = coverage(routes, failed)
    assert found.checked == checked
    assert found.unchecked_nodes == unchecked
    assert found.notes() == notes
    assert found.complete == (not failed)


def test_an_empty_coverage_is_complete():
    assert Coverage().complete and Coverage().notes() == []
