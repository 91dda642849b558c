"""SLOs over populations of GPU jobs (docs/slo.md): objectives admins edit, the ending
classification they edit, and what the evaluation stores: the latest scorecard of each
objective for each team (or the platform, or a partition), monthly snapshots, and alerts.

Scorecards and snapshots are written only by ``apps.slo.services``; alerts by
``apps.slo.notify``. Pages and the API read them, never Slurm or the jobs table.
"""

from __future__ import annotations

import zoneinfo
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from apps.accounts.models import Membership
from apps.analysis import slo as maths
from apps.core.fields import DocumentField
from apps.core.models import TimeStampedModel

STATUS_CHOICES = [(s.value, s.value) for s in maths.Status]  # also the API's SloStatusEnum


class _DefinitionQuerySet(models.QuerySet[Any]):
    def visible_to(self, user: Any) -> Any:
        """SLO definitions and the ending classification are the platform's published
        promises: every signed-in, active user reads them; only admins change them."""
        if not getattr(user, "is_active", False) or not user.is_authenticated:
            return self.none()
        return self.all()


class Objective(TimeStampedModel):
    """One SLO: an SLI, a target over a window, and the population it covers.

    ``scope`` says what one scorecard is about: ``team`` (one per team, or only ``team``),
    ``platform`` (all jobs), ``partition`` (one per partition, or only ``partition``).
    ``cluster`` and ``partition`` narrow the population; calendar months follow the
    cluster's time zone, else the site's (``TIME_ZONE``).
    """

    class Sli(models.TextChoices):
        QUEUE_WAIT = maths.Sli.QUEUE_WAIT.value, "queue wait"
        JOB_SUCCESS = maths.Sli.JOB_SUCCESS.value, "job success"
        GPU_EFFICIENCY = maths.Sli.GPU_EFFICIENCY.value, "GPU efficiency"

    class Window(models.TextChoices):
        ROLLING_7D = maths.WindowKind.ROLLING_7D.value, "rolling 7 days"
        ROLLING_28D = maths.WindowKind.ROLLING_28D.value, "rolling 28 days"
        CALENDAR_MONTH = maths.WindowKind.CALENDAR_MONTH.value, "calendar month"

    class Scope(models.TextChoices):
        PLATFORM = "platform"
        TEAM = "team"
        PARTITION = "partition"

    name = models.CharField(max_length=120, unique=True)
    description = models.TextField(blank=True)
    sli = models.CharField(max_length=20, choices=Sli.choices)
    target = models.FloatField(
        validators=[MinValueValidator(0.0001), MaxValueValidator(0.9999)],
        help_text="share of good events, e.g. 0.9 (between 0 and 1, exclusive)")
    wait_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="queue wait: a job is on time when its wait for "
                                         "resources is at most this many minutes")
    window = models.CharField(max_length=20, choices=Window.choices,
                              default=Window.ROLLING_28D)
    scope = models.CharField(max_length=12, choices=Scope.choices, default=Scope.TEAM)
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.CASCADE,
                             related_name="objectives",
                             help_text="team scope: only this team (blank: every team)")
    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="objectives",
                                help_text="only jobs of this cluster (blank: all clusters)")
    partition = models.CharField(max_length=128, blank=True,
                                 help_text="only jobs of this partition (blank: all)")
    enabled = models.BooleanField(default=True)
    notify = models.BooleanField(default=True, help_text="e-mail and webhook on breaches "
                                                         "and fast burns")
    order = models.PositiveSmallIntegerField(default=100)

    objects = _DefinitionQuerySet.as_manager()

    class Meta:
        ordering = ["order", "name"]
        verbose_name = "SLO"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.sli == self.Sli.QUEUE_WAIT and not self.wait_minutes:
            raise ValidationError({"wait_minutes": "a queue-wait SLO needs a target wait"})
        if self.team_id and self.scope != self.Scope.TEAM:
            raise ValidationError({"team": "only a team-scope SLO names a team"})

    @property
    def tz(self) -> zoneinfo.ZoneInfo:
        name = self.cluster.timezone if self.cluster_id and self.cluster else settings.TIME_ZONE
        return zoneinfo.ZoneInfo(name)

    @property
    def target_text(self) -> str:
        """``90% within 30 min`` / ``99%`` / ``50%`` as the pages print it."""
        text = f"{self.target * 100:g}%"
        return f"{text} within {self.wait_minutes} min" if self.wait_minutes and \
            self.sli == self.Sli.QUEUE_WAIT else text


class EndingRule(TimeStampedModel):
    """One row of the job-ending classification (``apps.analysis.slo.EndingRule``).

    Rules are tried in ``order``; the first that matches decides. Empty ``states`` match any
    state; ``started`` / ``hardware_fault`` empty match either; ``reason_pattern`` is a
    case-insensitive regular expression searched in Slurm's reason after the job started.
    """

    class Cause(models.TextChoices):
        PLATFORM = maths.Cause.PLATFORM.value, "platform (spends the budget)"
        USER = maths.Cause.USER.value, "user (shown, not charged)"
        SUCCESS = maths.Cause.SUCCESS.value, "success"
        EXCLUDED = maths.Cause.EXCLUDED.value, "not counted"

    key = models.SlugField(max_length=40, unique=True)
    label = models.CharField(max_length=200)
    order = models.PositiveSmallIntegerField(default=100)
    cause = models.CharField(max_length=12, choices=Cause.choices)
    states = models.JSONField(default=list, blank=True,
                              help_text='Slurm states, e.g. ["NODE_FAIL"]; empty: any')
    started = models.BooleanField(null=True, blank=True,
                                  help_text="had an allocation; empty: either")
    hardware_fault = models.BooleanField(
        null=True, blank=True, help_text="hardware XID or uncorrectable ECC during the job "
                                         "(job archive); empty: either")
    reason_pattern = models.CharField(max_length=200, blank=True,
                                      help_text="regular expression on Slurm's reason")
    enabled = models.BooleanField(default=True)

    objects = _DefinitionQuerySet.as_manager()

    class Meta:
        ordering = ["order", "key"]

    def __str__(self) -> str:
        return f"{self.key} ({self.cause})"

    def as_rule(self) -> maths.EndingRule:
        return maths.EndingRule(self.key, maths.Cause(self.cause), self.label,
                                frozenset(self.states or []), self.started, self.hardware_fault,
                                self.reason_pattern)


# --- What evaluations store -------------------------------------------------------------------


class _SubjectQuerySet(models.QuerySet[Any]):
    def visible_to(self, user: Any) -> Any:
        """Admins see every scorecard; other users the scorecards of teams they belong to
        (leads and researchers alike, read-only); platform and partition scorecards are the
        admins'."""
        if not getattr(user, "is_active", False) or not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        teams = Membership.objects.filter(user=user).values("team_id")
        return self.filter(team_id__in=teams)


class _Subject(models.Model):
    """Whom a result is about: ``team:<id>``, ``platform`` or ``partition:<name>``."""

    objective = models.ForeignKey(Objective, on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=160)
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+")
    partition = models.CharField(max_length=128, blank=True)
    good = models.FloatField(default=0)
    total = models.FloatField(default=0)
    sli = models.FloatField(null=True, blank=True)
    target = models.FloatField()
    budget_remaining = models.FloatField(help_text="1 = untouched, 0 = spent, < 0 overspent")
    status = models.CharField(max_length=12, choices=STATUS_CHOICES)
    # documents written in bulk at every evaluation: VALUES, not UNNEST (DocumentField)
    details = DocumentField(default=dict, blank=True)

    class Meta:
        abstract = True

    @property
    def subject_label(self) -> str:
        if self.team is not None:
            return str(self.team.name)
        return "platform" if self.subject == "platform" else f"partition {self.partition}"


class Scorecard(_Subject):
    """The latest evaluation of one objective for one subject (rewritten at each run).

    ``details`` holds the SLI's breakdown (queue wait: per partition and GPU-count bucket
    with p50/p90, own-limit waits apart; success: endings per rule; efficiency: coverage),
    ``trend`` the days of the window, ``worst_jobs`` the jobs that cost most.
    """

    objective = models.ForeignKey(Objective, on_delete=models.CASCADE,
                                  related_name="scorecards")
    evaluated_at = models.DateTimeField()
    window_start = models.DateTimeField()
    window_end = models.DateTimeField(help_text="end of the full window (calendar months: "
                                                "the next month's start)")
    burn_rates = models.JSONField(default=dict, blank=True, help_text='{"1h": 2.5, ...}')
    alerts = models.JSONField(default=list, blank=True, help_text='["page-6h", ...]')
    exhaustion_at = models.DateTimeField(null=True, blank=True,
                                         help_text="budget spent at the last day's burn rate")
    trend = DocumentField(default=list, blank=True)
    worst_jobs = DocumentField(default=list, blank=True)

    objects = _SubjectQuerySet.as_manager()

    # set by the pages for their templates (apps/slo/views.py), never stored
    shown_worst: list[dict[str, Any]]
    hidden_worst: int
    figure: dict[str, Any] | None
    figure_id: str
    open_alerts: list[Alert]

    class Meta:
        ordering = ["budget_remaining", "objective__order", "subject"]
        constraints = [models.UniqueConstraint(fields=["objective", "subject"],
                                               name="slo_scorecard_unique")]
        indexes = [models.Index(fields=["team", "objective"], name="slo_scorecard_team")]

    def __str__(self) -> str:
        return f"{self.objective} / {self.subject}"


class Snapshot(_Subject):
    """One objective for one subject over one calendar month (history, comparable across
    months). The open month is refreshed; once the month is over it is computed one last
    time and marked ``final``."""

    objective = models.ForeignKey(Objective, on_delete=models.CASCADE,
                                  related_name="snapshots")
    month = models.DateField(help_text="first day of the month (the objective's time zone)")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    computed_at = models.DateTimeField()
    final = models.BooleanField(default=False)

    objects = _SubjectQuerySet.as_manager()

    class Meta:
        ordering = ["-month", "objective__order", "subject"]
        constraints = [models.UniqueConstraint(fields=["objective", "subject", "month"],
                                               name="slo_snapshot_unique")]

    def __str__(self) -> str:
        return f"{self.objective} / {self.subject} {self.month:%Y-%m}"


class Alert(models.Model):
    """One breach or fast burn of one objective for one subject: told once.

    At most one open alert per (objective, subject, kind) (the partial unique constraint is
    the deduplication); it resolves when the condition clears, and a later episode is a new
    alert. ``channels`` records where it went, so a failed channel is retried alone.
    """

    class Kind(models.TextChoices):
        FAST_BURN = "fast_burn", "budget burning fast"
        BREACH = "breach", "SLO breached"

    objective = models.ForeignKey(Objective, on_delete=models.CASCADE, related_name="alerts")
    subject = models.CharField(max_length=160)
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    sli = models.FloatField(null=True, blank=True)
    budget_remaining = models.FloatField()
    message = models.TextField(blank=True)
    channels = models.JSONField(default=list, blank=True, help_text='["email", "webhook"]')
    sent_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True,
                                         help_text="a worker is sending it until then")
    error = models.TextField(blank=True)

    objects = _SubjectQuerySet.as_manager()

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [models.UniqueConstraint(
            fields=["objective", "subject", "kind"], condition=Q(resolved_at__isnull=True),
            name="slo_alert_one_open")]

    def __str__(self) -> str:
        return f"{self.objective} / {self.subject}: {self.kind}"
