"""Template helpers for findings: ATT&CK links, evidence formatting, and two small blocks
other pages include (a job's findings; the per-cluster summary on the platform page)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django import template
from django.db.models import OuterRef, Subquery

from apps.analysis.security_rules import ATTACK
from apps.clusters.models import Cluster
from apps.core.models import TaskRun
from apps.security.findings import summary_by_cluster
from apps.security.models import Finding

register = template.Library()
COLUMNS = ("critical", "high", "medium", "low", "info")


@register.filter
def attack_path(technique: str) -> str:
    """``T1496.001`` -> ``T1496/001`` (the path on attack.mitre.org)."""
    return technique.replace(".", "/")


@register.filter
def attack_name(technique: str) -> str:
    return ATTACK.get(technique, "")


@register.filter
def evidence_label(key: Any) -> str:
    text = str(key).replace("_", " ")
    return text[:1].upper() + text[1:]


@register.filter
def is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping)


@register.filter
def evidence_value(value: Any) -> str:
    """Evidence values as text: lists joined, None as a dash, floats rounded, objects as
    compact JSON (templates escape the result, and ``long_text`` cuts a long one)."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, list | tuple):
        return ", ".join(evidence_value(v) for v in value) or "—"
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


@register.filter
def severity_at(index: int) -> str:
    return COLUMNS[index] if 0 <= index < len(COLUMNS) else ""


@register.inclusion_tag("security/partials/job_findings.html", takes_context=True)
def job_security_findings(context: dict[str, Any], job: Any) -> dict[str, Any]:
    """The security findings about ``job`` this user may see (active ones first)."""
    user = context["request"].user
    rows = Finding.objects.visible_to(user).filter(job=job).order_by("status", "-last_seen")[:10]
    return {"job_security_findings": list(rows)}


@register.inclusion_tag("security/partials/platform_summary.html")
def security_summary() -> dict[str, Any]:
    """Active findings per cluster and severity, and each cluster's last detection run."""
    counts = summary_by_cluster()
    last = TaskRun.objects.filter(kind="security.detect", cluster=OuterRef("pk")) \
        .order_by("-created_at").values("pk")[:1]
    clusters = list(Cluster.objects.annotate(last_run=Subquery(last)))
    runs = TaskRun.objects.in_bulk([c.last_run for c in clusters if c.last_run])
    rows = [{"cluster": c, "counts": [counts.get(c.pk, {}).get(s, 0) for s in COLUMNS],
             "run": runs.get(c.last_run)} for c in clusters]
    return {"security_summary": rows, "security_severities": COLUMNS}
