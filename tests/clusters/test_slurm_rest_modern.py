"""The REST backend against slurmrestd 24.11/26.05's recorded answers (v0.0.40 to v0.0.45):
the version it picks, fairshare, scripts, limit writes that keep every other limit, cancel.

A local HTTP server answers with the recordings of tests/fixtures/slurm/<release>/rest and
keeps what was sent; the real daemons are in tests/integration.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from apps.clusters.adapters.slurm import Action, SlurmJob, rest
from apps.clusters.adapters.slurm.rest import SlurmRest
from apps.clusters.adapters.slurm.rest_limits import limit_body
from apps.core.errors import AdapterError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


class Slurmrestd:
    """Answers: path (query left out) -> (status, body); records every request."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], tuple[int, bytes]] = {}
        self.seen: list[tuple[str, str, Any]] = []

    def answer(self, method: str, path: str, body: Any, status: int = 200) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.routes[(method, path)] = (status, data)

    def recorded(self, release: str, name: str, path: str) -> None:
        self.answer("GET", path, (FIXTURES / release / "rest" / name).read_bytes())


@pytest.fixture
def slurmrestd() -> Iterator[tuple[Slurmrestd, str]]:
    fake = Slurmrestd()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            sent = json.loads(self.rfile.read(length)) if length else None
            fake.seen.append((self.command, self.path, sent))
            path = self.path.split("?")[0].rstrip("/")
            status, body = fake.routes.get((self.command, path),
                                           (404, b'{"errors":[{"error":"no route"}]}'))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    rest._detected.clear()
    yield fake, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _client(url: str, version: str = "") -> SlurmRest:
    return SlurmRest(url=url, user="slurm", token="t", version=version, timeout=5,
                     cluster="dev2605")


# --- which version ------------------------------------------------------------------------


@pytest.mark.parametrize(("release", "expected"), [("24.11", "v0.0.42"), ("26.05", "v0.0.45")])
def test_with_no_version_it_speaks_the_newest_the_server_serves(slurmrestd, release,
                                                                 expected):
    fake, url = slurmrestd
    fake.recorded(release, "openapi_v3.json", "/openapi/v3")
    fake.recorded(release, f"{expected}_partitions.json", f"/slurm/{expected}/partitions")
    assert len(_client(url).partitions()) == 3
    assert len(_client(url).partitions()) == 3
    assert [p for _, p, _ in fake.seen].count("/openapi/v3") == 1  # remembered per URL


def test_a_server_offering_no_version_beacon_speaks_is_a_clear_error(slurmrestd):
    fake, url = slurmrestd
    fake.answer("GET", "/openapi/v3", {"paths": {"/slurm/v0.0.36/jobs/": {},
                                                 "/slurm/v0.0.99/jobs/": {}}})
    with pytest.raises(AdapterError, match=r"offers v0\.0\.36, v0\.0\.99; Beacon speaks"):
        _client(url).nodes()


def test_22_05s_openapi_gives_v0_0_38(slurmrestd):
    fake, url = slurmrestd
    fake.answer("GET", "/openapi/v3", {"paths": {f"/slurm/{v}/jobs": {} for v in
                                                 ("v0.0.36", "v0.0.37", "v0.0.38")}})
    client = _client(url)
    assert client.api().name == "v0.0.38"
    assert client.cannot(Action.QUOTA_WRITE)  # 22.05's slurmrestd cannot write limits


# --- reads at v0.0.45 ---------------------------------------------------------------------


def test_jobs_fairshare_and_queue_at_v0_0_45(slurmrestd):
    fake, url = slurmrestd
    fake.recorded("26.05", "dbv0.0.45_jobs.json", "/slurmdb/v0.0.45/jobs")
    fake.recorded("26.05", "v0.0.45_shares.json", "/slurm/v0.0.45/shares")
    fake.recorded("26.05", "v0.0.45_jobs.json", "/slurm/v0.0.45/jobs")
    client = _client(url, "v0.0.45")
    jobs = [j for j in client.jobs_since(None) if isinstance(j, SlurmJob)]
    assert len(jobs) == 23 and not any(j.exit_unresolved for j in jobs)
    assert client.exit_codes([j.job_id for j in jobs]) == {}  # right as they are: no fix read
    assert {(r.account, r.user) for r in client.shares()} >= {("nlp", ""), ("nlp", "bob")}
    assert client.queue() and client.gpu_bindings()


def test_scripts_are_asked_one_job_at_a_time(slurmrestd):
    """slurmdbd fails a show_batch_script request naming several jobs (26.05.5, MySQL
    error 1054), so each job is its own request."""
    fake, url = slurmrestd
    record = json.loads((FIXTURES / "26.05" / "rest" / "dbv0.0.45_job_2.json").read_text())
    record["jobs"][0]["script"] = "#!/bin/bash\nsrun true\n"
    fake.answer("GET", "/slurmdb/v0.0.45/jobs", record)
    scripts = _client(url, "v0.0.45").job_scripts([2, 3])
    assert scripts == {"2": "#!/bin/bash\nsrun true\n"}
    asked = [p for m, p, _ in fake.seen if m == "GET"]
    assert len(asked) == 2 and all("show_batch_script=true" in p for p in asked)
    assert "step=2&" in asked[0] and "step=3&" in asked[1]


# --- limits: read, change one entry, post back the rest as it was -------------------------


def _vision(fake: Slurmrestd) -> dict[str, Any]:
    data = json.loads((FIXTURES / "26.05" / "rest" / "dbv0.0.45_associations.json").read_text())
    data["associations"] = [a for a in data["associations"]
                            if a["account"] == "vision" and not a.get("user")]
    fake.answer("GET", "/slurmdb/v0.0.45/associations", data)
    return data["associations"][0]


def test_a_limit_write_posts_back_every_other_limit(slurmrestd):
    fake, url = slurmrestd
    record = _vision(fake)
    fake.answer("POST", "/slurmdb/v0.0.45/associations", {"errors": [], "warnings": []})
    change = _client(url, "v0.0.45").set_account_limit("vision", "gres/gpu", 1200)
    assert change.applied and "no limit -> 1200 minutes" in change.output
    (_, _, sent), = [s for s in fake.seen if s[0] == "POST"]
    (posted,) = sent["associations"]
    assert (posted["account"], posted["cluster"], posted["user"]) == ("vision", "dev2605", "")
    limits = posted["max"]["tres"]
    # GrpTRES=gres/gpu=16 goes back as it was: slurmrestd would clear what is left out
    assert limits["total"] == record["max"]["tres"]["total"] and limits["total"]
    assert limits["group"]["minutes"] == [{"type": "gres", "name": "gpu", "count": 1200}]


def test_a_preview_over_rest_sends_nothing_and_says_so(slurmrestd):
    fake, url = slurmrestd
    _vision(fake)
    change = _client(url, "v0.0.45").set_account_limit("vision", "gres/gpu", 60, dry_run=True)
    assert not change.applied and "not sent: slurmrestd has no dry run" in change.output
    assert change.command.startswith("POST /slurmdb/v0.0.45/associations {")
    assert not [s for s in fake.seen if s[0] == "POST"]


def test_an_account_slurm_does_not_know_is_never_created(slurmrestd):
    fake, url = slurmrestd
    fake.answer("GET", "/slurmdb/v0.0.45/associations", {"associations": [], "errors": []})
    with pytest.raises(AdapterError, match="no account ghost"):
        _client(url, "v0.0.45").set_account_limit("ghost", "gres/gpu", 5)
    assert not [s for s in fake.seen if s[0] == "POST"]


def test_a_refused_write_is_an_error_with_slurms_words(slurmrestd):
    fake, url = slurmrestd
    _vision(fake)
    fake.answer("POST", "/slurmdb/v0.0.45/associations",
                {"errors": [{"error": "Invalid TRES name", "error_number": 9000}]})
    with pytest.raises(AdapterError, match=r"Slurm refused the limit.*Invalid TRES name"):
        _client(url, "v0.0.45").set_account_limit("vision", "gres/gpu", 5)


@pytest.mark.parametrize(("minutes", "expected"), [
    (None, [{"type": "cpu", "name": "", "count": 1000}]),
    (90, [{"type": "cpu", "name": "", "count": 1000},
          {"type": "gres", "name": "gpu", "count": 90}]),
])
def test_the_body_changes_one_entry_only(minutes, expected):
    record = {"account": "a", "cluster": "c", "user": "", "max": {"tres": {
        "total": [{"type": "gres", "name": "gpu", "count": 4}],
        "group": {"minutes": [{"type": "cpu", "name": "", "count": 1000},
                              {"type": "gres", "name": "gpu", "id": 1001, "count": 600}],
                  "active": []},
        "per": {"job": [{"type": "gres", "name": "gpu", "count": 2}]}}}}
    body, said = limit_body(record, "gres/gpu", minutes)
    limits = body["associations"][0]["max"]["tres"]
    assert limits["group"]["minutes"] == expected
    assert limits["total"] == record["max"]["tres"]["total"]
    assert limits["per"] == record["max"]["tres"]["per"]
    assert "600 ->" in said
    with pytest.raises(AdapterError, match="cannot be negative"):
        limit_body(record, "gres/gpu", -5)


# --- cancel -------------------------------------------------------------------------------


def test_cancel_and_an_already_ended_job(slurmrestd):
    fake, url = slurmrestd
    fake.answer("DELETE", "/slurm/v0.0.45/job/7", {"errors": [], "warnings": []})
    fake.answer("DELETE", "/slurm/v0.0.45/job/8", {"errors": [
        {"error": "Job/step already completing or completed", "error_number": 2017}]})
    fake.answer("DELETE", "/slurm/v0.0.45/job/9", {"errors": [
        {"error": "Access/permission denied", "error_number": 2002}]})
    client = _client(url, "v0.0.45")
    client.cancel_job(7)
    client.cancel_job(8)
    with pytest.raises(AdapterError, match="refused to cancel job 9"):
        client.cancel_job(9)


@pytest.mark.parametrize(("version", "steps", "states"), [
    ("v0.0.45", ["step=1", "step=2"], "state=pending&state=running"),
    ("v0.0.38", ["step=1%2C2"], "state=pending%2Crunning%2C"),
])
def test_lists_go_in_the_query_as_each_version_reads_them(slurmrestd, version, steps, states):
    """22.05 reads ``step=1,2``; from 23.02 a comma is "Unable to parse query" (HTTP 400,
    500 on 26.05.5) and the key is repeated instead."""
    fake, url = slurmrestd
    meta = {"plugin": {"data_parser": f"data_parser/{version}"}}
    fake.answer("GET", f"/slurmdb/{version}/jobs", {"jobs": [], "meta": meta, "errors": []})
    client = SlurmRest(url=url, user="slurm", token="t", version=version, timeout=5)
    list(client.jobs_by_id([1, 2]))
    list(client.jobs_since(None))
    by_id, window = (p for m, p, _ in fake.seen if m == "GET")
    assert all(step in by_id for step in steps)
    assert states in window


def test_a_server_that_cannot_be_asked_is_not_asked_again_for_a_minute(slurmrestd):
    fake, url = slurmrestd
    fake.answer("GET", "/openapi/v3", b"Service Unavailable", status=503)
    client = _client(url)
    assert client.cannot(Action.QUOTA_WRITE) == ""  # cannot tell: the action will say why
    assert _client(url).cannot(Action.QUOTA_WRITE) == ""
    assert [p for _, p, _ in fake.seen] == ["/openapi/v3"]  # one attempt, not one per page
    with pytest.raises(AdapterError, match="did not say which API versions it serves"):
        _client(url).nodes()
