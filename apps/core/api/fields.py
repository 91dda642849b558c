"""Strict request-body fields: what the schema says is exactly what is accepted.

DRF's CharField takes numbers and strips spaces, its DecimalField takes JSON numbers and
exponents, and both refuse NUL characters the schema never mentions: a schema-valid request
refused (400) or an invalid one accepted. ``tests/api/test_fuzz.py`` finds each of those.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers
from rest_framework.exceptions import APIException

NO_NUL_TEXT = r"^[^\x00]*$"
SOME_TEXT = r"^[^\x00]*[^\x00\s][^\x00]*$"  # at least one visible character, no NUL


class StrictText(serializers.Field):
    """A JSON string matching ``pattern`` (documented as such), taken as is."""

    def __init__(self, pattern: str = NO_NUL_TEXT, max_length: int | None = None,
                 **kwargs: Any) -> None:
        self.pattern, self.max_length = pattern, max_length
        self._regex = re.compile(pattern)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("expected a string")
        if self.max_length is not None and len(data) > self.max_length:
            raise serializers.ValidationError(f"at most {self.max_length} characters")
        if not self._regex.match(data):
            raise serializers.ValidationError(f"must match {self.pattern}")
        return data

    def to_representation(self, value: Any) -> str:
        return str(value)


def _text_schema(field: StrictText) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "pattern": field.pattern}
    if field.max_length is not None:
        schema["maxLength"] = field.max_length
    return schema


class DecimalString(StrictText):
    """A decimal number written as a JSON string (``"2.5000"``), never a float."""

    def to_internal_value(self, data: Any) -> Decimal:  # type: ignore[override]
        return Decimal(super().to_internal_value(data))


def decimal_pattern(whole: int, places: int, signed: bool = False) -> str:
    sign = "-?" if signed else ""
    return rf"^{sign}\d{{1,{whole}}}(\.\d{{1,{places}}})?$"


class Conflict(APIException):
    """409: a well-formed request that the current state (or a business rule) refuses. Only
    requests the schema calls invalid get a 400."""

    status_code = 409
    default_detail = "refused"
    default_code = "conflict"


class StrictTextExtension(OpenApiSerializerFieldExtension):
    target_class = StrictText
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        """The schema drf-spectacular writes for these fields: exactly what they accept."""
        schema = _text_schema(self.target)
        if isinstance(self.target, DecimalString):
            schema["format"] = "decimal"
        return schema


