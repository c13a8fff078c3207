// Live updates for the dashboard from GET /events (Server-Sent Events). Little script on
// purpose: every page works without it; this only refreshes what the server renders.
//
// <body data-events="/events?..."> names the stream. With data-refresh="/ui/..." the page
// fetches that fragment (at most once a second) when an event arrives and swaps in each
// element marked data-live-part (by id). Without it, a listing shows its "refresh" hint.
// data-live-on="name name ..." narrows the events a fragment page refreshes on (default: all).
// body[data-live] says connecting | connected | off.
(function () {
  "use strict";
  var JOB_EVENTS = [
    "enqueued", "scheduled", "promoted", "claimed", "completed", "retrying", "dead",
    "recovered", "released", "replayed", "canceled", "purged"
  ];
  // A gap: the stream was trimmed past us, so what we show may be stale: refresh too.
  var OTHER_EVENTS = [
    "queue_paused", "queue_resumed", "worker_joined", "worker_left", "worker_quiet",
    "worker_resumed", "gap"
  ];
  var THROTTLE_MS = 1000;
  var RETRY_MS = 2000;
  var MAX_RETRY_MS = 60000;

  function start() {
    var body = document.body;
    var stream = body.getAttribute("data-events");
    if (!stream || typeof window.EventSource !== "function") {
      body.setAttribute("data-live", "off");
      return;
    }
    var refreshUrl = body.getAttribute("data-refresh");
    var lastRefresh = 0;
    var timer = null;
    var inFlight = false;

    function swap(html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var parts = doc.querySelectorAll("[data-live-part][id]");
      for (var i = 0; i < parts.length; i++) {
        var old = document.getElementById(parts[i].id);
        if (old) {
          old.replaceWith(document.importNode(parts[i], true));
        }
      }
      // times.js shows the new part's times relative, as it did the page's.
      document.dispatchEvent(new CustomEvent("taskforge:swapped"));
    }

    function refresh() {
      timer = null;
      if (inFlight) {
        schedule();
        return;
      }
      inFlight = true;
      lastRefresh = Date.now();
      fetch(refreshUrl, { credentials: "same-origin", redirect: "error" })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.text();
        })
        .then(swap)
        .catch(function () { /* the next event tries again */ })
        .then(function () { inFlight = false; });
    }

    function schedule() {
      if (timer !== null) { return; }
      var wait = Math.max(0, lastRefresh + THROTTLE_MS - Date.now());
      timer = window.setTimeout(refresh, wait);
    }

    function hint() {
      var el = document.getElementById("live-hint");
      if (el) { el.hidden = false; }
    }

    // A fragment page refreshes on anything; a listing hints only when jobs changed.
    var only = (body.getAttribute("data-live-on") || "").split(" ").filter(Boolean);
    var names = refreshUrl ? JOB_EVENTS.concat(OTHER_EVENTS) : JOB_EVENTS.concat(["gap"]);
    if (refreshUrl && only.length) { names = only; }
    var onEvent = refreshUrl ? schedule : hint;
    var lastId = "";
    var delay = RETRY_MS;
    var refusals = 0;
    var source = null;

    function received(event) {
      if (event.lastEventId) { lastId = event.lastEventId; }
      onEvent();
    }

    function connect() {
      var url = stream;
      if (lastId) {
        url += (url.indexOf("?") < 0 ? "?" : "&") + "last_event_id=" + encodeURIComponent(lastId);
      }
      source = new EventSource(url);
      body.setAttribute("data-live", "connecting");
      source.onopen = function () {
        body.setAttribute("data-live", "connected");
        delay = RETRY_MS;
        refusals = 0;
        // The stream starts now, not when the page was rendered: whatever happened in between
        // (a replayed job that already ran) is read once, here.
        if (refreshUrl) { schedule(); }
      };
      source.onerror = function () {
        if (source.readyState !== EventSource.CLOSED) {
          // It reconnects by itself, sending Last-Event-ID: nothing is missed.
          body.setAttribute("data-live", "connecting");
          return;
        }
        // A refusal (503: the gateway serves its most streams; a restart) closes it for good:
        // try again later, from the last event seen, waiting longer each time.
        body.setAttribute("data-live", "off");
        // EventSource cannot tell a 503 from a 400: after a few refusals in a row, start from
        // now rather than repeat an id the server may not take (the page refreshes on open).
        refusals += 1;
        if (refusals >= 3) { lastId = ""; }
        window.setTimeout(connect, delay);
        delay = Math.min(delay * 2, MAX_RETRY_MS);
      };
      for (var i = 0; i < names.length; i++) {
        source.addEventListener(names[i], received);
      }
    }

    connect();
    window.addEventListener("pagehide", function () { source.close(); });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
