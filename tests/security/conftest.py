"""Shared helpers for the security tests: hits, findings, and the world of tests/conftest."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from apps.analysis.security_types import Hit
from apps.security.findings import record_hits
from apps.security.models import Finding

T = datetime(2026, 11, 2, 9, 0, tzinfo=UTC).timestamp()


def hit(rule: str = "gpu_activity_without_job", dedup: str = "gpu01:0", start: float = T,
        end: float | None = None, **fields: Any) -> Hit:
    values: dict[str, Any] = {"severity": "high", "title": f"{rule} {dedup}", "node": "gpu01",
                              "merge_gap": 90.0, "evidence": {"mean_util": 0.97}}
    values.update(fields)
    return Hit(rule, values.pop("severity"), dedup, values.pop("title"), start,
               end if end is not None else start + 900, **values)


@pytest.fixture
def findings_world(world: Any) -> dict[str, Finding]:
    """A finding on bob's job (team A), one on carol's (team B), an SSH finding about tom
    (team A, no job), and a node finding (no team), with private evidence on the first."""
    c = world.cluster
    record_hits(c, [
        hit("miner_in_job", "job:101", job_id=101, user="bob", team="nlp", severity="critical",
            evidence={"signals": {"egress": {"met": True}}, "candidates": [101, 102],
                      "other_jobs": [{"job_id": 102, "user": "tom"}]}),
        hit("secret_in_job_script", "201:github:x", job_id=201, user="carol", team="vision",
            node=""),
        hit("ssh_without_allocation", "gpu01:tom", user="tom", team="nlp",
            evidence={"source_ip": "10.0.0.9", "method": "publickey"}),
        hit("gpu_activity_without_job", "gpu01:3", gpu=3),
    ])
    return {f.rule_key: f for f in Finding.objects.all()}
