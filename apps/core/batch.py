"""Helpers for bulk work (the demo's load, backfills).

``fewer_collections`` keeps Python's cyclic garbage collector from walking the same
long-lived objects again and again while a bulk import allocates millions of small
tuples (telemetry points) that are freed by reference counting anyway. ``forked`` runs a
generator of pure work in a child process, so a second core parses while this one writes.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

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


def forked(produce: Callable[[], Iterator[T]], chunk: int = 32) -> Iterator[T]:
    """What ``produce()`` yields, computed in a forked child while the caller uses it.

    For CPU-bound pure work (parsing and summarising telemetry) beside the caller's
    database writes: the child must not touch the database or other shared handles, and
    its items travel pickled, so they should be plain data. The pipe holds a few chunks:
    a slow caller makes the child wait, so memory stays bounded. An exception in the
    child is raised here, after the items before it. Without ``fork`` (or with
    ``BEACON_NO_FORK`` set), ``produce()`` runs in this process.
    """
    if os.environ.get("BEACON_NO_FORK") or "fork" not in mp.get_all_start_methods():
        yield from produce()
        return
    context = mp.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_produce_into, args=(produce, send, chunk), daemon=True)
    child.start()
    send.close()
    try:
        while True:
            try:
                kind, payload = receive.recv()
            except EOFError:
                raise RuntimeError(f"the worker process ended early (exit {child.exitcode})") \
                    from None
            if kind == _DONE:
                return
            if kind == _FAILED:
                raise payload
            yield from payload
    finally:
        receive.close()
        child.join(timeout=5)
        if child.is_alive():  # the caller stopped early: the child waits on a full pipe
            child.terminate()
            child.join()


def _produce_into(produce: Callable[[], Iterator[Any]], send: Any, chunk: int) -> None:
    items: list[Any] = []
    try:
        for item in produce():
            items.append(item)
            if len(items) >= chunk:
                send.send(("items", items))
                items = []
        send.send(("items", items))
        send.send((_DONE, None))
    except Exception as exc:  # handed to the parent, which raises it
        send.send(("items", items))
        try:
            send.send((_FAILED, exc))
        except Exception:  # an exception that does not pickle: its text
            send.send((_FAILED, RuntimeError(f"{type(exc).__name__}: {exc}")))
    finally:
        send.close()
