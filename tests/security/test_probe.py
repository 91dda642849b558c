"""The active probe against a real local HTTP server: GET only, no redirects followed,
auth told apart from open, closed ports are silent, the rate limit holds, and the answers
become findings through the same rule as collector output."""

from __future__ import annotations

import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.utils import timezone

from apps.security.adapters.probe import Prober, ProbeTarget
from apps.security.detection import Sources, detect
from apps.security.models import Finding, ServiceProbe
from apps.security.probing import ProbeDisabled, probe_cluster, targets


class Stub:
    """A Ray-like server: /api/jobs/ open, /api/kernels asks for a token, / redirects."""

    def __init__(self) -> None:
        seen: list[tuple[str, str]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(("GET", self.path))
                if self.path == "/api/jobs/":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b"[]" + b" " * 200_000)
                elif self.path == "/api/kernels":
                    self.send_response(403)
                    self.end_headers()
                else:
                    self.send_response(302)
                    self.send_header("Location", "/login?next=/")
                    self.end_headers()

            def do_POST(self) -> None:
                seen.append(("POST", self.path))
                self.send_response(500)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    server = Stub()
    yield server
    server.close()


def test_the_probe_tells_open_from_protected_and_closed(stub):
    slept: list[float] = []
    prober = Prober(timeout=2, per_second=4, sleep=slept.append)
    answers = prober.probe([ProbeTarget("127.0.0.1", stub.port, "ray-dashboard"),
                            ProbeTarget("127.0.0.1", stub.port, "jupyter"),
                            ProbeTarget("127.0.0.1", stub.port, "gradio-unknown"),
                            ProbeTarget("127.0.0.1", 9, "ray-dashboard"),
                            ProbeTarget("bad host!", 80, "jupyter")])
    got = [(a.status, a.auth_required) for a in answers]
    assert got == [(200, False), (403, True), (302, True), (None, None), (None, None)]
    assert slept == [0.25] * 4  # 4 requests a second at most
    assert stub.seen == [("GET", "/api/jobs/"), ("GET", "/api/kernels"), ("GET", "/")]


@pytest.mark.django_db
def test_probing_is_opt_in_and_limited_to_running_jobs_nodes(world, stub, settings):
    from tests.conftest import make_job

    with pytest.raises(ProbeDisabled):
        probe_cluster(world.cluster)
    settings.SECURITY_PROBE_ENABLED = True
    assert targets(world.cluster) == []  # no running job: nothing to probe
    make_job(world.cluster, 500, world.users["bob"], world.team_a, state="RUNNING",
             end_time=None, nodes="127.0.0.1")
    ports = {str(stub.port): "ray-dashboard"}
    [target] = targets(world.cluster, ports)
    assert (target.node, target.job_id, target.user) == ("127.0.0.1", 500, "bob")
    stats = probe_cluster(world.cluster, Prober(timeout=2, sleep=lambda s: None), ports)
    assert stats == {"probed": 1, "answered": 1, "open": 1}
    probe = ServiceProbe.objects.get()
    assert (probe.status, probe.auth_required, probe.job_id_raw) == (200, False, 500)
    now = timezone.now()
    detect(world.cluster, now - timedelta(minutes=5), now + timedelta(minutes=1), Sources())
    finding = Finding.objects.get(rule_key="exposed_service")
    assert (finding.severity, finding.job_id_raw, finding.user) == ("critical", 500,
                                                                    world.users["bob"])
