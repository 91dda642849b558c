"""A team's GPU-hour quota per month on a Slurm account, every change to it, and warnings.

``Quota`` rows exist only for quotas that were *applied* to Slurm (or scheduled for a month
that has not begun); a write Slurm refused leaves no quota behind, only a ``QuotaChange``
of kind ``failed``. ``version`` is the optimistic-concurrency counter: an edit must name the
version it saw, and an edit based on an older one is refused.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from apps.accounts.models import Team
from apps.core.models import TimeStampedModel


class QuotaQuerySet(models.QuerySet["Quota"]):
    def visible_to(self, user: Any) -> QuotaQuerySet:
        """A team's members (researchers and leads) see its quotas; admins see all."""
        return self.filter(account__team__in=Team.objects.visible_to(user))


class Quota(TimeStampedModel):
    """The GPU-hour quota of one Slurm account for one month, as the portal set it."""

    class State(models.TextChoices):
        SCHEDULED = "scheduled", "scheduled (written when its month begins)"
        APPLIED = "applied", "applied in Slurm"

    account = models.ForeignKey("clusters.SlurmAccount", on_delete=models.CASCADE,
                                related_name="quotas")
    month = models.DateField(help_text="First day of the month")
    gpu_minutes = models.BigIntegerField(null=True, blank=True,
                                         help_text="GrpTRESMins gres/gpu; empty: no limit")
    state = models.CharField(max_length=16, choices=State.choices, default=State.APPLIED)
    version = models.PositiveIntegerField(default=0)
    applied_at = models.DateTimeField(null=True, blank=True)
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                               on_delete=models.SET_NULL, related_name="+")
    slurm_minutes = models.BigIntegerField(null=True, blank=True,
                                           help_text="What Slurm held when last read")
    slurm_read_at = models.DateTimeField(null=True, blank=True)
    drift = models.BooleanField(default=False,
                                help_text="Slurm holds another value than the portal set")

    objects = QuotaQuerySet.as_manager()

    class Meta:
        ordering = ["-month", "account"]
        constraints = [models.UniqueConstraint(fields=["account", "month"],
                                               name="quota_unique")]

    def __str__(self) -> str:
        return f"{self.account} {self.month:%Y-%m}: {self.gpu_hours_text}"

    @property
    def gpu_hours(self) -> float | None:
        return None if self.gpu_minutes is None else self.gpu_minutes / 60

    @property
    def gpu_hours_text(self) -> str:
        hours = self.gpu_hours
        return "no limit" if hours is None else f"{hours:g} GPU-hours"


class QuotaChangeQuerySet(models.QuerySet["QuotaChange"]):
    def visible_to(self, user: Any) -> QuotaChangeQuerySet:
        """Who changed a quota and why: platform admins only (like the audit log)."""
        if getattr(user, "is_active", False) and getattr(user, "is_staff", False):
            return self.all()
        return self.none()


class QuotaChange(models.Model):
    """One event in a quota's life: who, when, old and new values, why, and what Slurm said.

    ``set``: written to Slurm (or scheduled); ``failed``: Slurm refused or was unreachable,
    nothing applied; ``conflict``: refused because the value changed since the admin looked;
    ``drift``: Slurm's value changed outside the portal; ``applied``: a scheduled quota
    written when its month began. Never edited.
    """

    class Kind(models.TextChoices):
        SET = "set"
        SCHEDULED = "scheduled"
        APPLIED = "applied"
        FAILED = "failed"
        CONFLICT = "conflict"
        DRIFT = "drift"

    account = models.ForeignKey("clusters.SlurmAccount", on_delete=models.CASCADE,
                                related_name="quota_changes")
    month = models.DateField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    at = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="+")
    old_minutes = models.BigIntegerField(null=True, blank=True)
    new_minutes = models.BigIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    command = models.TextField(blank=True)
    output = models.TextField(blank=True)
    error = models.TextField(blank=True)

    objects = QuotaChangeQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.account} {self.kind} {self.old_minutes} -> {self.new_minutes}"


class QuotaAlert(models.Model):
    """A warning that usage reached 80 % or 100 % of a quota: one per (account, month, level,
    quota value), so each crossing is announced once however often usage is checked."""

    account = models.ForeignKey("clusters.SlurmAccount", on_delete=models.CASCADE,
                                related_name="quota_alerts")
    month = models.DateField()
    level = models.PositiveSmallIntegerField()
    limit_minutes = models.BigIntegerField()
    used_hours = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    channels = models.JSONField(default=list, blank=True, help_text='["email", "webhook"]')
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["account", "month", "level",
                                                       "limit_minutes"],
                                               name="quotaalert_unique")]

    def __str__(self) -> str:
        return f"{self.account} {self.month:%Y-%m} {self.level}%"
