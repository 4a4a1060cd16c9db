// console.js: follows the guest console on the instance page.
// - opens the console stream (server-sent "console" events) from the offset
//   the page was rendered at; a reconnect resumes from the last event's id;
// - appends each segment as a <span> whose text is set with textContent:
//   guest bytes are never parsed as HTML;
// - keeps the last data-scrollback characters in the page, dropping the
//   oldest spans;
// - follow / pause: pausing closes the stream (nothing is buffered) and
//   stops scrolling; following again resumes from where it stopped, the
//   server skipping ahead (and saying how much) if the guest printed a lot;
// - scrolls to the bottom while following, unless the reader scrolled up.
(function () {
  "use strict";
  function start() {
    var pre = document.getElementById("console-log");
    var toggle = document.getElementById("console-toggle");
    var state = document.getElementById("console-state");
    if (!pre || !window.EventSource) return;
    var streamURL = pre.getAttribute("data-stream");
    var offset = Number(pre.getAttribute("data-offset")) || 0;
    var keep = Number(pre.getAttribute("data-scrollback")) || 262144;
    var size = pre.textContent.length;
    var source = null;
    var following = false;

    function setState(text) {
      if (state && state.textContent !== text) state.textContent = text;
    }

    function atBottom() { return pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24; }

    // Each line is a block of its own, so appending one lays out that line
    // only, not the whole scrollback; the line still open at the end of a
    // message (cur) gets the next message's first characters.
    var cur = null;
    function add(cls, text) {
      var parts = text.split("\n");
      for (var i = 0; i < parts.length; i++) {
        var piece = i < parts.length - 1 ? parts[i] + "\n" : parts[i];
        if (piece === "") continue;
        if (!cur) {
          cur = document.createElement("div");
          pre.appendChild(cur);
        }
        var span = document.createElement("span");
        if (cls) span.className = cls;
        span.textContent = piece;
        cur.appendChild(span);
        size += piece.length;
        if (i < parts.length - 1) cur = null;
      }
    }

    function trim() {
      while (size > keep && pre.firstChild && pre.firstChild !== cur) {
        size -= pre.firstChild.textContent.length;
        pre.removeChild(pre.firstChild);
      }
    }

    // Messages are applied once per frame, however many arrive: the page
    // stays responsive while a guest floods its console.
    var queue = [];
    var queued = 0; // characters of JSON in the queue
    var scheduled = false;
    function flush() {
      scheduled = false;
      var stick = atBottom();
      for (var q = 0; q < queue.length; q++) {
        var msg = queue[q];
        if (msg.r) { cur = null; add("console-skip", "[log restarted: new boot]\n"); }
        if (msg.s > 0) { cur = null; add("console-skip", "[… " + msg.s + " bytes skipped: see the download …]\n"); }
        if (msg.dropped) { cur = null; add("console-skip", "[… output skipped while the page was hidden: see the download …]\n"); }
        var segs = msg.g || [];
        for (var i = 0; i < segs.length; i++) add(segs[i].c || "", segs[i].t || "");
      }
      queue = [];
      queued = 0;
      trim();
      if (stick) pre.scrollTop = pre.scrollHeight;
    }

    function onMessage(ev) {
      var msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      offset = msg.o;
      queue.push(msg);
      msg.n = ev.data.length;
      queued += msg.n;
      // A hidden tab draws no frames: keep about a scrollback's worth.
      while (queued > 2 * keep && queue.length > 1) {
        queued -= queue.shift().n;
        queue[0].dropped = true;
      }
      if (!scheduled) {
        scheduled = true;
        if (document.hidden) setTimeout(flush, 1000);
        else requestAnimationFrame(flush);
      }
    }

    function follow() {
      if (source) source.close();
      source = new EventSource(streamURL + "?from=" + encodeURIComponent(offset));
      source.addEventListener("console", onMessage);
      source.addEventListener("open", function () { setState("live"); });
      source.addEventListener("error", function () { setState(source && source.readyState === 2 ? "disconnected" : "reconnecting…"); });
      following = true;
      pre.setAttribute("data-following", "true");
      if (toggle) { toggle.textContent = "Pause"; toggle.setAttribute("aria-pressed", "false"); }
      setState("connecting…");
      pre.scrollTop = pre.scrollHeight;
    }

    function pause() {
      if (source) source.close();
      if (queue.length) flush();
      source = null;
      following = false;
      pre.setAttribute("data-following", "false");
      if (toggle) { toggle.textContent = "Follow"; toggle.setAttribute("aria-pressed", "true"); }
      setState("paused");
    }

    if (toggle) {
      toggle.hidden = false;
      toggle.addEventListener("click", function () { if (following) pause(); else follow(); });
    }
    window.addEventListener("pagehide", function () { if (source) source.close(); });
    follow();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
