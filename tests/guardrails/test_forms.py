"""The My alerts scope form: which scope a user gets for what they asked."""

import pytest

from apps.guardrails.forms import AlertScopeForm


@pytest.mark.parametrize(("asked", "may_see_teams", "scope"), [
    ({}, False, "mine"),
    ({}, True, "mine"),
    ({"scope": "mine"}, True, "mine"),
    ({"scope": "team"}, True, "team"),
    ({"scope": "team"}, False, "mine"),  # a researcher asking for team alerts gets their own
    ({"scope": "all"}, True, "mine"),  # unknown value: a stale bookmark still opens
    ({"scope": "te\x00am"}, True, "mine"),  # a null character fails the field: the default
])
def test_scope(asked: dict[str, str], may_see_teams: bool, scope: str) -> None:
    assert AlertScopeForm(asked).scope_for(may_see_teams) == scope
