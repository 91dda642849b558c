"""The jobs API: jobs, their metrics, series, diagnosis and trace analyses, all through
``visible_to`` (an invisible job is a 404; routes and statuses in the permission matrix)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.permissions import VIEW, lead_team_ids
from apps.analysis.phases import TraceAnalysisError
from apps.core.api.strict import StrictCursorPagination
from apps.core.errors import AdapterError
from apps.core.paging import SplitSlices
from apps.jobs import compare as comparison
from apps.jobs import presenters, traces
from apps.jobs.api.serializers import (
    ComparisonSerializer,
    JobDetailSerializer,
    JobFindingSerializer,
    JobMetricsSerializer,
    JobSerializer,
    JobSeriesSerializer,
    TraceRunSerializer,
)
from apps.jobs.filters import JobFilterSet
from apps.jobs.models import Job, JobMetrics, TraceRun

# Files as binary parts, and nothing else: spectacular would document a ListField of files as
# URIs and let any other field through, so clients (and the fuzzer) could not know the shape.
TRACE_UPLOAD_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["files"],
    "properties": {"files": {"type": "array", "minItems": 1,
                             "items": {"type": "string", "format": "binary"},
                             "description": "one Kineto trace per rank, .json or .json.gz"}},
}


class JobCursor(StrictCursorPagination):
    ordering = ("-submit_time", "-id")


class JobViewSet(viewsets.ReadOnlyModelViewSet):
    """Jobs the caller may see: their own, their led teams', or all for admins."""

    queryset = Job.objects.none()
    serializer_class = JobSerializer
    filterset_class = JobFilterSet
    pagination_class = JobCursor
    required_action = VIEW
    write_action: str | None = None  # only the trace upload writes (its action sets VIEW)

    def get_queryset(self) -> Any:
        qs = Job.objects.visible_to(self.request.user).select_related("cluster", "team")
        if self.action == "retrieve":
            qs = qs.prefetch_related("gpus_held__node")
        return qs

    def get_serializer_class(self) -> Any:
        return JobDetailSerializer if self.action == "retrieve" else JobSerializer

    def paginate_queryset(self, queryset: Any) -> Any:
        """The list's page through one ordered scan per part of ``visible_to`` (the user's
        own jobs, each led team's): the rule's OR made PostgreSQL read everyone's jobs by
        time (620 ms for a researcher's RUNNING jobs at 10M jobs). Costs the led-teams query,
        and the candidate-ids query for a lead."""
        if self.paginator is None:
            return None
        user = self.request.user
        split = Job.objects.visible_parts(user, lead_team_ids(user))
        # DRF types the argument as a queryset; SplitSlices offers what its paginator uses
        pageable: Any = SplitSlices(queryset, split) if split else queryset
        return super().paginate_queryset(pageable)

    @extend_schema(responses=JobMetricsSerializer)
    @action(detail=True, filter_backends=[])
    def metrics(self, request: Request, pk: str | None = None) -> Response:
        """Stored metrics: efficiency, the straggler verdict, per-GPU and per-node summaries
        (``status: pending`` and empty lists until the job is archived)."""
        job = self.get_object()
        metrics = JobMetrics.objects.filter(job=job).first() or JobMetrics(job=job)
        return Response(JobMetricsSerializer(metrics).data)

    @extend_schema(responses=JobSeriesSerializer)
    @action(detail=True, filter_backends=[])
    def series(self, request: Request, pk: str | None = None) -> Response:
        """The archived series of every GPU (job-exclusive) and node (node-shared)."""
        return Response(JobSeriesSerializer(presenters.series_payload(self.get_object())).data)

    @extend_schema(responses=JobFindingSerializer(many=True))
    @action(detail=True, filter_backends=[], pagination_class=None)
    def diagnosis(self, request: Request, pk: str | None = None) -> Response:
        """What to check and whom to talk to, worst first, each with its evidence."""
        findings = presenters.findings_for(self.get_object())
        return Response(JobFindingSerializer(findings, many=True).data)

    @extend_schema(methods=["GET"], responses=TraceRunSerializer(many=True))
    @extend_schema(methods=["POST"], request={"multipart/form-data": TRACE_UPLOAD_SCHEMA},
                   responses={201: TraceRunSerializer,
                              400: OpenApiResponse(description="no file, a corrupt or "
                                                               "non-trace file"),
                              413: OpenApiResponse(description="over the upload limit")})
    @action(detail=True, methods=["get", "post"], filter_backends=[], pagination_class=None,
            parser_classes=[MultiPartParser, FormParser], write_action=VIEW)
    def traces(self, request: Request, pk: str | None = None) -> Response:
        """The job's trace analyses; POST uploads per-rank traces and analyses them."""
        job = self.get_object()
        if request.method == "GET":
            runs = job.trace_runs.select_related("job__cluster").prefetch_related("ranks")
            return Response(TraceRunSerializer(runs, many=True).data)
        try:
            # the body's size was checked before it was read (TraceUploadLimitMiddleware)
            run = traces.import_uploads(job, request.FILES.getlist("files"))
        except traces.UploadRefused as exc:
            return Response({"detail": str(exc)}, status=exc.status)
        except (AdapterError, TraceAnalysisError) as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(TraceRunSerializer(run).data, status=status.HTTP_201_CREATED)


class JobComparisonViewSet(viewsets.GenericViewSet):
    """Jobs side by side: the comparison page's figures as JSON, through ``visible_to``."""

    queryset = Job.objects.none()
    serializer_class = ComparisonSerializer
    filter_backends: list[Any] = []
    pagination_class = None
    required_action = VIEW

    @extend_schema(parameters=[OpenApiParameter(
        "ids", {"type": "array", "items": {"type": "string", "pattern": comparison.REF_PATTERN},
                "minItems": comparison.MIN_JOBS, "maxItems": comparison.MAX_JOBS,
                "uniqueItems": True},
        required=True, style="form", explode=True,
        description="a job as <cluster>/<job id> (Slurm's raw id), repeated: "
                    f"{comparison.MIN_JOBS} to {comparison.MAX_JOBS} different jobs")],
        responses=ComparisonSerializer)
    def list(self, request: Request) -> Response:
        """Two to six jobs side by side (the comparison page's figures), oldest first, with
        the differences named against the oldest. A job the caller may not see is a 404."""
        unknown = sorted(set(request.query_params) - {"ids"})
        if unknown:
            raise ValidationError({n: ["unknown query parameter (known: ids)"] for n in unknown})
        try:
            refs = comparison.parse_refs(request.query_params.getlist("ids"))
            compared = comparison.compare_jobs(request.user, refs)
        except comparison.NotVisible as exc:
            raise NotFound(str(exc)) from None
        except comparison.CompareError as exc:
            raise ValidationError({"ids": [str(exc)]}) from None
        payload = {"runs": [asdict(r) for r in compared.runs],
                   **asdict(compared.comparison)}
        return Response(ComparisonSerializer(payload).data)


class TraceCursor(StrictCursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50


class TraceRunViewSet(viewsets.ReadOnlyModelViewSet):
    """Trace analyses of the jobs the caller may see."""

    queryset = TraceRun.objects.none()
    serializer_class = TraceRunSerializer
    pagination_class = TraceCursor
    required_action = VIEW
    filter_backends: list[Any] = []

    def get_queryset(self) -> Any:
        return (TraceRun.objects.visible_to(self.request.user)
                .select_related("job__cluster").prefetch_related("ranks"))
