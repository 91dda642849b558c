"""Trace analyses of a job: one row per analysis of its PyTorch profiler traces, and per rank.

Written only by ``apps.jobs.traces.import_trace``.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from apps.jobs.models.jobs import Job


class TraceRunQuerySet(models.QuerySet["TraceRun"]):
    def visible_to(self, user: Any) -> TraceRunQuerySet:
        """A trace analysis is visible to whoever sees its job."""
        return self.filter(job__in=Job.objects.visible_to(user))


class TraceRun(models.Model):
    """One phase and straggler analysis of a job's PyTorch profiler traces.

    Written only by ``apps.jobs.traces.import_trace``. ``fingerprint`` digests the analysed
    files' contents, so importing the same traces again updates this row instead of adding
    one. ``partial`` means ranks or steps were missing; ``warnings`` says which.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="trace_runs")
    fingerprint = models.CharField(max_length=64, help_text="sha256 over the files' sha256")
    files = models.JSONField(default=list, blank=True,
                             help_text='[{"name": "rank0...json.gz", "rank": 0, "sha256": "…"}]')
    world_size = models.PositiveIntegerField()
    steps = models.PositiveIntegerField(help_text="Steps compared across ranks")
    timeline = models.CharField(max_length=8, default="cpu", help_text="cpu (gloo) or gpu")
    dominant_phase = models.CharField(max_length=32, blank=True)
    straggler_rank = models.IntegerField(null=True, blank=True)
    straggler_phase = models.CharField(max_length=32, blank=True)
    straggler_excess_ms = models.FloatField(null=True, blank=True)
    waiting_ranks = models.JSONField(default=list, blank=True)
    communication_bound = models.BooleanField(default=False)
    partial = models.BooleanField(default=False)
    warnings = models.JSONField(default=list, blank=True)
    recorded_start = models.DateTimeField(null=True, blank=True)
    recorded_end = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TraceRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["job", "fingerprint"],
                                               name="tracerun_unique")]

    def __str__(self) -> str:
        return f"traces of {self.job} ({self.world_size} ranks)"

    def report(self) -> dict[str, Any]:
        """The JSON shape of ``manage.py analyze_trace --json``, from the stored rows."""
        straggler = None
        if self.straggler_rank is not None:
            straggler = {"rank": self.straggler_rank, "phase": self.straggler_phase,
                         "excess_ms": self.straggler_excess_ms}
        return {
            "world_size": self.world_size, "steps": self.steps,
            "ranks": [row.as_dict() for row in self.ranks.all()],
            "dominant_phase": self.dominant_phase or None,
            "straggler": straggler, "waiting_ranks": self.waiting_ranks,
        }


class TraceRankPhases(models.Model):
    """One rank's mean step in a trace analysis, split into phases (ms per step)."""

    PHASE_FIELDS = ("data_loading", "forward", "backward", "communication", "optimizer",
                    "other")

    trace_run = models.ForeignKey(TraceRun, on_delete=models.CASCADE, related_name="ranks")
    rank = models.PositiveIntegerField()
    step_ms = models.FloatField()
    data_loading_ms = models.FloatField(default=0)
    forward_ms = models.FloatField(default=0)
    backward_ms = models.FloatField(default=0)
    communication_ms = models.FloatField(default=0)
    optimizer_ms = models.FloatField(default=0)
    other_ms = models.FloatField(default=0)

    class Meta:
        ordering = ["trace_run", "rank"]
        constraints = [models.UniqueConstraint(fields=["trace_run", "rank"],
                                               name="tracerankphases_unique")]

    def __str__(self) -> str:
        return f"rank {self.rank} of {self.trace_run}"

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "step_ms": self.step_ms,
                "phases_ms": {p: getattr(self, f"{p}_ms") for p in self.PHASE_FIELDS}}
