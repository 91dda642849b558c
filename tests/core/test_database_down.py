"""A database error in a page is a 503 saying so (never a traceback); the API gets JSON.

tests/integration/test_faults_postgres.py stops a real PostgreSQL under a real server; this
checks the handler alone, with the database refusing through Django's own error class.
"""

from __future__ import annotations

import pytest
from django.db import InterfaceError, OperationalError
from django.test import Client

from apps.jobs import views as job_views
from apps.jobs.models import Job


@pytest.fixture
def failing_list(monkeypatch):
    def _fail(error):
        def get_context_data(self, **kwargs):
            raise error
        monkeypatch.setattr(job_views.JobListView, "get_context_data", get_context_data)
    return _fail


@pytest.mark.parametrize("error", [OperationalError("connection refused"),
                                   InterfaceError("connection already closed")])
def test_a_page_whose_database_is_gone_is_a_503_page(world, failing_list, error):
    failing_list(error)
    client = Client(raise_request_exception=False)
    client.force_login(world.users["bob"])
    response = client.get("/jobs/")
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    body = response.content.decode()
    assert 'id="database-unavailable"' in body and type(error).__name__ in body
    assert "Traceback" not in body and "connection" not in body  # no internals leak


def test_the_api_gets_json(world, monkeypatch):
    from apps.jobs.api import views as api_views

    def _fail(self):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(api_views.JobViewSet, "get_queryset", _fail)
    client = Client(raise_request_exception=False)
    client.force_login(world.users["bob"])
    response = client.get("/api/v1/jobs/")
    assert response.status_code == 503
    assert "database is unavailable" in response.json()["detail"]


def test_other_errors_stay_500(world, failing_list):
    failing_list(ZeroDivisionError("a bug"))
    client = Client(raise_request_exception=False)
    client.force_login(world.users["bob"])
    response = client.get("/jobs/")
    assert response.status_code == 500
    assert Job.objects.exists()
