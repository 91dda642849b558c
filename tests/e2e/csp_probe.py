"""A test-only URLconf: the portal plus a page that draws Plotly charts under the real CSP.

The page loads the vendored plotly.min.js and a same-origin script, exactly as
``static/js/charts.js`` pages do, so a policy too tight for Plotly shows up as a console
error in Chromium. ``?inline=1`` adds an inline script, which the policy must block.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import path

from portal.urls import urlpatterns as portal_urls

FIGURES = {
    "bars": {"data": [{"type": "bar", "x": ["a", "b"], "y": [1, 2]}], "layout": {"height": 240}},
    "lines": {"data": [{"type": "scatter", "mode": "lines", "x": [1, 2, 3], "y": [3, 1, 2]},
                       {"type": "heatmap", "z": [[1, 2], [3, 4]]}], "layout": {"height": 240}},
}
PAGE = """{% load static %}<!doctype html><html><head><meta charset="utf-8">
<link rel="icon" href="data:,"><title>csp probe</title></head><body>
{% for name, fig in figures.items %}<div class="chart" data-figure="fig-{{ name }}"></div>
{{ fig|json_script:name }}{% endfor %}
{% if inline %}<script>window.inlineRan = true;</script>{% endif %}
<script src="{% static 'vendor/plotly.min.js' %}"></script><script src="/csp-probe.js"></script>
</body></html>"""
DRAW = """document.querySelectorAll("[data-figure]").forEach(function (el) {
  var fig = JSON.parse(document.getElementById(el.dataset.figure.slice(4)).textContent);
  Plotly.newPlot(el, fig.data, fig.layout, {displaylogo: false});
});"""


def probe_page(request: HttpRequest) -> HttpResponse:
    template = engines["django"].from_string(PAGE)
    context = {"figures": FIGURES, "inline": request.GET.get("inline") == "1"}
    return HttpResponse(template.render(context, request))


def probe_script(request: HttpRequest) -> HttpResponse:
    return HttpResponse(DRAW, content_type="text/javascript")


urlpatterns = [
    *portal_urls,
    path("csp-probe/", probe_page),
    path("csp-probe.js", probe_script),
]
