"""No dead ends (issue 19 item 7): error pages in the portal's layout that say why and where
to go, the API's front door and documentation served from installed files, the "My API
tokens" page, and the job page's title for array tasks."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from apps.accounts.models import ApiToken
from apps.audit.models import AuditEvent
from apps.shell import views as core_views
from tests.conftest import make_job

pytestmark = pytest.mark.django_db


def _page(response) -> str:
    return response.content.decode()


# --- Error pages -------------------------------------------------------------------------


def test_another_teams_job_is_a_404_that_says_whose_it_is_and_where_to_go(world, login):
    response = login("carol").get(reverse("jobs-detail", args=["testcluster", 101]))
    html = _page(response)
    assert response.status_code == 404
    assert "belongs to another team" in html and "Where to go" in html
    assert 'class="mainnav"' in html and reverse("jobs-list") in html  # inside the layout


def test_an_unknown_job_says_beacon_has_not_seen_it(world, login):
    response = login("bob").get(reverse("jobs-detail", args=["testcluster", 999999]))
    assert response.status_code == 404 and "Beacon has no job 999999" in _page(response)


def test_an_unknown_address_is_a_page_in_the_layout_and_json_under_the_api(world, login):
    response = login("bob").get("/no/such/page/")
    assert response.status_code == 404 and "Nothing to see here" in _page(response)
    assert "Resolver404" not in _page(response) and "tried" not in _page(response)
    api = login("bob").get("/api/v1/no-such-endpoint/")
    assert api.status_code == 404 and api.json() == {"detail": "Not found."}
    anon = Client().get("/no/such/page/")
    assert anon.status_code == 404 and "Sign in" in _page(anon)


def test_a_page_for_admins_is_a_403_that_says_who_it_is_for(world, login):
    response = login("bob").get(reverse("core-platform"))
    assert response.status_code == 403
    html = _page(response)
    assert "for platform admins" in html and "Where to go" in html and 'class="mainnav"' in html


def test_a_server_error_is_a_page_in_the_layout(world, monkeypatch):
    def broken(self, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(core_views.HomeView, "get_context_data", broken)
    client = Client(raise_request_exception=False)
    client.force_login(world.users["bob"])
    response = client.get(reverse("core-home"))
    assert response.status_code == 500
    html = _page(response)
    assert "Something went wrong on our side" in html and 'class="mainnav"' in html
    assert "boom" not in html and "Traceback" not in html


# --- The API's front door and docs ---------------------------------------------------------


def test_the_api_root_lists_every_endpoint_with_its_address(world):
    body = Client().get("/api/v1/").json()
    paths = {e["path"] for e in body["endpoints"]}
    assert {"/api/v1/jobs/", "/api/v1/jobs/{pk}/", "/api/v1/slo/scorecards/",
            "/api/v1/quotas/accounts/{pk}/preview/"} <= paths
    jobs = next(e for e in body["endpoints"] if e["path"] == "/api/v1/jobs/")
    assert jobs["url"].startswith("http://testserver/api/v1/jobs/")
    assert body["docs"] == {"swagger_ui": "/api/docs/", "redoc": "/api/redoc/"}
    assert Client().get(body["schema"]).status_code == 200


@pytest.mark.parametrize("url", ["/api/docs/", "/api/redoc/"])
def test_the_api_docs_load_nothing_from_another_site(world, url):
    response = Client().get(url)
    html = _page(response)
    assert response.status_code == 200
    assert "drf_spectacular_sidecar" in html  # the installed package's files
    assert "http://" not in html and "https://" not in html
    assert "'unsafe-inline'" not in response["Content-Security-Policy"].split("script-src")[1] \
        .split(";")[0]


def test_the_swagger_ui_script_is_served_apart_for_the_csp(world):
    response = Client().get("/api/docs/?script=")
    assert response.status_code == 200 and "SwaggerUIBundle" in _page(response)


# --- My API tokens -------------------------------------------------------------------------


def test_a_token_is_made_named_shown_once_used_and_revoked(world, login):
    bob = login("bob")
    url = reverse("accounts-tokens")
    made = bob.post(url, {"name": "  CI   export "})
    key = made.context["new_key"]
    assert made.status_code == 200 and key in _page(made) and key.startswith("bcn_")
    assert set(made["Cache-Control"].split(", ")) == {"no-store", "private"}
    token = ApiToken.objects.get(user=world.users["bob"])
    assert token.name == "CI export" and key not in token.digest  # only a hash is kept
    listed = _page(bob.get(url))
    assert "CI export" in listed and key not in listed and key[:10] in listed

    api = Client(HTTP_AUTHORIZATION=f"Token {key}")
    jobs = api.get("/api/v1/jobs/")
    assert jobs.status_code == 200
    assert {j["job_id"] for j in jobs.json()["results"]} == {101}  # it sees what bob sees
    token.refresh_from_db()
    assert token.last_used_at is not None

    assert login("carol").post(reverse("accounts-token-revoke", args=[token.pk])).status_code \
        == 404  # not hers
    revoked = bob.post(reverse("accounts-token-revoke", args=[token.pk]))
    assert revoked.status_code == 303 and not ApiToken.objects.exists()
    assert api.get("/api/v1/jobs/").status_code == 401
    kinds = [e.details["kind"] for e in AuditEvent.objects.filter(
        action=AuditEvent.Action.TOKEN).order_by("at", "id")]
    assert kinds == ["created", "revoked"]


def test_a_token_needs_a_name(world, login):
    response = login("bob").post(reverse("accounts-tokens"), {"name": "   "})
    assert response.status_code == 400 and "give the token a name" in _page(response)
    assert not ApiToken.objects.exists()


# --- Small layout faults ---------------------------------------------------------------------


def test_an_array_task_page_is_titled_with_its_task_and_its_raw_job_id(world, login):
    make_job(world.cluster, 7088, world.users["bob"], world.team_a, display_id="7087_0",
             array_job_id=7087, array_task_id=0)
    html = _page(login("bob").get(reverse("jobs-detail", args=["testcluster", 7088])))
    assert "<title>Job 7087_0 (job id 7088)" in html


def test_the_admin_says_advisories(world):
    from apps.security.models import Advisory

    assert Advisory._meta.verbose_name_plural == "advisories"


def test_legends_sit_below_the_plot_in_their_own_band():
    from apps.chargeback.charts import team_split
    from apps.core.figures import legend_below

    layout = legend_below({"height": 200, "margin": {"b": 40},
                           "xaxis": {"title": {"text": "GPU-hours"}}})
    assert layout["legend"]["yref"] == "container" and layout["legend"]["y"] == 0
    assert layout["margin"]["b"] > 40 and layout["height"] == 200 + layout["margin"]["b"] - 40
    figure = team_split([("nlp", {"useful": 2.0})])
    assert figure["layout"]["legend"]["yref"] == "container"
    json.dumps(figure)
