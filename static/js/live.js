// The live cluster view (templates/clusters/live.html): ask the server for the changing
// part every data-live-every seconds and swap it in; paused while the tab is hidden, and a
// failed request keeps what is shown and says so (never a blank page).
(function () {
  "use strict";
  var box = document.getElementById("live-state");
  if (!box) { return; }
  var every = parseInt(box.getAttribute("data-live-every"), 10);
  if (!every) { return; }  // a simulated cluster never changes
  function refresh() {
    if (document.hidden) { return; }
    fetch(box.getAttribute("data-live-url"), {credentials: "same-origin",
      headers: {"X-Requested-With": "fetch"}})
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) { box.innerHTML = html; })
      .catch(function (err) {
        var asOf = document.getElementById("live-as-of");
        if (asOf) { asOf.textContent = asOf.textContent.split(" (")[0] + " (refresh failed: " + err.message + ")"; }
      });
  }
  window.setInterval(refresh, every * 1000);
})();
