"""Page and API reads from a real PostgreSQL streaming replica (issue 29; apps/core/replica.py).

``deploy/dev/pg-replica.sh up`` takes a ``pg_basebackup -R`` of the suite's primary
(127.0.0.1:5432) into a temporary folder and starts it on a free loopback port as a hot
standby; the test points a ``replica`` database alias at the test database there. Replay is
paused with ``pg_wal_replay_pause()`` to make the replica fall behind, and the server is
stopped to make it go away. What it proves, each against the real replica:

1. a page read by a browser that wrote nothing comes from the replica (a row changed on the
   primary while replay is paused is not on it);
2. read-your-writes: the request that writes reads back from the primary, and so does the
   same browser's next page (the sticky cookie), while another browser still reads the
   replica;
3. behind by more than DATABASE_REPLICA_MAX_LAG: pages read the primary, and /metrics and the
   Platform page say why; caught up again, the replica is used again;
4. gone: pages read the primary, including a request already routed to the dead replica
   between two health checks (served again, no error page).
"""

from __future__ import annotations

import os
import subprocess
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse

from apps.core import replica
from apps.jobs.models import Job
from tests.integration.redis_server import free_port
from tests.integration.services import require

pytestmark = [pytest.mark.integration("postgres"), pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "dev" / "pg-replica.sh"


def _script(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REPLICA_PORT": str(port),
           "REPLICA_DIR": f"/tmp/beacon-test-replica-{port}"}
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def replica_port() -> Iterator[int]:
    from django.db import connection

    require(connection.vendor == "postgresql", "postgres",
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/beacon pytest ...")
    port = free_port()
    started = _script(port, "up")
    assert started.returncode == 0, started.stdout + started.stderr
    yield port
    _script(port, "down")


@pytest.fixture
def replica_alias(replica_port: int, transactional_db: Any, settings: Any,
                  django_db_blocker: Any) -> Iterator[int]:
    """The ``replica`` alias on the test database of the running replica, for this test."""
    config = dict(connections["default"].settings_dict)
    config["PORT"] = str(replica_port)
    config["OPTIONS"] = {**config.get("OPTIONS", {}), "connect_timeout": "3"}
    config["CONN_MAX_AGE"] = 60
    connections.settings[replica.REPLICA] = config
    # Django's test case (and pytest-django's blocker) refuse connections to an alias they
    # were not told of when the test started: this one is added now, so allowed explicitly
    conn = connections[replica.REPLICA]
    real = django_db_blocker._real_ensure_connection
    conn.ensure_connection = types.MethodType(real, conn)  # type: ignore[method-assign]
    settings.DATABASE_REPLICA_CHECK_EVERY = 0  # every read looks again: the test moves fast
    settings.DATABASE_REPLICA_MAX_LAG = 3600
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    yield replica_port
    if hasattr(connections._connections, replica.REPLICA):
        connections[replica.REPLICA].close()
        delattr(connections._connections, replica.REPLICA)
    del connections.settings[replica.REPLICA]


def _on_replica(port: int, sql: str) -> Any:
    dbname = connections["default"].settings_dict["NAME"]
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname=dbname,
                         autocommit=True, connect_timeout=5) as conn:
        return conn.execute(sql).fetchone()


def _caught_up(port: int) -> None:
    for _ in range(100):
        state = replica.check()
        if state.usable and state.lag_s == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"the replica did not catch up: {replica.check()}")


def test_reads_follow_the_replica_until_a_write_lag_or_outage(replica_alias: int,
                                                              world: Any) -> None:
    port = replica_alias
    # elsewhere: Django's test client would re-raise the error a request met and recovered
    # from (it listens for it); a browser sees only the response
    bob, elsewhere, staff = Client(), Client(raise_request_exception=False), Client()
    bob.force_login(world.users["bob"])
    elsewhere.force_login(world.users["bob"])  # the same user in another browser
    staff.force_login(world.users["staff"])
    _caught_up(port)
    _on_replica(port, "SELECT pg_wal_replay_pause()")

    # 1. a change the replica has not replayed is not on the pages read from it
    Job.objects.filter(pk=world.jobs["bob"].pk).update(name="renamed-on-the-primary")
    listed = elsewhere.get(reverse("jobs-list")).content.decode()
    assert "job-101" in listed and "renamed-on-the-primary" not in listed

    # 2. read-your-writes: the POST's page and this browser's next page read the primary
    made = bob.post(reverse("accounts-tokens"), {"name": "made-while-paused"})
    assert made.status_code == 200 and "made-while-paused" in made.content.decode()
    assert replica.COOKIE in made.cookies
    assert "made-while-paused" in bob.get(reverse("accounts-tokens")).content.decode()
    assert "made-while-paused" not in elsewhere.get(reverse("accounts-tokens")).content.decode()

    # 3. behind by more than the limit: the primary, and /metrics and Platform say so
    replica_alias_limit = 1
    from django.conf import settings

    settings.DATABASE_REPLICA_MAX_LAG = replica_alias_limit
    time.sleep(1.5)
    assert "renamed-on-the-primary" in elsewhere.get(reverse("jobs-list")).content.decode()
    metrics = staff.get("/metrics").content.decode()
    assert 'beacon_db_replica_in_use{configured="true",reason="replica ' in metrics
    assert "behind the primary (DATABASE_REPLICA_MAX_LAG=1)\"} 0.0" in metrics
    platform = staff.get(reverse("core-platform")).content.decode()
    assert 'data-replica="primary"' in platform and "s behind the primary" in platform

    _on_replica(port, "SELECT pg_wal_replay_resume()")
    _caught_up(port)
    assert 'reason=""} 1.0' in staff.get("/metrics").content.decode()
    assert 'data-replica="in-use"' in staff.get(reverse("core-platform")).content.decode()

    # 4. gone: stopped between two checks, then known to be gone
    elsewhere.get(reverse("jobs-list"))  # the replica connection is open and in use
    settings.DATABASE_REPLICA_CHECK_EVERY = 3600  # the last check (usable) stands
    assert replica.state(force=True).usable
    stopped = _script(port, "down")
    assert stopped.returncode == 0, stopped.stderr
    page = elsewhere.get(reverse("jobs-list"))
    assert page.status_code == 200 and "renamed-on-the-primary" in page.content.decode()
    state = replica.state()
    assert not state.usable and state.reason.startswith("replica unreachable")
    assert 'reason="replica unreachable' in staff.get("/metrics").content.decode()
    assert elsewhere.get(reverse("accounts-tokens")).status_code == 200
