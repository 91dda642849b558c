"""A strict API: unknown or malformed query parameters are a 400, never silently ignored.

DRF and django-filter ignore what they do not understand (``?offset=abc``, ``?stat=RUNNING``,
``?submitted_before=``), so a typo returns everything with a 200. Fuzzing flags that as a
schema-violating request accepted; for callers it is a silent wrong answer.
"""

from __future__ import annotations

import re
from datetime import UTC
from typing import Any

import django_filters
from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.filters import BaseFilterBackend
from rest_framework.pagination import CursorPagination, LimitOffsetPagination

# Filters whose query value may repeat (?state=A&state=B) or be empty (a blank search box).
_MULTI = (django_filters.MultipleChoiceFilter,)
_BLANK_OK = (django_filters.CharFilter,)
_BOOLEANS = {"true", "false"}
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")  # what CursorPagination.encode_cursor writes


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
    """``page_size`` 1..max_page_size, or a 400; a cursor that is not one this API wrote is a
    400 too (DRF answers 404 to bad base64, and a 500 to a well-formed cursor whose position
    is not a value of the ordering field: a tampered ``p=`` reached the database).
    """

    page_size = 50
    max_page_size = 500
    page_size_query_param = "page_size"
    invalid_cursor_message = ("not a cursor this API wrote: follow the next or previous link "
                              "of an earlier page unchanged, or leave cursor out for the first "
                              "page")

    def get_schema_operation_parameters(self, view: Any) -> list[Any]:
        return _with_bounds(super().get_schema_operation_parameters(view), {
            self.page_size_query_param: {"minimum": 1, "maximum": self.max_page_size}})

    def get_page_size(self, request: Any) -> int | None:
        size = _strict_int(request, self.page_size_query_param, 1, self.max_page_size)
        return self.page_size if size is None else size

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self._model = queryset.model  # decode_cursor checks the position against its field
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request: Any) -> Any:
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is not None and not _BASE64.fullmatch(encoded):
            # b64decode drops what is not base64 ("\x00" read as an empty cursor)
            raise self._refused()
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise self._refused() from None
        if cursor is not None and cursor.position is not None and \
                not _is_position(self._model, self.ordering[0].lstrip("-"), cursor.position):
            raise self._refused()
        return cursor

    def _refused(self) -> ValidationError:
        return ValidationError({self.cursor_query_param: [self.invalid_cursor_message]})


def _is_position(model: type[models.Model], name: str, position: object) -> bool:
    """Whether ``position`` reads as a value of the field ``name``, as the cursor filter will
    compare it: a date-time with its offset and within the calendar in UTC, a number in range."""
    try:
        field = model._meta.get_field(name)
        if not isinstance(field, models.Field):
            return False  # a relation's reverse side is never a cursor position
        value = field.to_python(position)
        if isinstance(field, models.DateTimeField):
            if value.tzinfo is None:
                return False  # this API writes aware times; a naive one is not ours
            value.astimezone(UTC)  # 9999-12-31T23:59-23:59 is past the calendar's end in UTC
        elif isinstance(field, models.IntegerField):
            return bool(-(2**63) <= value < 2**63)
        return True
    except (FieldDoesNotExist, DjangoValidationError, ValueError, TypeError, OverflowError,
            AttributeError):
        return False
