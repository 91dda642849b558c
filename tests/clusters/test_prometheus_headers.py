"""A cluster's extra query headers (a multi-tenant Mimir's X-Scope-OrgID) reach its store."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ValidationError

from apps.clusters import services
from apps.clusters.models import Cluster

pytestmark = pytest.mark.django_db


def _recording_store(seen: list[dict[str, str]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(dict(self.headers.items()))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"status": "success",
                               "data": {"resultType": "vector", "result": []}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def test_it_sends_the_clusters_headers_with_every_query():
    seen: list[dict[str, str]] = []
    server = _recording_store(seen)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = Cluster.objects.create(
            name="mimir", prometheus_url=f"http://127.0.0.1:{server.server_port}/prometheus",
            prometheus_headers={"X-Scope-OrgID": "tenant-a"})
        client = services.prometheus_for(cluster)
        assert client is not None
        client.query("up")
        client.query_range("up", 0, 60, 30)
    finally:
        server.shutdown()
        server.server_close()
    assert [h.get("X-Scope-OrgID") for h in seen] == ["tenant-a", "tenant-a"]


def test_a_cluster_without_headers_sends_none():
    cluster = Cluster.objects.create(name="plain", prometheus_url="http://127.0.0.1:9")
    client = services.prometheus_for(cluster)
    assert client is not None and client.headers == {}


@pytest.mark.parametrize(("headers", "words"), [
    (["X-Scope-OrgID"], "must be an object"),
    ({"X Scope": "a"}, "not an HTTP header name"),
    ({"X-Scope-OrgID": 7}, "one line of text"),
    ({"X-Scope-OrgID": "a\r\nX-Evil: 1"}, "one line of text"),
])
def test_bad_headers_are_refused_with_the_reason(headers, words):
    cluster = Cluster(name="bad", prometheus_url="http://127.0.0.1:9", prometheus_headers=headers)
    with pytest.raises(ValidationError, match=words):
        cluster.full_clean()
