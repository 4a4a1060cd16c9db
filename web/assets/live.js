// live.js: the dashboard's live-stream glue around htmx's SSE extension.
// - remembers the id of the last event applied and makes every reconnect
//   resume after it (the browser's own retry sends Last-Event-ID; the
//   extension's retry re-reads sse-connect, which is kept up to date here);
// - shows a connected / reconnecting indicator;
// - treats a stream that stays silent past two heartbeats as dead (sleeping
//   laptops, proxies that drop idle connections) and reconnects;
// - keeps "4s ago" texts fresh.
(function () {
  "use strict";
  var HEARTBEAT_MS = 10000;
  var lastSeen = Date.now();
  var current = null;

  function body() { return document.body; }

  function lastID() { return body().getAttribute("data-last-event-id") || "0"; }

  function setIndicator(state, text) {
    var el = document.getElementById("live-indicator");
    if (!el) return;
    el.setAttribute("data-state", state);
    var dot = el.querySelector(".live-dot");
    var label = el.querySelector(".live-text");
    if (label) label.textContent = text;
    if (dot) {
      dot.classList.remove("bg-emerald-500", "bg-amber-500", "bg-red-500");
      dot.classList.add(state === "connected" ? "bg-emerald-500" : state === "reconnecting" ? "bg-amber-500" : "bg-red-500");
    }
  }

  function streamURL() { return "/events?since=" + encodeURIComponent(lastID()); }

  function track(source) {
    current = source;
    source.addEventListener("open", function () { lastSeen = Date.now(); setIndicator("connected", "live"); });
    source.addEventListener("error", function () { setIndicator("reconnecting", "reconnecting…"); });
    ["update", "heartbeat", "counts"].forEach(function (name) {
      source.addEventListener(name, function (ev) {
        lastSeen = Date.now();
        if (ev.lastEventId) {
          body().setAttribute("data-last-event-id", ev.lastEventId);
          body().setAttribute("sse-connect", streamURL());
        }
        setIndicator("connected", "live");
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!window.htmx) return;
    // Every EventSource the extension creates starts after the last event seen.
    htmx.createEventSource = function () {
      var source = new EventSource(streamURL());
      track(source);
      return source;
    };
    // Missing out-of-band targets are normal: one stream serves every page.
    htmx.on("htmx:oobErrorNoTarget", function (ev) { ev.preventDefault && ev.preventDefault(); });
  });

  var holdUntil = 0;

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
    if (current.readyState === 2 /* CLOSED */ || Date.now() - lastSeen >= 2.5 * HEARTBEAT_MS) reconnect();
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
