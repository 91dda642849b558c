"""The one webhook sender against real listeners on 127.0.0.1 (issue 27): refused by default,
sent when the allow-list names the address, redirects not followed, the connection pinned to
the address that was checked (with TLS still checking the URL's host name), and the same
words for every failure that could tell a user what listens where. No test measures time."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from apps.analysis.egress import UNDELIVERED, parse_allow_list
from apps.core.adapters.webhook import Egress, WebhookSender
from apps.core.errors import AdapterError, TransientAdapterError
from apps.core.webhooks import post_json

LOOPBACK = ipaddress.ip_address("127.0.0.1")


class Listener:
    """An HTTP(S) server on 127.0.0.1 that records each request and answers ``status`` with
    ``headers``."""

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.received: list[dict[str, Any]] = []
        received, answer = self.received, (status, headers or {})

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server calls it by this name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, "host": self.headers["Host"],
                                 "body": json.loads(body)})
                self.send_response(answer[0])
                for name, value in answer[1].items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"http{'s' if tls else ''}://127.0.0.1:{self.port}/hook/s3cret"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sender(*allow: str, resolver: Any = None, ca_bundle: str = "") -> WebhookSender:
    config = Egress(allow=parse_allow_list(allow)[0], timeout=5, ca_bundle=ca_bundle)
    return WebhookSender(config) if resolver is None else WebhookSender(config, resolver)


# --- The policy, on a real listener ----------------------------------------------------------


def test_it_refuses_to_post_to_loopback_by_default(listener, settings):
    settings.WEBHOOK_ALLOW = []
    with pytest.raises(AdapterError) as caught:
        post_json(listener.url, {"text": "hi"}, timeout=5)
    assert str(caught.value) == UNDELIVERED and "loopback" in caught.value.detail
    assert listener.received == []  # nothing reached it


@pytest.mark.parametrize("spelling", ["localhost", "[::ffff:127.0.0.1]", "2130706433", "0x7f.1",
                                      "127.1", "0177.0.0.1"])
def test_no_spelling_of_loopback_gets_through(listener, settings, spelling):
    settings.WEBHOOK_ALLOW = []
    with pytest.raises(AdapterError, match=UNDELIVERED):
        post_json(f"http://{spelling}:{listener.port}/hook", {"text": "hi"}, timeout=5)
    assert listener.received == []


def test_it_posts_when_the_allow_list_names_127_0_0_1(listener, settings, caplog):
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]
    caplog.set_level("INFO", logger="beacon.webhook")
    assert post_json(listener.url, {"text": "hi"}, timeout=5) == 200
    [got] = listener.received
    assert got == {"path": "/hook/s3cret", "host": f"127.0.0.1:{listener.port}",
                   "body": {"text": "hi"}}
    # the allow-listed internal destination is logged, without the URL's secret path
    assert "allowed by BEACON_WEBHOOK_ALLOW entry '127.0.0.1/32'" in caplog.text
    assert "s3cret" not in caplog.text


def test_a_redirect_is_not_followed(settings):
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]
    elsewhere = Listener()
    moved = Listener(302, {"Location": elsewhere.url})
    try:
        with pytest.raises(AdapterError, match="redirects are not followed") as caught:
            post_json(moved.url, {"text": "hi"}, timeout=5)
        assert type(caught.value) is AdapterError  # not worth a retry
        assert len(moved.received) == 1 and elsewhere.received == []
    finally:
        moved.close()
        elsewhere.close()


def test_429_is_retried_no_sooner_than_retry_after_asks(settings):
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]
    settings.WEBHOOK_RETRY_AFTER_MAX = 600
    busy = Listener(429, {"Retry-After": "7200"})
    try:
        with pytest.raises(TransientAdapterError, match=r"slow down \(HTTP 429\)") as caught:
            post_json(busy.url, {"text": "hi"}, timeout=5)
        assert caught.value.retry_after == 600  # capped
    finally:
        busy.close()


# --- One message for everything that could map the network --------------------------------


def test_a_closed_port_and_a_policy_refusal_read_the_same(settings, caplog):
    """Refused by the policy, nobody listening, no answer, a name that does not resolve: the
    user reads the same words; only the detail (admins, the log) says which."""
    port = closed_port()
    silent = socket.socket()  # accepts connections (the backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    errors = {}
    try:
        settings.WEBHOOK_ALLOW = ["127.0.0.1"]
        for name, url, timeout in [
                ("closed port", f"http://127.0.0.1:{port}/hook/s3cret", 5),
                ("no answer", f"http://127.0.0.1:{silent.getsockname()[1]}/hook", 1),
                ("no such name", "http://nowhere.invalid/hook", 5)]:
            with pytest.raises(AdapterError) as caught:
                post_json(url, {"text": "hi"}, timeout=timeout)
            errors[name] = caught.value
        settings.WEBHOOK_ALLOW = []
        for name, url in [("refused loopback", f"http://127.0.0.1:{port}/hook"),
                          ("refused metadata", "http://169.254.169.254/latest/meta-data/"),
                          ("refused [::1]", f"http://[::1]:{port}/hook"),
                          ("refused localhost", "http://localhost:6379/hook")]:
            with pytest.raises(AdapterError) as caught:
                post_json(url, {"text": "hi"}, timeout=5)
            errors[name] = caught.value
    finally:
        silent.close()
    assert {name: str(e) for name, e in errors.items()} == dict.fromkeys(errors, UNDELIVERED)
    assert "Connection refused" in errors["closed port"].detail
    assert "cloud metadata" in errors["refused metadata"].detail
    assert "s3cret" not in errors["closed port"].detail + caplog.text


# --- Pinning: resolved once, connected to what was checked -----------------------------------


def test_the_connection_goes_to_the_address_that_was_checked(listener):
    """``hook.test`` resolves nowhere but through the sender's own resolver, called once: the
    request reaches the listener, so it went to that answer, with the URL's name as Host."""
    calls: list[str] = []

    def resolver(host: str, port: int) -> list[Any]:
        calls.append(host)
        return [LOOPBACK]

    assert sender("hook.test", resolver=resolver).post_json(
        f"http://hook.test:{listener.port}/hook", {"text": "hi"}) == 200
    assert calls == ["hook.test"]
    assert listener.received[0]["host"] == f"hook.test:{listener.port}"


def test_a_name_that_resolves_inside_is_refused_at_send(listener):
    """Saved while it pointed outside, it points at loopback now (DNS changed): refused."""
    with pytest.raises(AdapterError, match=UNDELIVERED):
        sender(resolver=lambda host, port: [LOOPBACK]).post_json(
            f"http://rebound.example:{listener.port}/hook", {"text": "hi"})
    assert listener.received == []


# --- TLS still checks the URL's host name ----------------------------------------------------


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A private CA and a server certificate for hook.test signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    now, day = dt.datetime.now(dt.UTC), dt.timedelta(days=1)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("test CA")).issuer_name(name("test CA"))
          .public_key(ca_key.public_key()).serial_number(1)
          .not_valid_before(now - day).not_valid_after(now + day)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder().subject_name(name("hook.test")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - day).not_valid_after(now + day)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("hook.test")]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@pytest.fixture
def tls_listener(tmp_path) -> Iterator[tuple[Listener, str, list[str | None]]]:
    ca, cert, key = _certificates(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    server = Listener(tls=context)
    yield server, str(ca), names
    server.close()


def _to_loopback(host: str, port: int) -> list[Any]:
    return [LOOPBACK]


def test_tls_sends_and_checks_the_urls_host_name(tls_listener):
    server, ca, names = tls_listener
    hook = sender("127.0.0.1", resolver=_to_loopback, ca_bundle=ca)
    assert hook.post_json(f"https://hook.test:{server.port}/hook", {"text": "hi"}) == 200
    assert names == ["hook.test"] and server.received[0]["host"] == f"hook.test:{server.port}"
    # the same address under another name: the certificate does not match, nothing is sent
    with pytest.raises(TransientAdapterError, match=UNDELIVERED) as caught:
        hook.post_json(f"https://other.test:{server.port}/hook", {"text": "hi"})
    assert "other.test" in caught.value.detail and len(server.received) == 1


def test_tls_refuses_a_certificate_from_an_unknown_ca(tls_listener):
    server, _, _ = tls_listener
    with pytest.raises(TransientAdapterError) as caught:
        sender("127.0.0.1", resolver=_to_loopback).post_json(
            f"https://hook.test:{server.port}/hook", {"text": "hi"})
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.detail and server.received == []


def test_only_http_and_https_are_sent():
    for url in ("file:///etc/passwd", "gopher://127.0.0.1:70/", "ftp://example.org/x",
                "http:///nohost", "http://example.org:99999/"):
        with pytest.raises(AdapterError, match=r"not a valid http\(s\) URL"):
            sender().post_json(url, {"text": "hi"})


def test_an_allow_listed_ipv6_address_is_reached_with_its_brackets():
    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6

    hosts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server calls it by this name
            hosts.append(self.headers["Host"])
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    try:
        server = Server(("::1", 0), Handler)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://[::1]:{server.server_address[1]}/hook"
        with pytest.raises(AdapterError, match=UNDELIVERED):
            sender().post_json(url, {"text": "hi"})
        assert sender("::1").post_json(url, {"text": "hi"}) == 204
        assert hosts == [f"[::1]:{server.server_address[1]}"]
    finally:
        server.shutdown()
        server.server_close()
