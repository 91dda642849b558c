"""Request ids and JSON logs (issue 27 item 7): an id per request, echoed back, on every line
logged for it, and carried into the Celery tasks it queues."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from apps.core import logs

ROOT = Path(__file__).resolve().parents[2]


class _Collect(logging.Handler):
    def __init__(self, formatter: logging.Formatter) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.addFilter(logs.ContextFilter())
        self.setFormatter(formatter)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def collected():
    """A handler on the ``beacon`` logger, formatted as BEACON_LOG_FORMAT=json would."""
    handler = _Collect(logs.JsonFormatter())
    logger = logging.getLogger("beacon.test")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)


def _through_middleware(header: str | None) -> HttpResponse:
    def view(request):
        logging.getLogger("beacon.test").info("in the view")
        return HttpResponse("ok")

    extra = {"HTTP_X_REQUEST_ID": header} if header is not None else {}
    return logs.RequestIdMiddleware(view)(RequestFactory().get("/", **extra))


def test_a_request_gets_an_id_on_its_lines_and_in_its_response(collected):
    response = _through_middleware(None)
    rid = response["X-Request-ID"]
    assert len(rid) == 32 and int(rid, 16) >= 0
    line = json.loads(collected.lines[-1])
    assert line["request_id"] == rid and line["message"] == "in the view"
    assert _through_middleware(None)["X-Request-ID"] != rid  # a new one each time


@pytest.mark.parametrize("given", ["0b9c6f4e-3f0a-4c11-9d5e-8a1f2b3c4d5e",
                                   "4bf92f3577b34da6a3ce929d0e0e4736", "lb-7:abc.def_1"])
def test_a_sane_incoming_id_is_kept(collected, given):
    assert _through_middleware(given)["X-Request-ID"] == given
    assert json.loads(collected.lines[-1])["request_id"] == given


@pytest.mark.parametrize("given", ["", "a b", "x" * 129, "id\nforged line", '"><script>',
                                   "-starts-with-a-dash", "ünïcode"])
def test_an_odd_incoming_id_is_replaced(collected, given):
    rid = _through_middleware(given)["X-Request-ID"]
    assert rid != given and len(rid) == 32
    assert json.loads(collected.lines[-1])["request_id"] == rid


def test_outside_a_request_lines_carry_no_id(collected):
    logging.getLogger("beacon.test").info("at start-up")
    assert "request_id" not in json.loads(collected.lines[-1])


def test_the_json_line_has_the_traceback(collected):
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("beacon.test").exception("failed")
    line = json.loads(collected.lines[-1])
    assert line["level"] == "ERROR" and "ValueError: boom" in line["exception"]
    assert line["time"].endswith("+00:00")


def test_the_plain_format_names_the_request(settings):
    handler = _Collect(logging.Formatter(settings.LOGGING["formatters"]["plain"]["format"]))
    record = logging.LogRecord("beacon", logging.INFO, __file__, 1, "hello", None, None)
    token = logs.request_id.set("abc123")
    try:
        handler.handle(record)
    finally:
        logs.request_id.reset(token)
    assert handler.lines[-1].endswith("INFO beacon [req abc123]: hello")


def test_every_response_echoes_the_id(client, db):
    response = client.get("/health/", HTTP_X_REQUEST_ID="probe-1")
    assert response["X-Request-ID"] == "probe-1"


def test_a_task_published_under_a_request_carries_its_id():
    headers: dict[str, str] = {}
    token = logs.request_id.set("req-42")
    try:
        logs._stamp_message(headers=headers)
    finally:
        logs.request_id.reset(token)
    assert headers == {logs.TASK_HEADER: "req-42"}
    logs._stamp_message(headers=(none := {}))
    assert none == {}  # beat's tasks: no request, no header


def _run(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings",
                               "BEACON_DATA_DIR": env.pop("data"), **env})


# A real worker thread on an in-memory broker: the task runs in another thread, so the id
# can only reach it through the message. Logging is the worker's (setup_logging applies
# settings.LOGGING), switched to JSON by the environment.
WORKER = """
import logging, time, django
django.setup()
from celery.contrib.testing.worker import start_worker
from portal.celery import app
from apps.core import logs
app.conf.update(broker_url="memory://", task_always_eager=False)

@app.task(name="beacon_logtest.say")
def say():
    logging.getLogger("beacon").warning("inside the task")

with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=5):
    token = logs.request_id.set("req-from-the-web")
    say.delay()
    logs.request_id.reset(token)
    say.delay()  # and one with no request behind it
    time.sleep(3)
"""


def test_a_worker_logs_json_with_the_task_and_the_request_that_queued_it(tmp_path):
    done = _run(WORKER, data=str(tmp_path), BEACON_LOG_FORMAT="json")
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    inside = [line for line in lines if line["message"] == "inside the task"]
    assert len(inside) == 2, done.stderr[-3000:]
    assert inside[0]["request_id"] == "req-from-the-web"
    assert "request_id" not in inside[1]
    assert {line["task_name"] for line in inside} == {"beacon_logtest.say"}
    assert inside[0]["task_id"] != inside[1]["task_id"]


def test_the_format_is_chosen_by_the_environment(tmp_path):
    script = ("import django; django.setup(); import logging; "
              "logging.getLogger('beacon').warning('hi')")
    plain = _run(script, data=str(tmp_path)).stderr.strip().splitlines()[-1]
    assert plain.endswith("WARNING beacon: hi")
    as_json = json.loads(_run(script, data=str(tmp_path), BEACON_LOG_FORMAT="json")
                         .stderr.strip().splitlines()[-1])
    assert as_json["message"] == "hi" and as_json["level"] == "WARNING"
    bad = _run(script, data=str(tmp_path), BEACON_LOG_FORMAT="xml")
    assert bad.returncode != 0 and "BEACON_LOG_FORMAT='xml'" in bad.stderr
