// terminal.js: the instance page's terminal, a shell in the guest.
// - "Open terminal" loads xterm.js, its fit addon and its CSS (files of
//   /assets, vendored from npm: nothing from another origin), posts
//   /instances/NAME/terminal with the page's CSRF token and the terminal's
//   size, then connects the two websockets the answer names: the PTY's
//   bytes (LXD's fd 0) and the control socket, which carries LXD's
//   window-resize messages whenever the terminal's box changes size;
// - the data socket's last message is the shell's exit code, shown in the
//   terminal and in the panel's status;
// - "Close terminal" closes both sockets (the agent then ends the shell);
// - the focus goes into the terminal when it opens; Tab and Escape belong
//   to the shell, Ctrl+] moves the focus out (to "Close terminal").
// xterm's DOM renderer writes the CSS it computes (cell sizes, the theme's
// colours) into <style> elements, which the dashboard's Content-Security-
// Policy (style-src 'self') refuses: while a terminal is open, the <style>
// elements the page's scripts create are stand-ins whose CSS goes into
// constructed style sheets (document.adoptedStyleSheets), which a script of
// this origin may set as it may set element.style. The policy is unchanged.
(function () {
  "use strict";

  var loading = null;
  function addScript(src) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = function () { reject(new Error("could not load " + src)); };
      document.head.appendChild(s);
    });
  }
  // load brings xterm.js and its fit addon in, once.
  function load() {
    if (!loading) {
      var css = document.createElement("link");
      css.rel = "stylesheet";
      css.href = "/assets/xterm.css";
      document.head.appendChild(css);
      loading = addScript("/assets/xterm.js").then(function () { return addScript("/assets/xterm-addon-fit.js"); });
    }
    return loading;
  }

  // constructedStyles makes document.createElement("style") return a
  // hidden stand-in whose text and rules live in a constructed sheet.
  var constructed = false;
  function constructedStyles() {
    if (constructed) return;
    constructed = true;
    var create = document.createElement;
    document.createElement = function (tag, options) {
      if (String(tag).toLowerCase() !== "style") return create.call(document, tag, options);
      var el = create.call(document, "span", options);
      el.hidden = true;
      var sheet = new CSSStyleSheet();
      var text = "";
      document.adoptedStyleSheets = document.adoptedStyleSheets.concat([sheet]);
      var css = {
        get: function () { return text; },
        set: function (v) { text = String(v); sheet.replaceSync(text); },
      };
      Object.defineProperty(el, "textContent", css);
      Object.defineProperty(el, "innerText", css);
      Object.defineProperty(el, "sheet", { get: function () { return sheet; } });
      var remove = el.remove;
      el.remove = function () {
        document.adoptedStyleSheets = document.adoptedStyleSheets.filter(function (s) { return s !== sheet; });
        remove.call(el);
      };
      return el;
    };
  }

  function csrf() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  }

  function start() {
    var openBtn = document.getElementById("terminal-open");
    var closeBtn = document.getElementById("terminal-close");
    var box = document.getElementById("terminal");
    var state = document.getElementById("terminal-state");
    var nojs = document.getElementById("terminal-nojs");
    if (!openBtn || !closeBtn || !box || !window.WebSocket) return;
    if (nojs) nojs.hidden = true;
    openBtn.hidden = false;

    var term = null, fit = null, data = null, control = null, resizer = null, ended = true;

    function setState(text, value) {
      state.textContent = text;
      state.setAttribute("data-value", value);
    }

    // finish ends the session on the page: the sockets closed, the last
    // screen kept for reading, the open button back.
    function finish(text, value) {
      if (ended) return;
      ended = true;
      if (data) data.close();
      if (control) control.close();
      if (resizer) resizer.disconnect();
      setState(text, value);
      closeBtn.hidden = true;
      openBtn.hidden = false;
      openBtn.disabled = false;
      openBtn.textContent = "Open a new terminal";
      if (box.contains(document.activeElement)) openBtn.focus();
    }

    // showSize keeps the terminal's size on its box (data-cols, data-rows).
    function showSize() {
      box.setAttribute("data-cols", String(term.cols));
      box.setAttribute("data-rows", String(term.rows));
    }

    function sendResize(cols, rows) {
      if (control && control.readyState === WebSocket.OPEN) {
        control.send(JSON.stringify({ command: "window-resize", args: { width: String(cols), height: String(rows) } }));
      }
    }

    function connect(info) {
      var origin = (location.protocol === "https:" ? "wss://" : "ws://") + location.host;
      var enc = new TextEncoder();
      data = new WebSocket(origin + info.data);
      data.binaryType = "arraybuffer";
      control = new WebSocket(origin + info.control);
      control.onopen = function () { sendResize(term.cols, term.rows); };
      data.onopen = function () {
        setState("Connected: a shell in the guest.", "connected");
        term.focus();
      };
      data.onmessage = function (ev) {
        if (typeof ev.data !== "string") {
          term.write(new Uint8Array(ev.data));
          return;
        }
        var end = {};
        try { end = JSON.parse(ev.data); } catch (e) { end = { error: "an unreadable end message" }; }
        if (typeof end.exit === "number") {
          term.write("\r\n[the shell exited with code " + end.exit + "]\r\n");
          finish("The shell exited with code " + end.exit + ".", "exit:" + end.exit);
        } else {
          term.write("\r\n[the terminal ended: " + end.error + "]\r\n");
          finish("The terminal ended: " + end.error, "error");
        }
      };
      data.onclose = function () { finish("The terminal's connection closed.", "closed"); };
      term.onData(function (s) {
        if (data.readyState === WebSocket.OPEN) data.send(enc.encode(s));
      });
      term.onBinary(function (s) {
        if (data.readyState !== WebSocket.OPEN) return;
        var b = new Uint8Array(s.length);
        for (var i = 0; i < s.length; i++) b[i] = s.charCodeAt(i) & 255;
        data.send(b);
      });
      term.onResize(function (size) {
        showSize();
        sendResize(size.cols, size.rows);
      });
      resizer = new ResizeObserver(function () { if (!ended) fit.fit(); });
      resizer.observe(box);
    }

    function open() {
      openBtn.disabled = true;
      ended = false;
      setState("Opening…", "opening");
      load().then(function () {
        constructedStyles();
        if (term) term.dispose();
        box.hidden = false;
        term = new window.Terminal({ cursorBlink: true, fontSize: 13, fontFamily: "ui-monospace, SFMono-Regular, Menlo, monospace", scrollback: 5000 });
        var Fit = window.FitAddon && (window.FitAddon.FitAddon || window.FitAddon);
        fit = new Fit();
        term.loadAddon(fit);
        term.open(box);
        fit.fit();
        showSize();
        term.textarea.setAttribute("aria-describedby", "terminal-help");
        term.attachCustomKeyEventHandler(function (ev) {
          if (ev.type === "keydown" && ev.ctrlKey && !ev.altKey && !ev.metaKey && (ev.key === "]" || ev.code === "BracketRight")) {
            closeBtn.focus();
            return false;
          }
          return true;
        });
        var body = new URLSearchParams({ _csrf: csrf(), cols: String(term.cols), rows: String(term.rows) });
        return fetch(openBtn.getAttribute("data-open"), {
          method: "POST", credentials: "same-origin", body: body,
          headers: { "X-CSRF-Token": csrf(), "Content-Type": "application/x-www-form-urlencoded" },
        });
      }).then(function (res) {
        if (!res.ok) return res.text().then(function (t) { throw new Error(t.trim() || res.statusText); });
        return res.json();
      }).then(function (info) {
        openBtn.hidden = true;
        closeBtn.hidden = false;
        connect(info);
      }).catch(function (e) {
        finish("The terminal could not open: " + e.message, "error");
      });
    }

    openBtn.addEventListener("click", open);
    closeBtn.addEventListener("click", function () {
      if (term) term.write("\r\n[closed]\r\n");
      finish("Closed: the shell was ended.", "closed");
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
