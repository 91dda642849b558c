"""The usage report API: the page's report as JSON, from the same filter set and service.
Scope is the page's (``Job.objects.visible_to``); bad parameters are a 400 naming them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.permissions import VIEW
from apps.core.api.strict import StrictQueryParams
from apps.jobs.models import Job
from apps.reports import services
from apps.reports.api.serializers import ReportSerializer, RowSerializer
from apps.reports.filters import ReportFilterSet, params_of


class UsageReportView(generics.GenericAPIView):
    """GPU-hours, waits, jobs, success and efficiency of the jobs you may see, grouped.
    One report object, not a list (a generic view, not a viewset's ``list``)."""

    queryset = Job.objects.none()
    serializer_class = ReportSerializer
    filterset_class = ReportFilterSet
    filter_backends = [StrictQueryParams]
    pagination_class = None
    required_action = VIEW

    @extend_schema(responses={200: ReportSerializer})
    def get(self, request: Request) -> Response:
        self.filter_queryset(self.queryset)  # unknown or repeated parameters: a 400
        filterset = ReportFilterSet(request.query_params, request=request,
                                    queryset=Job.objects.none())
        if not filterset.form.is_valid():
            raise ValidationError(filterset.form.errors)
        report = services.build(request.user, params_of(filterset.form.cleaned_data))
        return Response(_body(report))


def _body(report: services.Report) -> dict[str, Any]:
    p = report.params
    context = {"group": p.group, "labels": report.labels}
    return {"date_from": p.first, "date_to": p.last, "group": list(p.group),
            "period": p.period.value if p.period else None, "as_of": report.as_of,
            "team": p.team.slug if p.team else None, "periods": report.labels,
            "rows": RowSerializer(report.rows, many=True, context=context).data,
            "total": RowSerializer(report.total, context={**context, "group": ("total",)}).data}
