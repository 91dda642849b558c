"""Optional error reporting (Sentry) and traces (OpenTelemetry), each switched on by one
environment variable and off by default.

Off, nothing here imports either SDK, so nothing can open a connection. On, the SDK is
imported when the process starts (``CoreConfig.ready``); a site that sets the variable
without installing the package gets a start-up error naming the package, never a silent
no-op. Neither package is in requirements.txt: docs/DEPLOY.md gives the pip lines.

- ``SENTRY_DSN``: ``sentry_sdk.init`` with the DSN; the SDK's own Django and Celery
  integrations switch on by themselves. No personal data is sent (``send_default_pii`` off);
  each event is tagged with the request id (``apps/core/logs.py``).
- ``OTEL_EXPORTER_OTLP_ENDPOINT``: a tracer provider exporting over OTLP/HTTP (the exporter
  reads that variable and the other ``OTEL_EXPORTER_OTLP_*`` ones itself), with Django and
  Celery instrumented (the SDK restarts its export thread in forked worker children).
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from apps.core import logs

log = logging.getLogger("beacon")

SENTRY_PACKAGE = "sentry-sdk"
OTEL_PACKAGES = ("opentelemetry-sdk opentelemetry-exporter-otlp-proto-http "
                 "opentelemetry-instrumentation-django opentelemetry-instrumentation-celery")
_started: set[str] = set()  # each is started once per process


def _need(module: str, variable: str, packages: str) -> ModuleType:
    """Import ``module`` or stop start-up with what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"{variable} is set, but {module!r} cannot be imported ({exc}): install "
            f"{packages} (docs/DEPLOY.md), or unset {variable}") from None


def _once(what: str) -> bool:
    if what in _started:
        return False
    _started.add(what)
    return True


# --- Errors: Sentry ----------------------------------------------------------------------


def tag_request_id(event: dict[str, Any], hint: Any) -> dict[str, Any]:
    """Sentry's ``before_send``: the request id, so an event and the log lines meet."""
    rid = logs.request_id.get()
    if rid:
        event.setdefault("tags", {})["request_id"] = rid
    return event


def start_error_reporting(dsn: str, environment: str, traces_sample_rate: float) -> bool:
    """``sentry_sdk.init`` when a DSN is given; False (and no import) when it is not."""
    if not dsn or not _once("sentry"):
        return False
    sentry_sdk = _need("sentry_sdk", "SENTRY_DSN", SENTRY_PACKAGE)
    sentry_sdk.init(dsn=dsn, environment=environment or None, send_default_pii=False,
                    traces_sample_rate=traces_sample_rate, before_send=tag_request_id)
    log.info("error reporting: Sentry (environment %s)", environment or "unset")
    return True


# --- Traces: OpenTelemetry -----------------------------------------------------------------


def start_tracing(endpoint: str, service_name: str) -> bool:
    """A tracer provider exporting to ``endpoint`` over OTLP/HTTP, with Django and Celery
    instrumented; False (and no import) when no endpoint is given."""
    if not endpoint or not _once("otel"):
        return False
    need = {name: _need(name, "OTEL_EXPORTER_OTLP_ENDPOINT", OTEL_PACKAGES) for name in (
        "opentelemetry.trace", "opentelemetry.sdk.resources", "opentelemetry.sdk.trace",
        "opentelemetry.sdk.trace.export", "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry.instrumentation.django", "opentelemetry.instrumentation.celery")}
    sdk = need["opentelemetry.sdk.trace"]
    provider = sdk.TracerProvider(resource=need["opentelemetry.sdk.resources"].Resource.create(
        {"service.name": service_name}))
    exporter = need["opentelemetry.exporter.otlp.proto.http.trace_exporter"].OTLPSpanExporter()
    provider.add_span_processor(need["opentelemetry.sdk.trace.export"].BatchSpanProcessor(exporter))
    need["opentelemetry.trace"].set_tracer_provider(provider)
    need["opentelemetry.instrumentation.django"].DjangoInstrumentor().instrument()
    need["opentelemetry.instrumentation.celery"].CeleryInstrumentor().instrument()
    log.info("traces: OpenTelemetry to %s as %s", endpoint, service_name)
    return True


def start(settings: Any) -> None:
    """Start what the settings switch on (both off by default)."""
    start_error_reporting(settings.SENTRY_DSN, settings.SENTRY_ENVIRONMENT,
                          settings.SENTRY_TRACES_SAMPLE_RATE)
    start_tracing(settings.OTEL_EXPORTER_OTLP_ENDPOINT, settings.OTEL_SERVICE_NAME)
