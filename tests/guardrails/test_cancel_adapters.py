"""``cancel_job`` on each Slurm backend: scancel (cli), DELETE job (rest), unsupported
(files) said by ``cannot(Action.CANCEL)`` and an AdapterError. pyslurm's ``Job(id).cancel()``
is tested with the pyslurm backend (tests/clusters/test_slurm_pyslurm.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from apps.clusters.adapters.slurm import Action
from apps.clusters.adapters.slurm.cli import SlurmCli
from apps.clusters.adapters.slurm.files import SlurmFiles
from apps.clusters.adapters.slurm.rest import SlurmRest
from apps.core.errors import AdapterError, TransientAdapterError
from tests.fake import write_command


def _cli(tmp_path: Path, body: str) -> SlurmCli:
    write_command(tmp_path, "scancel", f'echo "scancel $*" >> {tmp_path}/argv.log\n{body}')
    return SlurmCli(cluster="devcluster", bin_dir=str(tmp_path), timeout=5)


def test_cli_cancels_with_scancel(tmp_path):
    cli = _cli(tmp_path, "exit 0")
    assert cli.cannot(Action.CANCEL) == ""
    cli.cancel_job(4242)
    assert (tmp_path / "argv.log").read_text().split() == ["scancel", "-M", "devcluster", "4242"]


def test_cli_a_job_that_already_ended_is_not_an_error(tmp_path):
    cli = _cli(tmp_path, 'echo "scancel: error: Kill job error on job id 7: Job/step already '
                         'completing or completed" >&2; exit 1')
    cli.cancel_job(7)


def test_cli_a_refusal_is_an_adapter_error(tmp_path):
    cli = _cli(tmp_path, 'echo "scancel: error: Kill job error on job id 7: Access/permission '
                         'denied" >&2; exit 1')
    with pytest.raises(AdapterError, match="permission denied"):
        cli.cancel_job(7)


DELETED: list[str] = []
ANSWERS: dict[str, tuple[int, dict]] = {}


class _Handler(BaseHTTPRequestHandler):
    def do_DELETE(self) -> None:
        DELETED.append(self.path)
        status, body = ANSWERS.get(self.path, (200, {"errors": []}))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _rest(url: str) -> SlurmRest:
    return SlurmRest(url=url, user="beacon", token="t", version="v0.0.38", timeout=5)


def test_rest_cancels_with_delete_job(server):
    rest = _rest(server)
    assert rest.cannot(Action.CANCEL) == ""
    rest.cancel_job(99)
    assert DELETED[-1] == "/slurm/v0.0.38/job/99"


def test_rest_an_ended_job_is_not_an_error_and_a_refusal_is(server):
    ANSWERS["/slurm/v0.0.38/job/5"] = (500, {"errors": [
        {"error_number": 2017, "error": "Job/step already completing or completed"}]})
    _rest(server).cancel_job(5)
    ANSWERS["/slurm/v0.0.38/job/6"] = (200, {"errors": [
        {"error_number": 1, "error": "Access/permission denied"}]})
    with pytest.raises(AdapterError, match="refused to cancel job 6"):
        _rest(server).cancel_job(6)


def test_rest_unreachable_is_transient():
    with pytest.raises(TransientAdapterError):
        SlurmRest(url="http://127.0.0.1:9", user="b", token="t", timeout=2).cancel_job(1)


def test_a_read_only_backend_says_it_cannot_cancel():
    client = SlurmFiles(Path("/nonexistent"))
    assert client.cannot(Action.CANCEL)
    with pytest.raises(AdapterError, match=r"cannot cancel|cancelling jobs"):
        client.cancel_job(1)
