"""The diagnosis engine: rules as data over a job's facts, rendered with their evidence."""

from __future__ import annotations

import math

import pytest

from apps.analysis.diagnosis import (
    FACTS,
    Condition,
    Rule,
    evaluate,
    holds,
    problems,
    render,
    show,
)


def rule(*conditions: tuple[str, str, float], text: str = "t", key: str = "r") -> Rule:
    return Rule(key, "data", "warning", "title", text, "hint",
                tuple(Condition(*c) for c in conditions))


STALL = rule(("computing_share", "<=", 0.35), ("busy", ">=", 0.5),
             ("straggler_found", "<=", 0),
             text="busy {busy} but computing {computing}, {pcie_rx_gbs} in")


@pytest.mark.parametrize(("facts", "fires"), [
    ({"computing_share": 0.2, "busy": 0.87, "straggler_found": 0.0}, True),
    ({"computing_share": 0.35, "busy": 0.5, "straggler_found": 0.0}, True),  # bounds included
    ({"computing_share": 0.36, "busy": 0.87, "straggler_found": 0.0}, False),
    ({"computing_share": 0.2, "busy": 0.4, "straggler_found": 0.0}, False),
    ({"computing_share": 0.2, "busy": 0.87, "straggler_found": 1.0}, False),
    ({"computing_share": 0.2, "busy": 0.87}, False),  # not measured: never fires
    ({"computing_share": math.nan, "busy": 0.87, "straggler_found": 0.0}, False),
    ({"computing_share": "0.2", "busy": 0.87, "straggler_found": 0.0}, False),
])
def test_a_rule_fires_only_when_every_condition_holds_on_measured_facts(facts, fires):
    assert holds(STALL, facts) is fires


def test_a_rule_without_conditions_never_fires():
    assert not holds(rule(), {"busy": 1.0})


@pytest.mark.parametrize(("op", "value", "fires"), [
    (">=", 3, True), (">", 3, False), ("<=", 3, True), ("<", 3, False), ("==", 3, True),
    ("!=", 3, False), ("!=", 4, True)])
def test_operators(op, value, fires):
    assert holds(rule(("xid_gpus", op, value)), {"xid_gpus": 3.0}) is fires


def test_findings_carry_their_evidence_with_page_anchors():
    facts = {"computing_share": 0.22, "busy": 0.87, "straggler_found": 0.0,
             "computing": 0.19, "pcie_rx_gbs": 2.5}
    [finding] = evaluate([STALL, rule(("xid_gpus", ">=", 1))], facts)
    assert finding.text == "busy 87% but computing 19%, 2.5 GB/s in"
    assert [e.fact for e in finding.evidence] == ["computing_share", "busy", "straggler_found",
                                                   "computing", "pcie_rx_gbs"]
    assert [e.shown for e in finding.evidence][:3] == ["22%", "87%", "no"]
    assert {e.anchor for e in finding.evidence} == {"efficiency", "stragglers", "gpus"}


@pytest.mark.parametrize(("fact", "value", "shown"), [
    ("busy", 0.874, "87%"), ("pcie_rx_gbs", 2.46, "2.5 GB/s"), ("fs_read_gbs", 0.0904, "90 MB/s"),
    ("fs_read_gbs", 0.0, "0 MB/s"), ("temp_max", 89.4, "89 °C"),
    ("straggler_found", 1.0, "yes"), ("xid_gpus", 2.0, "2"), ("ib_errors", 26.04, "26"),
    ("ib_errors", 0.25, "0.25"),
    ("run_hours", 30.25, "30.2 h"), ("trace_excess_ms", 94.33, "94.3 ms"),
    ("straggler_gpu", "gpu01:5", "gpu01:5"), ("busy", None, "unknown"),
])
def test_values_print_in_their_unit(fact, value, shown):
    assert show(fact, value) == shown


def test_unknown_placeholders_are_left_unknown_not_evaluated():
    assert render("{busy} {nope} {busy.__class__}", {"busy": 0.5}) == \
        "50% unknown {busy.__class__}"


@pytest.mark.parametrize(("bad", "words"), [
    (Rule("k", "storage", "warning", "t", "t", "h", (Condition("busy", ">=", 1),)), "area"),
    (rule(), "at least one condition"),
    (rule(("nope", ">=", 1)), "unknown fact 'nope'"),
    (rule(("straggler_gpu", "==", 1)), "is a name"),
    (rule(("busy", "=>", 1)), "operator '=>'"),
    (rule(("busy", ">=", 1), text="{nope}"), "unknown placeholder {nope}"),
])
def test_bad_rules_are_explained(bad, words):
    assert any(words in p for p in problems(bad))


def test_a_good_rule_has_no_problems():
    assert problems(STALL) == []


def test_every_fact_has_a_known_unit_and_anchor():
    assert {f.unit for f in FACTS.values()} <= {"pct", "count", "bool", "gbs", "celsius",
                                                "hours", "ms", "mhz", "text"}
    assert {f.anchor for f in FACTS.values()} <= {"efficiency", "gpus", "health", "network",
                                                  "stragglers", "phases"}
