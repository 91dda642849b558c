"""The API token form: the name as the token list will show it."""

import pytest

from apps.accounts.forms import NAME_MAX, TokenForm


@pytest.mark.parametrize(("sent", "name", "valid"), [
    ({"name": "CI export"}, "CI export", True),
    ({"name": "  CI \n\t export  "}, "CI export", True),  # pasted blanks fold to one space
    ({"name": ""}, "", True),  # refused later by tokens.create, which says what a name is for
    ({}, "", True),
    ({"name": "x" * 300}, "x" * NAME_MAX, True),  # cut to the stored length
    ({"name": "a\x00b"}, None, False),
])
def test_name(sent: dict[str, str], name: str | None, valid: bool) -> None:
    form = TokenForm(sent)
    assert form.is_valid() is valid
    if valid:
        assert form.cleaned_data["name"] == name
