from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.jobs.models import (
    Job,
    JobFinding,
    JobGpu,
    JobMetrics,
    JobMetricSummary,
    JobNodeMetrics,
    TraceRun,
)
from apps.jobs.roofline import roofline_payload


class JobGpuSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")

    class Meta:
        model = JobGpu
        fields = ["node", "gpu_index", "gpu_uuid", "start", "end"]


class RequestedSerializer(serializers.Serializer):
    """What the job asked for (issue 26): a pending job holds nothing yet, so ``gpus`` and
    ``cpus`` above are 0 while this says what it waits for. null: Slurm did not say."""

    gpus = serializers.IntegerField(source="req_gpus", allow_null=True)
    cpus = serializers.IntegerField(source="req_cpus", allow_null=True)
    memory_mb = serializers.IntegerField(source="req_memory_mb", allow_null=True,
                                         help_text="the whole job's (Slurm's --mem is per node)")
    nodes = serializers.IntegerField(source="req_nodes", allow_null=True)
    time_limit_min = serializers.IntegerField(allow_null=True)
    tres = serializers.CharField(source="tres_req", help_text="as Slurm prints ReqTRES")


class JobSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name")
    team = serializers.CharField(source="team.slug", allow_null=True, default=None)
    exit = serializers.CharField(source="exit_text")
    url = serializers.SerializerMethodField()
    implausible = serializers.ListField(
        child=serializers.CharField(), read_only=True,
        help_text="Why the record looks impossible (issue 25); empty: plausible. Until an admin "
                  "accepts it, chargeback and SLOs leave it out")
    implausible_accepted_by = serializers.SerializerMethodField(
        help_text="The admin who accepted the implausible record (null: not accepted)")
    requested = RequestedSerializer(source="*", read_only=True)

    class Meta:
        model = Job
        fields = [
            "id", "cluster", "job_id", "display_id", "array_job_id", "array_task_id",
            "het_job_id", "het_job_offset", "name", "user_name", "account", "team",
            "partition", "qos", "state", "reason", "exit_code", "exit_signal", "exit",
            "submit_time", "eligible_time", "start_time", "end_time", "time_limit_min",
            "nodes", "node_count", "cpus", "memory_mb", "gpus", "gpu_shards",
            "gpu_equivalent", "gpu_types", "gpu_source", "tres_alloc", "requested", "labels",
            "implausible",
            "implausible_accepted_at", "implausible_accepted_by", "updated_at", "url",
        ]

    def get_url(self, job: Job) -> str:
        return f"/jobs/{job.cluster.name}/{job.job_id}/"

    def get_implausible_accepted_by(self, job: Job) -> str | None:
        # read only for accepted records (a handful): no join on every list page
        if job.implausible_accepted_by_id is None:
            return None
        user = job.implausible_accepted_by
        return user.username if user is not None else None


class RooflinePeaksSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    memory_bytes_per_s = serializers.FloatField()
    flops_per_s = serializers.DictField(child=serializers.FloatField(),
                                        help_text="dense peak FLOP/s per pipe")
    sources = serializers.ListField(child=serializers.CharField())


class RooflinePointSerializer(serializers.Serializer):
    gpu = serializers.CharField()
    flops_per_s = serializers.FloatField(help_text="estimated: pipe activity x pipe peak")
    bytes_per_s = serializers.FloatField(help_text="estimated: DRAM activity x peak bandwidth")
    intensity = serializers.FloatField(allow_null=True, help_text="FLOP per byte")
    pipe = serializers.CharField(help_text="the pipe doing most FLOPs: its peak is the roof")
    roof_flops_per_s = serializers.FloatField()
    share_of_roof = serializers.FloatField(allow_null=True)
    bound = serializers.CharField(help_text="memory, compute or idle")
    pipe_flops_per_s = serializers.DictField(child=serializers.FloatField())


class RooflineSerializer(serializers.Serializer):
    """The job's GPUs on its model's roofline, estimated from activity ratios (issue 30)."""

    status = serializers.CharField(
        help_text="ready, no_fields, unknown_model, mixed_models or no_gpus")
    reason = serializers.CharField(help_text="why there is no roofline ('' when ready)")
    estimate = serializers.CharField()
    model = serializers.CharField()
    peaks = RooflinePeaksSerializer(allow_null=True)
    points = RooflinePointSerializer(many=True)
    missing_fields = serializers.ListField(
        child=serializers.CharField(), help_text="exporter series that would add what is missing")
    uncounted_pipes = serializers.ListField(child=serializers.CharField())
    unmeasured_gpus = serializers.ListField(child=serializers.CharField())
    vendor_pipes = serializers.ListField(child=serializers.CharField())


class JobDetailSerializer(JobSerializer):
    gpus_held = JobGpuSerializer(many=True, read_only=True)
    roofline = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "work_dir", "comment", "gpus_held", "roofline"]

    @extend_schema_field(RooflineSerializer)
    def get_roofline(self, job: Job) -> dict[str, Any]:
        """From the stored archive, as the job page draws it (docs/roofline.md)."""
        return roofline_payload(job)


# --- Metrics, the straggler verdict, series --------------------------------------------------


class JobMetricSummarySerializer(serializers.ModelSerializer):
    """One GPU of the job: activity, the time split, health and traffic."""

    class Meta:
        model = JobMetricSummary
        exclude = ["id", "job", "series"]


class JobNodeMetricsSerializer(serializers.ModelSerializer):
    """One node of the job (node-shared: other jobs on the node add to these numbers)."""

    ib_degraded = serializers.BooleanField(read_only=True)

    class Meta:
        model = JobNodeMetrics
        exclude = ["id", "job", "series"]


class StragglerGpuSerializer(serializers.Serializer):
    gpu = serializers.CharField()
    waiting = serializers.FloatField()
    peer_waiting = serializers.FloatField()
    slowdown = serializers.FloatField(help_text="0.5: its work per step takes 50 % longer")
    cause = serializers.CharField()


class EvidenceSerializer(serializers.Serializer):
    kind = serializers.CharField()
    gpu = serializers.CharField()
    text = serializers.CharField()
    value = serializers.FloatField(allow_null=True)


class StragglerSerializer(serializers.Serializer):
    """The straggler verdict from telemetry (docs/stragglers.md)."""

    status = serializers.CharField(source="straggler_status",
                                   help_text="found, none, undetermined or not_applicable")
    confidence = serializers.CharField(source="straggler_confidence")
    summary = serializers.CharField(source="straggler_summary")
    stragglers = StragglerGpuSerializer(many=True, source="straggler_detail.stragglers",
                                        default=list)
    waiting_gpus = serializers.ListField(child=serializers.CharField(), default=list,
                                         source="straggler_detail.waiting_gpus")
    reasons = serializers.ListField(child=serializers.CharField(), default=list,
                                    source="straggler_detail.reasons")
    limits = serializers.ListField(child=serializers.CharField(), default=list,
                                   source="straggler_detail.limits")
    evidence = EvidenceSerializer(many=True, source="straggler_detail.evidence", default=list)


class JobMetricsSerializer(serializers.ModelSerializer):
    """A job's stored GPU metrics: efficiency, the straggler verdict, per GPU and per node."""

    straggler = StragglerSerializer(source="*", read_only=True)
    gpus = JobMetricSummarySerializer(many=True, source="job.archived_gpus",
                                      read_only=True)
    nodes = JobNodeMetricsSerializer(many=True, source="job.archived_nodes", read_only=True)

    class Meta:
        model = JobMetrics
        fields = ["status", "source", "binding", "measure", "window_start", "window_end",
                  "step_s", "points", "allocated_gpu_hours", "useful_hours", "waiting_hours",
                  "held_idle_hours", "no_process_hours", "useful_fraction", "coverage",
                  "means", "verdict", "gpus_missing", "warnings", "computed_at", "straggler",
                  "gpus", "nodes"]


class ChannelsSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="gpu01:3 or a node's host name")
    channels = serializers.DictField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
        help_text="channel -> one value per point (null: no sample); ratios are 0..1, "
                  "rates in B/s, temperature °C, clock MHz, throttle a bitmask")


class JobSeriesSerializer(serializers.Serializer):
    """The archived down-sampled series: point k covers (start + k*step, start + (k+1)*step]."""

    start = serializers.DateTimeField(allow_null=True)
    step_s = serializers.FloatField()
    points = serializers.IntegerField()
    gpus = ChannelsSerializer(many=True, help_text="job-exclusive")
    nodes = ChannelsSerializer(many=True, help_text="node-shared")


# --- Findings and traces --------------------------------------------------------------------


class ContactSerializer(serializers.Serializer):
    name = serializers.CharField()
    email = serializers.CharField()
    url = serializers.CharField()


class FindingEvidenceSerializer(serializers.Serializer):
    fact = serializers.CharField()
    # DRF's metaclass moves declared fields off the class; the stubs see Field.label
    label = serializers.CharField()  # type: ignore[assignment]
    shown = serializers.CharField()
    anchor = serializers.CharField(help_text="the job page section showing it (#anchor)")


class JobFindingSerializer(serializers.ModelSerializer):
    """What to check and whom to talk to, with the facts it rests on."""

    contact = ContactSerializer(allow_null=True, read_only=True)
    evidence = FindingEvidenceSerializer(many=True, read_only=True)

    class Meta:
        model = JobFinding
        fields = ["id", "source", "key", "area", "severity", "title", "text", "hint", "route",
                  "contact", "evidence", "created_at"]


class TraceGpuSerializer(serializers.Serializer):
    """The GPU's account of a step, per-step means (ms)."""

    idle_ms = serializers.FloatField()
    compute_ms = serializers.FloatField()
    communication_ms = serializers.FloatField()
    exposed_communication_ms = serializers.FloatField()


class TraceDeviceSerializer(serializers.Serializer):
    """Where a rank ran, as its trace says."""

    host = serializers.CharField(allow_null=True)
    index = serializers.IntegerField()
    name = serializers.CharField(allow_null=True)


class TraceRankSerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    step_ms = serializers.FloatField()
    phases_ms = serializers.DictField(child=serializers.FloatField())
    gpu = TraceGpuSerializer(allow_null=True)
    device = TraceDeviceSerializer(allow_null=True)


class TraceStragglerSerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    phase = serializers.CharField()
    excess_ms = serializers.FloatField()
    steps = serializers.ListField(child=serializers.IntegerField())
    intermittent = serializers.BooleanField()
    device = TraceDeviceSerializer(allow_null=True)


class TraceRunSerializer(serializers.ModelSerializer):
    """One phase and straggler analysis of a job's profiler traces (docs/traces.md)."""

    job = serializers.IntegerField(source="job_id", read_only=True)
    cluster = serializers.CharField(source="job.cluster.name", read_only=True)
    job_id = serializers.IntegerField(source="job.job_id", read_only=True)
    straggler = serializers.SerializerMethodField()
    ranks = serializers.SerializerMethodField()

    class Meta:
        model = TraceRun
        fields = ["id", "job", "cluster", "job_id", "world_size", "steps", "timeline",
                  "dominant_phase", "straggler", "waiting_ranks", "communication_bound",
                  "gpu_idle_share", "mixed_runs", "verdict",
                  "partial", "warnings", "files", "recorded_start", "recorded_end",
                  "created_at", "ranks"]

    @extend_schema_field(TraceStragglerSerializer(allow_null=True))
    def get_straggler(self, run: TraceRun) -> dict[str, Any] | None:
        return run.report()["straggler"]

    @extend_schema_field(TraceRankSerializer(many=True))
    def get_ranks(self, run: TraceRun) -> list[dict[str, Any]]:
        return [r.as_dict() for r in run.ranks.all()]


class TraceUploadSerializer(serializers.Serializer):
    files = serializers.ListField(child=serializers.FileField(),
                                  help_text="one Kineto trace per rank, .json or .json.gz")


# --- Jobs side by side (``GET /api/v1/jobs/compare/``) -------------------------------------


class CompareTelemetrySerializer(serializers.Serializer):
    useful_share = serializers.FloatField(allow_null=True, help_text="computing / allocated")
    busy_share = serializers.FloatField()
    held_share = serializers.FloatField(help_text="idle with GPU memory held")
    straggler_status = serializers.CharField()
    straggler_words = serializers.CharField()
    straggler_gpus = serializers.ListField(child=serializers.CharField())
    timeline = serializers.ListField(child=serializers.FloatField(allow_null=True),
                                     help_text="mean GPU busy share per stored point")
    timeline_offset_s = serializers.FloatField(help_text="first point, after the job's start")
    step_s = serializers.FloatField()
    timeline_measure = serializers.CharField()


class CompareTraceSerializer(serializers.Serializer):
    step_ms = serializers.FloatField(help_text="mean step over the ranks")
    phases_ms = serializers.DictField(child=serializers.FloatField())
    ranks = serializers.IntegerField()
    steps = serializers.IntegerField()
    straggler_rank = serializers.IntegerField(allow_null=True)
    straggler_phase = serializers.CharField()
    straggler_gpu = serializers.CharField()


class CompareRunSerializer(serializers.Serializer):
    """One job's stored figures; ``telemetry`` and ``trace`` are null when it has none."""

    ref = serializers.CharField(help_text="<cluster>/<job id>")
    state = serializers.CharField()
    ending = serializers.CharField(help_text="the ending's kind; empty while it runs")
    ending_title = serializers.CharField()
    gpus = serializers.FloatField()
    gpu_model = serializers.CharField()
    nodes = serializers.IntegerField()
    run_s = serializers.FloatField(allow_null=True)
    gpu_hours = serializers.FloatField()
    telemetry = CompareTelemetrySerializer(allow_null=True)
    telemetry_missing = serializers.CharField()
    trace = CompareTraceSerializer(allow_null=True)
    findings = serializers.ListField(child=serializers.ListField(child=serializers.CharField()),
                                     help_text="[rule key, title]")


class CompareCellSerializer(serializers.Serializer):
    value = serializers.JSONField(allow_null=True, help_text="a number or text; null: missing")
    missing = serializers.CharField(help_text="why there is no value")


class CompareRowSerializer(serializers.Serializer):
    key = serializers.CharField()
    title = serializers.CharField(source="label", help_text="the row's name, as the page says it")
    kind = serializers.CharField()
    cells = CompareCellSerializer(many=True)


class CompareDifferenceSerializer(serializers.Serializer):
    topic = serializers.CharField()
    text = serializers.CharField()
    rows = serializers.ListField(child=serializers.CharField())


class ComparisonSerializer(serializers.Serializer):
    """Jobs side by side, oldest first (run 1 is the baseline), with the differences named."""

    runs = CompareRunSerializer(many=True)
    rows = CompareRowSerializer(many=True)
    differences = CompareDifferenceSerializer(many=True)
    notes = serializers.ListField(child=serializers.CharField())
