// Relative times for the dashboard: each <time datetime="..."> the server rendered (the exact
// RFC 3339 time, which stays its title and the whole page's text without JavaScript) reads
// "3 s ago" or "in 2 min", as Sidekiq's do. Updated every few seconds, and at once when
// live.js swaps in a refreshed part ("taskforge:swapped"). A title the server gave is kept:
// the Periodic page's times are titled in their schedule's zone, not in UTC.
(function () {
  "use strict";
  var TICK_MS = 5000;
  var STEPS = [[60, 1, "s"], [3600, 60, "min"], [172800, 3600, "h"], [Infinity, 86400, "d"]];

  function relative(seconds) {
    var ahead = seconds < 0;
    var size = Math.abs(seconds);
    for (var i = 0; i < STEPS.length; i++) {
      if (size < STEPS[i][0]) {
        var text = Math.floor(size / STEPS[i][1]) + " " + STEPS[i][2];
        return ahead ? "in " + text : text + " ago";
      }
    }
    return "";
  }

  function update() {
    var now = Date.now();
    var times = document.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var exact = times[i].getAttribute("datetime");
      var at = Date.parse(exact);
      if (isNaN(at)) { continue; }
      if (!times[i].title) { times[i].title = exact; }  // the exact time, on hover
      times[i].textContent = relative((now - at) / 1000);
    }
  }

  function start() {
    update();
    document.addEventListener("taskforge:swapped", update);
    window.setInterval(update, TICK_MS);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
