"""The job page below the efficiency card: straggler verdict, diagnosis, per-GPU and node
charts with their scope, trace phases, and trace uploads that never take the page down."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.urls import reverse

from apps.accounts.models import Contact
from apps.analysis.timeseries import GpuKey
from apps.jobs import archive
from apps.jobs.models import TraceRun
from tests.conftest import make_job
from tests.jobs.fake_telemetry import FakeSource
from tests.trace_builder import BASE_NS, Options, Step, simulate, to_chrome

PEERS = {"gpu_util": 0.98, "sm_active": 0.41, "tensor_active": 0.2, "fb_used": 60000.0,
         "power": 600.0, "temperature": 68.0, "sm_clock": 1980.0, "throttle_reasons": 0.0,
         "xid": 0.0, "nvlink_tx": 3e10, "pcie_rx": 6e8}
RECORDED = datetime.fromtimestamp(BASE_NS / 1e9 + Options().start_us / 1e6, tz=UTC)


def _url(job, name="jobs-detail"):
    return reverse(name, kwargs={"cluster": job.cluster.name, "job_id": job.job_id})


@pytest.fixture
def straggling(world):
    """bob's job, archived: gpu01:5 is thermally throttled and the seven others wait."""
    job = world.jobs["bob"]
    gpus = {GpuKey("gpu01", i): dict(PEERS) for i in range(8)}
    gpus[GpuKey("gpu01", 5)].update(sm_active=0.86, temperature=89.0, sm_clock=1148.0,
                                    throttle_reasons=0x60)
    Contact.objects.create(area="hardware", name="Hardware on-call", email="hw@example.org")
    nodes = {"gpu01": {"cpu_busy": 0.42, "cpu_iowait": 0.17, "mem_used": 512 * 2**30, "ib_tx": 2e9,
                       "ib_wait": 100.0, "net_tx": 1e6}}
    archive.archive_job(job, FakeSource(gpus, nodes=nodes))
    return job


def test_the_page_names_the_straggler_with_confidence_and_evidence(straggling, login):
    html = login("bob").get(_url(straggling)).content.decode()
    assert "GPU gpu01:5 is the straggler" in html
    assert "high confidence" in html
    assert "gpu01:5 was thermally throttled 100% of the time" in html
    assert 'data-figure="fig-waiting"' in html and "Confidence and limits" in html


def test_the_diagnosis_says_what_to_check_whom_to_call_and_links_evidence(straggling, login):
    html = login("bob").get(_url(straggling)).content.decode()
    assert "A faulty GPU slows the whole job" in html
    assert "Hardware on-call" in html and "mailto:hw@example.org" in html
    assert 'href="#stragglers">straggler GPU named yes</a>' in html
    for anchor in ("efficiency", "stragglers", "diagnosis", "gpus", "health", "network",
                   "phases"):
        assert f'id="{anchor}"' in html


def test_every_chart_says_whether_it_is_job_exclusive_or_node_shared(straggling, login):
    page = login("bob").get(_url(straggling))
    html = page.content.decode()
    for fig in ("fig-gpu-activity", "fig-gpu-power", "fig-gpu-temperature", "fig-gpu-clock",
                "fig-gpu-nvlink", "fig-gpu-pcie", "fig-gpu-events"):
        assert f'data-figure="{fig}"' in html and f'id="{fig}"' in html
        figure = json.loads(html.split(f'id="{fig}" type="application/json">')[1]
                            .split("</script>")[0])
        title = figure["layout"]["title"]["text"]
        assert "job-exclusive" in title, fig
    for fig in ("fig-node-cpu", "fig-node-mem", "fig-node-ib", "fig-node-ibwait",
                "fig-node-net"):
        figure = json.loads(html.split(f'id="{fig}" type="application/json">')[1]
                            .split("</script>")[0])
        assert "node-shared" in figure["layout"]["title"]["text"], fig


def test_the_node_table_shows_cpu_busy_and_peak_memory(straggling, login):
    page = login("bob").get(_url(straggling))
    html = page.content.decode()
    assert "CPU busy" in html and "42%" in html
    assert "512.0 GiB" in html  # as the right-sizing advice says it (issue 26)
    cpu = json.loads(html.split('id="fig-node-cpu" type="application/json">')[1]
                     .split("</script>")[0])
    assert cpu["data"][0]["y"][0] == pytest.approx(42.0, abs=0.4)  # percent
    assert "I/O wait" in html and "17%" in html
    iowait = json.loads(html.split('id="fig-node-iowait" type="application/json">')[1]
                        .split("</script>")[0])
    assert iowait["data"][0]["y"][0] == pytest.approx(17.0, abs=0.4)


def test_the_straggler_line_is_drawn_thicker(straggling, login):
    context = login("bob").get(_url(straggling)).context
    activity = dict(context["gpu_panels"])["fig-gpu-activity"]
    widths = {t["name"]: t["line"]["width"] for t in activity["data"]}
    assert widths["gpu01:5"] > widths["gpu01:0"]


def test_a_research_finding_names_the_researcher(world, login):
    job = world.jobs["bob"]
    archive.archive_job(job, FakeSource({GpuKey("gpu01", i): {**PEERS, "sm_active": 0.7,
                                                              "tensor_active": 0.0}
                                         for i in range(8)}))
    html = login("alice").get(_url(job)).content.decode()
    assert "Tensor cores unused" in html and "the researcher, bob" in html
    assert "torch.autocast" in html


def test_no_metrics_and_no_traces_explains_itself(world, login):
    html = login("bob").get(_url(world.jobs["bob"])).content.decode()
    assert "No diagnosis yet" in html and "No profiler traces analysed" in html


# --- Traces: the phase chart and uploads ----------------------------------------------------


def test_telemetry_and_a_trace_naming_one_straggler_tell_one_story(straggling, login):
    # 8 ranks on gpu01's 8 GPUs (rank r on GPU r, as the kernels' device says); rank 5, on
    # the thermally throttled GPU, is slow in backward: the two verdicts are one
    plans = [[Step(backward=38.0 if r == 5 else 8.0)] * 6 for r in range(8)]
    files = [SimpleUploadedFile(t.source, json.dumps(to_chrome(t, device=t.rank)).encode())
             for t in simulate(plans, Options(gpu=True))]
    bob = login("bob")
    assert bob.post(_url(straggling, "jobs-traces"), {"files": files}).status_code == 303
    page = bob.get(_url(straggling))
    html = page.content.decode()
    assert "One story with the profiler trace" in html
    assert "Rank 5 is slow because its GPU gpu01:5 is (thermal throttling)" in html
    assert "rank 5 runs on GPU gpu01:5" in html and '<a href="#phases">rank 5</a>' in html
    assert "(it ran on GPU <a href=\"#stragglers\">gpu01:5</a>)" in html
    # one verdict, one owner: neither separate card is left
    keys = [f.key for f in page.context["findings"]]
    assert keys.count("straggler-story") == 1
    assert not {"slow-gpu-hardware", "slow-compute-rank", "straggler-no-hardware"} & set(keys)
    assert "Hardware on-call" in html
    # the GPU timeline per rank is on the page, each rank with its GPU
    gpu = page.context["trace_gpu_figure"]
    assert gpu["data"][0]["y"][5] == "rank 5 (gpu01:5)"


def test_a_gpu_trace_shows_the_gpu_timeline_and_an_idle_gpu_says_what_to_check(world, login):
    job = world.jobs["bob"]
    # the GPU computes 2 ms of each ~60 ms step: the CPU cannot feed it
    plans = [[Step(data=40.0, forward=4.0, backward=8.0)] * 6 for _ in range(2)]
    files = [SimpleUploadedFile(t.source, json.dumps(to_chrome(t, device=t.rank)).encode())
             for t in simulate(plans, Options(gpu=True))]
    bob = login("bob")
    bob.post(_url(job, "jobs-traces"), {"files": files})
    html = bob.get(_url(job)).content.decode()
    assert "The GPU is idle" in html and "the CPU side cannot feed it" in html
    assert "CUDA graphs" in html and 'data-figure="fig-gpu-timeline"' in html
    assert "GPU gpu01:0" in html and "GPU gpu01:1" in html  # where each rank ran


@pytest.fixture
def traced_job(world):
    return make_job(world.cluster, 555, world.users["bob"], world.team_a,
                    start_time=RECORDED - timedelta(minutes=30),
                    end_time=RECORDED + timedelta(minutes=30))


def _trace_files(slow: int = 1, world: int = 3, gz: bool = False) -> list[SimpleUploadedFile]:
    plans = [[Step(data=31.0 if r == slow else 1.0)] * 6 for r in range(world)]
    files = []
    for trace in simulate(plans):
        body = json.dumps(to_chrome(trace)).encode()
        name = trace.source + (".gz" if gz else "")
        files.append(SimpleUploadedFile(name, gzip.compress(body) if gz else body))
    return files


def test_an_upload_is_analysed_and_the_page_shows_the_phases(traced_job, login):
    bob = login("bob")
    response = bob.post(_url(traced_job, "jobs-traces"), {"files": _trace_files(gz=True)})
    assert response.status_code == 303 and response["Location"].endswith("#phases")
    page = bob.get(response["Location"])
    html = page.content.decode()
    assert "Traces analysed: 3 ranks" in html and "Straggler: rank 1 (data_loading)" in html
    assert "Rank 1 is the straggler" in html and "only waited for it" in html
    figure = page.context["trace_figure"]
    labels = figure["data"][0]["y"]
    assert labels == ["rank 0 (waited)", "rank 1 ◀ straggler (data loading)", "rank 2 (waited)"]
    assert "One rank loads its data slowly" in html  # the diagnosis reads trace phases too


@pytest.mark.parametrize(("files", "words"), [
    ([], "choose one or more trace files"),
    ([SimpleUploadedFile("rank0.json", b'{"traceEvents": [')], "rank0.json"),
    ([SimpleUploadedFile("rank0.json.gz", gzip.compress(b'{"traceEvents": []}')[:-8])],
     "truncated gzip"),
    ([SimpleUploadedFile("notes.txt", b"hello")], "notes.txt"),
])
def test_a_bad_upload_gives_a_clear_message_and_the_page_stays_up(traced_job, login, files,
                                                                  words):
    bob = login("bob")
    response = bob.post(_url(traced_job, "jobs-traces"), {"files": files}, follow=True)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Trace upload refused" in html and words in html
    assert not TraceRun.objects.filter(job=traced_job).exists()
    # shown at the form (the page opens there), naming the person's file, not a server path
    assert response.redirect_chain[-1][0].endswith("#trace-upload")
    form = html[html.index('id="trace-upload"'):]
    assert "Trace upload refused" in form[:form.index("</form>")]
    assert "beacon-trace-" not in html and "/tmp" not in html


@override_settings(TRACE_MAX_DECOMPRESSED_MB=1)
def test_a_decompression_bomb_is_refused(traced_job, login):
    bomb = gzip.compress(b'{"traceEvents": [' + b" " * (3 << 20) + b"]}")
    response = login("bob").post(_url(traced_job, "jobs-traces"),
                                 {"files": [SimpleUploadedFile("r0.json.gz", bomb)]}, follow=True)
    assert "decompresses past the limit" in response.content.decode()


# Oversize uploads, with CSRF on as in production: CsrfViewMiddleware reads request.POST to
# find the form's token, which parses (and spools to disk) the whole multipart body. The
# refusal must come first, so these tests count the multipart parser's runs.


@pytest.fixture
def csrf_client(world):
    """``csrf_client(persona)``: (a client that enforces CSRF, signed in, and its token)."""
    from django.conf import settings
    from django.test import Client

    def _client(persona):
        client = Client(enforce_csrf_checks=True)
        client.force_login(world.users[persona])
        client.get(reverse("jobs-list"))  # any page with a form sets the CSRF cookie
        return client, client.cookies[settings.CSRF_COOKIE_NAME].value

    return _client


@pytest.fixture
def multipart_parses():
    """How many times Django's multipart parser ran (it still runs: the spy wraps it)."""
    from unittest import mock

    from django.http.multipartparser import MultiPartParser

    with mock.patch.object(MultiPartParser, "parse", autospec=True,
                           side_effect=MultiPartParser.parse) as spy:
        yield spy


@override_settings(TRACE_UPLOAD_MAX_MB=1)
def test_an_oversized_upload_is_refused_before_the_body_is_parsed(traced_job, csrf_client,
                                                                   multipart_parses):
    client, token = csrf_client("bob")
    big = SimpleUploadedFile("r0.json", b"x" * (2 << 20))
    response = client.post(_url(traced_job, "jobs-traces"),
                           {"files": [big], "csrfmiddlewaretoken": token})
    assert response.status_code == 413
    html = response.content.decode()
    assert "Trace upload refused" in html and "over the limit of 1 MiB" in html
    assert "manage.py import_trace" in html and f'href="{_url(traced_job)}#phases"' in html
    assert multipart_parses.call_count == 0
    assert not TraceRun.objects.exists()


@override_settings(TRACE_UPLOAD_MAX_MB=1)
def test_an_upload_within_the_limit_passes_csrf_and_is_parsed_once(traced_job, csrf_client,
                                                                    multipart_parses):
    """The control: the same client and token under the limit (the spy would see a parse)."""
    client, token = csrf_client("bob")
    response = client.post(_url(traced_job, "jobs-traces"),
                           {"files": _trace_files(), "csrfmiddlewaretoken": token})
    assert response.status_code == 303
    assert multipart_parses.call_count == 1 and TraceRun.objects.filter(job=traced_job).exists()


def test_an_upload_without_the_csrf_token_is_still_refused(traced_job, csrf_client):
    client, _ = csrf_client("bob")
    response = client.post(_url(traced_job, "jobs-traces"), {"files": _trace_files()})
    assert response.status_code == 403 and not TraceRun.objects.exists()


def test_nobody_uploads_to_a_job_they_cannot_see(traced_job, login):
    response = login("carol").post(_url(traced_job, "jobs-traces"), {"files": _trace_files()})
    assert response.status_code == 404
    assert not TraceRun.objects.exists()


# --- The API ------------------------------------------------------------------------------


def test_the_api_serves_metrics_with_the_straggler_verdict(straggling, login):
    data = login("bob").get(reverse("api:job-metrics", args=[straggling.pk])).json()
    assert data["status"] == "complete" and data["straggler"]["status"] == "found"
    assert [s["gpu"] for s in data["straggler"]["stragglers"]] == ["gpu01:5"]
    assert len(data["gpus"]) == 8 and data["gpus"][5]["straggler"] is True
    assert data["gpus"][5]["thermal_share"] == 1.0


def test_the_api_serves_series_per_gpu(straggling, login):
    data = login("bob").get(reverse("api:job-series", args=[straggling.pk])).json()
    assert [g["name"] for g in data["gpus"]] == [f"gpu01:{i}" for i in range(8)]
    channels = data["gpus"][5]["channels"]
    assert channels["temperature"][0] == 89.0 and channels["throttle"][0] == 0x60
    assert len(channels["activity"]) == data["points"]


def test_the_api_serves_the_diagnosis_with_evidence(straggling, login):
    [finding] = login("alice").get(reverse("api:job-diagnosis", args=[straggling.pk])).json()
    assert finding["key"] == "slow-gpu-hardware" and finding["area"] == "hardware"
    assert finding["contact"]["name"] == "Hardware on-call"
    assert {e["fact"] for e in finding["evidence"]} >= {"straggler_found", "straggler_gpu"}


def test_an_unarchived_job_has_pending_metrics_in_the_api(world, login):
    data = login("bob").get(reverse("api:job-metrics", args=[world.jobs["bob"].pk])).json()
    assert data["status"] == "pending" and data["gpus"] == []


def test_traces_upload_through_the_api(traced_job, login):
    bob = login("bob")
    url = reverse("api:job-traces", args=[traced_job.pk])
    response = bob.post(url, {"files": _trace_files(slow=2)})
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["straggler"] == {"rank": 2, "phase": "data_loading",
                                 "excess_ms": data["straggler"]["excess_ms"],
                                 "steps": [2, 3, 4, 5, 6, 7], "intermittent": False,
                                 "device": None}
    assert data["waiting_ranks"] == [0, 1] and len(data["ranks"]) == 3
    assert [r["id"] for r in bob.get(url).json()] == [data["id"]]
    detail = bob.get(reverse("api:tracerun-detail", args=[data["id"]])).json()
    assert detail["job_id"] == 555 and detail["cluster"] == "testcluster"


def test_a_corrupt_api_upload_is_a_400_naming_the_file(traced_job, login):
    response = login("bob").post(reverse("api:job-traces", args=[traced_job.pk]),
                                 {"files": [SimpleUploadedFile("rank7.json", b"[1, 2")]})
    assert response.status_code == 400 and "rank7.json" in response.json()["detail"]


@override_settings(TRACE_UPLOAD_MAX_MB=1)
def test_an_oversized_api_upload_is_a_413_before_the_body_is_parsed(traced_job, csrf_client,
                                                                     multipart_parses):
    """DRF's SessionAuthentication runs the same CSRF check, which reads the body too."""
    client, token = csrf_client("bob")
    url = reverse("api:job-traces", args=[traced_job.pk])
    response = client.post(url, {"files": [SimpleUploadedFile("r.json", b"x" * (2 << 20))]},
                           HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 413
    assert "over the limit of 1 MiB" in response.json()["detail"]
    assert multipart_parses.call_count == 0 and not TraceRun.objects.exists()
    response = client.post(url, {"files": _trace_files()}, HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 201 and multipart_parses.call_count >= 1


def test_a_large_body_elsewhere_is_not_this_middlewares_business(world, login):
    """Only the trace upload routes are refused by size here; other routes keep Django's
    own limits (DATA_UPLOAD_MAX_MEMORY_SIZE)."""
    from django.test import override_settings as override

    with override(TRACE_UPLOAD_MAX_MB=1):
        response = login("bob").post(reverse("logout"), {"pad": "x" * (2 << 20)})
    assert response.status_code != 413
