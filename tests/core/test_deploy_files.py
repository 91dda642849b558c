"""docker-compose.yml is valid for the Compose v2 client (no Docker engine needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import compose
import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = Path(compose.__file__).parent / "docker-compose"


def _config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COMPOSE), "-f", str(path), "config", "-q"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_compose_file_is_valid():
    result = _config(ROOT / "docker-compose.yml")
    assert result.returncode == 0, result.stderr


def test_compose_file_has_the_services_a_site_needs():
    out = subprocess.run([str(COMPOSE), "-f", "docker-compose.yml", "config", "--services"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert set(out.stdout.split()) == {"web", "worker", "beat", "postgres", "redis", "prometheus"}


@pytest.mark.parametrize(("old", "new"), [
    ("", ""),  # control: an unchanged copy passes, so a failure below is the edit's
    ("condition: service_healthy", "condition: service_happy"),
    ("interval: 30s", "interval: 30 seconds"),
])
def test_the_validation_catches_a_broken_file(tmp_path, old, new):
    broken = tmp_path / "docker-compose.yml"
    broken.write_text((ROOT / "docker-compose.yml").read_text().replace(old, new, 1))
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    assert (_config(broken).returncode == 0) == (old == new)


def _services() -> dict[str, dict[str, object]]:
    import json

    out = subprocess.run([str(COMPOSE), "-f", "docker-compose.yml", "config", "--format", "json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return dict(json.loads(out.stdout)["services"])


def test_every_long_running_service_has_a_healthcheck():
    services = _services()
    for name in ("web", "worker", "beat", "postgres", "redis", "prometheus"):
        assert services[name].get("healthcheck", {}).get("test"), name


def test_the_beat_healthcheck_reads_the_schedule_file_beat_writes():
    beat = _services()["beat"]
    assert "--schedule /data/celerybeat-schedule" in " ".join(beat["command"])
    assert "/data/celerybeat-schedule" in " ".join(beat["healthcheck"]["test"])


def test_prometheus_loads_a_config_file_that_is_shipped():
    prometheus = _services()["prometheus"]
    flag = next(a for a in prometheus["command"] if a.startswith("--config.file="))
    mounted = next(v for v in prometheus["volumes"] if v["target"] == "/etc/prometheus")
    shipped = Path(mounted["source"]) / Path(flag.split("=", 1)[1]).relative_to("/etc/prometheus")
    assert shipped.is_file(), shipped


def test_prometheus_can_scrape_web_and_the_worker():
    services = _services()
    assert "web" in services["web"]["environment"]["INTERNAL_HOSTS"].split(",")  # Host header
    assert services["worker"]["environment"]["WORKER_METRICS_PORT"] == "9808"
    assert services["worker"]["environment"]["PROMETHEUS_MULTIPROC_DIR"]


def test_the_broker_keeps_queued_tasks_across_a_restart():
    redis = _services()["redis"]
    assert "--appendonly yes" in " ".join(redis["command"])
    assert any(v["target"] == "/data" for v in redis["volumes"])
