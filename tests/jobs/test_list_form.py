"""The job list's scope, grouping and cursor: query string -> typed values, defaults for junk."""

from __future__ import annotations

import pytest
from django.http import QueryDict

from apps.jobs.forms import JobListForm, ListChoices


@pytest.mark.parametrize(("query", "expected"), [
    ("", ListChoices("mine", True, "")),
    ("scope=team", ListChoices("team", True, "")),
    ("scope=all&group=tasks", ListChoices("all", False, "")),
    ("scope=everything", ListChoices("mine", True, "")),  # unknown: the default
    ("scope=", ListChoices("mine", True, "")),
    ("scope=%20team", ListChoices("mine", True, "")),  # compared as sent
    ("group=arrays&q=train", ListChoices("mine", False, "")),  # a search lists every task
    ("q=%20", ListChoices("mine", False, "")),
    ("after=2026-11-20T12:00:00%2B00:00_42",
     ListChoices("mine", True, "2026-11-20T12:00:00+00:00_42")),
    ("scope=team&after=%00", ListChoices("team", True, "")),  # a null character: the default
    ("scope=all&scope=team", ListChoices("team", True, "")),  # the last one, as GET.get reads it
])
def test_choices(query, expected):
    assert JobListForm(QueryDict(query)).choices() == expected
