"""The query string of a list page's filter form, read the way a browser sends it.

A browser submits every field of a GET form, so each filter left at its default ("any",
"every record") arrives as an empty value. django-filter reads ``?state=`` on a
multiple-choice filter as the choice ``""`` and refuses it ("Select a valid choice"), so the
jobs page answered every search with an error about its own default (issue 26). Pages bind
their filter sets through :func:`page_filterset`, which drops the blank values first; the API
stays strict (``apps/core/api/strict.py``): a program sending ``?state=`` gets a 400.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.http import QueryDict

F = TypeVar("F")


def without_blanks(query: QueryDict) -> QueryDict:
    """A copy of ``query`` without blank values; a name left with none is dropped."""
    params = QueryDict(mutable=True)
    for key in query:
        values = [v for v in query.getlist(key) if v.strip()]
        if values:
            params.setlist(key, values)
    return params


def page_filterset(filterset_class: type[F], query: QueryDict, **kwargs: Any) -> F:
    """``filterset_class`` bound to a page's query string, the form's defaults left out."""
    return filterset_class(without_blanks(query), **kwargs)  # type: ignore[call-arg]


def filter_messages(filterset: Any) -> list[str]:
    """The form's errors as lines naming each field by its label, not its query name."""
    form = filterset.form
    lines = []
    for name, errors in form.errors.items():
        # the bound field's label: the field's own, else Django's pretty name ("Status"); a
        # field's label can be None (django-filter's, once drf-spectacular has read the class)
        label = str(form[name].label) if name in form.fields else name
        lines.append(f"{label}: {' '.join(str(e) for e in errors)}")
    return lines
