"""How `make test` splits the suite over its pytest-xdist workers: lanes.

The tests of a shared service change state the others of their kind can see: a backfill
restarts the one Prometheus on :9091, a fault test stops a release's slurmdbd, a Slurm test
counts that cluster's jobs, the Celery tests share one Redis database. Those must run one after
another, so each shared service is a lane of its own, run in collection order on one worker:
one lane per Slurm release (``slurm-22.05``, ``slurm-24.11``, ``slurm-26.05``, read off the
test's parameter id; the releases' clusters share nothing), a ``victoriametrics`` lane for
the telemetry tests' VictoriaMetrics runs (the ``store`` fixture's ``victoriametrics``
parameter: its one server on :18428 shares nothing with Prometheus) and one ``services`` lane
for Prometheus and Redis. Every other module goes, whole, to the remaining workers ("rest"):
whole modules so that a module-scoped fixture (a simulated month, a Slurm wave) is built once.

With at least one worker more than there are lanes, each lane has a worker of its own
(gw0, gw1, ... in lane order) and the rest share the others; with fewer, every lane's tests
go to gw0 as one ``services`` lane, in collection order. The Slurm lanes mostly wait for
daemons and jobs, so on two cores `make test` runs more workers than cores.

A lane's worker takes nothing else: a lane ends with transactional tests, whose flush empties
the rows the data migrations wrote, and a later non-transactional module would miss them.
pytest-django orders each lane's tests as in a serial run, so no lane sees a flush before a
test that needs those rows.

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
VICTORIA_METRICS = "victoriametrics"
# a Slurm test's release, from its parameter id: test_x[slurm-24.11-rest], test_y[slurm-22.05];
# a telemetry test's VictoriaMetrics run: test_z[victoriametrics-5001]. A Slurm test that
# also runs on each store (test_w[slurm-22.05-victoriametrics]) is its release's: the
# store it runs on is its own (exporters.private_store), the cluster is the lane's.
RELEASE = re.compile(r"\[(?:.*-)?(slurm-\d+\.\d+)(?:-.*)?\]$")
STORE = re.compile(r"\[(?:.*-)?(victoriametrics)(?:-.*)?\]$")


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
        self._lane_of_worker: dict[str, str] = {}

    def schedule(self) -> None:
        if self.collection is None and self.registered_collections:
            collection = next(iter(self.registered_collections.values()))
            self._scope_of, self._lane_of_worker = plan(collection, len(self.nodes))
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        return self._scope_of[nodeid]

    def _lane(self, node: Any) -> str:
        if not self._lane_of_worker:
            return "any"  # one worker, or nothing to keep apart (a subset of the suite)
        return self._lane_of_worker.get(node.workerinput["workerid"], "rest")

    def _next_scope(self, node: Any) -> str | None:
        lane = self._lane(node)
        for scope in self.workqueue:
            if lane == "any" or scope == lane or (lane == "rest" and not is_lane(scope)):
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
            node.shutdown()  # its lane is done; the other lanes' work stays theirs
            return
        if self._pending_of(self.assigned_work[node]) <= 2:
            self._assign_work_unit(node)


def db_order(item: Any) -> int:
    """pytest-django's rank of a test: 0 plain database test, 1 transactional, 2 no database."""
    marker = item.get_closest_marker("django_db")
    fixtures = getattr(item, "fixturenames", ())
    transactional = ("transactional_db" in fixtures or "live_server" in fixtures
                     or (marker is not None and (marker.kwargs.get("transaction", False)
                                                 or marker.kwargs.get("reset_sequences", False))))
    if transactional:
        return 1
    return 0 if marker is not None or "db" in fixtures else 2


def restore_db_order(items: list[Any]) -> None:
    """Put pytest-django's order back after pytest's own reordering (a stable sort).

    pytest-django sorts first (tryfirst); pytest then groups the tests that share a
    session-scoped parameter, such as pytest-playwright's ``[chromium]``, next to the first of
    them. A plain test that asked for a fixture named like a playwright one pulled every
    transactional browser test into the middle of the plain ones, and their flush emptied the
    data migrations' rows under the plain tests that ran after them on that worker (CI: 60
    failures on one worker, none where Chromium was missing)."""
    items.sort(key=db_order)


def is_lane(scope: str) -> bool:
    return scope in (SERVICES, VICTORIA_METRICS) or scope.startswith("slurm-")


def plan(collection: list[str], workers: int) -> tuple[dict[str, str], dict[str, str]]:
    """Each test's unit of work, and which worker runs which lane (none: any worker, any work).

    A unit is a lane, or a module's run of consecutive tests: a module with plain and
    transactional tests appears twice in pytest-django's order, and each appearance is its own
    unit, so its transactional tests still run after the plain ones."""
    lanes = {nodeid: _lane_of(nodeid) for nodeid in collection}
    names = sorted({lane for lane in lanes.values() if lane})
    merged = workers <= len(names)
    scope_of: dict[str, str] = {}
    runs: dict[str, int] = {}
    previous = None
    for nodeid in collection:
        module = nodeid.split("::", 1)[0]
        if lanes[nodeid]:
            scope_of[nodeid] = SERVICES if merged else lanes[nodeid]
        else:
            if module != previous:
                runs[module] = runs.get(module, 0) + 1
            scope_of[nodeid] = f"{module}#{runs[module]}"
        previous = module
    if workers < 2 or not names:
        return scope_of, {}
    if merged:
        return scope_of, {"gw0": SERVICES}
    return scope_of, {f"gw{index}": lane for index, lane in enumerate(names)}


def _lane_of(nodeid: str) -> str:
    """The shared service lane a test belongs to, or "" for none."""
    if not _uses_a_shared_service(nodeid.split("::", 1)[0]):
        return ""
    lane = RELEASE.search(nodeid) or STORE.search(nodeid)
    return lane.group(1) if lane else SERVICES
