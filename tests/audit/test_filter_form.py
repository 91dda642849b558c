"""The audit page's filter form: valid filters only, an unknown action ignored."""

from __future__ import annotations

import pytest

from apps.audit.forms import AuditFilterForm


@pytest.mark.parametrize(("query", "filters"), [
    ({}, {}),
    ({"action": "login"}, {"action": "login"}),
    ({"action": "bogus"}, {}),
    ({"user": "  bob "}, {"username": "bob"}),
    ({"action": "login", "user": "x" * 200}, {"action": "login", "username": "x" * 150}),
    ({"action": "", "user": ""}, {}),
])
def test_filters(query, filters):
    assert AuditFilterForm(query).filters() == filters
