// live.js: the dashboard's live-stream glue around htmx's SSE extension.
// - remembers the id of the last event applied (or passed over: a heartbeat
//   may carry one) and makes every reconnect resume after it with the
//   page's scope (the browser's own retry sends Last-Event-ID; the
//   extension's retry re-reads sse-connect, which is kept up to date here);
// - shows a connected / reconnecting indicator;
// - treats a stream that stays silent past two heartbeats as dead (sleeping
//   laptops, proxies that drop idle connections) and reconnects;
// - keeps "4s ago" texts fresh;
// - sends the page's CSRF token with every htmx request (X-CSRF-Token);
// - when the stream cannot reconnect because the session ended (signed out
//   elsewhere, expired), goes to the login page instead of retrying.
(function () {
  "use strict";
  var HEARTBEAT_MS = Number(document.body && document.body.getAttribute("data-heartbeat-ms")) || 10000;
  var lastSeen = Date.now();
  var current = null;

  function body() { return document.body; }

  function lastID() { return body().getAttribute("data-last-event-id") || "0"; }

  function setIndicator(state, text) {
    var el = document.getElementById("live-indicator");
    // Only real changes: the indicator is a live region, and rewriting the
    // same text on every heartbeat would make screen readers repeat it.
    if (!el || el.getAttribute("data-state") === state) return;
    el.setAttribute("data-state", state);
    var dot = el.querySelector(".live-dot");
    var label = el.querySelector(".live-text");
    if (label) label.textContent = text;
    if (dot) {
      dot.classList.remove("bg-emerald-500", "bg-amber-500", "bg-red-500");
      dot.classList.add(state === "connected" ? "bg-emerald-500" : state === "reconnecting" ? "bg-amber-500" : "bg-red-500");
    }
  }

  // The page's scope (what it shows: view=...) rides along on every
  // reconnect, so the stream keeps carrying only what the page shows.
  function streamURL() {
    var scope = body().getAttribute("data-stream-scope");
    return "/events?since=" + encodeURIComponent(lastID()) + (scope ? "&" + scope : "");
  }

  function applied(ev) {
    lastSeen = Date.now();
    if (ev && ev.lastEventId) {
      body().setAttribute("data-last-event-id", ev.lastEventId);
      body().setAttribute("sse-connect", streamURL());
    }
    setIndicator("connected", "live");
    trim("activity-list", 50);
    recount();
  }

  // An unfiltered single-page table counts its rows as they come and go.
  function recount() {
    var total = document.getElementById("instances-total");
    var rows = document.getElementById("instance-rows");
    if (!total || !rows || !total.hasAttribute("data-live-count")) return;
    var n = rows.querySelectorAll('[data-testid="instance-row"]').length;
    total.textContent = n + (n === 1 ? " instance" : " instances");
  }

  // Live lists keep their newest entries only.
  function trim(id, keep) {
    var list = document.getElementById(id);
    while (list && list.children.length > keep) list.removeChild(list.lastElementChild);
  }

  function track(source) {
    if (current === source) return;
    current = source;
    source.addEventListener("open", function () { applied(null); });
    source.addEventListener("error", function () {
      if (current === source) setIndicator("reconnecting", "reconnecting…");
    });
  }

  // The extension announces its streams and every message it swaps (update,
  // counts, heartbeat: all are in the body's sse-swap list) on the body.
  document.addEventListener("htmx:sseOpen", function (e) {
    if (e.detail && e.detail.source) track(e.detail.source);
    applied(null);
  });
  document.addEventListener("htmx:sseMessage", function (e) { applied(e.detail); });
  document.addEventListener("htmx:sseError", function (e) {
    if (e.detail && e.detail.source && e.detail.source !== current) return;
    setIndicator("reconnecting", "reconnecting…");
  });

  // Every EventSource the SSE extension creates (at page load, after its own
  // retries, after reconnect below) starts after the last event applied.
  // This runs before htmx processes the page (deferred scripts run in order,
  // before DOMContentLoaded), so the first stream is tracked too.
  if (window.htmx) {
    htmx.createEventSource = function () {
      var source = new EventSource(streamURL());
      track(source);
      return source;
    };
    // Missing out-of-band targets are normal: one stream serves every page.
    htmx.config.allowNestedOobSwaps = false;
  }

  // The boot timeline chart of an instance page is drawn on the server:
  // when a live update reaches the instance's timeline, fetch it again
  // (once per burst of updates).
  var chartDue = {};
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    var target = e.detail && e.detail.target;
    if (!target || !target.id || target.id.indexOf("timeline-") !== 0) return;
    var name = target.id.slice("timeline-".length);
    if (chartDue[name]) return;
    chartDue[name] = setTimeout(function () {
      delete chartDue[name];
      var chart = document.getElementById("bootchart-" + name);
      if (chart && window.htmx) htmx.ajax("GET", chart.getAttribute("data-src"), { target: chart, swap: "outerHTML" });
    }, 150);
  });

  // htmx requests carry the CSRF token the page was rendered with.
  document.addEventListener("htmx:configRequest", function (e) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta && meta.content && e.detail && e.detail.headers) e.detail.headers["X-CSRF-Token"] = meta.content;
  });

  var holdUntil = 0;
  var probing = false;

  // A closed stream may mean the session ended: the dashboard then answers
  // 401 to everything. Ask once (HEAD /) before reconnecting, and go to
  // the login page if so.
  function checkSession(then) {
    if (probing) return;
    probing = true;
    fetch("/", { method: "HEAD", cache: "no-store", credentials: "same-origin" }).then(function (r) {
      probing = false;
      if (r.status === 401) {
        setIndicator("signed-out", "signed out");
        window.location.assign("/login?ended=1");
        return;
      }
      then();
    }, function () { probing = false; then(); });
  }

  function reconnect() {
    setIndicator("reconnecting", "reconnecting…");
    try { if (current) current.close(); } catch (e) { /* already closed */ }
    lastSeen = Date.now();
    var b = body();
    // A changed attribute makes htmx set the element up again, which opens
    // a new stream through htmx.createEventSource below.
    b.setAttribute("sse-connect", streamURL() + "&attempt=" + Date.now());
    if (window.htmx) htmx.process(b);
  }

  // Watchdog: no event, not even a heartbeat, for 2.5 periods = dead stream.
  setInterval(function () {
    if (!current || Date.now() < holdUntil) return;
    if (current.readyState === 2 /* CLOSED */ || Date.now() - lastSeen >= 2.5 * HEARTBEAT_MS) checkSession(reconnect);
  }, 1000);

  // guestlinkLive.drop(ms) closes the stream as a network failure would and
  // holds the reconnect for ms: the browser tests use it to check that the
  // page resumes after the last event it applied and misses nothing.
  window.guestlinkLive = {
    drop: function (ms) {
      holdUntil = Date.now() + (ms || 0);
      try { if (current) current.close(); } catch (e) { /* already closed */ }
      setIndicator("reconnecting", "reconnecting…");
    },
    reconnect: reconnect,
  };

  // Relative times.
  function ago(ms) {
    if (ms < 1000) return ms + "ms ago";
    var s = ms / 1000;
    if (s < 60) return s.toFixed(1) + "s ago";
    var m = Math.floor(s / 60);
    if (m < 60) return m + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s ago";
    return Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m ago";
  }
  setInterval(function () {
    document.querySelectorAll("time[data-since]").forEach(function (el) {
      var since = el.getAttribute("data-since");
      if (!since) return;
      var prefix = el.textContent.indexOf("heartbeat ") === 0 ? "heartbeat " : "";
      el.textContent = prefix + ago(Math.max(0, Date.now() - Date.parse(since)));
    });
  }, 1000);
})();
