"""A crawler for the portal as one signed-in person sees it: every link followed, every form
submitted with its default (or first) values, every answer recorded (issue 19 item 8).

Issue 26: it also records every in-page link (``#section``, on the page or on another
page it visited) whose target id is not on the page, and every absolute link that is not on
the address the portal is served on (``served``: links in pages, alerts and digests come
from ``SITE_URL``, which must be that address).

Bounded so a run stays short on a demo with thousands of jobs: at most ``per_route`` pages
per URL name (job pages, statements, ... differ only by their object) and ``max_pages`` in
all. Used by ``tests/core/test_crawl.py``.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urldefrag, urlencode, urljoin, urlsplit

from django.test import Client
from django.urls import Resolver404, resolve

# Never followed: signing out ends the crawl's session; the Django admin's change forms are
# Django's own pages (its index is visited); static files and the metrics endpoint are not
# pages; the API answers JSON (its root is visited).
SKIP_PREFIXES = ("/accounts/logout/", "/admin/", "/static/", "/metrics", "/oidc/",
                 "/api/v1/", "/api/schema/")
ALSO_VISIT = ("/admin/", "/api/v1/", "/api/docs/", "/api/redoc/")


@dataclass
class Form:
    action: str
    method: str
    fields: list[tuple[str, str]]
    page: str

    @property
    def key(self) -> tuple[str, str, tuple[str, ...]]:
        return (self.method, _route(self.action), tuple(sorted({n for n, _ in self.fields})))


class _PageParser(HTMLParser):
    """Links (``<a href>``, htmx ``hx-get``) and forms with their default values."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page, self.links, self.forms = page, [], []
        self.ids: set[str] = set()
        self.absolute: list[str] = []  # every http(s) URL a link, form, htmx call or message names
        self._pre = 0
        self._form: Form | None = None
        self._select: tuple[str, list[str], list[str]] | None = None  # name, options, selected
        self._textarea: tuple[str, list[str]] | None = None
        self._buttons: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self._pre += tag == "pre"
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for attr in ("href", "hx-get", "hx-post", "action"):
            if urlsplit(a.get(attr, "")).scheme in ("http", "https"):
                self.absolute.append(a[attr])
        if tag == "a" and a.get("href"):
            self.links.append(urljoin(self.page, a["href"]))
        if a.get("hx-get"):
            self.links.append(urljoin(self.page, a["hx-get"]))
        if tag == "form":
            self._form = Form(urljoin(self.page, a.get("action") or self.page),
                              (a.get("method") or "get").lower(), [], self.page)
            self._buttons = []
        elif self._form is not None:
            self._field(tag, a)

    def _field(self, tag: str, a: dict[str, str]) -> None:
        assert self._form is not None
        name, kind = a.get("name", ""), a.get("type", "text").lower()
        if tag == "input" and name and kind not in ("file", "submit", "button", "image",
                                                    "reset", "checkbox", "radio"):
            self._form.fields.append((name, a.get("value", "")))
        elif tag == "input" and name and kind in ("checkbox", "radio") and "checked" in a:
            self._form.fields.append((name, a.get("value", "on")))
        elif tag in ("button", "input") and kind == "submit" and name:
            self._buttons.append((name, a.get("value", "")))
        elif tag == "select" and name:
            self._select = (name, [], [])
        elif tag == "option" and self._select is not None:
            value = a.get("value", "")
            self._select[1].append(value)
            if "selected" in a:
                self._select[2].append(value)
        elif tag == "textarea" and name:
            self._textarea = (name, [])

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._textarea[1].append(data)
        if self._pre:  # a stored message (a digest, an alert): its URLs are links to follow
            self.absolute += _URL.findall(data)

    def handle_endtag(self, tag: str) -> None:
        self._pre -= tag == "pre" and self._pre > 0
        if self._form is None:
            return
        if tag == "select" and self._select is not None:
            name, options, chosen = self._select
            if chosen or options:
                self._form.fields.append((name, (chosen or options)[0]))
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            self._form.fields.append((self._textarea[0], "".join(self._textarea[1])))
            self._textarea = None
        elif tag == "form":
            self._form.fields += self._buttons[:1]  # the first submit button, as Enter does
            self.forms.append(self._form)
            self._form = None


def _route(url: str) -> str:
    path = urlsplit(url).path
    try:
        return resolve(path).view_name
    except Resolver404:
        return path


SERVED = "http://testserver"  # the test client's address
_URL = re.compile(r"https?://[^\s<>\"')]+")
# Reference sites a page may cite (a finding's ATT&CK technique): not the portal, so never
# "another address of it". Anything else absolute must be on the served address.
REFERENCES = ("https://attack.mitre.org/",)


def _internal(url: str) -> str | None:
    """The path and query of a link into the portal, or None for another site."""
    url = urldefrag(url)[0]
    parts = urlsplit(url)
    if parts.scheme not in ("", "http", "https") or parts.netloc not in ("", "testserver"):
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _on(address: str, url: str) -> bool:
    """Is ``url`` on ``address`` (scheme, host and port alike)?"""
    a, u = urlsplit(address), urlsplit(url)
    return (a.scheme, a.netloc) == (u.scheme, u.netloc)


@dataclass
class Report:
    """What one pass saw: every request and the faults among them."""

    visited: list[tuple[str, str, int]] = field(default_factory=list)  # method, url, status
    server_errors: list[str] = field(default_factory=list)
    broken_links: list[str] = field(default_factory=list)
    missing_anchors: list[str] = field(default_factory=list)  # "#x" with no id="x" there
    offsite_links: list[str] = field(default_factory=list)  # absolute, not the served address
    forms: int = 0

    def record(self, method: str, url: str, status: int, source: str, is_link: bool) -> None:
        self.visited.append((method, url, status))
        if status >= 500:
            self.server_errors.append(f"{method} {url} -> {status} (from {source})")
        elif is_link and status in (403, 404):
            self.broken_links.append(f"{url} -> {status} (linked from {source})")


class Crawler:
    def __init__(self, client: Client, per_route: int = 3, max_pages: int = 400,
                 served: str = SERVED) -> None:
        self.client, self.per_route, self.max_pages = client, per_route, max_pages
        self.served = served
        self.ids: dict[str, set[str]] = {}  # page (path and query) -> its element ids
        self.fragments: list[tuple[str, str, str]] = []  # (page, fragment, linked from)

    def crawl(self, start: str = "/", also: tuple[str, ...] = ()) -> Report:
        """Everything reachable from ``start``, ``ALSO_VISIT`` and ``also`` (pages the
        per-route bound might not reach, such as a job without telemetry)."""
        report = Report()
        seen: set[str] = set()
        per_route: Counter[str] = Counter()
        forms_done: set[tuple[str, str, tuple[str, ...]]] = set()
        queue: deque[tuple[str, str]] = deque([(start, "start")])
        queue.extend((url, "start") for url in (*ALSO_VISIT, *also))
        while queue and len(report.visited) < self.max_pages:
            url, source = queue.popleft()
            route = _route(url)
            from_form = source.startswith("form on")  # a form's answer is always looked at
            if url in seen or (per_route[route] >= self.per_route and not from_form):
                continue
            seen.add(url)
            per_route[route] += 1
            html = self._get(url, source, report)
            if html is None:
                continue
            parser = _PageParser("http://testserver" + url)
            parser.feed(html)
            self._anchors(url, parser, report)
            for link in parser.links:
                target = _internal(link)
                if target and not target.startswith(SKIP_PREFIXES) and target not in seen:
                    queue.append((target, url))
            for form in parser.forms:
                if form.key not in forms_done and _internal(form.action):
                    forms_done.add(form.key)
                    self._submit(form, report, queue, seen)
        report.missing_anchors += [f"{page}#{frag} (linked from {source})"
                                   for page, frag, source in self.fragments
                                   if page in self.ids and frag not in self.ids[page]]
        return report

    def _anchors(self, url: str, parser: _PageParser, report: Report) -> None:
        """Keep the page's ids and its links' fragments (checked once every page is seen);
        note its absolute links off the served address."""
        self.ids[url] = parser.ids
        for link in parser.links:
            target, fragment = urldefrag(link)
            page = _internal(target)
            if fragment and page is not None and not fragment.startswith(("!", "/")):
                self.fragments.append((page, fragment, url))
        report.offsite_links += [f"{link} (on {url})" for link in parser.absolute
                                 if not _on(self.served, link)
                                 and not link.startswith(REFERENCES)]

    def _get(self, url: str, source: str, report: Report) -> str | None:
        response = self.client.get(url)
        report.record("GET", url, response.status_code, source, is_link=source != "start")
        if response.status_code in (301, 302, 303):
            target = _internal(response["Location"])
            if target and not target.startswith(SKIP_PREFIXES):
                return self._get(target, url, report)
            return None
        kind = response.get("Content-Type", "")
        if response.status_code != 200 or "html" not in kind or response.streaming:
            return None
        return response.content.decode("utf-8", "replace")

    def _submit(self, form: Form, report: Report, queue: deque[tuple[str, str]],
                seen: set[str]) -> None:
        action = _internal(form.action) or "/"
        if action.startswith(("/accounts/logout/", "/admin/", "/oidc/")):
            return
        report.forms += 1
        data = [(k, v) for k, v in form.fields if k != "csrfmiddlewaretoken"]
        if form.method == "get":
            url = urlsplit(action).path + "?" + urlencode(data)
            if url not in seen:
                queue.appendleft((url, f"form on {form.page}"))
            return
        response = self.client.post(action, _multi(data))
        report.record("POST", action, response.status_code, f"form on {form.page}",
                      is_link=False)
        if response.status_code in (301, 302, 303):
            target = _internal(response["Location"])
            if target and not target.startswith(SKIP_PREFIXES):
                self._get(target, f"POST {action}", report)


def _multi(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, []).append(value)
    return out
