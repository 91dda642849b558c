"""Every rules file under deploy/prometheus passes `promtool check` and has a passing
`promtool test rules` file; the example configs are valid."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.services import require

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "prometheus"
RULES = sorted((DEPLOY / "rules").glob("*.yml"))
TESTS = sorted(DEPLOY.glob("*_test.yml"))

pytestmark = pytest.mark.integration("prometheus")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    require(tool is not None, "promtool", "deploy/dev/prometheus.sh up (installs it)")
    assert tool is not None
    return subprocess.run([tool, *args], cwd=DEPLOY, capture_output=True, text=True,
                          timeout=120, check=False)


def test_every_rules_file_has_a_test_file():
    tested = {rule for test in TESTS for rule in yaml.safe_load(test.read_text())["rule_files"]}
    assert {f"rules/{r.name}" for r in RULES} <= tested
    assert RULES, "no rules found"


@pytest.mark.parametrize("rules", RULES, ids=lambda p: p.name)
def test_rules_pass_promtool_check(rules):
    result = _promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", TESTS, ids=lambda p: p.name)
def test_rule_unit_tests_pass(test_file):
    result = _promtool("test", "rules", test_file.name)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("config", [DEPLOY / "prometheus.example.yml",
                                    ROOT / "deploy" / "dev" / "prometheus.yml"],
                         ids=lambda p: p.name)
def test_configs_pass_promtool_check(config):
    result = _promtool("check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_config_passes_promtool_with_its_token_file(tmp_path):
    """deploy/prometheus/prometheus.yml as docker-compose mounts it, once the site has put
    the METRICS_TOKEN value in metrics_token (promtool refuses a missing file)."""
    site = tmp_path / "prometheus"
    shutil.copytree(DEPLOY, site)
    (site / "metrics_token").write_text("a-token\n")
    result = _promtool("check", "config", str(site / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    (site / "metrics_token").unlink()  # and the check does see a missing token file
    assert _promtool("check", "config", str(site / "prometheus.yml")).returncode != 0


@pytest.mark.parametrize("config", ["prometheus.yml", "prometheus.example.yml"])
def test_shipped_configs_load_every_rules_file(config):
    loaded = set(yaml.safe_load((DEPLOY / config).read_text())["rule_files"])
    assert {f"rules/{r.name}" for r in RULES} <= loaded


def test_the_compose_config_scrapes_web_and_worker_with_the_token():
    jobs = {j["job_name"]: j for j in
            yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["scrape_configs"]}
    assert jobs["beacon"]["static_configs"][0]["targets"] == ["web:8000"]  # BeaconMetricsDown
    assert jobs["beacon"]["metrics_path"] == "/metrics"
    assert jobs["beacon-worker"]["static_configs"][0]["targets"] == ["worker:9808"]
    for name in ("beacon", "beacon-worker"):
        assert jobs[name]["authorization"] == {"type": "Bearer",
                                               "credentials_file": "metrics_token"}
    assert {"dcgm-exporter", "node-exporter"} <= jobs.keys()
