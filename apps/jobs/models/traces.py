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
    # a phase, or an unmapped annotation's own name
    dominant_phase = models.CharField(max_length=200, blank=True)
    straggler_rank = models.IntegerField(null=True, blank=True)
    straggler_phase = models.CharField(max_length=200, blank=True)
    straggler_excess_ms = models.FloatField(null=True, blank=True)
    straggler_steps = models.JSONField(default=list, blank=True,
                                       help_text="step numbers where the others waited for it")
    straggler_intermittent = models.BooleanField(default=False)
    waiting_ranks = models.JSONField(default=list, blank=True)
    communication_bound = models.BooleanField(default=False)
    gpu_idle_share = models.FloatField(null=True, blank=True,
                                       help_text="median rank's idle share of a GPU step")
    mixed_runs = models.BooleanField(default=False,
                                     help_text="the files look like different runs or jobs")
    verdict = models.TextField(blank=True)
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

    @property
    def gpu_starved(self) -> bool:
        from apps.analysis.step_phases import PhaseConfig

        return self.gpu_idle_share is not None and \
            self.gpu_idle_share >= PhaseConfig.gpu_idle_fraction

    def straggler_row(self) -> TraceRankPhases | None:
        if self.straggler_rank is None:
            return None
        return next((r for r in self.ranks.all() if r.rank == self.straggler_rank), None)

    def report(self) -> dict[str, Any]:
        """The JSON shape of ``manage.py analyze_trace --json``, from the stored rows."""
        straggler = None
        if self.straggler_rank is not None:
            row = self.straggler_row()
            straggler = {"rank": self.straggler_rank, "phase": self.straggler_phase,
                         "excess_ms": self.straggler_excess_ms, "steps": self.straggler_steps,
                         "intermittent": self.straggler_intermittent,
                         "device": row.device() if row else None}
        return {
            "world_size": self.world_size, "steps": self.steps,
            "ranks": [row.as_dict() for row in self.ranks.all()],
            "dominant_phase": self.dominant_phase or None,
            "straggler": straggler, "waiting_ranks": self.waiting_ranks,
            "timeline": self.timeline, "verdict": self.verdict,
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
    annotations_ms = models.JSONField(default=dict, blank=True,
                                      help_text="time under unmapped annotations, by name")
    # the GPU's account of a step (per-step means; null on CPU traces)
    gpu_idle_ms = models.FloatField(null=True, blank=True)
    gpu_compute_ms = models.FloatField(null=True, blank=True)
    gpu_communication_ms = models.FloatField(null=True, blank=True)
    gpu_exposed_communication_ms = models.FloatField(null=True, blank=True)
    # where the rank ran, as the trace says
    device_host = models.CharField(max_length=255, blank=True)
    device_index = models.IntegerField(null=True, blank=True)
    device_name = models.CharField(max_length=128, blank=True)

    GPU_FIELDS = ("idle_ms", "compute_ms", "communication_ms", "exposed_communication_ms")

    telemetry_gpu: str  # set by the job page (apps/jobs/presenters.py), never stored

    class Meta:
        ordering = ["trace_run", "rank"]
        constraints = [models.UniqueConstraint(fields=["trace_run", "rank"],
                                               name="tracerankphases_unique")]

    def __str__(self) -> str:
        return f"rank {self.rank} of {self.trace_run}"

    def gpu(self) -> dict[str, float] | None:
        if self.gpu_idle_ms is None:
            return None
        return {f: getattr(self, f"gpu_{f}") for f in self.GPU_FIELDS}

    def device(self) -> dict[str, Any] | None:
        if self.device_index is None:
            return None
        return {"host": self.device_host or None, "index": self.device_index,
                "name": self.device_name or None}

    @property
    def gpu_label(self) -> str:
        """``host:index`` as telemetry names GPUs ('' when the trace does not say)."""
        if self.device_index is None:
            return ""
        return f"{self.device_host}:{self.device_index}" if self.device_host \
            else f"#{self.device_index}"

    def as_dict(self) -> dict[str, Any]:
        phases = {p: getattr(self, f"{p}_ms") for p in self.PHASE_FIELDS}
        return {"rank": self.rank, "step_ms": self.step_ms,
                "phases_ms": {**phases, **self.annotations_ms},
                "gpu": self.gpu(), "device": self.device()}


class TraceFanOut(models.Model):
    """One run of trace files too many for one task: read in groups, then analysed once.

    ``collect_traces`` plans it (issue 29 item 4): the files split into ``TraceDigestGroup``
    rows, one Celery task each; the task that digests the last group claims
    ``analysing_since`` and queues the analysis, which reads the stored digests (no file)
    and sets ``trace_run``. Unique on (job, fingerprint of the files): collecting the same
    files again finds this row and reads only the groups not digested yet. ``config`` is
    the ``PhaseConfig`` every group cuts with (``apps/analysis/digest_json.py``).
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="trace_fan_outs")
    fingerprint = models.CharField(max_length=64, help_text="sha256 over the files' sha256")
    label = models.CharField(max_length=255, help_text="the folder, under TRACE_ROOT")
    config = models.JSONField(default=dict, help_text="the PhaseConfig the groups cut with")
    names = models.JSONField(default=dict, help_text="server path -> the name shown")
    analysing_since = models.DateTimeField(null=True, blank=True,
                                           help_text="when the analysis was claimed")
    trace_run = models.ForeignKey(TraceRun, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "fingerprint"],
                                               name="tracefanout_unique")]

    def __str__(self) -> str:
        return f"trace fan-out {self.label}"


class TraceDigestGroup(models.Model):
    """Some files of a ``TraceFanOut``, and once digested, their ranks' digests.

    ``claimed_at`` is set by the task reading them (a second task skips a fresh claim);
    ``digests`` (``digest_to_json`` of each readable file, in file order) and ``problems``
    (the files skipped, in words) are written with ``digested_at``, once.
    """

    fan_out = models.ForeignKey(TraceFanOut, on_delete=models.CASCADE, related_name="groups")
    index = models.PositiveIntegerField()
    files = models.JSONField(default=list, help_text="server paths, in order")
    digests = models.JSONField(default=list, blank=True)
    problems = models.JSONField(default=list, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    digested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["fan_out", "index"]
        constraints = [models.UniqueConstraint(fields=["fan_out", "index"],
                                               name="tracedigestgroup_unique")]

    def __str__(self) -> str:
        return f"{self.fan_out.label} group {self.index + 1}"
