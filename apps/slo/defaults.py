"""What a new site starts with: the ending classification (``apps.analysis.slo``'s defaults)
and three team SLOs. ``seed`` only adds what is missing, so admins' edits survive running it
again (the data migration runs it; so does ``manage.py slo_defaults``).
"""

from __future__ import annotations

from typing import Any

from apps.analysis.slo import DEFAULT_ENDING_RULES

# name, SLI, target, wait minutes, description
OBJECTIVES: list[tuple[str, str, float, int | None, str]] = [
    ("Queue wait", "queue_wait", 0.90, 30,
     "90% of GPU jobs start within 30 minutes of becoming eligible. Waits on the team's own "
     "limits (QOS and association limits, dependencies, holds) are shown apart, not charged."),
    ("Job success", "job_success", 0.99, None,
     "99% of GPU jobs end without a platform-caused failure (node failure, GPU XID or ECC "
     "error, preemption without requeue, launch failure). User-caused endings are shown, "
     "not charged."),
    ("GPU efficiency", "gpu_efficiency", 0.50, None,
     "Half of the measured allocated GPU-hours are useful (SM-active weighted, from the job "
     "archive)."),
]


def seed(models: Any) -> dict[str, int]:
    """Create missing ending rules and default objectives through ``models``
    (``django.apps.apps`` or a migration's historical registry)."""
    rule_model = models.get_model("slo", "EndingRule")
    objective_model = models.get_model("slo", "Objective")
    added = {"rules": 0, "objectives": 0}
    for order, rule in enumerate(DEFAULT_ENDING_RULES, start=1):
        _, created = rule_model.objects.get_or_create(key=rule.key, defaults={
            "label": rule.label, "order": order * 10, "cause": rule.cause.value,
            "states": sorted(rule.states), "started": rule.started,
            "hardware_fault": rule.hardware_fault, "reason_pattern": rule.reason_pattern})
        added["rules"] += created
    for order, (name, sli, target, wait, text) in enumerate(OBJECTIVES, start=1):
        _, created = objective_model.objects.get_or_create(name=name, defaults={
            "sli": sli, "target": target, "wait_minutes": wait, "description": text,
            "window": "rolling_28d", "scope": "team", "order": order * 10})
        added["objectives"] += created
    return added
