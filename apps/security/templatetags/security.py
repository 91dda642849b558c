"""Template helpers for findings: ATT&CK links, evidence formatting, and two small blocks
other pages include (a job's findings; the per-cluster summary on the platform page)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django import template
from django.db.models import OuterRef, Subquery
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

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


# --- Evidence as tables -----------------------------------------------------------------------

MAX_DEPTH = 3  # nested tables this deep; below, compact JSON text
MAX_ITEMS = 50  # list entries shown; the rest counted


@register.simple_tag
def evidence_table(evidence: Any) -> SafeString:
    """A finding's evidence as a key/value table: nested objects as nested tables, a list
    of objects as a table with a column per key, a window as "start → end", never raw JSON
    above ``MAX_DEPTH`` (issue 26). Every value is escaped (evidence quotes hostile input)."""
    if not isinstance(evidence, Mapping) or not evidence:
        return mark_safe('<p class="muted">No evidence recorded.</p>')
    return _mapping(evidence, 0)


def _mapping(value: Mapping[Any, Any], depth: int) -> SafeString:
    rows = format_html_join("", '<tr><th scope="row">{}</th><td>{}</td></tr>',
                            ((evidence_label(k), _cell(v, depth + 1)) for k, v in value.items()))
    return format_html('<table class="table compact evidence"><tbody>{}</tbody></table>', rows)


def _cell(value: Any, depth: int) -> SafeString | str:
    if isinstance(value, Mapping):
        if set(value) == {"start", "end"}:
            return f"{value['start']} → {value['end']}"
        return _mapping(value, depth) if depth < MAX_DEPTH and value else evidence_value(value)
    if isinstance(value, list | tuple) and value and \
            all(isinstance(v, Mapping) for v in value) and depth < MAX_DEPTH:
        return _records(value, depth)
    if isinstance(value, list | tuple) and len(value) > MAX_ITEMS:
        rest = len(value) - MAX_ITEMS
        return f"{evidence_value(list(value[:MAX_ITEMS]))} … and {rest} more"
    return evidence_value(value)


def _records(items: Sequence[Mapping[Any, Any]], depth: int) -> SafeString:
    """A list of objects: one row each, a column per key (in order of first use)."""
    keys = list(dict.fromkeys(k for item in items for k in item))
    head = format_html_join("", "<th>{}</th>", ((evidence_label(k),) for k in keys))
    shown = items[:MAX_ITEMS]
    body = format_html_join("", "<tr>{}</tr>", (
        (format_html_join("", "<td>{}</td>", ((_cell(i.get(k), depth + 1),) for k in keys)),)
        for i in shown))
    more = format_html('<p class="small muted">… and {} more</p>', len(items) - len(shown)) \
        if len(items) > len(shown) else ""
    return format_html('<table class="table compact"><thead><tr>{}</tr></thead>'
                       "<tbody>{}</tbody></table>{}", head, body, more)


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
