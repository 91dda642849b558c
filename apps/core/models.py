"""Shared model bases and the record of every background run."""

from __future__ import annotations

from django.db import models


class TimeStampedModel(models.Model):
    """Adds created/updated times to a model."""

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class TaskRunQuerySet(models.QuerySet["TaskRun"]):
    def visible_to(self, user: object) -> TaskRunQuerySet:
        """Run records carry errors and internals: platform admins only."""
        if getattr(user, "is_active", False) and getattr(user, "is_staff", False):
            return self.all()
        return self.none()


class TaskRun(models.Model):
    """One background run (a sync, an archive, a detection pass), shown in the UI.

    ``runs.tracked_run()`` creates and finishes these; nothing else should set the
    status by hand.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        # finished, but a source or measure it was asked to read failed: ``error`` says
        # which (the query and the service's own error text), ``stats`` what was read
        PARTIAL = "partial"
        FAILED = "failed"

    kind = models.CharField(max_length=64, db_index=True)
    cluster = models.ForeignKey(
        "clusters.Cluster", null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    target = models.CharField(max_length=200, blank=True, help_text="What the run worked on")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    stats = models.JSONField(default=dict, blank=True)

    objects = TaskRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["kind", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.status})"

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None
