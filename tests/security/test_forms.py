"""The finding action form: dates and the assignee's username -> typed values; what it cannot
read becomes None, and ``findings.transition`` words the refusal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User

from apps.security.forms import FindingActionForm


@pytest.mark.parametrize(("until", "typed"), [
    ("2099-01-01", datetime(2099, 1, 1, tzinfo=UTC)),
    ("2099-01-01T08:30", datetime(2099, 1, 1, 8, 30, tzinfo=UTC)),
    ("2099-01-01T08:30:00+02:00", datetime(2099, 1, 1, 6, 30, tzinfo=UTC)),
    ("", None),
    ("tomorrow", None),
    ("2099-02-30", None),  # well formed, no such day
    ("2099-01-01" + "0" * 40, None),  # over 40 characters: not even tried
])
def test_until(until, typed):
    form = FindingActionForm({"action": "suppress", "reason": "x", "until": until})
    assert form.is_valid() and form.cleaned_data["until"] == typed


@pytest.mark.django_db
@pytest.mark.parametrize(("assignee", "found"), [("root", True), ("nobody", False), ("", False)])
def test_assignee(assignee, found):
    root = User.objects.create_user("root", is_staff=True)
    form = FindingActionForm({"action": "assign", "assignee": assignee})
    assert form.is_valid()
    assert form.cleaned_data["assignee"] == (root if found else None)


def test_text_is_kept_as_typed_and_a_null_character_is_refused():
    form = FindingActionForm({"action": "resolve", "reason": "  token revoked "})
    assert form.is_valid()
    assert (form.cleaned_data["action"], form.cleaned_data["reason"]) == \
        ("resolve", "  token revoked ")
    bad = FindingActionForm({"action": "resolve", "reason": "a\x00b"})
    assert not bad.is_valid() and "Null characters" in bad.first_error()
