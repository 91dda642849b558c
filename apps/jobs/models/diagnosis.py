"""Diagnosis rules (data admins edit) and the findings they produce on jobs.

Re-exported by ``apps/jobs/models/__init__.py``, where Django finds the ``jobs`` app's models.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from apps.analysis.diagnosis import FACTS, OPERATORS, Condition, Rule, problems
from apps.core.models import TimeStampedModel
from apps.jobs.models.jobs import Job


class DiagnosisRule(TimeStampedModel):
    """One "what to check and whom to talk to" rule: conditions, words, routing.

    Findings go to the area's contact (``accounts.Contact``: the cluster's own first, then
    the platform-wide one) unless ``contact`` overrides it; ``code`` findings go to the
    researcher who owns the job. ``text``, ``title`` and ``hint`` may cite facts as
    ``{busy}``, ``{straggler_gpu}``...: the list is in the condition's fact menu.
    """

    class Area(models.TextChoices):
        DATA = "data", "Data and storage"
        NETWORK = "network", "Network and interconnect"
        HARDWARE = "hardware", "Hardware"
        CODE = "code", "Code (the researcher)"

    class Severity(models.TextChoices):
        INFO = "info"
        WARNING = "warning"
        CRITICAL = "critical"

    key = models.SlugField(max_length=64, unique=True)
    title = models.CharField(max_length=200)
    area = models.CharField(max_length=16, choices=Area.choices)
    severity = models.CharField(max_length=16, choices=Severity.choices,
                                default=Severity.WARNING)
    text = models.TextField(help_text="What was seen; facts as {fact}")
    hint = models.TextField(blank=True, help_text="What to check or change")
    contact = models.ForeignKey("accounts.Contact", null=True, blank=True,
                                on_delete=models.SET_NULL, related_name="diagnosis_rules",
                                help_text="Send findings here instead of the area's contact")
    enabled = models.BooleanField(default=True)
    order = models.PositiveSmallIntegerField(default=100)

    class Meta:
        ordering = ["order", "key"]

    def __str__(self) -> str:
        return self.title

    def as_rule(self, conditions: list[DiagnosisCondition] | None = None) -> Rule:
        """The engine's view of this row (pass prefetched conditions to save queries)."""
        rows = conditions if conditions is not None else list(self.conditions.all())
        return Rule(self.key, self.area, self.severity, self.title, self.text, self.hint,
                    tuple(Condition(c.fact, c.op, c.value) for c in rows))

    def clean(self) -> None:
        found = [p for p in problems(self.as_rule([])) if "condition" not in p]
        if found:
            raise ValidationError("; ".join(found))


class DiagnosisCondition(models.Model):
    """One condition of a rule: ``fact op value``; all of a rule's conditions must hold."""

    rule = models.ForeignKey(DiagnosisRule, on_delete=models.CASCADE,
                             related_name="conditions")
    fact = models.CharField(max_length=64, choices=[
        (name, f"{name} — {spec.label}") for name, spec in FACTS.items()
        if spec.unit != "text"])
    op = models.CharField(max_length=2, choices=[(op, op) for op in OPERATORS])
    value = models.FloatField(help_text="Shares are 0..1 (0.35 = 35 %); yes/no is 1/0")

    class Meta:
        ordering = ["rule", "id"]

    def __str__(self) -> str:
        return f"{self.fact} {self.op} {self.value:g}"


class JobFindingQuerySet(models.QuerySet["JobFinding"]):
    def visible_to(self, user: Any) -> JobFindingQuerySet:
        """A finding is visible to whoever sees its job."""
        return self.filter(job__in=Job.objects.visible_to(user))


class JobFinding(models.Model):
    """Something found on a job, with its evidence and whom to talk to.

    ``source`` says which engine wrote it: the diagnosis rules now, security rules later
    (they add their own source value); the job list's "has findings" filter reads this
    table whatever the source. Rows of one source are replaced as a whole each run.
    """

    class Source(models.TextChoices):
        DIAGNOSIS = "diagnosis"

    class Route(models.TextChoices):
        CONTACT = "contact", "the area's contact"
        RESEARCHER = "researcher", "the researcher"
        NONE = "none", "nobody configured"

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="findings")
    source = models.CharField(max_length=16, default=Source.DIAGNOSIS)
    rule = models.ForeignKey(DiagnosisRule, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="findings")
    key = models.CharField(max_length=64, help_text="the rule's key when it fired")
    area = models.CharField(max_length=16)
    severity = models.CharField(max_length=16)
    title = models.CharField(max_length=200)
    text = models.TextField()
    hint = models.TextField(blank=True)
    route = models.CharField(max_length=16, choices=Route.choices, default=Route.CONTACT)
    contact = models.ForeignKey("accounts.Contact", null=True, blank=True,
                                on_delete=models.SET_NULL, related_name="findings")
    evidence = models.JSONField(
        default=list, blank=True,
        help_text='[{"fact", "label", "value", "shown", "anchor"}]: what the finding rests on')
    created_at = models.DateTimeField(auto_now_add=True)

    objects = JobFindingQuerySet.as_manager()

    class Meta:
        ordering = ["job", "id"]
        indexes = [models.Index(fields=["job", "source"], name="jobfinding_job_source"),
                   models.Index(fields=["key", "created_at"], name="jobfinding_key")]

    def __str__(self) -> str:
        return f"{self.title} on {self.job_id}"
