"""Helpers for bulk work (the demo's load, backfills).

``fewer_collections`` keeps Python's cyclic garbage collector from walking the same
long-lived objects again and again while a bulk import allocates millions of small
tuples (telemetry points) that are freed by reference counting anyway. ``forked`` runs a
generator of pure work in a child process, so a second core parses while this one writes;
``forked_map`` spreads independent items (one telemetry file each) over several children.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import pickle
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from multiprocessing.context import ForkProcess
from typing import Any, TypeVar

R = TypeVar("R")

# Allocations between young collections during bulk work (CPython's default is 700): the
# import makes and frees tuples by the million, and a young collection per 700 of them
# spends its time re-visiting Django's objects, not freeing anything.
BULK_THRESHOLD = 50_000


@contextmanager
def fewer_collections(threshold: int = BULK_THRESHOLD) -> Iterator[None]:
    """Run the block with what exists now frozen (never scanned) and rarer collections.

    Cycles made inside the block are still collected, only less often; the thresholds
    and the frozen objects are given back afterwards.
    """
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


# --- A second core -------------------------------------------------------------------------

T = TypeVar("T")
_DONE, _FAILED = "done", "failed"


def forked(produce: Callable[[], Iterator[T]], chunk: int = 32, ahead: int = 8) -> Iterator[T]:
    """What ``produce()`` yields, computed in a forked child while the caller uses it.

    For CPU-bound pure work (parsing and summarising telemetry, decoding a sacct dump)
    beside the caller's database writes: the child must not touch the database or other
    shared handles, and its items travel pickled, so they should be plain data. A thread
    here keeps up to ``ahead`` chunks of ``chunk`` items read from the pipe, so the child
    goes on working while the caller writes a batch (a pipe alone holds 64 kB: the child
    would wait); a slow caller makes the child wait, so memory stays bounded. An
    exception in the child is raised here, after the items before it. Without ``fork``
    (or with ``BEACON_NO_FORK`` set), ``produce()`` runs in this process.
    """
    if not _can_fork():
        yield from produce()
        return
    context = mp.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    # not a daemon, so that it may fork workers of its own (forked_map); the finally below
    # ends it whatever happens here
    child = context.Process(target=_produce_into, args=(produce, send, chunk, receive),
                            daemon=False)
    _start_keeping_stdin(child)
    send.close()
    received: queue.Queue[bytes | None] = queue.Queue(maxsize=max(ahead, 1))
    stop = threading.Event()
    pump = threading.Thread(target=_pump, args=(receive, received, stop), daemon=True)
    pump.start()
    finished = False
    try:
        while True:
            data = received.get()
            if data is None:
                raise RuntimeError(f"the worker process ended early (exit {child.exitcode})")
            kind, payload = pickle.loads(data)  # noqa: S301 - our own child wrote it
            if kind == _DONE:
                finished = True
                return
            if kind == _FAILED:
                raise payload
            yield from payload
    finally:
        stop.set()
        if not finished:
            child.join(timeout=0.05)
        if child.is_alive() and not finished:  # the caller stopped early: end the child
            child.terminate()
        pump.join()
        receive.close()
        child.join(timeout=5)
        if child.is_alive():
            child.terminate()
            child.join()


def _start_keeping_stdin(child: Any) -> None:
    """Start ``child`` with standard input left open in it: multiprocessing closes the
    child's ``sys.stdin`` (unless it is None), and the stream a child reads may be that
    one (``manage.py import_sacct -``)."""
    saved, sys.stdin = sys.stdin, None
    try:
        child.start()
    finally:
        sys.stdin = saved


def _pump(receive: Any, received: queue.Queue[bytes | None], stop: threading.Event) -> None:
    """Move the child's messages from the pipe to ``received`` until the pipe ends (None
    marks the end) or the caller stops."""
    while not stop.is_set():
        try:
            data: bytes | None = receive.recv_bytes()
        except (EOFError, OSError):
            data = None
        while not stop.is_set():
            try:
                received.put(data, timeout=0.1)
                break
            except queue.Full:
                continue
        if data is None:
            return


def _produce_into(produce: Callable[[], Iterator[Any]], send: Any, chunk: int,
                  receive: Any) -> None:
    receive.close()  # the caller's end: once the caller closes it, a send here fails at once
    items: list[Any] = []
    try:
        try:
            for item in produce():
                items.append(item)
                if len(items) >= chunk:
                    send.send(("items", items))
                    items = []
            send.send(("items", items))
            send.send((_DONE, None))
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            _send_failure(send, items, exc)
        except Exception as exc:  # handed to the parent, which raises it
            _send_failure(send, items, exc)
    except BrokenPipeError:  # the caller stopped early and closed its end
        pass
    finally:
        send.close()


def _send_failure(send: Any, items: list[Any], exc: Exception) -> None:
    send.send(("items", items))
    try:
        send.send((_FAILED, exc))
    except (TypeError, AttributeError, pickle.PicklingError):  # it does not pickle: its text
        send.send((_FAILED, RuntimeError(f"{type(exc).__name__}: {exc}")))


def _can_fork() -> bool:
    """Fork is available, not turned off, and allowed here (a daemonic process, such as a
    pool worker, may not have children)."""
    return not os.environ.get("BEACON_NO_FORK") and "fork" in mp.get_all_start_methods() \
        and not mp.current_process().daemon


def forked_map(fn: Callable[[T], R], items: list[T], workers: int = 2) -> Iterator[R]:
    """``fn(item)`` for each item, in order, computed by ``workers`` forked children.

    Child ``k`` takes items ``k``, ``k + workers``, ... (the items and ``fn`` reach it by
    the fork; results travel pickled, so they should be plain data). Each child is at most
    one result ahead of the caller: a pipe holds a result until it is read. An exception
    for an item is raised here in that item's place. For pure work only, as ``forked``.
    Without fork, with one worker or one item, it runs in this process.
    """
    if workers < 2 or len(items) < 2 or not _can_fork():
        yield from (fn(item) for item in items)
        return
    context = mp.get_context("fork")
    pipes: list[Connection] = []
    children: list[ForkProcess] = []
    for k in range(min(workers, len(items))):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_map_into, daemon=True,
                                args=(fn, items[k::workers], send, [*pipes, receive]))
        child.start()
        send.close()
        pipes.append(receive)
        children.append(child)
    try:
        for index in range(len(items)):
            k = index % len(pipes)
            try:
                kind, payload = pipes[k].recv()
            except EOFError:
                raise RuntimeError(f"worker process {k} ended early "
                                   f"(exit {children[k].exitcode})") from None
            if kind == _FAILED:
                raise payload
            yield payload
    finally:
        for receive in pipes:
            receive.close()
        for child in children:
            child.join(timeout=5)
            if child.is_alive():  # the caller stopped early: the child waits on a full pipe
                child.terminate()
                child.join()


def _map_into(fn: Callable[[Any], Any], items: list[Any], send: Any,
              receiving: list[Any]) -> None:
    for end in receiving:  # the caller's ends: once it closes them, a send here fails at once
        end.close()
    try:
        for item in items:
            try:
                result = ("item", fn(item))
            except Exception as exc:  # handed to the parent, which raises it in its place
                result = (_FAILED, exc)
            try:
                send.send(result)
            except (TypeError, AttributeError, pickle.PicklingError) as exc:  # not picklable
                result = (_FAILED, RuntimeError(f"{type(exc).__name__}: {exc}"))
                send.send(result)
            if result[0] == _FAILED:  # the caller stops at this item
                return
    except BrokenPipeError:  # the caller stopped early and closed its end
        pass
    finally:
        send.close()
