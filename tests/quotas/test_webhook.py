"""The webhook adapter against a local HTTP server: success, 4xx, 5xx, refused, bad URL."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apps.core.errors import AdapterError, TransientAdapterError
from apps.quotas.adapters.webhook import Webhook

RECEIVED: list[dict] = []
STATUS = {"code": 200}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        RECEIVED.append(json.loads(body))
        self.send_response(STATUS["code"])
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    RECEIVED.clear()
    STATUS["code"] = 200
    yield f"http://127.0.0.1:{httpd.server_address[1]}/hook"
    httpd.shutdown()
    httpd.server_close()


def test_a_warning_is_posted_as_json(server):
    Webhook(server, timeout=5).post({"text": "80%", "level": 80})
    assert RECEIVED == [{"text": "80%", "level": 80}]


@pytest.mark.parametrize(("code", "error"), [(500, TransientAdapterError), (404, AdapterError)])
def test_a_bad_answer_is_an_error(server, code, error):
    STATUS["code"] = code
    with pytest.raises(error, match=f"HTTP {code}"):
        Webhook(server, timeout=5).post({"text": "x"})


def test_nobody_listening_is_transient():
    with pytest.raises(TransientAdapterError, match="unreachable"):
        Webhook("http://127.0.0.1:9/hook", timeout=2).post({"text": "x"})


def test_a_url_without_a_scheme_is_refused():
    with pytest.raises(AdapterError, match="no http"):
        Webhook("hooks.example.org/x")
