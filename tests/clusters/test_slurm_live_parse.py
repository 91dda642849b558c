"""Reservations and QOS limits (issue 30) parsed from recordings of the real daemons
(tests/fixtures/slurm/live/<release>/, recorded by record.sh beside them): every shape,
text and JSON, CLI and every slurmrestd version, reads the same rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from apps.clusters.adapters.slurm import Qos, Reservation
from apps.clusters.adapters.slurm import parse_live as pl

LIVE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "live"
RELEASES = sorted(p.name for p in LIVE.iterdir() if p.is_dir())
JSON_RESERVATIONS = sorted(LIVE.glob("*/rest/v*_reservations.json")) + sorted(
    LIVE.glob("*/scontrol_reservations.json"))
JSON_QOS = sorted(LIVE.glob("*/rest/dbv*_qos.json")) + sorted(LIVE.glob("*/sacctmgr_qos.json"))


def _release(path: Path) -> str:
    return path.relative_to(LIVE).parts[0]


def _text_reservations(release: str) -> list[Reservation]:
    return pl.parse_reservations_text((LIVE / release / "scontrol_reservations.txt").read_text())


def _text_qos(release: str) -> list[Qos]:
    return pl.parse_qos_text((LIVE / release / "sacctmgr_qos.txt").read_text())


def test_recordings_cover_every_data_parser_the_dev_clusters_serve():
    names = {p.name.split("_")[0] for p in JSON_RESERVATIONS if p.parent.name == "rest"}
    assert {"v0.0.37", "v0.0.38", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"} <= names


@pytest.mark.parametrize("release", RELEASES)
def test_the_recorded_reservation_reads_from_text(release):
    [res] = _text_reservations(release)
    assert res.name == "beacon_fixture" and res.nodes == "gpu04" and res.node_count == 1
    assert res.users == ("bob", "carol") and res.accounts == () and res.partition == ""
    assert "MAINT" in res.flags and res.tres == {"cpu": 32}
    assert res.end - res.start == (datetime(2026, 1, 1, 1, 30) - datetime(2026, 1, 1))
    assert res.start.tzinfo is UTC


@pytest.mark.parametrize("path", JSON_RESERVATIONS, ids=lambda p: str(p.relative_to(LIVE)))
def test_json_reservations_equal_the_text_of_the_same_release(path):
    assert pl.parse_reservations_json(json.loads(path.read_text())) == \
        _text_reservations(_release(path))


@pytest.mark.parametrize("release", RELEASES)
def test_the_recorded_qos_limits_read_from_text(release):
    rows = {q.name: q for q in _text_qos(release)}
    assert rows["high"].max_tres_per_user == {"gres/gpu": 16}
    assert rows["high"].flags == ("DenyOnLimit",) and rows["high"].priority == 100
    mine = rows["beacon_fixture_qos"]
    assert (mine.grp_tres, mine.grp_jobs, mine.max_tres_per_job, mine.max_tres_per_node,
            mine.max_tres_per_user, mine.max_tres_per_account) == (
        {"gres/gpu": 8}, 6, {"gres/gpu": 4}, {"gres/gpu": 2}, {"gres/gpu": 6}, {"gres/gpu": 7})
    assert (mine.max_jobs_per_user, mine.max_submit_per_user, mine.max_wall_min) == (3, 5, 120)
    assert mine.preempt == ("low",) and mine.priority == 5
    assert rows["normal"].max_tres_per_user == {} and rows["normal"].max_wall_min is None


@pytest.mark.parametrize("path", JSON_QOS, ids=lambda p: str(p.relative_to(LIVE)))
def test_json_qos_equal_the_text_of_the_same_release(path):
    assert pl.parse_qos_json(json.loads(path.read_text())) == _text_qos(_release(path))


def test_no_reservations_is_an_empty_list():
    assert pl.parse_reservations_text("No reservations in the system\n") == []


def test_a_reservation_whose_times_do_not_read_is_an_error_not_always_in_force():
    line = ("ReservationName=x StartTime=12/08-17:35 EndTime=12/08-19:05 Nodes=gpu01 "
            "NodeCnt=1 Users=bob")
    with pytest.raises(ValueError, match="times"):
        pl.parse_reservations_text(line)
