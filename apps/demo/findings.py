"""Stored findings against the simulator's ground truth: per-rule recall and precision.

``manage.py detection_report GROUND_TRUTH_FILE --cluster NAME`` prints this. The ground
truth is read only here and in tests (STYLE.md §2.5); it never feeds a rule.

An injected incident is **found** when a finding of its rule overlaps its window (give or
take ``slack``) and agrees on every entity field the truth names (job, node, GPU, UUID,
user, team; for software also the version, and a cluster-wide incident needs a
cluster-wide finding). It is found **with the right severity** when that finding's
severity is the truth's. A finding that matches no incident is a **false alarm**; rules
the simulator plants nothing for can only have false alarms (their recall is "n/a").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from apps.analysis.security_rules import RULES
from apps.clusters.models import Cluster
from apps.security.models import Finding

# ground-truth incident kind -> the rule that detects it
KIND_RULE = {kind: kind for kind in (
    "gpu_activity_without_job", "miner_in_job", "ib_traffic_without_multinode_job",
    "secret_in_job_script", "ssh_without_allocation", "exposed_service",
    "gpu_memory_left_after_job", "vulnerable_software")}


@dataclass
class RuleRow:
    rule: str
    injected: int = 0
    found: int = 0
    right_severity: int = 0
    findings: int = 0
    true_findings: int = 0
    missed: list[str] = field(default_factory=list)
    false_alarms: list[str] = field(default_factory=list)

    @property
    def recall(self) -> float | None:
        return self.found / self.injected if self.injected else None

    @property
    def precision(self) -> float | None:
        return self.true_findings / self.findings if self.findings else None


@dataclass
class Report:
    rows: list[RuleRow]
    period: tuple[datetime, datetime]

    @property
    def all_found(self) -> bool:
        return all(r.found == r.injected == r.right_severity for r in self.rows)

    @property
    def false_alarms(self) -> int:
        return sum(len(r.false_alarms) for r in self.rows)


def _entity_matches(truth: dict[str, Any], finding: Finding) -> bool:
    entity = truth["entity"]
    pairs = (("job_id", finding.job_id_raw), ("node", finding.node_name or None),
             ("gpu", finding.gpu_index), ("uuid", finding.gpu_uuid or None),
             ("user", finding.user_name or None),
             ("team", finding.team.slug if finding.team else None))
    if any(entity.get(name) is not None and entity[name] != value for name, value in pairs):
        return False
    if truth["kind"] == "vulnerable_software":
        details, evidence = truth.get("details", {}), finding.evidence or {}
        if (details.get("software"), details.get("version")) != (evidence.get("software"),
                                                                 evidence.get("version")):
            return False
        return entity.get("node") is not None or not finding.node_name  # cluster-wide
    return True


def _overlaps(truth: dict[str, Any], finding: Finding, slack: float) -> bool:
    start, end = truth["window"]["start"], truth["window"]["end"]
    return finding.first_seen.timestamp() <= end + slack and \
        finding.last_seen.timestamp() >= start - slack


def report(truth: dict[str, Any], cluster: Cluster, slack: float | None = None) -> Report:
    """Compare the cluster's findings in the truth's period with its injected incidents."""
    meta = truth.get("meta", {})
    slack = slack if slack is not None else max(3600.0, 2 * float(meta.get("telemetry_step", 0)))
    start, end = float(meta.get("start", 0)), float(meta.get("now", 0)) or 2**33
    incidents = [f for f in truth.get("findings", []) if f.get("category") == "incident"
                 and f.get("kind") in KIND_RULE]
    stored = list(Finding.objects.filter(cluster=cluster, last_seen__gte=_dt(start - slack),
                                         first_seen__lte=_dt(end + slack))
                  .select_related("team"))
    rows = {key: RuleRow(key) for key in RULES}
    matched: set[int] = set()
    for incident in incidents:
        _match(incident, stored, rows[KIND_RULE[incident["kind"]]], matched, slack)
    for finding in stored:
        row = rows.setdefault(finding.rule_key, RuleRow(finding.rule_key))
        row.findings += 1
        if finding.pk in matched:
            row.true_findings += 1
        else:
            row.false_alarms.append(f"#{finding.pk} {finding.title}")
    return Report(sorted(rows.values(), key=lambda r: (RULES[r.rule].number
                                                       if r.rule in RULES else 99, r.rule)),
                  (_dt(start), _dt(end)))


def _match(incident: dict[str, Any], stored: Iterable[Finding], row: RuleRow,
           matched: set[int], slack: float) -> None:
    row.injected += 1
    hits = [f for f in stored if f.rule_key == row.rule and _overlaps(incident, f, slack)
            and _entity_matches(incident, f)]
    if not hits:
        row.missed.append(f"{incident.get('id')} {_describe(incident)}")
        return
    row.found += 1
    row.right_severity += any(f.severity == incident.get("severity") for f in hits)
    matched.update(f.pk for f in hits)


def _describe(incident: dict[str, Any]) -> str:
    entity = {k: v for k, v in incident.get("entity", {}).items() if v is not None}
    return f"{incident.get('kind')} {entity}"


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(min(max(t, 0), 2**33), UTC)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def render(result: Report) -> str:
    """The report as a table, then what was missed and what was a false alarm."""
    lines = [f"period {result.period[0]:%Y-%m-%d %H:%M} .. {result.period[1]:%Y-%m-%d %H:%M} UTC",
             f"{'#':>2}  {'rule':<34}{'injected':>9}{'found':>7}{'severity ok':>12}"
             f"{'findings':>9}{'recall':>8}{'precision':>10}"]
    for r in result.rows:
        number = RULES[r.rule].number if r.rule in RULES else 0
        lines.append(f"{number:>2}  {r.rule:<34}{r.injected:>9}{r.found:>7}"
                     f"{r.right_severity:>12}{r.findings:>9}{_pct(r.recall):>8}"
                     f"{_pct(r.precision):>10}")
    injected = sum(r.injected for r in result.rows)
    found = sum(r.found for r in result.rows)
    findings = sum(r.findings for r in result.rows)
    true = sum(r.true_findings for r in result.rows)
    lines.append(f"    {'all rules':<34}{injected:>9}{found:>7}"
                 f"{sum(r.right_severity for r in result.rows):>12}{findings:>9}"
                 f"{_pct(found / injected if injected else None):>8}"
                 f"{_pct(true / findings if findings else None):>10}")
    for r in result.rows:
        lines += [f"missed: {m}" for m in r.missed]
    for r in result.rows:
        lines += [f"false alarm ({r.rule}): {a}" for a in r.false_alarms]
    lines.append(f"false alarms: {result.false_alarms}")
    return "\n".join(lines)


def as_json(result: Report) -> list[dict[str, Any]]:
    return [{"rule": r.rule, "injected": r.injected, "found": r.found,
             "right_severity": r.right_severity, "findings": r.findings,
             "recall": r.recall, "precision": r.precision, "missed": r.missed,
             "false_alarms": r.false_alarms} for r in result.rows]
