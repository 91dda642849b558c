"""The one quoting function: table tests, then proof against the real Prometheus."""

from __future__ import annotations

import pytest
import requests

from apps.clusters.adapters import promql
from apps.clusters.adapters.promql import Matcher, UnsafeValue
from tests.integration import prom

HOSTILE = ['"', "\\", "}", "\n", 'job"7', "a\nb", "jöb-β", "a😀b", 'x"} or vector(1) #',
           "C:\\tmp\\x", "o'brien", "a.b", "a|b", "(.*)", "tab\there", "nul\x00end"]


@pytest.mark.parametrize(("value", "literal"), [
    ("alice", '"alice"'),
    ('al"ice', '"al\\"ice"'),
    ("a\\b", '"a\\\\b"'),
    ("a\nb", '"a\\nb"'),
    ("a\tb", '"a\\tb"'),
    ("jöb-β", '"jöb-β"'),
    ("a😀b", '"a😀b"'),
    ("o'brien", '"o\'brien"'),
    ('x"} or vector(1) #', '"x\\"} or vector(1) #"'),
])
def test_it_quotes_a_value_as_a_promql_literal(value, literal):
    assert promql.quote(value) == literal


@pytest.mark.parametrize("bad", ["", "\ud800", 7, None])
def test_it_refuses_values_that_cannot_be_quoted_safely(bad):
    with pytest.raises(UnsafeValue):
        promql.quote(bad)


@pytest.mark.parametrize(("values", "literal"), [
    (["1", "2"], '"1|2"'),
    (["2", "1", "2"], '"1|2"'),
    (["a.b", "c"], '"a\\\\.b|c"'),
    (["a|b"], '"a\\\\|b"'),
    (["(x)", "[y]", "{z}", "^$*+?"],
     r'"\\(x\\)|\\[y\\]|\\^\\$\\*\\+\\?|\\{z\\}"'),
    (['q"', "é"], '"q\\"|é"'),
])
def test_it_builds_an_escaped_alternation(values, literal):
    assert promql.any_of(values) == literal


@pytest.mark.parametrize("values", [[], [""], ["1", ""]])
def test_it_refuses_an_empty_alternation_or_member(values):
    with pytest.raises(UnsafeValue):
        promql.any_of(values)


@pytest.mark.parametrize(("metric", "matchers", "expected"), [
    ("up", [], "up"),
    ("DCGM_FI_DEV_GPU_UTIL", [Matcher.eq("hpc_job", "7")], 'DCGM_FI_DEV_GPU_UTIL{hpc_job="7"}'),
    ("m", [Matcher.present("Hostname"), Matcher.one_of("gpu", ["1", "0"])],
     'm{Hostname!="",gpu=~"0|1"}'),
    ("m", [Matcher.ne("mode", "idle")], 'm{mode!="idle"}'),
])
def test_it_renders_selectors(metric, matchers, expected):
    assert promql.selector(metric, *matchers) == expected


@pytest.mark.parametrize(("metric", "label"), [
    ("bad name", "ok"), ("1abc", "ok"), ("ok", "bad-label"), ("ok", "__name__"), ("ok", "a b"),
])
def test_it_refuses_bad_metric_and_label_names(metric, label):
    with pytest.raises(UnsafeValue):
        promql.selector(metric, Matcher.eq(label, "v"))


@pytest.mark.parametrize(("value", "ok"), [
    ("123", True), ("123_4", True), ("", False), ("12a", False), ("1_2_3", False),
    ("1\n", False), ('1"', False),
])
def test_it_allow_lists_job_ids(value, ok):
    if ok:
        assert promql.check_job_id(value) == value
    else:
        with pytest.raises(UnsafeValue):
            promql.check_job_id(value)


def test_duration_is_whole_milliseconds():
    assert promql.duration(2016) == "2016000ms"
    assert promql.duration(0.0001) == "1ms"


# --- Against the real Prometheus ------------------------------------------------------

TS = 1_790_000_000  # 2026-09-21: before every other test data set
DATASET = "promql-hostile-v1"


def _dataset() -> str:
    lines = ["# HELP beacon_hostile One series per hostile label value.",
             "# TYPE beacon_hostile gauge"]
    for i, value in enumerate(HOSTILE):
        lines.append(f"{prom.om_series('beacon_hostile', {'v': value})} {i} {TS}")
    lines.append(f"{prom.om_series('beacon_hostile', {'other': 'unlabelled'})} 99 {TS}")
    return "\n".join(lines) + "\n" + prom.marker_lines(DATASET, TS) + "# EOF\n"


def _query(url: str, expr: str) -> list[dict[str, object]]:
    response = requests.post(f"{url}/api/v1/query", data={"query": expr, "time": TS + 1},
                             timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["data"]["result"]


@pytest.mark.integration("prometheus")
@pytest.mark.parametrize("value", [v for v in HOSTILE if "\x00" not in v])
def test_hostile_values_select_exactly_their_own_series(value):
    url = prom.require_prometheus()
    prom.ensure_loaded(DATASET, TS, _dataset())
    for expr in (promql.selector("beacon_hostile", Matcher.eq("v", value)),
                 promql.selector("beacon_hostile", Matcher.one_of("v", [value]))):
        result = _query(url, expr)
        assert [r["metric"]["v"] for r in result] == [value], expr
        assert result[0]["value"][1] == str(HOSTILE.index(value))


@pytest.mark.integration("prometheus")
def test_an_alternation_of_hostile_values_selects_exactly_those():
    url = prom.require_prometheus()
    prom.ensure_loaded(DATASET, TS, _dataset())
    wanted = ['job"7', "a.b", "(.*)", "a|b", "a😀b"]
    result = _query(url, promql.selector("beacon_hostile", Matcher.one_of("v", wanted)))
    assert sorted(r["metric"]["v"] for r in result) == sorted(wanted)


@pytest.mark.integration("prometheus")
def test_a_naive_fstring_would_have_been_injectable():
    """The control: the injection string does change an unquoted query (so the test bites)."""
    url = prom.require_prometheus()
    prom.ensure_loaded(DATASET, TS, _dataset())
    naive = 'beacon_hostile{v="x"} or vector(1) #"}'
    assert _query(url, naive), "the naive query returned the injected vector(1)"
    safe = promql.selector("beacon_hostile", Matcher.eq("v", 'x"} or vector(1) #'))
    assert [r["metric"].get("v") for r in _query(url, safe)] == ['x"} or vector(1) #']


def test_a_host_pattern_allows_an_optional_port():
    assert promql.any_host(["gpu02", "gpu.01"]) == r'"(gpu\\.01|gpu02)(:[0-9]+)?"'
    with pytest.raises(UnsafeValue):
        promql.any_host([])
