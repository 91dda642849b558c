"""How `make test` deals the suite to its workers (tests/xdist_lanes.py)."""

from __future__ import annotations

from tests.xdist_lanes import db_order, plan, restore_db_order

SLURM = "tests/integration/test_slurm_sync.py"  # marked integration("slurm")
PROM = "tests/integration/test_alert_rules.py"  # marked integration("prometheus")
PLAIN = "tests/core/test_template_lines.py"

COLLECTION = [
    f"{PLAIN}::test_a",
    f"{SLURM}::test_sync[slurm-22.05-cli]",
    f"{SLURM}::test_sync[slurm-24.11-rest]",
    f"{SLURM}::test_wave[slurm-26.05]",
    f"{PROM}::test_rules",
    f"{PROM}::test_store[victoriametrics-5001]",
    f"{SLURM}::test_policy[slurm-24.11-victoriametrics]",
    f"{PLAIN}::test_b",
]


def test_with_a_worker_per_lane_each_release_and_the_other_services_run_apart():
    scope_of, lanes = plan(COLLECTION, workers=7)
    assert lanes == {"gw0": "services", "gw1": "slurm-22.05", "gw2": "slurm-24.11",
                     "gw3": "slurm-26.05", "gw4": "victoriametrics"}
    assert [scope_of[n] for n in COLLECTION] == [
        f"{PLAIN}#1", "slurm-22.05", "slurm-24.11", "slurm-26.05", "services",
        "victoriametrics", "slurm-24.11", f"{PLAIN}#2"]  # a Slurm test on a private store


def test_with_too_few_workers_every_lane_runs_on_the_first_one_in_collection_order():
    scope_of, lanes = plan(COLLECTION, workers=3)
    assert lanes == {"gw0": "services"}
    assert [scope_of[n] for n in COLLECTION[1:7]] == ["services"] * 6


def test_one_worker_or_no_shared_service_keeps_nothing_apart():
    assert plan(COLLECTION, workers=1)[1] == {}
    assert plan([f"{PLAIN}::test_a[victoriametrics]"], workers=7)[1] == {}  # no marker
    assert plan([f"{PLAIN}::test_a", f"{PLAIN}::test_b"], workers=6)[1] == {}


class _Item:
    """What db_order reads of a pytest item: its django_db marker and fixture names."""

    def __init__(self, name: str, fixtures: tuple[str, ...] = (), **db: bool) -> None:
        self.name, self.fixturenames, self._db = name, fixtures, db

    def get_closest_marker(self, name: str) -> object:
        if name != "django_db" or self._db.get("none", False):
            return None
        return type("Mark", (), {"kwargs": {k: v for k, v in self._db.items()}})()


def test_the_database_order_is_put_back_after_pytest_groups_a_session_parameter():
    # what pytest did to pytest-django's order: the [chromium] browser tests (transactional)
    # grouped next to a plain test that shared their session-scoped parameter
    items = [_Item("plain[chromium]", ("db",), none=True),
             _Item("browser[chromium]", ("live_server",), transaction=True),
             _Item("plain_after"), _Item("no_db", none=True),
             _Item("transactional", transaction=True), _Item("sequences", reset_sequences=True)]
    restore_db_order(items)
    assert [i.name for i in items] == ["plain[chromium]", "plain_after", "browser[chromium]",
                                       "transactional", "sequences", "no_db"]


def test_in_this_run_no_plain_database_test_comes_after_a_transactional_one(request):
    # a transactional test's flush empties the data migrations' rows: a plain test after it
    # on the same worker would miss them (tests/xdist_lanes.py)
    ranks = [db_order(item) for item in request.session.items]
    assert ranks == sorted(ranks)
