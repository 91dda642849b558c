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
    assert set(out.stdout.split()) == {"nginx", "web", "worker", "beat", "postgres", "redis",
                                       "prometheus"}


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
    for name in ("nginx", "web", "worker", "beat", "postgres", "redis", "prometheus"):
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


# --- nginx in front of gunicorn (issue 27 item 2) ---------------------------------------------

NGINX = ROOT / "deploy" / "nginx"


def _directive(name: str) -> str:
    """A directive's value in the shipped proxy settings (one occurrence each)."""
    import re

    found = re.findall(rf"^{name}\s+([^;]+);", (NGINX / "beacon-proxy.conf").read_text(), re.M)
    assert len(found) == 1, (name, found)
    return found[0].strip()


def test_only_nginx_is_published_and_gunicorn_stays_internal():
    services = _services()
    published = {name: [p["target"] for p in svc.get("ports", []) if not p.get("host_ip")]
                 for name, svc in services.items()}
    assert {name for name, ports in published.items() if ports} == {"nginx"}
    assert sorted(published["nginx"]) == [80, 443]
    assert "ports" not in services["web"]
    assert set(services["web"]["networks"]) == {"backend"}
    assert set(services["nginx"]["networks"]) == {"frontend", "backend"}


def test_nginx_runs_the_shipped_config_files():
    nginx = _services()["nginx"]
    mounts = {v["target"]: Path(v["source"]) for v in nginx["volumes"]}
    assert mounts["/etc/nginx/conf.d/beacon.conf"] == NGINX / "beacon.conf"
    assert mounts["/etc/nginx/snippets/beacon-proxy.conf"] == NGINX / "beacon-proxy.conf"
    assert mounts["/etc/nginx/tls"] == NGINX / "tls"
    site = (NGINX / "beacon.conf").read_text()
    assert site.count("include /etc/nginx/snippets/beacon-proxy.conf;") == 2  # both servers
    assert "server web:8000;" in site and "ssl_certificate /etc/nginx/tls/fullchain.pem;" in site
    assert "apt-get install -y --no-install-recommends nginx" in (NGINX / "Dockerfile").read_text()


def test_beacon_reads_the_client_address_nginx_sets():
    assert _services()["web"]["environment"]["TRUSTED_PROXY_COUNT"] == "1"
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in (
        NGINX / "beacon-proxy.conf").read_text()


def test_nginx_takes_the_bodies_beacon_takes_and_no_larger():
    from portal import settings

    assert _directive("client_max_body_size") == f"{settings.TRACE_UPLOAD_MAX_MB}m"


def test_nginx_buffers_and_times_out_slow_clients():
    assert _directive("proxy_request_buffering") == "on"
    assert _directive("proxy_buffering") == "on"
    for name in ("client_body_timeout", "client_header_timeout"):
        assert 0 < int(_directive(name).rstrip("s")) <= 60, name


def test_nginx_waits_longer_than_gunicorn_works():
    command = " ".join(_services()["web"]["command"])
    gunicorn_timeout = int(command.split("--timeout", 1)[1].split()[0])
    assert int(_directive("proxy_read_timeout").rstrip("s")) > gunicorn_timeout
