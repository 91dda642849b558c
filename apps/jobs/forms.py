"""The job list's own query parameters (scope, grouping, sort, page), read as typed values.
The column filters are ``filters.JobFilterSet``'s. An unknown value falls back to the default,
so a stale bookmark still opens the page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms

from apps.core.forms import MessageForm

SCOPES = ("mine", "team", "all")


def default_scope(is_staff: bool, leads: bool) -> str:
    """Where the list opens (issue 26): every job for an admin, the teams' jobs for a lead,
    one's own for a researcher; each still read through ``visible_to``."""
    return "all" if is_staff else "team" if leads else "mine"
MAX_PAGE = 100_000  # 5M rows at 50 a page: past it OFFSET reads too much to answer


@dataclass(frozen=True)
class ListChoices:
    scope: str  # one of SCOPES
    grouped: bool  # array tasks folded into one row (not when searching)
    after: str  # the keyset cursor, as ``core.paging.keyset_page`` reads it
    sort: str  # a column, "-" first for descending (``listing.parse_sort`` whitelists it)
    page: int  # the page number of an order other than the default (from 1)


class JobListForm(forms.Form):
    # strip=False: the values are compared as sent, as before forms came.
    scope = forms.CharField(required=False, strip=False)
    group = forms.CharField(required=False, strip=False)
    q = forms.CharField(required=False, strip=False)
    after = forms.CharField(required=False, strip=False)
    sort = forms.CharField(required=False, max_length=40)
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)

    def __init__(self, data: Any, default_scope: str = "mine") -> None:
        super().__init__(data)
        self.default_scope = default_scope

    def clean_scope(self) -> str:
        scope = self.cleaned_data["scope"]
        return scope if scope in SCOPES else self.default_scope

    def choices(self) -> ListChoices:
        """Always answers: a field that failed (a null character) takes its default."""
        self.is_valid()
        data = self.cleaned_data
        return ListChoices(scope=data.get("scope", self.default_scope),
                           grouped=data.get("group", "") != "tasks" and not data.get("q", ""),
                           after=data.get("after", ""), sort=data.get("sort") or "",
                           page=data.get("page") or 1)


class AcceptImplausibleForm(MessageForm):
    """An admin accepts an implausible record (issue 25): why it is right, for the audit log."""

    note = forms.CharField(max_length=500, error_messages={
        "required": "Say why the record is right: the note goes to the audit log."})
