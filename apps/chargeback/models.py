"""Chargeback: the rate card, each month's terms, and team statements with their lines.

A statement is a **draft** while its month is open (``services.refresh_statements`` rewrites
its usage lines), then an admin **finalises** it and it is immutable: its row and its lines can
no longer be changed or deleted, through ``save()``, ``delete()`` or a queryset's ``update()`` /
``delete()`` alike. A correction is a new adjustment line, never an edit.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from apps.accounts.models import Membership
from apps.analysis.chargeback import Policy
from apps.core.models import TimeStampedModel


class ImmutableStatement(Exception):
    """A final statement (or one of its lines) was about to be changed or deleted."""


def _first_of_month(value: date) -> None:
    if value.day != 1:
        raise ValidationError(f"{value} is not the first day of a month")


class Rate(TimeStampedModel):
    """A price per GPU-hour for a partition and GPU model (blank = any) over a date range.

    ``valid_until`` is exclusive and open when empty. Statements copy the price onto their
    lines, so editing the rate card never changes a final statement.
    """

    partition = models.CharField(max_length=128, blank=True, help_text="Blank: any partition")
    gpu_model = models.CharField(max_length=64, blank=True,
                                 help_text="Slurm GPU type (h100, a100); blank: any model")
    price = models.DecimalField(max_digits=12, decimal_places=4,
                                validators=[MinValueValidator(Decimal("0"))],
                                help_text="Per GPU-hour, in CHARGEBACK_CURRENCY")
    valid_from = models.DateField()
    valid_until = models.DateField(null=True, blank=True, help_text="Exclusive; blank: open")
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-valid_from", "partition", "gpu_model"]

    def __str__(self) -> str:
        scope = "/".join(p for p in (self.partition, self.gpu_model) if p) or "default"
        return f"{scope}: {self.price} from {self.valid_from}"

    def clean(self) -> None:
        if self.valid_until and self.valid_until <= self.valid_from:
            raise ValidationError({"valid_until": "must be after valid_from"})


class BillingPeriod(TimeStampedModel):
    """One month's chargeback terms: the policy admins picked and its waste fee."""

    month = models.DateField(unique=True, validators=[_first_of_month],
                             help_text="First day of the month")
    policy = models.CharField(max_length=16, choices=[(p.value, p.value) for p in Policy],
                              default=Policy.ALLOCATED.value)
    waste_fee = models.DecimalField(
        max_digits=5, decimal_places=4, default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(Decimal("1"))],
        help_text="useful_plus_fee: share of the rate charged per wasted GPU-hour (0..1)")
    refresh_requested_at = models.DateTimeField(
        null=True, blank=True, editable=False,
        help_text="When a page last asked for the month's drafts to be refreshed (the claim)")

    class Meta:
        ordering = ["-month"]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} ({self.policy})"

    @property
    def label(self) -> str:
        return f"{self.month:%Y-%m}"


# --- Statements -------------------------------------------------------------------------------


class GpuHours(models.Model):
    """The GPU-hours split and its price, as a statement totals it and as each line has it
    (``apps.analysis.chargeback``: allocated = useful + waiting + held idle + no process +
    unmeasured; charged follows the statement's policy)."""

    allocated_hours = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    useful_hours = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    waiting_hours = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    held_idle_hours = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    no_process_hours = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    unmeasured_hours = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    charged_hours = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    amount = models.DecimalField(max_digits=16, decimal_places=2, default=0)
    useful_amount = models.DecimalField(max_digits=16, decimal_places=2, default=0)

    class Meta:
        abstract = True


class StatementQuerySet(models.QuerySet["Statement"]):
    def visible_to(self, user: Any) -> StatementQuerySet:
        """Leads see their teams' statements, admins all; researchers see none (they see
        their own usage instead)."""
        if not getattr(user, "is_active", False) or not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        led = Membership.objects.filter(user=user, role=Membership.Role.LEAD).values("team_id")
        return self.filter(team_id__in=led)

    def update(self, **kwargs: Any) -> int:
        if self.filter(status=Statement.Status.FINAL).exists():
            raise ImmutableStatement("final statements cannot be changed")
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        if self.filter(status=Statement.Status.FINAL).exists():
            raise ImmutableStatement("final statements cannot be deleted")
        return super().delete()


class Statement(TimeStampedModel, GpuHours):
    """One team's chargeback for one month: usage lines plus adjustment lines.

    The totals are the usage lines' sums (``apps.analysis.chargeback.totals``); adjustments
    are added on top in ``total_due``. Terms (policy, fee, currency) are copied at computation.
    """

    class Status(models.TextChoices):
        DRAFT = "draft"
        FINAL = "final"

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT,
                             related_name="statements")
    period = models.ForeignKey(BillingPeriod, on_delete=models.PROTECT,
                               related_name="statements")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.DRAFT)
    policy = models.CharField(max_length=16, default=Policy.ALLOCATED.value)
    waste_fee = models.DecimalField(max_digits=5, decimal_places=4, default=Decimal("0"))
    currency = models.CharField(max_length=8, default="EUR")
    computed_at = models.DateTimeField(null=True, blank=True)
    finalised_at = models.DateTimeField(null=True, blank=True)
    finalised_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                     on_delete=models.SET_NULL, related_name="+")

    objects = StatementQuerySet.as_manager()

    class Meta:
        ordering = ["-period__month", "team__slug"]
        constraints = [models.UniqueConstraint(fields=["team", "period"],
                                               name="statement_unique")]

    def __str__(self) -> str:
        return f"{self.team.slug} {self.period.label} ({self.status})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Refuse any write to a row that is final in the database (finalising is allowed)."""
        if self.pk and Statement.objects.filter(pk=self.pk, status=self.Status.FINAL).exists():
            raise ImmutableStatement(f"statement {self} is final: add an adjustment instead")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        if Statement.objects.filter(pk=self.pk, status=self.Status.FINAL).exists():
            raise ImmutableStatement(f"statement {self} is final and cannot be deleted")
        return super().delete(*args, **kwargs)

    @property
    def is_final(self) -> bool:
        return self.status == self.Status.FINAL

    @property
    def waste_hours(self) -> Decimal:
        return self.waiting_hours + self.held_idle_hours + self.no_process_hours

    @property
    def waste_share(self) -> float:
        measured = self.allocated_hours - self.unmeasured_hours
        return float(self.waste_hours / measured) if measured > 0 else 0.0

    @property
    def adjustments_total(self) -> Decimal:
        rows = self.lines.filter(kind=StatementLine.Kind.ADJUSTMENT)
        return rows.aggregate(s=models.Sum("amount"))["s"] or Decimal("0.00")

    @property
    def total_due(self) -> Decimal:
        return self.amount + self.adjustments_total


class StatementLineQuerySet(models.QuerySet["StatementLine"]):
    def _touches_final(self) -> bool:
        return self.filter(statement__status=Statement.Status.FINAL).exists()

    def update(self, **kwargs: Any) -> int:
        if self._touches_final():
            raise ImmutableStatement("lines of a final statement cannot be changed")
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        if self._touches_final():
            raise ImmutableStatement("lines of a final statement cannot be deleted")
        return super().delete()


class StatementLine(GpuHours):
    """A usage line (a user, partition and GPU model over one rate segment) or an adjustment.

    Usage lines are written by ``services.refresh_statements`` only. An adjustment is an
    amount (negative for a credit) with a reason, added by an admin at any time; on a final
    statement it is the only kind of line that can still be added.
    """

    class Kind(models.TextChoices):
        USAGE = "usage"
        ADJUSTMENT = "adjustment"

    statement = models.ForeignKey(Statement, on_delete=models.CASCADE, related_name="lines")
    kind = models.CharField(max_length=12, choices=Kind.choices, default=Kind.USAGE)
    user_name = models.CharField(max_length=64, blank=True)
    partition = models.CharField(max_length=128, blank=True)
    gpu_model = models.CharField(max_length=64, blank=True)
    start = models.DateTimeField(null=True, blank=True)
    end = models.DateTimeField(null=True, blank=True)
    price = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True,
                                help_text="Per GPU-hour; empty: no rate applied")
    description = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = StatementLineQuerySet.as_manager()

    class Meta:
        ordering = ["statement", "kind", "user_name", "partition", "gpu_model", "start", "id"]
        indexes = [models.Index(fields=["statement", "kind"], name="stmtline_kind")]

    def __str__(self) -> str:
        if self.kind == self.Kind.ADJUSTMENT:
            return f"adjustment {self.amount}: {self.description}"
        return f"{self.user_name} {self.partition} {self.gpu_model}: {self.amount}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """On a final statement only new adjustment lines may be written."""
        final = Statement.objects.filter(pk=self.statement_id,
                                         status=Statement.Status.FINAL).exists()
        if final and not (self._state.adding and self.kind == self.Kind.ADJUSTMENT):
            raise ImmutableStatement("a final statement takes new adjustment lines only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        if Statement.objects.filter(pk=self.statement_id,
                                    status=Statement.Status.FINAL).exists():
            raise ImmutableStatement("lines of a final statement cannot be deleted")
        return super().delete(*args, **kwargs)

    @property
    def waste_hours(self) -> Decimal:
        return self.waiting_hours + self.held_idle_hours + self.no_process_hours


class Reconciliation(models.Model):
    """One comparison of Beacon's allocated GPU-hours with Slurm's own report over a window.

    ``accounts`` holds one row per account (Beacon, sreport and sacct GPU-minutes); ``jobs``
    the jobs that differ, each with its kind (``apps.analysis.reconcile.Difference``).
    """

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE,
                                related_name="reconciliations")
    month = models.DateField(validators=[_first_of_month])
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    ok = models.BooleanField(default=False)
    tolerance_min = models.FloatField(default=1.0)
    accounts = models.JSONField(default=list, blank=True)
    jobs = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.cluster.name} {self.month:%Y-%m}: {'ok' if self.ok else 'differences'}"
