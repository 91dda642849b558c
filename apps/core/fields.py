"""Model fields shared by the apps."""

from __future__ import annotations

from typing import Any

from django.db import models


class DocumentField(models.JSONField):
    """A JSONField for large documents written in bulk (scorecards' breakdowns and trends).

    Django 5.2 sends a PostgreSQL ``bulk_create`` as ``UNNEST`` of one array per column;
    psycopg then quotes every document inside a text array in Python (one regex
    substitution per double quote), which for 150 scorecards of ~10 kB of JSON cost more
    than the upsert itself (issue 7's benchmark). A field with ``get_placeholder`` makes
    Django write ``VALUES`` rows instead: one parameter per document, escaped by libpq.
    The column is the same ``jsonb``.
    """

    def get_placeholder(self, value: Any, compiler: Any, connection: Any) -> str:
        return "%s"


def column(field: models.Field[Any, Any] | models.ForeignObjectRel) -> str:
    """The database column of a concrete field, for the raw SQL of the bulk writers (the
    stubs type ``Field.column`` as optional: a relation's reverse side has none)."""
    if isinstance(field, models.ForeignObjectRel) or field.column is None:
        raise ValueError(f"{field} has no database column")
    return field.column
