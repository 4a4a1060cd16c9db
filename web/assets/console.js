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

    function add(cls, text) {
      var span = document.createElement("span");
      if (cls) span.className = cls;
      span.textContent = text;
      pre.appendChild(span);
      size += text.length;
    }

    function trim() {
      while (size > keep && pre.firstChild) {
        size -= pre.firstChild.textContent.length;
        pre.removeChild(pre.firstChild);
      }
    }

    function onMessage(ev) {
      var msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      var stick = atBottom();
      if (msg.r) add("console-skip", "\n[log restarted: new boot]\n");
      if (msg.s > 0) add("console-skip", "\n[… " + msg.s + " bytes skipped: see the download …]\n");
      var segs = msg.g || [];
      for (var i = 0; i < segs.length; i++) add(segs[i].c || "", segs[i].t || "");
      offset = msg.o;
      trim();
      if (stick) pre.scrollTop = pre.scrollHeight;
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
