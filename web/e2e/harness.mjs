// Test harness for the dashboard's browser tests: a real guestlinkd (built
// by `make build`) on a private state directory and a free localhost port,
// the real CLI, and Debian's Chromium driven by playwright-core. The
// dashboard needs a session: the harness signs in with the one-time login
// URL guestlinkd prints at start (`dashboard login URL`), or a fresh one
// from `guestlink dashboard --print-url`.
import assert from "node:assert/strict";
import { spawn, execFile } from "node:child_process";
import { mkdtempSync, mkdirSync, existsSync, rmSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium } from "playwright-core";

const run = promisify(execFile);
export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
// GUESTLINK_BIN points at a private copy of bin/ (other builds in the same
// tree then cannot replace binaries under a running test); default bin/.
export const binDir = process.env.GUESTLINK_BIN ? resolve(process.env.GUESTLINK_BIN) : join(root, "bin");
const bin = (name) => join(binDir, name);

// Screenshots go outside the tree unless asked for: `make screenshots` sets
// GUESTLINK_SCREENSHOTS=docs to regenerate the committed docs/dashboard-*.png
// on purpose; a plain `npm test` leaves the tree as it was.
export const shotDir = process.env.GUESTLINK_SCREENSHOTS
  ? resolve(root, process.env.GUESTLINK_SCREENSHOTS)
  : join(tmpdir(), "guestlink-screenshots");
mkdirSync(shotDir, { recursive: true });
/** shot returns the path of a screenshot named name (dashboard-*.png). */
export const shot = (name) => join(shotDir, name);

/** The cookie holding the dashboard session. */
export const SESSION_COOKIE = "guestlink_session";

export const CHROMIUM_FLAGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
];

/** freePort returns a free port on 127.0.0.1. */
export async function freePort() {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
    srv.on("error", rej);
  });
}

/** logTail returns the last lines the running test daemon logged. */
export function logTail(lines = 40) {
  const d = Daemon.current;
  if (!d) return "";
  const text = d.log.join("").split("\n").slice(-lines).join("\n");
  return `\n--- guestlinkd log tail (${d.stateDir}) ---\n${text}`;
}

/**
 * waitFor polls fn until it returns a truthy value, and fails with what it
 * waited for, the last error and the daemon's log tail after timeout ms.
 */
export async function waitFor(fn, { timeout = 30000, interval = 100, what = "condition" } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, interval));
  }
  throw new Error(`timed out after ${timeout} ms waiting for ${typeof what === "function" ? what() : what}${last ? ": " + last.message : ""}${logTail()}`);
}

/** Daemon is a running guestlinkd with its own state directory. */
export class Daemon {
  /** start runs guestlinkd on a fresh state directory, with extra flags. */
  static async start(extra = []) {
    for (const b of ["guestlinkd", "guestlink", "guestlink-agent", "plugins/sim"]) {
      if (!existsSync(bin(b))) throw new Error(`${bin(b)} is missing: run make build first (or point GUESTLINK_BIN at a built bin/)`);
    }
    const d = new Daemon();
    d.extra = extra;
    Daemon.current = d;
    d.stateDir = mkdtempSync(join(tmpdir(), "guestlink-e2e-"));
    d.port = await freePort();
    d.url = `http://127.0.0.1:${d.port}`;
    d.log = [];
    d.logText = "";
    await d.spawn();
    return d;
  }

  async spawn() {
    this.proc = spawn(bin("guestlinkd"), ["--state-dir", this.stateDir, "--http", `127.0.0.1:${this.port}`, "--plugin-dir", bin("plugins"), ...(this.extra || [])], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    // Never leave the daemon behind this process.
    process.once("exit", () => this.proc.kill("SIGKILL"));
    this.startURL = null;
    const keep = (b) => {
      const text = b.toString();
      this.log.push(text);
      if (this.log.length > 500) this.log.shift();
      // The login URL guestlinkd prints once at start (one-time token).
      const m = !this.startURL && /(https?:\/\/[^\s"]+\/login\?token=[A-Za-z0-9._~%-]+)/.exec(text);
      if (m) this.startURL = m[1];
    };
    this.proc.stdout.on("data", keep);
    this.proc.stderr.on("data", keep);
    this.exited = new Promise((r) => this.proc.on("exit", (code, signal) => r({ code, signal })));
    let gone = null;
    this.exited.then((e) => { gone = e; });
    await waitFor(async () => {
      if (gone) throw new Error(`guestlinkd exited (${JSON.stringify(gone)}) before the dashboard answered`);
      // The assets are public: they answer before anyone signs in.
      return (await fetch(this.url + "/assets/app.css", { signal: AbortSignal.timeout(2000) })).ok;
    }, { what: `the dashboard at ${this.url} to answer`, timeout: 60000 });
  }

  /**
   * loginURL returns a one-time dashboard login URL on this daemon's
   * address: first the one guestlinkd printed at start, then fresh ones
   * from `guestlink dashboard --print-url`.
   */
  async loginURL() {
    let printed = this.startURL;
    this.startURL = null; // one-time: never hand it out twice
    if (!printed) {
      try {
        printed = (await this.cli("dashboard", "--print-url")).trim();
      } catch (e) {
        throw new Error(`no dashboard login URL: guestlinkd printed none at start (a "dashboard login URL" log line) and ${e.message}`);
      }
    }
    const u = new URL(printed);
    if (u.pathname !== "/login" || !u.searchParams.get("token")) throw new Error(`not a dashboard login URL: ${printed}`);
    return this.url + u.pathname + u.search;
  }

  /**
   * login signs a browser context in (its cookie jar gets the session) and
   * returns the URL it landed on.
   */
  async login(context) {
    const page = await context.newPage();
    try {
      const res = await page.goto(await this.loginURL());
      if (!res || res.status() !== 200) throw new Error(`signing in: the login URL answered ${res && res.status()}${logTail()}`);
      return page.url();
    } finally {
      await page.close();
    }
  }

  async restart() {
    this.proc.kill("SIGTERM");
    await this.exited;
    await this.spawn();
  }

  /** cli runs the guestlink CLI against this daemon and returns its stdout. */
  async cli(...args) {
    try {
      const { stdout } = await run(bin("guestlink"), args, {
        env: { ...process.env, GUESTLINK_STATE_DIR: this.stateDir },
        timeout: 120000,
      });
      return stdout;
    } catch (e) {
      throw new Error(`guestlink ${args.join(" ")} failed: ${e.message}${e.stderr ? "\n" + e.stderr : ""}${logTail()}`);
    }
  }

  /**
   * api calls the admin API over this daemon's TCP address. The TCP API
   * wants credentials: on a 401 the harness creates the bearer identity
   * bearer/e2e with the CLI (over the admin socket), issues its token and
   * sends it from then on.
   */
  async api(method, path, body) {
    const call = () => fetch(this.url + path, {
      method,
      headers: { ...(body ? { "Content-Type": "application/json" } : {}), ...(this.bearer ? { Authorization: `Bearer ${this.bearer}` } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    let res = await call();
    if (res.status === 401 && !this.bearer) {
      await this.cli("auth", "identity", "create", "bearer/e2e").catch(() => {}); // may exist already
      this.bearer = (await this.cli("auth", "identity", "token", "issue", "bearer/e2e")).trim();
      res = await call();
    }
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 2000)}`);
    return text ? JSON.parse(text) : null;
  }

  async info(name) {
    return JSON.parse(await this.cli("info", name, "--format", "json"));
  }

  /** guest runs guestlink-agent's client side inside a simulated guest. */
  async guest(name, ...args) {
    const info = await this.info(name);
    if (!info.devlxd_socket) throw new Error(`guestlink info ${name} has no devlxd_socket (is it a sim guest?)`);
    try {
      const { stdout } = await run(bin("guestlink-agent"), args, {
        env: { ...process.env, GUESTLINK_AGENT_DEVLXD_SOCKET: info.devlxd_socket },
        timeout: 60000,
      });
      return stdout;
    } catch (e) {
      throw new Error(`guestlink-agent ${args.join(" ")} in ${name} failed: ${e.message}${logTail()}`);
    }
  }

  async stop() {
    try {
      const list = JSON.parse(await this.cli("list", "--format", "json"));
      for (const i of list) await this.cli("delete", "--force", i.name).catch(() => {});
    } catch { /* daemon already gone */ }
    this.proc.kill("SIGTERM");
    const killer = setTimeout(() => this.proc.kill("SIGKILL"), 30000);
    await this.exited;
    clearTimeout(killer);
    if (Daemon.current === this) Daemon.current = null;
    rmSync(this.stateDir, { recursive: true, force: true });
  }
}

export async function browser() {
  const exe = process.env.CHROMIUM || "/usr/bin/chromium";
  if (!existsSync(exe)) throw new Error(`${exe} is missing: install Debian's chromium (make deps) or set CHROMIUM`);
  return chromium.launch({ executablePath: exe, args: CHROMIUM_FLAGS, timeout: 60000 });
}

/** sessionHeader returns a Cookie header carrying a context's session. */
export async function sessionHeader(context) {
  const c = (await context.cookies()).find((c) => c.name === SESSION_COOKIE);
  if (!c) throw new Error("the browser context has no dashboard session");
  return `${c.name}=${c.value}`;
}

/**
 * streamIDs reads the dashboard's own stream from since (with the session
 * cookie) and returns the ids of the update messages up to and including
 * until: the authoritative list of lifecycle events a page resuming from
 * since must apply.
 */
export async function streamIDs(url, cookie, since, until, timeout = 20000) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeout);
  const ids = [];
  try {
    const res = await fetch(`${url}/events?since=${since}`, { signal: ctrl.signal, headers: { Cookie: cookie } });
    if (res.status !== 200) throw new Error(`GET /events: ${res.status} ${await res.text()}`);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    while (ids[ids.length - 1] !== until) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let k;
      while ((k = buf.indexOf("\n\n")) >= 0) {
        const msg = buf.slice(0, k);
        buf = buf.slice(k + 2);
        const id = /^id: (\d+)$/m.exec(msg);
        if (msg.startsWith("event: update") && id) ids.push(Number(id[1]));
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") throw e;
  } finally {
    clearTimeout(timer);
    ctrl.abort();
  }
  return ids;
}

const axeSource = readFileSync(join(root, "node_modules", "axe-core", "axe.min.js"), "utf8");

/**
 * axeViolations runs axe-core (npm, pinned in package.json) in the page and
 * returns its serious and critical violations, each as "rule: target
 * (summary)". axe is injected through the DevTools protocol (evaluate), so
 * the page keeps its Content-Security-Policy: nothing is inlined.
 */
export async function axeViolations(page) {
  if (!(await page.evaluate(() => typeof window.axe === "object"))) await page.evaluate(axeSource);
  const result = await page.evaluate(() => window.axe.run(document, {
    runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"] },
    resultTypes: ["violations"],
  }));
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .flatMap((v) => v.nodes.map((n) => `${v.id} (${v.impact}): ${n.target.join(" ")}: ${n.failureSummary.replace(/\s+/g, " ")}`));
}

// cspWatch collects what a page's Content-Security-Policy blocked and the
// page's script errors: htmx, its SSE extension, live.js and xterm.js must
// run under the policy untouched.
export function cspWatch(page) {
  const problems = [];
  page.on("console", (m) => { if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text()); });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  return problems;
}

// tabTo presses Tab until the element matching selector has the focus: it
// is reachable from the keyboard, in the page's order.
export async function tabTo(page, selector) {
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  for (let i = 0; i < 80; i++) {
    await page.keyboard.press("Tab");
    if (await page.evaluate((sel) => document.activeElement === document.querySelector(sel), selector)) return;
  }
  assert.fail(`${selector} cannot be reached with the Tab key`);
}
