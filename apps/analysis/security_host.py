"""Host and software rules: secrets in job scripts (4), vulnerable versions (8).
Registered in ``security_rules.RULES``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from apps.analysis.components import canonical, split
from apps.analysis.secret_shapes import SecretMatch, scan
from apps.analysis.security_base import iso, lower, param
from apps.analysis.security_types import (
    Allow,
    Hit,
    Inputs,
    JobText,
    NodeSoftware,
    Outcome,
    RuleConfig,
    severity_rank,
)
from apps.analysis.versions import Advisory, is_vulnerable, parse_version

# An inventory is re-collected every day or so: a version still there is the same finding.
_INVENTORY_GAP = 7 * 86400.0

# --- 4. Secrets in job scripts and environments ---------------------------------------------------


def secret_in_job_script(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Token shapes in stored scripts and environments: kind, place, keyed fingerprint.

    Token kinds take the rule's severity; passwords in URLs and generic ``*_SECRET=``
    assignments one level lower. ``kinds`` (empty: all) limits what is reported.
    """
    out = Outcome()
    wanted = set(param(cfg, "kinds"))
    for text in inputs.texts:
        if text.user in allow.exempt_users:
            continue
        for match in scan(text.text, inputs.secret_key):
            if wanted and match.kind not in wanted:
                continue
            out.hits.append(_secret_hit(cfg, text, match))
    return out


def _secret_hit(cfg: RuleConfig, text: JobText, match: SecretMatch) -> Hit:
    severity = cfg.severity if match.severity == "high" else lower(cfg.severity, 1)
    # A PEM header is the same in every key: its place tells two keys apart.
    tail = f":{match.line}" if match.kind == "private_key" else ""
    return Hit("secret_in_job_script", severity,
               f"{text.job_id}:{match.kind}:{match.fingerprint}{tail}",
               f"{match.label} in job {text.job_id}'s {text.source}",
               text.submitted, text.submitted, job_id=text.job_id, user=text.user, team=text.team,
               evidence={"kind": match.kind, "label": match.label,
                         "where": f"{text.source}, line {match.line}, column {match.column}",
                         "length": match.length, "fingerprint": match.fingerprint,
                         "preview": match.preview, "submitted": iso(text.submitted)})


# --- 8. Vulnerable component versions ----------------------------------------------------------


@dataclass
class _Affected:
    software: str
    version: str
    nodes: set[str] = field(default_factory=set)
    advisories: dict[str, Advisory] = field(default_factory=dict)
    seen: float = 0.0
    where: set[str] = field(default_factory=set)  # inventory qualifiers: site modules


def vulnerable_software(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Inventory versions the advisory table lists as affected; one finding per node, or
    one for the cluster when at least ``cluster_wide_share`` of the nodes report it.
    Names meet through ``components.canonical`` (``torch`` is ``pytorch``)."""
    out = Outcome()
    aliases = allow.aliases or None
    affected: dict[tuple[str, str], _Affected] = {}
    by_software: dict[str, list[Advisory]] = defaultdict(list)
    for advisory in inputs.advisories:
        by_software[canonical(advisory.software, aliases)].append(advisory)
    patched = {(canonical(name, aliases), version) for name, version in allow.versions}
    for node in inputs.software:
        _check_node(node, by_software, patched, aliases, affected, out)
    total = len({n.node for n in inputs.software})
    for item in sorted(affected.values(), key=lambda a: (a.software, a.version)):
        out.hits.extend(_version_hits(cfg, item, total))
    return out


def _check_node(node: NodeSoftware, by_software: dict[str, list[Advisory]],
                patched: set[tuple[str, str]], aliases: Mapping[str, str] | None,
                affected: dict[tuple[str, str], _Affected], out: Outcome) -> None:
    for key, raw in sorted(node.software.items()):
        software, where = split(str(key), aliases)
        advisories = by_software.get(software)
        if not advisories or (software, str(raw)) in patched:
            continue
        version = parse_version(raw)
        if version is None:
            out.skipped.append(f"inventory {node.node}: {key} version {str(raw)[:40]!r} "
                               f"is not a version")
            continue
        hits = [a for a in advisories if is_vulnerable(version, a)]
        if hits:
            item = affected.setdefault((software, str(raw)), _Affected(software, str(raw)))
            item.nodes.add(node.node)
            item.advisories.update({",".join(a.cves): a for a in hits})
            item.seen = max(item.seen, node.collected_at)
            if where:
                item.where.add(where)


def _version_hits(cfg: RuleConfig, item: _Affected, total: int) -> list[Hit]:
    advisories = list(item.advisories.values())
    severity = max((a.severity for a in advisories), key=severity_rank)
    cves = sorted({c for a in advisories for c in a.cves})
    fixed = sorted({f for a in advisories for f in a.fixed})
    evidence = {"software": item.software, "version": item.version, "cves": cves,
                "fixed_in": fixed, "nodes": sorted(item.nodes),
                "notes": [a.note for a in advisories if a.note]}
    if item.where:
        evidence["provided_by"] = sorted(item.where)
    share = param(cfg, "cluster_wide_share")
    if total > 1 and len(item.nodes) >= share * total:
        return [Hit("vulnerable_software", severity, f"{item.software}:{item.version}:*",
                    f"{item.software} {item.version} on every node ({', '.join(cves)})",
                    item.seen, item.seen, merge_gap=_INVENTORY_GAP,
                    evidence={**evidence, "scope": "cluster"})]
    return [Hit("vulnerable_software", severity, f"{item.software}:{item.version}:{node}",
                f"{item.software} {item.version} on {node} ({', '.join(cves)})", item.seen,
                item.seen, node=node, merge_gap=_INVENTORY_GAP,
                evidence={**evidence, "scope": "node"}) for node in sorted(item.nodes)]
