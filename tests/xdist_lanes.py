"""How `make test` splits the suite over two pytest-xdist workers: two lanes.

The tests of the shared services (the one dev Slurm cluster, the one Prometheus on :9091 and
the Redis database the Celery tests share) change state the others of their kind can see: a
backfill restarts Prometheus, a fault test stops slurmdbd, a Slurm test counts the cluster's
jobs. They must run one after another, so they all go to the first worker ("services" lane),
in collection order. Every other module goes, whole, to the other workers ("rest" lane):
whole modules so that a module-scoped fixture (a simulated month, a Slurm wave) is built once.

The services worker takes nothing else: its lane ends with transactional tests, whose flush
empties the rows the data migrations wrote, and a later non-transactional module would miss
them. pytest-django orders each lane's tests as in a serial run, so neither lane sees a flush
before a test that needs those rows.

xdist's own ``--dist loadgroup`` would do the first half, but its group suffix does not take
on pytest 9 (it rewrites ``Item._nodeid``; pytest 9 reads ``Item._id``), hence this.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parents[1]
SHARED = re.compile(r"""mark\.integration\(\s*["'](slurm|prometheus|redis)["']""")
SERVICES = "services"


@cache
def _uses_a_shared_service(module: str) -> bool:
    try:
        return SHARED.search((ROOT / module).read_text(encoding="utf-8")) is not None
    except OSError:
        return False


class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        # keep pytest-django's order (plain, then transactional, then database-free tests):
        # sorting modules by size would put a transactional module before plain ones
        config.option.loadscopereorder = False
        self._scope_of: dict[str, str] = {}

    def schedule(self) -> None:
        if self.collection is None and self.registered_collections:
            self._scope_of = _scopes(next(iter(self.registered_collections.values())))
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        return self._scope_of[nodeid]

    def _lane(self, node: Any) -> str:
        if len(self.nodes) < 2 or (SERVICES not in self.workqueue
                                   and not self._services_assigned()):
            return "any"  # one worker, or nothing to keep apart (a subset of the suite)
        return SERVICES if node.workerinput["workerid"] == "gw0" else "rest"

    def _services_assigned(self) -> bool:
        return any(SERVICES in work for work in self.assigned_work.values())

    def _next_scope(self, node: Any) -> str | None:
        lane = self._lane(node)
        for scope in self.workqueue:
            if lane == "any" or (scope == SERVICES) == (lane == SERVICES):
                return str(scope)
        return None

    def _assign_work_unit(self, node: Any) -> None:
        scope = self._next_scope(node)
        if scope is None:
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid)
                                for nodeid, done in work_unit.items() if not done])

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if self._next_scope(node) is None:
            node.shutdown()  # its lane is done; the other lane's work stays the other's
            return
        if self._pending_of(self.assigned_work[node]) <= 2:
            self._assign_work_unit(node)


def _scopes(collection: list[str]) -> dict[str, str]:
    """Each test's unit of work: "services", or a module's run of consecutive tests.

    A module with plain and transactional tests appears twice in pytest-django's order; each
    appearance is its own unit, so its transactional tests still run after the plain ones."""
    scope_of: dict[str, str] = {}
    runs: dict[str, int] = {}
    previous = None
    for nodeid in collection:
        module = nodeid.split("::", 1)[0]
        if _uses_a_shared_service(module):
            scope_of[nodeid] = SERVICES
        else:
            if module != previous:
                runs[module] = runs.get(module, 0) + 1
            scope_of[nodeid] = f"{module}#{runs[module]}"
        previous = module
    return scope_of
