"""Helpers that narrow types for the checker (mypy) and hold at run time too."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory

from apps.accounts.permissions import signed_in
from apps.chargeback.models import StatementLine
from apps.core.fields import column
from apps.jobs.models import Job


def test_column_names_the_database_column_of_concrete_fields_only():
    assert column(Job._meta.get_field("job_id")) == "job_id"
    assert column(Job._meta.get_field("cluster")) == "cluster_id"  # a foreign key's column
    assert column(Job._meta.pk) == Job._meta.pk.column
    assert [column(f) for f in StatementLine._meta.concrete_fields] == \
        [f.column for f in StatementLine._meta.concrete_fields]
    with pytest.raises(ValueError, match="no database column"):
        column(Job._meta.get_field("findings"))  # the reverse side of a relation


@pytest.mark.django_db
def test_signed_in_gives_the_user_and_refuses_an_anonymous_request():
    request = RequestFactory().get("/")
    request.user = user = User.objects.create_user("typed")
    assert signed_in(request) is user
    request.user = AnonymousUser()
    with pytest.raises(PermissionDenied):
        signed_in(request)
