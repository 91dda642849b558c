"""The portal's own metrics for Prometheus: request latency, Celery task outcomes.

The ``/metrics`` view (``apps/shell/views.py``) adds the clusters' sync lag
(``apps/clusters/metrics.py``).

``/metrics`` is closed unless the site opens it (docs/SECURITY.md): a bearer token
(``METRICS_TOKEN``) or an address allow-list (``METRICS_ALLOWED_IPS``, CIDRs allowed).
With several gunicorn workers or a Celery worker on the same host, set
``PROMETHEUS_MULTIPROC_DIR`` to an empty folder shared by all of them: prometheus-client
then keeps each process's counters in files and this view adds them up.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import threading
import time
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from celery import signals as celery_signals
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    make_wsgi_app,
    multiprocess,
)

from apps.core.net import client_ip

REQUEST_LATENCY = Histogram(
    "beacon_http_request_duration_seconds", "Time Django spent on a request, by route",
    ["route", "method", "status"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
TASK_OUTCOMES = Counter(
    "beacon_celery_tasks_total", "Celery task runs by task and outcome", ["task", "outcome"])
_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}


# --- Request latency -----------------------------------------------------------------


class RequestMetricsMiddleware:
    """Observes every response under its route name (never the raw path: bounded labels)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.view_name if match and match.view_name else "unmatched"
        method = request.method if request.method in _METHODS else "other"
        REQUEST_LATENCY.labels(route, method, str(response.status_code)).observe(
            time.perf_counter() - started)
        return response


# --- Celery task outcomes ------------------------------------------------------------


def _task_name(sender: Any) -> str:
    return str(getattr(sender, "name", None) or sender or "unknown")


@celery_signals.task_success.connect
def _task_succeeded(sender: Any = None, **kwargs: Any) -> None:
    TASK_OUTCOMES.labels(_task_name(sender), "success").inc()


@celery_signals.task_failure.connect
def _task_failed(sender: Any = None, **kwargs: Any) -> None:
    TASK_OUTCOMES.labels(_task_name(sender), "failure").inc()


@celery_signals.task_retry.connect
def _task_retried(sender: Any = None, **kwargs: Any) -> None:
    TASK_OUTCOMES.labels(_task_name(sender), "retry").inc()


# --- The /metrics view -----------------------------------------------------------------


def metrics_allowed(request: HttpRequest) -> bool:
    """A matching bearer token, or a client address inside ``METRICS_ALLOWED_IPS``."""
    return _allowed(request.headers.get("Authorization", ""), client_ip(request))


def _allowed(authorization: str, address: str) -> bool:
    token = settings.METRICS_TOKEN
    if token and authorization.startswith("Bearer ") and hmac.compare_digest(
            authorization[7:].encode(), token.encode()):
        return True
    return _address_allowed(address, settings.METRICS_ALLOWED_IPS)


def _address_allowed(address: str, networks: list[str]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(net, strict=False) for net in networks)


def process_registry() -> CollectorRegistry:
    """This process's metrics, or every process's with ``PROMETHEUS_MULTIPROC_DIR``."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


# --- The Celery worker's own /metrics ------------------------------------------------------
#
# Task outcomes are counted where tasks run: in the worker, not in web. With
# ``WORKER_METRICS_PORT`` set, the worker's main process serves them on that port (same
# token / allow-list as web's /metrics). Its prefork children count into
# ``PROMETHEUS_MULTIPROC_DIR`` (set it for the worker; it is emptied when the worker
# starts), and the server adds them up.


@celery_signals.worker_init.connect
def _serve_worker_metrics(**kwargs: Any) -> None:
    port = settings.WORKER_METRICS_PORT
    if port:
        _empty_multiproc_dir()
        serve_worker_metrics(port, settings.WORKER_METRICS_ADDRESS)


@celery_signals.worker_process_shutdown.connect
def _child_exited(pid: int | None = None, **kwargs: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and pid:
        multiprocess.mark_process_dead(pid)


def _empty_multiproc_dir() -> None:
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if name.endswith(".db"):  # a previous run's counters (prometheus-client's files)
            os.remove(os.path.join(folder, name))


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every 30 s are not worth a log line each."""


def serve_worker_metrics(port: int, address: str = "0.0.0.0") -> WSGIServer:  # noqa: S104
    """Serve the worker's task metrics on ``address:port`` in a daemon thread; returns the
    server (``shutdown()`` stops it). Port 0 picks a free one (``server.server_port``)."""
    metrics_app = make_wsgi_app(process_registry())

    def guarded(environ: dict[str, Any], start_response: Any) -> Any:
        if not _allowed(environ.get("HTTP_AUTHORIZATION", ""), environ.get("REMOTE_ADDR", "")):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"metrics: not allowed from here (see docs/SECURITY.md)\n"]
        return metrics_app(environ, start_response)

    server = make_server(address, port, guarded, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True).start()
    return server
