"""drf-spectacular's AutoSchema, plus the error responses every operation can give.

Declaring them is what lets schema-driven tests (tests/api/test_fuzz.py) tell a documented
400/401/403/404 from an undocumented one.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema

_DETAIL = {"type": "object", "properties": {"detail": {"type": "string"}},
           "required": ["detail"]}
_FIELD_ERRORS = {"type": "object", "additionalProperties": {
    "oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}]}}
ERRORS: dict[str, tuple[str, dict[str, Any]]] = {
    "400": ("Invalid query parameter or body: messages per field", _FIELD_ERRORS),
    "401": ("No valid credentials (send 'Authorization: Token <key>')", _DETAIL),
    "403": ("Signed in, but the role does not allow this", _DETAIL),
    "404": ("No such object, or not visible to the caller", _DETAIL),
    "429": ("Too many requests from this token or address: try again after Retry-After "
            "seconds", _DETAIL),
}


# Django refuses NUL in text input (PostgreSQL cannot store it): a 400 the schema must
# announce, or a client (and the fuzzer) cannot know the value was invalid.
NO_NUL = "^[^\\x00]*$"


class BeaconAutoSchema(AutoSchema):
    def _get_parameters(self) -> list[dict[str, Any]]:
        parameters = super()._get_parameters()
        for param in parameters:
            schema = param.get("schema", {})
            if schema.get("type") == "string" and not ({"enum", "format", "pattern"} & set(schema)):
                schema["pattern"] = NO_NUL
        return parameters

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        for code, (text, schema) in ERRORS.items():
            responses.setdefault(code, {"description": text,
                                        "content": {"application/json": {"schema": schema}}})
        return responses
