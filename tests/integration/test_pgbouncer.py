"""Beacon through pgbouncer in transaction pooling mode (issue 29; docs/DEPLOY.md).

``deploy/dev/pgbouncer.sh up`` starts Debian's pgbouncer on a free loopback port in front of
the suite's PostgreSQL (pool_mode = transaction); the test points the ``default`` connection
at it with ``DATABASE_TRANSACTION_POOLING``'s setting (no server-side cursors), then runs a
sacct import (the sync's one write path: COPY into a temporary table, upsert) and real page
and API requests through it, each in transactions of their own. pgbouncer's own counters
(``SHOW STATS``) prove the queries went through it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse

from apps.clusters.models import Cluster
from apps.jobs.models import Job
from tests.integration.redis_server import free_port
from tests.integration.services import require

pytestmark = [pytest.mark.integration("postgres"), pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "dev" / "pgbouncer.sh"
SACCT = ROOT / "tests" / "fixtures" / "slurm" / "sacct_window.json"


def _script(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGB_PORT": str(port), "PGB_DIR": f"/tmp/beacon-test-pgbouncer-{port}"}
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def pooled(transactional_db: Any) -> Iterator[int]:
    """The test's ``default`` connection, through pgbouncer for the length of the test."""
    require(connection.vendor == "postgresql", "postgres",
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/beacon pytest ...")
    port = free_port()
    started = _script(port, "up")
    assert started.returncode == 0, started.stdout + started.stderr
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(PORT=str(port), DISABLE_SERVER_SIDE_CURSORS=True)
    try:
        yield port
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
        _script(port, "down")


def _queries_through(port: int) -> int:
    """pgbouncer's count of queries it passed to the test database."""
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="pgbouncer",
                         autocommit=True, prepare_threshold=None) as admin:
        cursor = admin.execute("SHOW STATS")
        names = [c.name for c in cursor.description or []]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    test_db = connection.settings_dict["NAME"]
    return sum(int(r["total_query_count"]) for r in rows if r["database"] == test_db)


def test_a_sync_pages_and_the_api_work_through_transaction_pooling(pooled: int, world: Any,
                                                                   login: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port()")
        assert cursor.fetchone()[0] == 5432  # the server behind the pooler answers
    assert connection.settings_dict["PORT"] == str(pooled)

    Cluster.objects.create(name="devcluster")
    out = StringIO()
    call_command("import_sacct", str(SACCT), cluster="devcluster", stdout=out)
    assert "created 30, updated 0, skipped 0, errors 0" in out.getvalue()
    out = StringIO()  # again: every record unchanged, through the temporary table again
    call_command("import_sacct", str(SACCT), cluster="devcluster", stdout=out)
    assert "errors 0" in out.getvalue()
    assert Job.objects.filter(cluster__name="devcluster").count() == 30

    bob, staff = login("bob"), login("staff")
    job = world.jobs["bob"]
    pages = [(bob, reverse("jobs-list")), (bob, job_url(job)),
             (bob, "/api/v1/jobs/"), (staff, reverse("core-platform")),
             (staff, reverse("jobs-export"))]
    for client, url in pages:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        if hasattr(response, "streaming_content"):
            b"".join(response.streaming_content)  # a streamed export reads as it goes
    made = bob.post(reverse("accounts-tokens"), {"name": "via-pgbouncer"})
    assert made.status_code == 200 and "via-pgbouncer" in made.content.decode()
    assert _queries_through(pooled) > 50


def job_url(job: Job) -> str:
    return reverse("jobs-detail", args=[job.cluster.name, job.job_id])
