"""apps/core/batch.py: the forked producer hands over every item in order, and its errors."""

from __future__ import annotations

import gc
import multiprocessing
import os

import pytest

from apps.clusters.adapters.base import AdapterError
from apps.core.batch import fewer_collections, forked


def _numbers(n: int, fail_at: int | None = None):
    def produce():
        for i in range(n):
            if i == fail_at:
                raise AdapterError("bad file", service="openmetrics", detail="line 3")
            yield (i, os.getpid())
    return produce


def test_it_yields_everything_in_order_from_another_process():
    items = list(forked(_numbers(100), chunk=7))
    assert [i for i, _ in items] == list(range(100))
    assert {pid for _, pid in items} != {os.getpid()}


def test_an_error_in_the_child_comes_after_the_items_before_it():
    got = []
    with pytest.raises(AdapterError, match="bad file") as caught:
        for i, _ in forked(_numbers(50, fail_at=20), chunk=8):
            got.append(i)
    assert got == list(range(20))
    assert (caught.value.service, caught.value.detail) == ("openmetrics", "line 3")


def test_without_fork_it_runs_in_this_process(monkeypatch):
    monkeypatch.setenv("BEACON_NO_FORK", "1")
    assert {pid for _, pid in forked(_numbers(5))} == {os.getpid()}


def test_a_caller_that_stops_early_leaves_no_child_behind():
    stream = forked(_numbers(100_000), chunk=4)
    next(stream)
    stream.close()  # the generator's finally: the child is ended, not left waiting
    assert not multiprocessing.active_children()


def test_fewer_collections_gives_the_thresholds_back():
    before = gc.get_threshold()
    with fewer_collections(12345):
        assert gc.get_threshold()[0] == 12345
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
