"""Every list page's filter form, submitted as a browser submits it (issue 26 item 1).

A browser sends every field of a GET form; a filter left at "any" arrives blank. The page
must not complain about its own defaults, and every filter it offers must come back in the
form (and in its paging links) with the value asked, so a filtered page can be bookmarked.
"""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.http import QueryDict
from django.urls import reverse

pytestmark = pytest.mark.django_db

# (page, persona): each list page with a filter form, as each persona that opens it
PAGES = [("jobs-list", p) for p in ("bob", "alice", "staff")] + \
        [("security-list", p) for p in ("bob", "alice", "staff")] + \
        [("slo-list", p) for p in ("bob", "staff")] + [("audit-list", "staff")]
SAMPLES = {"number": "1", "date": "2026-11-01", "datetime-local": "2026-11-01T00:00"}


class _Field:
    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.name = tag, attrs.get("name", "")
        self.kind = attrs.get("type", "text").lower()
        self.value = attrs.get("value", "")
        self.options: list[str] = []
        self.selected: list[str] = []


class _FormParser(HTMLParser):
    """The GET forms of a page: each field with its type, value or options and choice."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[list[_Field]] = []
        self.links: list[str] = []
        self._select: _Field | None = None
        self._in_get = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "form":
            self._in_get = a.get("method", "get").lower() == "get"
            if self._in_get:
                self.forms.append([])
        elif tag in ("input", "select") and self._in_get and a.get("name") and \
                a.get("type", "") not in ("submit", "button"):
            field = _Field(tag, a)
            self.forms[-1].append(field)
            self._select = field if tag == "select" else None
        elif tag == "option" and self._select is not None:
            self._select.options.append(a.get("value", ""))
            if "selected" in a:
                self._select.selected.append(a.get("value", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "form":
            self._in_get = False


def _forms(html: str) -> list[list[_Field]]:
    parser = _FormParser()
    parser.feed(html)
    return [f for f in parser.forms if f]


def _defaults(fields: list[_Field]) -> list[tuple[str, str]]:
    """What a browser sends untouched: each input's value, each select's chosen option."""
    return [(f.name, (f.selected or f.options or [""])[0] if f.tag == "select" else f.value)
            for f in fields]


def _filled(fields: list[_Field]) -> list[tuple[str, str]]:
    """Every filter set to a value other than its default: the last option of a select, a
    sample of the input's type; hidden fields (the scope) keep theirs."""
    out = []
    for f in fields:
        if f.tag == "select":
            out.append((f.name, [o for o in f.options if o][-1] if any(f.options) else ""))
        elif f.kind == "hidden":
            out.append((f.name, f.value))
        else:
            out.append((f.name, SAMPLES.get(f.kind, "x1")))
    return out


def _page(login, url_name: str, persona: str, data: list[tuple[str, str]] | None = None):
    client = login(persona)
    url = reverse(url_name)
    response = client.get(url, data or {}) if not data else \
        client.get(url + "?" + "&".join(f"{k}={v}" for k, v in data))
    assert response.status_code == 200
    return response


@pytest.mark.parametrize(("url_name", "persona"), PAGES)
def test_a_filter_form_left_at_its_defaults_shows_no_error(world, login, url_name, persona):
    forms = _forms(_page(login, url_name, persona).content.decode())
    assert forms, f"{url_name} has no filter form"
    for fields in forms:
        response = _page(login, url_name, persona, _defaults(fields))
        html = response.content.decode()
        assert 'class="error"' not in html, html[html.find('class="error"') - 40:][:300]


@pytest.mark.parametrize(("url_name", "persona"), PAGES)
def test_every_filter_round_trips_through_the_url(world, login, url_name, persona):
    (fields, *_) = _forms(_page(login, url_name, persona).content.decode())
    asked = _filled(fields)
    html = _page(login, url_name, persona, asked).content.decode()
    assert 'class="error"' not in html, html[html.find('class="error"') - 40:][:300]
    (shown, *_) = _forms(html)
    assert _defaults(shown) == asked


def test_paging_links_keep_every_filter(world, login):
    """The jobs page's next-page link carries the filters asked (and the cursor)."""
    from tests.conftest import make_job

    for i in range(60):
        make_job(world.cluster, 50_000 + i, world.users["bob"], world.team_a, partition="x1")
    asked = {"scope": "mine", "partition": "x1", "state": "COMPLETED", "min_gpus": "1"}
    html = login("bob").get(reverse("jobs-list"), asked).content.decode()
    parser = _FormParser()
    parser.feed(html)
    older = [link for link in parser.links if "after=" in link]
    assert older, "no next-page link"
    assert asked.items() <= dict(parse_qsl(urlsplit(older[0]).query)).items()


def test_the_api_stays_strict_about_blank_typed_values(world, login):
    """Only pages forgive a blank: a program sending ``?state=`` still gets a 400."""
    response = login("bob").get(reverse("api:job-list"), {"min_gpus": ""})
    assert response.status_code == 400


@pytest.mark.parametrize(("url_name", "persona", "query", "message"), [
    ("jobs-list", "bob", {"min_gpus": "many"}, "Min GPUs: Enter a number."),
    ("security-list", "bob", {"job": "1.5"}, "Job id: Enter a whole number."),
    ("slo-list", "bob", {"status": "bogus"}, "Status: Select a valid choice."),
])
def test_a_bad_value_is_named_by_its_label(world, login, url_name, persona, query, message):
    """Pages do show errors: only their own defaults must never cause one."""
    html = _page(login, url_name, persona, list(query.items())).content.decode()
    assert 'class="error"' in html and message in html


def test_errors_keep_their_label_after_the_api_schema_was_built():
    """drf-spectacular reading a filter set leaves django-filter's field labels None; the
    page still names the field as the form shows it (seen in CI: "status:" for "Status:")."""
    from drf_spectacular.generators import SchemaGenerator

    from apps.core.filtering import filter_messages
    from apps.slo.filters import ScorecardFilterSet

    SchemaGenerator().get_schema(request=None, public=True)
    filterset = ScorecardFilterSet(QueryDict("status=bogus"))
    assert filter_messages(filterset)[0].startswith("Status: Select a valid choice.")
