"""apps/core/batch.py: the forked producer hands over every item in order, and its errors."""

from __future__ import annotations

import gc
import multiprocessing
import os

import pytest

from apps.core.batch import fewer_collections, forked, forked_map
from apps.core.errors import AdapterError


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


def _square_with_pid(n: int) -> tuple[int, int]:
    if n == 13:
        raise AdapterError("bad file 13", service="openmetrics")
    return n * n, os.getpid()


def test_forked_map_keeps_the_order_and_spreads_items_over_children():
    items = [n for n in range(40) if n != 13]
    results = list(forked_map(_square_with_pid, items, workers=2))
    assert [r for r, _ in results] == [n * n for n in items]
    pids = {pid for _, pid in results}
    assert len(pids) == 2 and os.getpid() not in pids


def test_forked_map_raises_an_items_error_in_its_place():
    got = []
    with pytest.raises(AdapterError, match="bad file 13"):
        for result, _ in forked_map(_square_with_pid, list(range(30)), workers=2):
            got.append(result)
    assert got == [n * n for n in range(13)]
    assert not multiprocessing.active_children()


def test_forked_map_runs_here_without_fork_or_in_a_daemonic_process(monkeypatch):
    monkeypatch.setenv("BEACON_NO_FORK", "1")
    assert {pid for _, pid in forked_map(_square_with_pid, [1, 2, 3])} == {os.getpid()}
    monkeypatch.delenv("BEACON_NO_FORK")
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True, raising=False)
    assert {pid for _, pid in forked_map(_square_with_pid, [1, 2, 3])} == {os.getpid()}


def test_a_forked_producer_may_itself_map_over_children():
    """The archive reads files in children of its forked worker (a non-daemonic child)."""
    def produce():
        yield from forked_map(_square_with_pid, [1, 2, 3, 4], workers=2)

    results = list(forked(produce))
    assert [r for r, _ in results] == [1, 4, 9, 16]
    assert len({pid for _, pid in results}) == 2


def test_a_caller_that_stops_mapping_early_leaves_no_child_behind():
    stream = forked_map(_square_with_pid, list(range(14, 5000)), workers=2)
    next(stream)
    stream.close()
    assert not multiprocessing.active_children()


def test_a_forked_child_may_read_the_callers_standard_input(monkeypatch):
    """multiprocessing closes a child's sys.stdin: `manage.py import_sacct -` parses it there."""
    import io
    import sys

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"one\ntwo\n")))
    stream = sys.stdin.buffer
    assert [line.strip() for line in forked(lambda: iter(stream))] == [b"one", b"two"]
    assert sys.stdin is not None and not sys.stdin.closed
