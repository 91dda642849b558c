"""I/O wait as data-path evidence for an input stall (issue 28): the shipped rules on tables
of facts (no database), and the node fact from archived node rows."""

from __future__ import annotations

import pytest

from apps.analysis.diagnosis import Condition, Rule, evaluate, problems
from apps.jobs.diagnosis_defaults import DEFAULT_RULES
from apps.jobs.models import JobNodeMetrics
from apps.jobs.node_facts import host_facts

RULES = tuple(Rule(s["key"], s["area"], s["severity"], s["title"], s["text"], s["hint"],
                   tuple(Condition(*c) for c in s["conditions"])) for s in DEFAULT_RULES)
DATA_PATH = {"input-stall", "input-stall-storage", "input-stall-iowait", "input-stall-cpu"}

# GPUs busy but not computing, host copies flowing in, one whole node (the input stall)
STALL = {"sm_measured": 1.0, "busy": 0.87, "computing": 0.19, "computing_share": 0.22,
         "straggler_found": 0.0, "pcie_rx_gbs": 2.5, "host_rx_gbs": 2.5,
         "node_cpu_share": 1.0}


def fired(**facts: float) -> list[str]:
    return sorted(f.rule for f in evaluate(RULES, {**STALL, **facts}) if f.rule in DATA_PATH)


@pytest.mark.parametrize(("facts", "expected"), [
    # reads block: CPUs mostly idle, a third of their time waiting for I/O
    ({"cpu_busy": 0.45, "cpu_iowait": 0.32}, ["input-stall", "input-stall-iowait"]),
    ({"cpu_busy": 0.2, "cpu_iowait": 0.10}, ["input-stall", "input-stall-iowait"]),  # the line
    # low I/O wait: no disk reading
    ({"cpu_busy": 0.2, "cpu_iowait": 0.02}, ["input-stall"]),
    ({"cpu_busy": 0.2, "cpu_iowait": 0.099}, ["input-stall"]),
    # no iowait series (an archive from before, a site without the mode): no reading
    ({"cpu_busy": 0.2}, ["input-stall"]),
    # the network file system also delivers: both data readings, each with its own evidence
    ({"cpu_busy": 0.3, "cpu_iowait": 0.2, "fs_read_gbs": 0.09},
     ["input-stall", "input-stall-iowait", "input-stall-storage"]),
    # a shared node: other jobs' I/O counts too, so no reading
    ({"cpu_busy": 0.3, "cpu_iowait": 0.4, "node_cpu_share": 0.25}, ["input-stall"]),
    # the GPUs compute: I/O wait alone names nothing
    ({"cpu_busy": 0.3, "cpu_iowait": 0.4, "computing_share": 0.8}, []),
    # no host copies (GPUDirect network data explains PCIe receive): not an input stall
    ({"cpu_busy": 0.3, "cpu_iowait": 0.4, "host_rx_gbs": 0.2}, []),
])
def test_an_input_stall_names_disk_latency_only_with_io_wait_on_whole_nodes(facts, expected):
    assert fired(**facts) == expected


def test_the_io_wait_verdict_says_what_was_seen_and_what_else_it_could_be():
    [finding] = [f for f in evaluate(RULES, {**STALL, "cpu_busy": 0.45, "cpu_iowait": 0.32})
                 if f.rule == "input-stall-iowait"]
    assert finding.area == "data"
    assert "spent 32% of their time in I/O wait" in finding.text
    assert "counts it in the 45% busy" in finding.text  # node_exporter's busy includes it
    for other in ("swapping", "checkpoint", "another job"):
        assert other in finding.text
    evidence = {e.fact: e for e in finding.evidence}
    assert evidence["cpu_iowait"].shown == "32%" and evidence["cpu_iowait"].anchor == "network"
    assert not problems(next(r for r in RULES if r.key == "input-stall-iowait"))


@pytest.mark.parametrize(("rows", "expected"), [
    ([(0.4, 0.05), (0.5, 0.31)], 0.31),  # the worst node: it holds back every rank
    ([(0.4, None), (0.5, 0.02)], 0.02),  # a node without the series: the others speak
    ([(0.4, None)], None),  # no series at all: no fact (not zero)
])
def test_the_io_wait_fact_is_the_worst_nodes(rows, expected):
    nodes = [JobNodeMetrics(host=f"gpu{i:02d}", cpu_busy=busy, cpu_iowait=iowait)
             for i, (busy, iowait) in enumerate(rows)]
    facts = host_facts(nodes, 32, [16] * len(nodes))
    assert facts.get("cpu_iowait") == expected
    assert facts["node_cpu_share"] == 1.0
