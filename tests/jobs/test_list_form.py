"""The job list's scope, grouping and cursor: query string -> typed values, defaults for junk."""

from __future__ import annotations

import pytest
from django.http import QueryDict

from apps.jobs.forms import JobListForm, ListChoices


@pytest.mark.parametrize(("query", "expected"), [
    ("", ListChoices("mine", True, "", "", 1)),
    ("scope=team", ListChoices("team", True, "", "", 1)),
    ("scope=all&group=tasks", ListChoices("all", False, "", "", 1)),
    ("scope=everything", ListChoices("mine", True, "", "", 1)),  # unknown: the default
    ("scope=", ListChoices("mine", True, "", "", 1)),
    ("scope=%20team", ListChoices("mine", True, "", "", 1)),  # compared as sent
    ("group=arrays&q=train", ListChoices("mine", False, "", "", 1)),  # a search lists every task
    ("q=%20", ListChoices("mine", False, "", "", 1)),
    ("after=2026-11-20T12:00:00%2B00:00_42",
     ListChoices("mine", True, "2026-11-20T12:00:00+00:00_42", "", 1)),
    ("scope=team&after=%00", ListChoices("team", True, "", "", 1)),  # a null character: the default
    ("scope=all&scope=team", ListChoices("team", True, "", "", 1)),  # the last, as GET.get
    ("sort=-gpu_hours&page=3", ListChoices("mine", True, "", "-gpu_hours", 3)),
    ("page=0", ListChoices("mine", True, "", "", 1)),  # out of range: the first page
])
def test_choices(query, expected):
    assert JobListForm(QueryDict(query)).choices() == expected
