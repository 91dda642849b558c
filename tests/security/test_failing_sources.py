"""Fail loudly, degrade narrowly (issue 17): one refused telemetry query costs its measure
only; the run is recorded partial with the query and Prometheus's error; the Security page
and the job page say which rules have not run since when; ``detect`` exits non-zero; the
digest tells the admins. Prometheus is faked at the adapter boundary here (its answers are
the ones 2.42 gives); tests/integration/test_real_exporters.py does it against the real one.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.core.management import CommandError, call_command
from django.test import override_settings

from apps.analysis.timeseries import Series
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.adapters.prometheus import (
    QueryError,
    QueryResult,
    QueryTimeout,
    _error_for,
)
from apps.core.errors import AdapterError, TransientAdapterError
from apps.core.models import TaskRun
from apps.security import notify, services
from apps.security.adapters.telemetry import from_prometheus
from apps.security.detection import Sources
from apps.security.models import Finding
from tests.fake import StreamedRange
from tests.integration.exporters import free_port

pytestmark = pytest.mark.django_db
START = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
T0 = START.timestamp()
# What Prometheus 2.42 answered to the query of issue 17 (HTTP 422, errorType execution)
CLASH = "vector cannot contain metrics with the same labelset"


class Prom(StreamedRange):
    """Answers like Prometheus: a busy GPU nobody holds; queries naming ``refuse`` fail as
    Prometheus fails them."""

    base_url = "http://prom.test"

    def __init__(self, refuse: tuple[str, ...] = (), error: AdapterError | None = None) -> None:
        self.refuse, self.error, self.queries = refuse, error, []

    def query_range(self, expr: str, start: float, end: float, step: float,
                    **kw: object) -> QueryResult:
        self.queries.append(expr)
        if any(word in expr for word in self.refuse):
            raise self.error or _error_for(422, "execution", CLASH, expr)
        times = [start + i * step for i in range(int((end - start) / step) + 1)]
        if "DCGM_FI_DEV_GPU_UTIL" in expr or "DCGM_FI_DEV_FB_USED" in expr:
            busy = Series("", {"Hostname": "gpu01", "gpu": "0", "UUID": "GPU-a"},
                          tuple((t, 97.0 if "UTIL" in expr else 24000.0) for t in times))
            return QueryResult("matrix", [busy])
        return QueryResult("matrix", [])


def _run(world, prom: Prom):
    return services.run_window(world.cluster, START, START + timedelta(minutes=30),
                               Sources(prometheus=prom))  # type: ignore[arg-type]


def test_one_refused_query_costs_its_measure_only():
    prom = Prom(refuse=("node_infiniband_port_data",))
    raw = from_prometheus(prom, Catalogue(), T0, T0 + 1800, 60)  # type: ignore[arg-type]
    assert len(prom.queries) == 13  # every other measure was still asked for
    [failure] = raw.failures
    assert failure.measure == "ib" and "node_infiniband_port_data" in failure.query
    assert failure.error == f"HTTP 422 execution: {CLASH}"
    assert raw.gpus  # GPU measures read


@pytest.mark.parametrize("error", [
    QueryTimeout("Prometheus query timed out", service="prometheus",
                 detail="HTTP 503 timeout: query timed out in expression evaluation"),
    QueryError("Prometheus rejected the query", service="prometheus",
               detail="HTTP 400 bad_data: invalid parameter \"query\": 1:5: parse error"),
])
def test_a_timed_out_or_rejected_query_is_narrow_too(error):
    prom = Prom(refuse=("node_cpu_seconds_total",), error=error)
    raw = from_prometheus(prom, Catalogue(), T0, T0 + 1800, 60)  # type: ignore[arg-type]
    assert [f.measure for f in raw.failures] == ["cpu_cores", "cpu_idle"]
    assert raw.failures[0].error.startswith(error.detail.split(":")[0])


def test_prometheus_unreachable_or_every_query_failing_fails_the_source():
    down = TransientAdapterError("cannot reach Prometheus", service="prometheus")
    prom = Prom(refuse=("",), error=down)
    with pytest.raises(TransientAdapterError):
        from_prometheus(prom, Catalogue(), T0, T0 + 1800, 60)  # type: ignore[arg-type]
    assert len(prom.queries) == 1  # not 13 connection attempts
    with pytest.raises(AdapterError, match="every telemetry query failed"):
        from_prometheus(Prom(refuse=("",)), Catalogue(), T0, T0 + 1800,  # type: ignore[arg-type]
                        60)


def test_a_partial_run_is_recorded_with_the_query_and_prometheus_error(world):
    report = _run(world, Prom(refuse=("node_infiniband_port_data",)))
    # the GPU rule still ran and found the busy GPU
    assert Finding.objects.get().rule_key == "gpu_activity_without_job"
    assert report.telemetry_ok and not report.telemetry_complete
    run = TaskRun.objects.get(kind="security.detect")
    assert run.status == TaskRun.Status.PARTIAL
    assert CLASH in run.error and "node_infiniband_port_data_received_bytes_total" in run.error
    assert run.stats["failures"] and run.stats["telemetry_complete"] is False
    assert "1 queries failed" in run.stats["sources"]["telemetry"]


def test_a_complete_run_succeeds_and_clears_the_banner(world, client):
    _run(world, Prom(refuse=("node_infiniband_port_data",)))
    assert services.detection_problem(world.cluster) is not None
    _run(world, Prom())
    assert TaskRun.objects.filter(kind="security.detect").first().status == "succeeded"
    assert services.detection_problem(world.cluster) is None
    client.force_login(world.users["staff"])
    assert b"detection-problem" not in client.get("/security/").content


def test_the_security_page_and_the_job_page_say_since_when(world, client):
    _run(world, Prom())  # complete: the "since"
    good = TaskRun.objects.get(kind="security.detect").finished_at
    _run(world, Prom(refuse=("node_infiniband_port_data",)))
    problem = services.detection_problem(world.cluster)
    assert problem and problem.telemetry and problem.since == good
    assert problem.reason == f"telemetry query failed, ib: HTTP 422 execution: {CLASH}"
    for user, can_see_runs in (("staff", True), ("bob", False)):
        client.force_login(world.users[user])
        for url in ("/security/", f"/jobs/{world.cluster.name}/101/"):
            page = client.get(url).content.decode()
            assert "telemetry rules have not run since " + f"{good:%Y-%m-%d %H:%M}" in page, url
            assert CLASH in page and "same labelset" in page
            assert "node_infiniband_port_data" not in page  # the query: on the run, for admins
            assert ("Background runs</a> show the queries" in page) is can_see_runs


def test_a_failed_run_names_its_error_and_never_as_since(world, client):
    prom = Prom(refuse=("",), error=TransientAdapterError("cannot reach Prometheus at "
                                                          "http://prom.test", service="prometheus"))
    report = _run(world, prom)
    assert not report.telemetry_ok
    problem = services.detection_problem(world.cluster)
    assert problem and problem.since is None
    assert problem.reason == "telemetry: cannot reach Prometheus at http://prom.test"
    client.force_login(world.users["alice"])
    page = client.get("/security/").content.decode()
    assert "telemetry rules have not run since they were set up" in page


def test_the_command_exits_non_zero_when_prometheus_is_unreachable(world):
    world.cluster.prometheus_url = f"http://127.0.0.1:{free_port()}"
    world.cluster.save()
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("detect", "--cluster", world.cluster.name, "--since",
                     "2026-11-02T12:00:00Z", "--until", "2026-11-02T12:30:00Z", stdout=out,
                     stderr=err)
    assert caught.value.returncode == 2
    assert "cannot reach Prometheus" in err.getvalue()
    assert "telemetry: failed" in out.getvalue()  # the summary was still printed
    assert TaskRun.objects.get(kind="security.detect").status == TaskRun.Status.PARTIAL


def test_the_command_exits_zero_when_every_source_it_was_asked_for_was_read(world, tmp_path):
    out = io.StringIO()
    call_command("detect", "--cluster", world.cluster.name, "--since", "2026-11-02T12:00:00Z",
                 "--until", "2026-11-02T12:30:00Z", "--openmetrics", str(tmp_path),
                 stdout=out, stderr=io.StringIO())
    assert TaskRun.objects.get(kind="security.detect").status == TaskRun.Status.SUCCEEDED


@override_settings(SECURITY_NOTIFY_EMAILS=["soc@example.org"])
def test_admins_get_the_failure_in_the_digest_once(world):
    _run(world, Prom(refuse=("node_infiniband_port_data",)))
    Finding.objects.update(notify_pending=False)  # nothing else to send: still a digest
    call_command("security_digest", stdout=io.StringIO())
    [message] = mail.outbox
    assert "1 detection run(s) incomplete" in message.subject
    assert CLASH in message.body and "node_infiniband_port_data_received_bytes_total" in \
        message.body
    assert "[detection partial] testcluster" in message.body
    call_command("security_digest", stdout=io.StringIO())
    assert len(mail.outbox) == 1  # reported once, not in every digest
    assert notify.detection_problems_since(None)  # still on record


def test_prometheus_refusal_text_is_what_the_real_server_says():
    """The fake's error is the real 2.42 answer to the issue's query (checked live in
    tests/clusters/test_promql.py); here only its mapping to QueryError is pinned."""
    error = _error_for(422, "execution", CLASH, "sum(rate(x[1m]))")
    assert isinstance(error, QueryError) and error.detail.startswith("HTTP 422 execution")
