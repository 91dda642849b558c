"""The production serving path survives slow clients (issue 27 item 2).

Debian's nginx with the shipped proxy settings (``deploy/nginx/beacon-proxy.conf``, started
by ``deploy/dev/nginx.sh``) in front of a real gunicorn with two sync workers, both on free
loopback ports. 50 clients each send a login POST's head and a few bytes of its body, then
wait: nginx holds them, so ``/health/`` still answers at once. The same clients sent straight
to gunicorn stop it (the finding in the issue), which shows the test can fail.
The production site file (``deploy/nginx/beacon.conf``: TLS, the redirect) passes ``nginx -t``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.exporters import free_port
from tests.integration.services import require

pytestmark = pytest.mark.integration("nginx")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "dev" / "nginx.sh"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
SLOW_CLIENTS = 50
HEALTH_WITHIN = 5.0  # seconds: "still answering", with room for a loaded CI machine


def _health(port: int, timeout: float) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/", timeout=timeout) as r:
        return int(r.status)


def _wait_until_answering(port: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if _health(port, 2) == 200:
                return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    pytest.fail(f"nothing answered /health/ on 127.0.0.1:{port} within {seconds} s")


@pytest.fixture(scope="module")
def gunicorn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Beacon under gunicorn as the Dockerfile runs it (sync workers), on SQLite in a
    folder of its own: /health/ needs only a database that answers."""
    folder = tmp_path_factory.mktemp("gunicorn")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", BEACON_DATA_DIR=str(folder))
    port = free_port()
    with open(folder / "gunicorn.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "portal.wsgi", "-b",
                                 f"127.0.0.1:{port}", "-w", "2", "--timeout", "120"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_until_answering(port)
            yield port
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def nginx(gunicorn: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """deploy/dev/nginx.sh's nginx on a free loopback port in front of that gunicorn."""
    require(os.access(NGINX, os.X_OK), "nginx", f"{SCRIPT.relative_to(ROOT)} install (as root)")
    port = free_port()
    env = {**os.environ, "NGINX_PORT": str(port), "NGINX_UPSTREAM": f"127.0.0.1:{gunicorn}",
           "NGINX_DIR": str(tmp_path_factory.mktemp("nginx"))}
    done = subprocess.run([str(SCRIPT), "up"], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stderr or done.stdout
    try:
        yield port
    finally:
        down = subprocess.run([str(SCRIPT), "down"], env=env, capture_output=True, text=True,
                              timeout=60, check=False)
        assert down.returncode == 0, down.stderr


@contextmanager
def slow_logins(port: int, count: int = SLOW_CLIENTS) -> Iterator[list[socket.socket]]:
    """``count`` clients each sending a login POST's head and 10 of its 1000 body bytes
    (a CSRF cookie is all an anonymous client needs), then waiting."""
    head = ("POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n"
            "Cookie: csrftoken=" + "a" * 32 + "\r\n\r\nusername=a").encode()
    clients: list[socket.socket] = []
    try:
        for _ in range(count):
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            clients.append(client)
            client.sendall(head)
        time.sleep(0.5)  # let each reach the server's read of the body
        yield clients
    finally:
        for client in clients:
            client.close()


def _still_held(client: socket.socket) -> bool:
    """Open, with no answer yet: the server is still waiting for the rest of the body."""
    client.setblocking(False)
    try:
        return client.recv(1) != b""  # data would be an early answer; b"" a close
    except BlockingIOError:
        return True
    finally:
        client.setblocking(True)


def test_health_answers_while_50_clients_hold_partial_logins(nginx):
    with slow_logins(nginx) as clients:
        started = time.monotonic()
        assert _health(nginx, HEALTH_WITHIN) == 200
        assert time.monotonic() - started < HEALTH_WITHIN
        assert sum(_still_held(c) for c in clients) == SLOW_CLIENTS


def test_without_the_proxy_the_same_clients_stop_gunicorn(gunicorn, nginx):
    # The control: this is what the issue found. Two sync workers each wait on a body that
    # never comes, and /health/ queues behind them.
    with slow_logins(gunicorn), pytest.raises((TimeoutError, urllib.error.URLError)):
        _health(gunicorn, 3)
    _wait_until_answering(gunicorn, 150)  # gunicorn's timeout frees the workers
    assert _health(nginx, HEALTH_WITHIN) == 200


def test_a_body_over_the_upload_limit_is_refused_by_nginx(nginx):
    with socket.create_connection(("127.0.0.1", nginx), timeout=5) as client:
        client.sendall(b"POST /api/v1/jobs/1/traces/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Content-Length: " + str(600 * 2**20).encode() + b"\r\n\r\n")
        answer = client.recv(200).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 413")


def test_each_answer_carries_nginxs_request_id(nginx):
    request = urllib.request.Request(f"http://127.0.0.1:{nginx}/health/",
                                     headers={"X-Request-ID": "chosen-by-the-client"})
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310  loopback
        rid, server = response.headers["X-Request-ID"], response.headers["Server"]
    assert len(rid) == 32 and int(rid, 16) >= 0  # nginx's $request_id, echoed by Beacon
    assert server == "nginx"  # no version


def test_the_production_site_file_passes_nginx_t(tmp_path):
    """deploy/nginx/beacon.conf as compose mounts it, with a throwaway certificate and the
    compose service name replaced by a loopback address (nginx resolves it at start)."""
    require(os.access(NGINX, os.X_OK), "nginx", f"{SCRIPT.relative_to(ROOT)} install (as root)")
    tls = tmp_path / "tls"
    tls.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=beacon.test", "-keyout", str(tls / "privkey.pem"),
                    "-out", str(tls / "fullchain.pem")], check=True, capture_output=True)
    site = (ROOT / "deploy" / "nginx" / "beacon.conf").read_text()
    site = (site.replace("server web:8000;", "server 127.0.0.1:9;")
                .replace("/etc/nginx/snippets/beacon-proxy.conf",
                         str(ROOT / "deploy" / "nginx" / "beacon-proxy.conf"))
                .replace("/etc/nginx/tls", str(tls))
                .replace("/var/log/nginx", str(tmp_path)))
    (tmp_path / "beacon.conf").write_text(site)
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
        "events {}\nhttp {\n" f"  include {tmp_path}/beacon.conf;\n" "}\n")
    done = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
