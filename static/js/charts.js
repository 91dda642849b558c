// Draws every [data-figure] element from the JSON figure named by its data-figure attribute
// (emitted by Django's json_script). Figures are built in Python (apps/*/charts.py).
(function () {
  "use strict";
  function draw(root) {
    if (!window.Plotly) { return; }
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.getAttribute("data-figure"));
      if (!source) { return; }
      var figure = JSON.parse(source.textContent);
      window.Plotly.react(el, figure.data, figure.layout,
        { displaylogo: false, displayModeBar: false, responsive: true });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  // htmx replaced a partial (a refreshed metrics card): draw what it brought.
  document.addEventListener("htmx:afterSettle", function () { draw(document); });
})();
