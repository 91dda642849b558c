"""The alert rules for Beacon itself pass `promtool check rules` and their unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.services import require

pytestmark = pytest.mark.integration("prometheus")

PROM = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def _promtool(*args: str, cwd: Path = PROM) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    require(tool is not None, "promtool", "apt-get install -y prometheus")
    return subprocess.run([str(tool), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_the_rules_are_valid():
    out = _promtool("check", "rules", "rules/beacon.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 rules found" in out.stdout


def test_the_rule_unit_tests_pass():
    out = _promtool("test", "rules", "beacon_test.yml")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_unit_tests_catch_a_wrong_threshold(tmp_path):
    # Control: a rule that waits twice as long must fail the same expectations.
    (tmp_path / "rules").mkdir()
    rules = (PROM / "rules" / "beacon.yml").read_text()
    (tmp_path / "rules" / "beacon.yml").write_text(rules.replace("> 1800", "> 3600", 1))
    shutil.copy(PROM / "beacon_test.yml", tmp_path)
    out = _promtool("test", "rules", "beacon_test.yml", cwd=tmp_path)
    assert out.returncode == 1
    assert "BeaconClusterSyncStale" in out.stdout + out.stderr
