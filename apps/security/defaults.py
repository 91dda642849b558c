"""The data a new site starts with: one row per rule, the advisory table, and root as an
admin user. ``seed`` only adds what is missing, so admins' edits survive re-running it
(the initial migration runs it; so does ``manage.py security_defaults``).
"""

from __future__ import annotations

from typing import Any

from apps.analysis.security_rules import RULES

_SLURM_CVES = ("CVE-2023-49933, CVE-2023-49934, CVE-2023-49935, CVE-2023-49936, "
               "CVE-2023-49937, CVE-2023-49938")
# (software, fixed versions, affected from, CVEs, severity, note); docs/security-rules.md
ADVISORIES: list[tuple[str, str, str, str, str, str]] = [
    ("slurm", "22.05.11, 23.02.7, 23.11.1", "", _SLURM_CVES, "high",
     "message-integrity bypass, SlurmDBD SQL injection, root MUNGE token reuse, crashes"),
    ("munge", "0.5.18", "0.5", "CVE-2026-25506", "high",
     "buffer overflow leaks the MAC subkey: any credential, root included, can be forged"),
    ("nvidia_container_toolkit", "1.16.2", "", "CVE-2024-0132", "high",
     "TOCTOU: a container reaches the host file system (not in CDI mode)"),
    ("nvidia_container_toolkit", "1.17.4", "", "CVE-2025-23359", "high",
     "TOCTOU bypass of the CVE-2024-0132 fix (not in CDI mode)"),
    ("nvidia_container_toolkit", "1.17.8", "", "CVE-2025-23266", "high",
     "NVIDIAScape: a container image's hook environment runs code as root on the host"),
    ("pytorch", "2.6.0", "", "CVE-2025-32434", "high",
     "torch.load(weights_only=True) still runs code from a malicious model file"),
]
ALLOW: list[tuple[str, str, str]] = [
    ("admin_user", "root", "the superuser administers every node"),
]


def seed(models: Any) -> dict[str, int]:
    """Create missing rules, advisories and allow-list entries through ``models``
    (``django.apps.apps`` or a migration's historical registry)."""
    rule_model = models.get_model("security", "SecurityRule")
    advisory_model = models.get_model("security", "Advisory")
    allow_model = models.get_model("security", "AllowListEntry")
    added = {"rules": 0, "advisories": 0, "allow": 0}
    for spec in RULES.values():
        _, created = rule_model.objects.get_or_create(key=spec.key, defaults={
            "number": spec.number, "title": spec.title, "severity": spec.severity,
            "attack": spec.attack, "params": {}})
        added["rules"] += created
    for software, fixed, first, cves, severity, note in ADVISORIES:
        _, created = advisory_model.objects.get_or_create(software=software, cves=cves, defaults={
            "fixed_versions": fixed, "affected_from": first, "severity": severity, "note": note})
        added["advisories"] += created
    for kind, value, reason in ALLOW:
        _, created = allow_model.objects.get_or_create(kind=kind, value=value, cluster=None,
                                                       defaults={"reason": reason})
        added["allow"] += created
    return added
