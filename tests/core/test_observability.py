"""Error reporting and traces are off unless their variable is set (issue 27 item 7): then no
SDK is imported, so nothing can connect anywhere; set without the package, start-up says
what to install; set with it, the SDK is started with Beacon's options.

The SDKs are not Beacon's dependencies, so these tests put small stand-ins on the path
(``sentry_sdk``, the ``opentelemetry`` modules Beacon imports) that record how they are
used. The stand-ins being importable is what makes "not imported when off" mean something.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apps.core import logs, observability

ROOT = Path(__file__).resolve().parents[2]

# Each stand-in appends what happens to it to $STUB_LOG, one JSON list per line.
_RECORD = ("import json, os\n"
           "def record(*what):\n"
           "    with open(os.environ['STUB_LOG'], 'a') as f:\n"
           "        f.write(json.dumps(what, default=str) + '\\n')\n")
SENTRY = {"sentry_sdk/__init__.py": _RECORD + (
    "record('import', 'sentry_sdk')\n"
    "def init(**options):\n"
    "    record('sentry.init', {k: v for k, v in options.items() if k != 'before_send'},\n"
    "           options['before_send'].__name__)\n")}
_OTEL_CLASS = ("class {name}:\n"
               "    def __init__(self, *a, **k): record('{name}', a, k)\n"
               "    def __getattr__(self, attr): return lambda *a, **k: record('{name}.' + attr)\n"
               "    @classmethod\n"
               "    def create(cls, attrs): record('{name}.create', attrs); return cls()\n")
OTEL = {
    "opentelemetry/__init__.py": _RECORD + "record('import', 'opentelemetry')\n",
    "opentelemetry/trace.py": "from opentelemetry import record\n"
                              "def set_tracer_provider(p): record('set_tracer_provider')\n",
    "opentelemetry/sdk/__init__.py": "",
    "opentelemetry/sdk/resources.py": "from opentelemetry import record\n"
                                      + _OTEL_CLASS.format(name="Resource"),
    "opentelemetry/sdk/trace/__init__.py": "from opentelemetry import record\n"
                                           + _OTEL_CLASS.format(name="TracerProvider"),
    "opentelemetry/sdk/trace/export.py": "from opentelemetry import record\n"
                                         + _OTEL_CLASS.format(name="BatchSpanProcessor"),
    "opentelemetry/exporter/__init__.py": "",
    "opentelemetry/exporter/otlp/__init__.py": "",
    "opentelemetry/exporter/otlp/proto/__init__.py": "",
    "opentelemetry/exporter/otlp/proto/http/__init__.py": "",
    "opentelemetry/exporter/otlp/proto/http/trace_exporter.py":
        "from opentelemetry import record\n" + _OTEL_CLASS.format(name="OTLPSpanExporter"),
    "opentelemetry/instrumentation/__init__.py": "",
    "opentelemetry/instrumentation/django.py": "from opentelemetry import record\n"
                                               + _OTEL_CLASS.format(name="DjangoInstrumentor"),
    "opentelemetry/instrumentation/celery.py": "from opentelemetry import record\n"
                                               + _OTEL_CLASS.format(name="CeleryInstrumentor"),
}
PROBE = ("import django, json, sys; django.setup(); "
         "print(json.dumps(sorted(m for m in sys.modules "
         "if m.split('.')[0] in ('sentry_sdk', 'opentelemetry'))))")


def _stubs(tmp_path: Path, *packages: dict[str, str]) -> Path:
    site = tmp_path / "site"
    for files in packages:
        for name, text in files.items():
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).write_text(text)
    return site


def _start(tmp_path: Path, site: Path | None, **env: str) -> tuple[subprocess.CompletedProcess[str],
                                                                   list[list[object]]]:
    """A Django process started as web and workers start; what the stand-ins recorded."""
    stub_log = tmp_path / "stub.log"
    base = {k: v for k, v in os.environ.items()
            if k not in ("SENTRY_DSN", "OTEL_EXPORTER_OTLP_ENDPOINT", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**base, "DJANGO_SETTINGS_MODULE": "portal.settings", "STUB_LOG": str(stub_log),
             "BEACON_DATA_DIR": str(tmp_path / "data"),
             "PYTHONPATH": os.pathsep.join(filter(None, [str(site or ""), str(ROOT)])), **env})
    calls = [json.loads(line) for line in stub_log.read_text().splitlines()] \
        if stub_log.exists() else []
    return done, calls


def test_with_nothing_set_no_sdk_is_imported(tmp_path):
    done, calls = _start(tmp_path, _stubs(tmp_path, SENTRY, OTEL))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert calls == []  # importable, yet never imported: nothing started, nothing sent


def test_a_dsn_starts_sentry_without_personal_data(tmp_path):
    done, calls = _start(tmp_path, _stubs(tmp_path, SENTRY, OTEL),
                         SENTRY_DSN="https://key@errors.example.org/1",
                         SENTRY_ENVIRONMENT="staging", SENTRY_TRACES_PERCENT="5")
    assert done.returncode == 0, done.stderr
    init = next(c for c in calls if c[0] == "sentry.init")
    assert init[1] == {"dsn": "https://key@errors.example.org/1", "environment": "staging",
                       "send_default_pii": False, "traces_sample_rate": 0.05}
    assert init[2] == "tag_request_id"
    assert not any(c[1] == "opentelemetry" for c in calls if c[0] == "import")


def test_an_endpoint_starts_traces_for_django_and_celery(tmp_path):
    done, calls = _start(tmp_path, _stubs(tmp_path, SENTRY, OTEL),
                         OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318",
                         OTEL_SERVICE_NAME="beacon-web")
    assert done.returncode == 0, done.stderr
    names = [c[0] for c in calls]
    assert ["Resource.create", {"service.name": "beacon-web"}] in calls
    for step in ("OTLPSpanExporter", "BatchSpanProcessor", "TracerProvider.add_span_processor",
                 "set_tracer_provider", "DjangoInstrumentor.instrument",
                 "CeleryInstrumentor.instrument"):
        assert step in names, step
    assert ["import", "sentry_sdk"] not in calls


@pytest.mark.parametrize(("variable", "value", "package"), [
    ("SENTRY_DSN", "https://key@errors.example.org/1", "sentry-sdk"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "opentelemetry-sdk"),
])
def test_set_without_the_package_start_up_says_what_to_install(tmp_path, variable, value,
                                                               package):
    done, _ = _start(tmp_path, None, **{variable: value})
    assert done.returncode != 0
    assert f"{variable} is set" in done.stderr and package in done.stderr


def test_a_traced_share_over_100_percent_is_refused(tmp_path):
    done, _ = _start(tmp_path, None, SENTRY_TRACES_PERCENT="150")
    assert done.returncode != 0 and "SENTRY_TRACES_PERCENT" in done.stderr


def test_sentry_events_carry_the_request_id():
    token = logs.request_id.set("req-7")
    try:
        event = observability.tag_request_id({"tags": {"a": "b"}}, None)
    finally:
        logs.request_id.reset(token)
    assert event["tags"] == {"a": "b", "request_id": "req-7"}
    assert "tags" not in observability.tag_request_id({}, None)
