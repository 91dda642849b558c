"""Absolute links come from the address the portal is served on (issue 26): ``make demo``
sets ``SITE_URL`` from ``PORT`` for every step; alerts and digests build their links on it;
stored message text wraps instead of widening the page."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from apps.guardrails.notify import job_url, preferences_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize(("args", "site"), [
    (["PORT=8123"], "http://127.0.0.1:8123"),
    (["PORT=9000", "HOST=0.0.0.0"], "http://0.0.0.0:9000"),
    (["PORT=8123", "SITE_URL=https://beacon.example.org"], "https://beacon.example.org"),
])
def test_make_demo_gives_every_step_the_served_address(args, site):
    out = subprocess.run(["make", "-n", "--no-print-directory", "demo", *args], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    steps = re.findall(r"(\S+) \S+/bin/(?:python manage\.py \w+|gunicorn)", out)
    assert len(steps) >= 5 and set(steps) == {f"SITE_URL={site}"}, out


def test_alert_and_digest_links_are_on_the_site_url(world, settings):
    settings.SITE_URL = "http://127.0.0.1:8123"
    job = world.jobs["bob"]
    assert job_url(job) == f"http://127.0.0.1:8123/jobs/{job.cluster.name}/{job.job_id}/"
    assert preferences_url().startswith("http://127.0.0.1:8123/")


def test_long_message_lines_wrap_instead_of_widening_the_page():
    css = (ROOT / "static/css/portal.css").read_text()
    [rule] = re.findall(r"(?m)^pre \{([^}]*)\}", css)
    assert "white-space: pre-wrap" in rule and "overflow-wrap: anywhere" in rule
    for template in ("templates/guardrails/alerts.html", "templates/quotas/edit.html"):
        text = (ROOT / template).read_text()
        assert "<pre" in text and "white-space" not in text  # nothing overrides the rule
