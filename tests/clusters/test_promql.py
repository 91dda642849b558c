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


# --- Counters over several names (issue 17) ----------------------------------------------

RX, TX = ("node_infiniband_port_data_received_bytes_total",
          "node_infiniband_port_data_transmitted_bytes_total")


@pytest.mark.parametrize(("names", "matchers", "by", "fn", "expected"), [
    ([RX], [], ["instance"], "rate",
     f"sum by (instance) (avg without (job) (rate({RX}[2m])))"),
    ([RX, RX], [], ["instance"], "rate",  # a repeated name is one selector
     f"sum by (instance) (avg without (job) (rate({RX}[2m])))"),
    ([RX, TX], [Matcher.eq("cluster", 'a"b')], ["instance", "device"], "rate",
     f'sum by (instance, device) (avg without (job) ('
     f'label_replace(rate({RX}{{cluster="a\\"b"}}[2m]), "beacon_name", "{RX}", "", "") or '
     f'label_replace(rate({TX}{{cluster="a\\"b"}}[2m]), "beacon_name", "{TX}", "", "")))'),
    (["a_total", "b_total"], [], ["instance", promql.NAME_LABEL], "increase",
     'sum by (instance, beacon_name) (avg without (job) ('
     'label_replace(increase(a_total[2m]), "beacon_name", "a_total", "", "") or '
     'label_replace(increase(b_total[2m]), "beacon_name", "b_total", "", "")))'),
])
def test_a_counter_sum_keeps_every_name_in_its_own_selector(names, matchers, by, fn, expected):
    query = promql.counter_sum(names, matchers, "2m", by, fn=fn)
    assert query == expected
    assert "__name__" not in query


@pytest.mark.parametrize(("names", "by", "fn"), [
    ([], ["instance"], "rate"), (["a"], ["instance"], "sum"), (["a b"], ["instance"], "rate"),
    (["a"], ["bad-label"], "rate"), (["a"], ["__name__"], "rate"),
])
def test_a_counter_sum_refuses_what_it_cannot_build(names, by, fn):
    with pytest.raises(UnsafeValue):
        promql.counter_sum(names, [], "2m", by, fn=fn)


S = 'x_total{a="b"}'
VM_SPAN = f"{S}[90001ms]"
VM_SAMPLED = f"(tlast_over_time({VM_SPAN}) - tfirst_over_time({VM_SPAN}))"


@pytest.mark.parametrize(("fn", "window", "store", "expected"), [
    ("rate", 90.0, "prometheus", f"rate({S}[90000ms])"),
    ("increase", 90.0, "prometheus", f"increase({S}[90000ms])"),
    ("rate", "2m", "victoriametrics", f"rate({S}[2m])"),  # a duration is used as it is
    ("irate", 90.0, "victoriametrics", f"irate({S}[90000ms])"),
    # the samples inside the range only, one millisecond more (its ranges exclude the start)
    ("rate", 90.0, "victoriametrics", f"(increase_prometheus({VM_SPAN}) / {VM_SAMPLED})"),
    ("increase", 90.0, "victoriametrics",
     f"(increase_prometheus({VM_SPAN}) * (90.000 / {VM_SAMPLED}))"),
])
def test_a_counter_reads_the_same_samples_on_each_store(fn, window, store, expected):
    assert promql.counter_call(fn, S, window, store) == expected


def test_a_counter_refuses_an_unknown_store_or_function():
    with pytest.raises(UnsafeValue, match="is not one of prometheus, victoriametrics"):
        promql.counter_call("rate", S, 60.0, "influx")
    with pytest.raises(UnsafeValue, match="not a counter function"):
        promql.counter_call("increase_prometheus", S, 60.0, "victoriametrics")


@pytest.mark.parametrize(("target", "host"), [
    ("gpu01:9100", "gpu01"), ("gpu01", "gpu01"), ("[fe80::1]:9100", "fe80::1"),
    ("10.0.0.7:9400", "10.0.0.7"), ("", ""), ("fe80::1", "fe80::1"),
])
def test_the_host_of_a_scrape_target(target, host):
    assert promql.host_of(target) == host


def test_code_written_matchers_are_quoted_and_checked():
    assert Matcher.not_matching("device", "lo|ib.*").render() == 'device!~"lo|ib.*"'
    assert Matcher.from_tuple(("mode", "=", "idle")).render() == 'mode="idle"'
    with pytest.raises(UnsafeValue):
        Matcher.from_tuple(("mode", "==", "idle"))


# Against the real Prometheus: the shapes a real node_exporter has. Two devices x two ports,
# both directions; node c1 scraped by two jobs; a counter reset on c2; c3 exports only the
# received counter. Rates are known: rx 1000 B/s and tx 3000 B/s per port.
COUNTERS_TS = 1_790_100_000
COUNTERS = "promql-counters-v1"


def _counters() -> str:
    lines = []
    for name, per_s in ((RX, 1000), (TX, 3000)):
        lines += [f"# TYPE {name.removesuffix('_total')} counter"]
        for host, jobs in (("c1", ("node", "node-ib")), ("c2", ("node",)), ("c3", ("node",))):
            if host == "c3" and name == TX:
                continue
            for job in jobs:
                for device in ("mlx5_0", "mlx5_1"):
                    for port in ("1", "2"):
                        labels = {"instance": f"{host}:9100", "job": job, "device": device,
                                  "port": port}
                        for i in range(41):  # 20 minutes at 30 s
                            value = per_s * 30 * (i if host != "c2" or i < 20 else i - 20)
                            lines.append(f"{prom.om_series(name, labels)} {value} "
                                         f"{COUNTERS_TS - 1200 + 30 * i}")
    return "\n".join(lines) + "\n" + prom.marker_lines(COUNTERS, COUNTERS_TS) + "# EOF\n"


def _post(url: str, expr: str) -> requests.Response:
    return requests.post(f"{url}/api/v1/query", data={"query": expr, "time": COUNTERS_TS},
                         timeout=10)


@pytest.mark.integration("prometheus")
def test_a_name_regex_under_rate_is_refused_and_the_counter_sum_is_not():
    """The control first: the query that cost every telemetry rule on real sites."""
    url = prom.require_prometheus()
    prom.ensure_loaded(COUNTERS, COUNTERS_TS, _counters())
    naive = f'sum by (instance, device) (rate({{__name__=~"{RX}|{TX}"}}[2m]))'
    refused = _post(url, naive)
    assert refused.status_code == 422
    assert "same labelset" in refused.json()["error"]

    answer = _post(url, promql.counter_sum([RX, TX], [Matcher.host("instance", ["c1", "c2",
                                                                                 "c3"])],
                                           "2m", ["instance", "device"]))
    assert answer.status_code == 200, answer.text
    got = {(r["metric"]["instance"], r["metric"]["device"]): float(r["value"][1])
           for r in answer.json()["data"]["result"]}
    # per device: 2 ports x (1000 + 3000) B/s; c1 once although scraped twice; c3 rx only
    assert got == pytest.approx({(h, d): 8000.0 if h != "c3:9100" else 2000.0
                                 for h in ("c1:9100", "c2:9100", "c3:9100")
                                 for d in ("mlx5_0", "mlx5_1")})


@pytest.mark.integration("prometheus")
def test_a_counter_sum_survives_a_reset_and_can_keep_the_directions_apart():
    url = prom.require_prometheus()
    prom.ensure_loaded(COUNTERS, COUNTERS_TS, _counters())
    expr = promql.counter_sum([RX, TX], [Matcher.eq("instance", "c2:9100")], "15m",
                              ["instance", promql.NAME_LABEL], fn="increase")
    answer = _post(url, expr)
    assert answer.status_code == 200, answer.text
    got = {r["metric"][promql.NAME_LABEL]: float(r["value"][1])
           for r in answer.json()["data"]["result"]}
    # 15 minutes over 4 ports; c2's counters restarted from 0 ten minutes ago, and the
    # 30 s step across the restart is lost (its bytes are unknown): 870 s of traffic
    assert got == pytest.approx({RX: 4 * 1000 * 870, TX: 4 * 3000 * 870}, rel=0.001)
