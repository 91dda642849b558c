"""One story per job: telemetry's straggler GPU joined to the trace's straggler rank."""

from __future__ import annotations

import pytest

from apps.analysis.diagnosis import Finding
from apps.analysis.straggler_story import (
    KEY,
    TelemetryStraggler,
    TraceStraggler,
    merge,
    one_story,
    rank_gpu,
)

THERMAL = TelemetryStraggler(("gpu06:1",), hardware=True, cause="thermal throttling")
NO_SIGN = TelemetryStraggler(("gpu06:1",), hardware=False, cause="")


def _trace(gpu: str = "gpu06:1", phase: str = "backward", **kw) -> TraceStraggler:
    return TraceStraggler(rank=1, phase=phase, excess_ms=42.0, gpu=gpu, **kw)


STORIES = [
    # (id, trace, telemetry, area, title starts, words in the text)
    ("same GPU, thermally throttled: the hardware", _trace(), THERMAL, "hardware",
     "Rank 1 is slow because its GPU gpu06:1 is (thermal throttling)",
     ["rank 1 runs on GPU gpu06:1", "The GPU, not the code"]),
    ("same GPU, no hardware sign: the code", _trace(), NO_SIGN, "code",
     "Rank 1 (GPU gpu06:1) does more work than the others",
     ["no sign of a hardware problem", "in the code"]),
    ("same GPU, slow data loading: the data contact", _trace(phase="data_loading"), NO_SIGN,
     "data", "Rank 1 (GPU gpu06:1)", ["input pipeline or data of that rank"]),
    ("different GPUs: the trace decides and says so", _trace(gpu="gpu07:3"), THERMAL, "code",
     "Telemetry and the trace disagree", ["Telemetry names GPU gpu06:1", "follows the trace"]),
    ("intermittent: the steps are named", _trace(intermittent=True, steps=(3, 6, 9)), NO_SIGN,
     "code", "Rank 1", ["on steps #3, #6, #9 only (an intermittent straggler)"]),
]


@pytest.mark.parametrize(("trace", "telemetry", "area", "title", "words"),
                         [c[1:] for c in STORIES], ids=[c[0] for c in STORIES])
def test_one_verdict_with_one_owner(trace, telemetry, area, title, words):
    story = one_story(trace, telemetry)
    assert story.rule == KEY and story.area == area
    assert story.title.startswith(title)
    for word in words:
        assert word in story.text
    assert {e.anchor for e in story.evidence} == {"stragglers", "phases"}


@pytest.mark.parametrize(("trace", "telemetry"), [
    (None, THERMAL), (_trace(), None),
    (_trace(gpu=""), THERMAL),  # a CPU trace: it cannot say where the rank ran
    (_trace(), TelemetryStraggler((), hardware=False, cause="")),
])
def test_nothing_to_join_keeps_the_findings_apart(trace, telemetry):
    assert one_story(trace, telemetry) is None


@pytest.mark.parametrize(("host", "index", "nodes", "gpu"), [
    ("gpu06", 1, ["gpu06", "gpu07"], "gpu06:1"),
    ("gpu06.cluster.example.org", 1, [], "gpu06:1"),  # Kineto's host_name is often the FQDN
    ("", 2, ["gpu06"], "gpu06:2"),  # one node: the device is enough
    ("", 2, ["gpu06", "gpu07"], ""),  # several nodes and no host: unknown
    ("gpu06", None, ["gpu06"], ""),  # no GPU events
])
def test_rank_gpu_names_gpus_as_telemetry_does(host, index, nodes, gpu):
    assert rank_gpu(host, index, nodes) == gpu


def _finding(rule: str) -> Finding:
    return Finding(rule, "code", "warning", rule, "", "", ())


def test_the_story_replaces_both_straggler_findings_where_the_first_stood():
    findings = [_finding("data-starved"), _finding("slow-gpu-hardware"), _finding("xid"),
                _finding("slow-compute-rank"), _finding("fp64")]
    story = one_story(_trace(), THERMAL)
    assert [f.rule for f in merge(findings, story)] == ["data-starved", KEY, "xid", "fp64"]
    assert [f.rule for f in merge(findings, None)] == [f.rule for f in findings]
