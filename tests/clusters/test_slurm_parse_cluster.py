"""Cluster-level Slurm parsers (nodes, partitions, associations, fairshare, sdiag)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.clusters.adapters.slurm import parse_cluster as cparse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def _json(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_sinfo_nodes_have_gpu_models_and_usage():
    nodes = {n.name: n for n in cparse.parse_sinfo_json(_json("sinfo.json"))}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert (nodes["gpu01"].gpu_type, nodes["gpu01"].gpu_count) == ("h100", 8)
    assert (nodes["gpu04"].gpu_type, nodes["gpu04"].partitions) == ("a100", ("gpu", "debug"))
    assert all(n.cpus == 32 and n.memory_mb == 256000 for n in nodes.values())
    assert all(0 <= n.gpus_used <= n.gpu_count for n in nodes.values())


def test_rest_nodes_parse_like_sinfo():
    rest = cparse.parse_sinfo_json(_json("rest/v0.0.38_nodes.json"))
    assert [n.name for n in rest] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert {n.gpu_type for n in rest} == {"h100", "a100"}


def test_partitions_from_scontrol_and_rest_agree():
    text = cparse.parse_scontrol_partitions((FIXTURES / "scontrol_partitions.txt").read_text())
    rest = cparse.parse_rest_partitions(_json("rest/v0.0.38_partitions.json"))
    assert text == rest
    gpu = next(p for p in text if p.name == "gpu")
    assert (gpu.is_default, gpu.max_time_min, gpu.nodes) == (True, 2880, "gpu[01-04]")


@pytest.mark.parametrize(("value", "minutes"), [
    ("UNLIMITED", None), ("30", 30), ("00:30:00", 30), ("2-00:00:00", 2880),
    ("1:00:30", 61), ("1-12", 2160), ("1-12:30", 2190), ("5:30", 6),
])
def test_slurm_durations(value, minutes):
    assert cparse._minutes(value) == minutes


def test_sacctmgr_associations():
    rows = cparse.parse_sacctmgr_assoc((FIXTURES / "sacctmgr_assoc.txt").read_text())
    accounts = {r.account: r for r in rows if not r.user}
    assert accounts["vision"].grp_tres == {"gres/gpu": 16}
    assert accounts["speech"].grp_tres_mins == {"gres/gpu": 20}
    assert accounts["nlp"].parent == "root" and accounts["nlp"].shares == "50"
    assert {r.account for r in rows if r.user == "grace"} == {"nlp", "vision"}
    assert accounts["nlp"].default_qos == "normal"


def test_rest_associations_match_sacctmgr_limits():
    text = cparse.parse_sacctmgr_assoc((FIXTURES / "sacctmgr_assoc.txt").read_text())
    rest = cparse.parse_rest_associations(_json("rest/dbv0.0.38_associations.json"))

    def limits(rows):
        return {(r.account, r.user): (dict(r.grp_tres), dict(r.grp_tres_mins)) for r in rows}

    assert limits(text) == limits(rest)


def test_sshare_rows_skip_root_and_drop_infinities():
    rows = cparse.parse_sshare((FIXTURES / "sshare.txt").read_text())
    assert ("root", "") not in {(r.account, r.user) for r in rows}
    speech = next(r for r in rows if r.account == "speech" and not r.user)
    assert speech.grp_tres_mins == {"gres/gpu": 20}
    assert "gres/gpu" in speech.grp_tres_raw
    root_user = next(r for r in rows if r.user == "root")
    assert root_user.level_fs is None  # "inf"
    assert {r.user for r in rows if r.account == "nlp"} == {"", "alice", "bob", "grace"}


def test_sdiag_marker_is_stable_and_changes_with_counters():
    text = (FIXTURES / "sdiag.txt").read_text()
    marker = cparse.sdiag_marker(text)
    assert marker == cparse.sdiag_marker(text)
    assert "Jobs submitted=" in marker and "Data since=" in marker
    bumped = text.replace("Jobs completed:", "Jobs completed: 1", 1).replace(
        "Jobs completed: 1 ", "Jobs completed: 1")
    assert cparse.sdiag_marker(bumped) != marker


def test_sdiag_without_counters_is_an_error():
    with pytest.raises(ValueError, match="no job counters"):
        cparse.sdiag_marker("sdiag: error: Unable to contact slurm controller")


def test_rest_diag_marker():
    marker = cparse.diag_marker(_json("rest/v0.0.38_diag.json"))
    assert "jobs_submitted=" in marker
    with pytest.raises(ValueError):
        cparse.diag_marker({"statistics": {}})
