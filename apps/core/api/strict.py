"""A strict API: unknown or malformed query parameters are a 400, never silently ignored.

DRF and django-filter ignore what they do not understand (``?offset=abc``, ``?stat=RUNNING``,
``?submitted_before=``), so a typo returns everything with a 200. Fuzzing flags that as a
schema-violating request accepted; for callers it is a silent wrong answer.
"""

from __future__ import annotations

from typing import Any

import django_filters
from rest_framework.exceptions import ValidationError
from rest_framework.filters import BaseFilterBackend
from rest_framework.pagination import CursorPagination, LimitOffsetPagination

# Filters whose query value may repeat (?state=A&state=B) or be empty (a blank search box).
_MULTI = (django_filters.MultipleChoiceFilter,)
_BLANK_OK = (django_filters.CharFilter,)
_BOOLEANS = {"true", "false"}


class StrictQueryParams(BaseFilterBackend):
    """First filter backend: refuses unknown names, repeats and blank typed values."""

    def filter_queryset(self, request: Any, queryset: Any, view: Any) -> Any:
        filters = _filters_of(view)
        allowed = set(filters) | _pagination_params(view)
        errors: dict[str, list[str]] = {}
        for name, values in request.query_params.lists():
            problem = _problem(name, values, allowed, filters.get(name))
            if problem:
                errors[name] = [problem]
        if errors:
            raise ValidationError(errors)
        return queryset


def _problem(name: str, values: list[str], allowed: set[str], flt: Any) -> str | None:
    if name not in allowed:
        return f"unknown query parameter (known: {', '.join(sorted(allowed)) or 'none'})"
    if len(values) > 1 and not isinstance(flt, _MULTI):
        return "given more than once"
    if "" in values and flt is not None and not isinstance(flt, _BLANK_OK):
        return "must not be empty"
    if isinstance(flt, django_filters.BooleanFilter) and not set(values) <= _BOOLEANS:
        # django-filter reads anything else as "no filter": a silent wrong answer
        return "must be true or false"
    return None


def _filters_of(view: Any) -> dict[str, Any]:
    filterset_class = getattr(view, "filterset_class", None)
    return dict(filterset_class.base_filters) if filterset_class else {}


def _pagination_params(view: Any) -> set[str]:
    paginator = getattr(view, "paginator", None)
    names = ("limit_query_param", "offset_query_param", "cursor_query_param",
             "page_size_query_param", "page_query_param")
    return {getattr(paginator, n) for n in names if getattr(paginator, n, None)}


def _strict_int(request: Any, name: str, minimum: int, maximum: int | None = None) -> int | None:
    """The integer in ``?name=``, None when absent; a 400 when it is not one in range."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < minimum or (maximum is not None and int(raw) > maximum):
        bound = f" and at most {maximum}" if maximum is not None else ""
        raise ValidationError({name: [f"expected an integer of at least {minimum}{bound}"]})
    return int(raw)


def _with_bounds(params: list[dict[str, Any]], bounds: dict[str, dict[str, int]]) -> list[Any]:
    """Write the accepted ranges into the OpenAPI parameters, so the schema says what we check."""
    for param in params:
        param["schema"].update(bounds.get(param["name"], {}))
    return params


class StrictLimitOffsetPagination(LimitOffsetPagination):
    """``limit`` 1..max_limit and ``offset`` >= 0, or a 400 (DRF falls back silently)."""

    default_limit = 50
    max_limit = 500

    def get_schema_operation_parameters(self, view: Any) -> list[Any]:
        return _with_bounds(super().get_schema_operation_parameters(view), {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
            self.offset_query_param: {"minimum": 0}})

    def get_limit(self, request: Any) -> int | None:
        limit = _strict_int(request, self.limit_query_param, 1, self.max_limit)
        return self.default_limit if limit is None else limit

    def get_offset(self, request: Any) -> int:
        return _strict_int(request, self.offset_query_param, 0) or 0


class StrictCursorPagination(CursorPagination):
    """``page_size`` 1..max_page_size, or a 400. A bad cursor stays DRF's 404."""

    page_size = 50
    max_page_size = 500
    page_size_query_param = "page_size"

    def get_schema_operation_parameters(self, view: Any) -> list[Any]:
        return _with_bounds(super().get_schema_operation_parameters(view), {
            self.page_size_query_param: {"minimum": 1, "maximum": self.max_page_size}})

    def get_page_size(self, request: Any) -> int | None:
        size = _strict_int(request, self.page_size_query_param, 1, self.max_page_size)
        return self.page_size if size is None else size
