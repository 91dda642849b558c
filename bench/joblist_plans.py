"""EXPLAIN (ANALYZE, BUFFERS) of every query each job-list view runs, on the joblist bench's
database (fill it first: ``python -m bench joblist``, or with ``BENCH_JOBLIST_JOBS``).

``python -m bench.joblist_plans [TEXT]`` signs in as each view's persona in-process, requests
the page once to warm it, then captures the second request's queries and prints each one's
time, its plan's execution time and, past 20 ms, the plan. TEXT keeps the views whose label or
path contains it. Besides the bench's views: the API list (``visible_to`` with no scope), a
researcher's ``scope=all`` and sorted pages (OFFSET over an unindexed order). Not a benchmark:
one request at a time, timings as noisy as the machine; it names where the time goes.
"""

from __future__ import annotations

import sys
import tempfile
import time

from bench.common import setup_django
from bench.joblist import DB_URL, VIEWS

ROLES = {"researcher": "u071", "lead": "u070", "lead2": "u080", "admin": "benchadmin"}
EXTRA = [
    ("API list (researcher)", "researcher", "/api/v1/jobs/"),
    ("API list (lead of 2 teams)", "lead2", "/api/v1/jobs/"),
    ("team sorted by GPU-h (lead)", "lead", "/jobs/?scope=team&sort=-gpu_hours"),
    ("team sorted by GPU-h, page 20 (lead)", "lead", "/jobs/?scope=team&sort=-gpu_hours&page=20"),
    ("all sorted by GPUs (admin)", "admin", "/jobs/?scope=all&sort=-gpus"),
]


def main(text: str) -> None:
    setup_django(tempfile.mkdtemp(prefix="beacon-bench-"), DB_URL)
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    settings.STORAGES = {**settings.STORAGES, "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    for label, role, path in [*VIEWS, *EXTRA]:
        if text in label or text in path:
            client = Client()
            client.force_login(User.objects.get(username=ROLES[role]))
            _explain(client, label, path)


def _explain(client: object, label: str, path: str) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(path)  # type: ignore[attr-defined]  # warm: caches, the page's own imports
    with CaptureQueriesContext(connection) as ctx:
        started = time.perf_counter()
        status = client.get(path).status_code  # type: ignore[attr-defined]
        elapsed = (time.perf_counter() - started) * 1000
    print(f"== {label} {path}: {status}, {elapsed:.0f} ms, {len(ctx.captured_queries)} queries")
    for query in ctx.captured_queries:
        sql = query["sql"]
        if not sql.lstrip("( ").upper().startswith("SELECT") or "django_session" in sql:
            continue
        with connection.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
            plan = [row[0] for row in cur.fetchall()]
        print(f"  {float(query['time']) * 1000:7.1f} ms | {plan[-1]} | {sql[:120]}")
        if float(query["time"]) > 0.02:
            print("     " + "\n     ".join(plan[:40]))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
