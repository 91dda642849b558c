"""The shared display filters and the nav tag (apps/core/templatetags/portal.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.template import Context, Template
from django.test import RequestFactory
from django.urls import resolve

from apps.core.templatetags.portal import percent, percent_of


@pytest.mark.parametrize(("value", "shown"), [
    (None, "—"),
    (0, "0%"),
    (0.0, "0%"),
    (0.424, "42%"),
    (0.426, "43%"),
    (1, "100%"),
    (1.5, "150%"),
    (2.25, "225%"),
    (-0.1, "-10%"),
    (Decimal("0.333"), "33%"),
    ("0.5", "50%"),
    ("1.2", "120%"),
    ("", "—"),
    ("n/a", "—"),
    (True, "—"),
])
def test_percent(value, shown):
    assert percent(value) == shown


@pytest.mark.parametrize(("part", "whole", "shown"), [
    (1, 4, "25%"),
    (3, 2, "150%"),
    (0, 5, "0%"),
    (5, 0, "—"),
    (5, None, "—"),
    (None, 5, "—"),
    ("2", "8", "25%"),
    ("x", 8, "—"),
])
def test_percent_of(part, whole, shown):
    assert percent_of(part, whole) == shown


@pytest.mark.parametrize("value", [0.1234, 0.5, 0.995, 1.0, 1.7, 0.0])
def test_percent_reads_like_the_widthratio_it_replaced(value):
    old = Template("{% widthratio v 1 100 %}%").render(Context({"v": value}))
    assert percent(value) == old


def _nav(path: str, *args: str) -> str:
    request = RequestFactory().get(path)
    request.resolver_match = resolve(path)
    quoted = " ".join(f"'{a}'" for a in args)
    template = Template("{% load portal %}{% nav_link " + quoted + " %}")
    return template.render(Context({"request": request}))


def test_nav_link_marks_its_own_page_only():
    assert _nav("/jobs/", "jobs-list", "Jobs") == '<a href="/jobs/" aria-current="page">Jobs</a>'
    assert _nav("/jobs/", "clusters-list", "Clusters") == '<a href="/clusters/">Clusters</a>'


def test_nav_link_marks_the_pages_it_also_covers():
    assert 'aria-current="page"' in _nav("/slo/", "slo-list", "SLOs", "slo-team")
    assert 'aria-current="page"' not in _nav("/slo/", "clusters-list", "Clusters", "jobs-list")


def test_nav_link_escapes_a_label_from_the_context():
    request = RequestFactory().get("/jobs/")
    request.resolver_match = resolve("/jobs/")
    html = Template("{% load portal %}{% nav_link 'jobs-list' label %}").render(
        Context({"request": request, "label": "<b>"}))
    assert html == '<a href="/jobs/" aria-current="page">&lt;b&gt;</a>'
