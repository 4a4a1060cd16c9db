// Browser end-to-end tests of the dashboard: a real daemon, real simulated
// guests running the real agent, and Debian's Chromium. The tests run in
// order: the first signs in with the daemon's login URL, the others use
// that signed-in browser context, the last signs out.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Daemon, browser, waitFor, streamIDs, shot, sessionHeader, axeViolations, SESSION_COOKIE, cspWatch, tabTo } from "./harness.mjs";

const run = promisify(execFile);

let daemon;
let chrome;
let ctx; // the signed-in browser context

before(async () => {
  daemon = await Daemon.start();
  chrome = await browser();
});

after(async () => {
  await chrome?.close();
  await daemon?.stop();
});

const badge = (page, id) => page.locator(`#${id}`).getAttribute("data-value");

function signedIn() {
  assert.ok(ctx, "the login test signs the browser in first");
  return ctx;
}

test("the login URL signs in once, with an HttpOnly SameSite=Strict cookie", async () => {
  const browserCtx = await chrome.newContext();
  const page = await browserCtx.newPage();
  const problems = cspWatch(page);

  // No session: every page is the login page, which says how to get in.
  for (const path of ["/", "/instances", "/instances/nope"]) {
    const res = await page.goto(daemon.url + path);
    assert.equal(res.status(), 401, `GET ${path} without a session (200: guestlinkd does not wire web.Config.Sessions)`);
    await page.waitForSelector('[data-testid="login-page"]');
    assert.match(await page.textContent('[data-testid="login-command"]'), /guestlink dashboard/);
    assert.equal(await page.locator('[data-testid="instances-table"]').count(), 0, "no data without a session");
  }
  await page.screenshot({ path: shot("dashboard-login.png"), fullPage: true });

  // The login URL: lands on the overview, token gone from the address bar.
  const url = await daemon.loginURL();
  const res = await page.goto(url);
  assert.equal(res.status(), 200);
  assert.equal(page.url(), daemon.url + "/", "redirected to / with no token in the URL");
  await waitFor(async () => (await page.getAttribute("#live-indicator", "data-state")) === "connected", { what: "the live indicator after signing in" });
  assert.match(await page.textContent('[data-testid="who"]'), /^session\/.{8}$/);

  const cookie = (await browserCtx.cookies()).find((c) => c.name === SESSION_COOKIE);
  assert.ok(cookie, "a session cookie is set");
  assert.equal(cookie.httpOnly, true, "HttpOnly");
  assert.equal(cookie.sameSite, "Strict", "SameSite=Strict");
  assert.equal(cookie.path, "/");
  assert.ok(cookie.expires > Date.now() / 1000, "the cookie expires with the session, not with the browser");
  assert.equal(await page.evaluate(() => document.cookie.includes("guestlink_session")), false, "scripts cannot read the session");

  // The same URL again, in another browser: refused.
  const other = await chrome.newContext();
  const again = await other.newPage();
  const reused = await again.goto(url);
  assert.equal(reused.status(), 401);
  assert.match(await again.textContent('[data-testid="login-error"]'), /already used/);
  assert.equal((await other.cookies()).some((c) => c.name === SESSION_COOKIE), false);
  await other.close();

  assert.deepEqual(problems, [], "no Content-Security-Policy violation or script error");
  await page.close();
  ctx = browserCtx;
});

test("a guest goes connected then Ready live, and stops from its page", async () => {
  const page = await signedIn().newPage();
  const problems = cspWatch(page);
  await page.goto(daemon.url + "/instances");
  await waitFor(async () => (await page.getAttribute("#live-indicator", "data-state")) === "connected", { what: "the live indicator" });

  await daemon.cli("launch", "web1", "--backend", "sim", "-c", "user.role=frontend");
  // The new row appears and its agent badge reaches "connected" with no reload.
  await waitFor(async () => (await badge(page, "agent-web1")) === "connected", { timeout: 60000, what: "agent badge connected" });
  assert.equal(await badge(page, "status-web1"), "Running");

  await daemon.guest("web1", "ready");
  await waitFor(async () => (await badge(page, "status-web1")) === "Ready", { what: "status badge Ready" });

  assert.equal(await page.locator('[data-testid="no-instances"]').isVisible(), false, "the empty-table note hides once a row arrives");
  await waitFor(async () => (await page.textContent('[data-testid="total"]')) === "1 instance", { what: "the row count to follow the live rows" });
  await page.screenshot({ path: shot("dashboard-instances.png"), fullPage: true });
  await page.emulateMedia({ colorScheme: "dark" });
  await page.screenshot({ path: shot("dashboard-instances-dark.png"), fullPage: true });
  await page.emulateMedia({ colorScheme: "light" });

  await page.click('a[href="/instances/web1"]');
  await page.waitForSelector('[data-testid="timeline"]');
  assert.equal(await badge(page, "istatus-web1"), "Ready");
  const kinds = await page.locator('[data-testid="timeline-entry"]').evaluateAll((els) => els.map((e) => e.dataset.kind + ":" + e.dataset.to));
  assert.ok(kinds.includes("ready:true"), `timeline shows the Ready change: ${kinds}`);
  await page.screenshot({ path: shot("dashboard-instance.png"), fullPage: true });

  await page.click('[data-testid="action-stop"]');
  await page.waitForLoadState();
  await waitFor(async () => (await badge(page, "istatus-web1")) === "Stopped", { timeout: 60000, what: "status Stopped" });
  const outcome = await page.locator('[data-testid="outcome"]').first().getAttribute("data-ok");
  assert.equal(outcome, "true");
  // The recent activity says who did it: this dashboard session.
  const who = await page.textContent('[data-testid="who"]');
  await page.goto(daemon.url + "/");
  const acts = await page.locator('[data-testid="activity-item"]').evaluateAll((els) => els.map((e) => e.textContent.replace(/\s+/g, " ").trim()));
  assert.ok(acts.some((a) => a.includes("web1 stopped by dashboard " + who)), `the activity names the session ${who}: ${JSON.stringify(acts)}`);
  assert.deepEqual(problems, [], "no Content-Security-Policy violation or script error");
  await page.close();
});

test("the console shows a line the guest prints after the page opened, live, with pause and download", async () => {
  // The guest prints what the test writes to a FIFO: output the guest
  // itself produces (its stdout is the sim console) when the test decides.
  const dir = mkdtempSync(join(tmpdir(), "guestlink-e2e-say-"));
  const fifo = join(dir, "say");
  await run("mkfifo", [fifo]);
  try {
    const cmd = `printf '\\033[1;32mguest booting\\033[0m\\n'; "$GUESTLINK_AGENT" run & while :; do cat '${fifo}'; done`;
    await daemon.cli("launch", "con1", "--backend", "sim", "-c", `sim.command=${cmd}`);
    const page = await signedIn().newPage();
    const problems = cspWatch(page);
    await page.goto(daemon.url + "/instances/con1");
    const log = page.locator('[data-testid="console"]');
    await waitFor(async () => (await page.textContent('[data-testid="console-state"]')) === "live", { what: "the console stream to open" });
    await waitFor(async () => (await log.textContent()).includes("guest booting"), { what: "the boot line in the console" });
    assert.equal(await log.locator(".ansi-fg-2.ansi-bold").first().textContent(), "guest booting", "ANSI green bold as classes");
    assert.ok(!(await log.textContent()).includes("\u001b"), "no raw escape in the page");
    await page.evaluate(() => { window.__notReloaded = true; });

    const line = `printed after the page opened <b>${Date.now()}</b>`;
    await writeFile(fifo, line + "\n");
    await waitFor(async () => (await log.textContent()).includes(line), { what: "the new guest line in the console" });
    assert.equal(await page.evaluate(() => window.__notReloaded), true, "shown without a reload");
    assert.equal(await log.locator("b").count(), 0, "guest bytes are text, never markup");
    await page.screenshot({ path: shot("dashboard-console.png"), fullPage: true });

    // The boot chart gains the Ready bar when the guest declares Ready.
    const chart = page.locator('[data-testid="boot-chart"]');
    assert.equal(await chart.locator('rect[data-phase="ready"]').count(), 0, "no Ready bar before Ready");
    assert.match(await chart.locator('[data-testid="boot-summary"]').first().textContent(), /not Ready yet/);
    await daemon.guest("con1", "ready");
    await waitFor(async () => (await chart.locator('rect[data-phase="ready"]').count()) === 1, { what: "the Ready bar in the boot chart" });
    assert.match(await page.locator('[data-testid="boot-chart"] [data-testid="boot-summary"]').first().textContent(), /✓ Ready in /);
    assert.equal(await page.evaluate(() => window.__notReloaded), true, "the chart updated without a reload");
    await page.locator('[data-testid="boot-chart"]').screenshot({ path: shot("dashboard-boot-chart.png") });

    // Pause (from the keyboard: Tab reaches the button, Enter presses it),
    // let the guest print, follow again: the line arrives once.
    await tabTo(page, '[data-testid="console-toggle"]');
    await page.keyboard.press("Enter");
    assert.equal(await page.textContent('[data-testid="console-state"]'), "paused");
    assert.equal(await page.getAttribute('[data-testid="console-toggle"]', "aria-pressed"), "true");
    await writeFile(fifo, "printed while paused\n");
    await page.click('[data-testid="console-toggle"]');
    await waitFor(async () => (await log.textContent()).includes("printed while paused"), { what: "the line printed while paused, after follow" });
    assert.equal((await log.textContent()).split("printed while paused").length, 2, "the paused line shown once");

    const href = await page.getAttribute('[data-testid="console-download"]', "href");
    const res = await page.request.get(daemon.url + href);
    assert.equal(res.status(), 200);
    assert.match(res.headers()["content-disposition"], /attachment; filename="con1-console.log"/);
    const body = await res.text();
    assert.ok(body.includes(line) && body.includes("\u001b[1;32mguest booting"), "the download is the log as the guest wrote it");
    assert.deepEqual(problems, [], "no Content-Security-Policy violation or script error");
    await page.close();
    await daemon.cli("delete", "--force", "con1");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a guest launched from the form appears in the list and becomes Ready; delete asks first", async () => {
  const page = await signedIn().newPage();
  const problems = cspWatch(page);
  await page.goto(daemon.url + "/instances");
  await page.click('nav a[href="/launch"]');
  await page.waitForSelector('[data-testid="launch-form"]');

  // A refused launch: the error is next to its field, what was typed stays.
  await page.fill("#launch-name", "bad_name");
  await page.fill("#launch-config", "user.origin=form");
  await page.click('[data-testid="launch-submit"]');
  await page.waitForSelector('[data-testid="launch-name-error"]');
  assert.equal(await page.getAttribute("#launch-name", "aria-invalid"), "true");
  assert.equal(await page.inputValue("#launch-config"), "user.origin=form");
  assert.deepEqual(await axeViolations(page), [], "axe on the launch form with an error");
  await page.screenshot({ path: shot("dashboard-launch.png"), fullPage: true });

  await page.fill("#launch-name", "form1");
  await page.selectOption("#launch-backend", "sim");
  await tabTo(page, '[data-testid="launch-submit"]');
  await page.keyboard.press("Enter");
  await page.waitForURL(daemon.url + "/instances/form1");
  assert.equal(await page.textContent('[data-testid="instance-name"]'), "form1");
  assert.equal(await page.locator('[data-testid="config"] [data-key="user.origin"] td').textContent(), "form");

  const list = await signedIn().newPage();
  await list.goto(daemon.url + "/instances");
  assert.equal(await list.locator('[data-testid="instance-row"][data-name="form1"]').count(), 1, "the launched guest is in the list");
  await waitFor(async () => (await badge(list, "agent-form1")) === "connected", { timeout: 60000, what: "form1's agent to connect" });
  await daemon.guest("form1", "ready");
  await waitFor(async () => (await badge(list, "status-form1")) === "Ready", { what: "form1 Ready in the list, live" });
  await list.close();

  // Edit the guest config from the page.
  await page.reload();
  await page.click('[data-testid="config-edit"] summary');
  await page.fill("#config-new-key", "user.zone");
  await page.fill("#config-new-value", "eu-1");
  await page.click('[data-testid="config-submit"]');
  await page.waitForSelector('[data-testid="config"] [data-key="user.zone"]');
  assert.equal(await page.locator('[data-testid="outcome"]').first().getAttribute("data-ok"), "true");
  assert.equal((await daemon.info("form1")).config["user.zone"], "eu-1", "the change reached the daemon");

  // Delete: a confirmation page first, then the list with the outcome.
  await page.click('[data-testid="action-delete"]');
  await page.waitForSelector('[data-testid="delete-form"]');
  assert.deepEqual(await axeViolations(page), [], "axe on the delete confirmation");
  await page.fill("#delete-confirm", "form1");
  await page.check("#delete-force");
  await page.click('[data-testid="delete-submit"]');
  await page.waitForSelector('[data-testid="outcome"][data-name="form1"][data-ok="true"]');
  assert.equal(await page.locator('[data-testid="instance-row"][data-name="form1"]').count(), 0, "gone from the list");
  assert.deepEqual(problems, [], "no Content-Security-Policy violation or script error");
  await page.close();
});

test("axe-core finds no serious or critical violation on any page, light and dark", async () => {
  await daemon.cli("launch", "axe1", "--backend", "sim", "-c", "user.role=web");
  await waitFor(async () => (await daemon.info("axe1")).agent?.state === "connected", { timeout: 60000, what: "axe1's agent" });
  await daemon.guest("axe1", "ready");
  const found = [];
  for (const scheme of ["light", "dark"]) {
    const anon = await chrome.newContext({ colorScheme: scheme });
    const login = await anon.newPage();
    await login.goto(daemon.url + "/");
    await login.waitForSelector('[data-testid="login-page"]');
    found.push(...(await axeViolations(login)).map((v) => `${scheme} login: ${v}`));
    await anon.close();

    const page = await signedIn().newPage();
    await page.emulateMedia({ colorScheme: scheme });
    for (const path of ["/", "/instances", "/instances/axe1", "/launch", "/instances/axe1/delete"]) {
      await page.goto(daemon.url + path);
      await waitFor(async () => (await page.getAttribute("#live-indicator", "data-state")) === "connected", { what: `the live indicator on ${path}` });
      if (path === "/instances/axe1") {
        await waitFor(async () => (await page.textContent('[data-testid="console-state"]')) === "live", { what: "the console stream" });
        await page.click('[data-testid="config-edit"] summary');
      }
      found.push(...(await axeViolations(page)).map((v) => `${scheme} ${path}: ${v}`));
    }
    if (scheme === "dark") await page.goto(daemon.url + "/instances/axe1"), await page.screenshot({ path: shot("dashboard-instance-dark.png"), fullPage: true });
    await page.close();
  }
  await daemon.cli("delete", "--force", "axe1");
  assert.deepEqual(found, [], "serious or critical accessibility violations");
});

test("after the stream drops, the page resumes and misses nothing", async () => {
  await daemon.cli("launch", "web2", "--backend", "sim");
  const page = await signedIn().newPage();
  await page.goto(daemon.url + "/");
  await waitFor(async () => (await page.getAttribute("#live-indicator", "data-state")) === "connected", { what: "the live indicator" });

  // Drop the stream the way a sleeping laptop or a proxy would, and hold
  // the reconnect while events happen.
  await page.evaluate(() => window.guestlinkLive.drop(3000));
  assert.equal(await page.getAttribute("#live-indicator", "data-state"), "reconnecting");
  const before = Number(await page.getAttribute("body", "data-last-event-id"));
  await daemon.cli("stop", "web2", "--force");
  await daemon.cli("start", "web2");

  await waitFor(async () => (await page.getAttribute("#live-indicator", "data-state")) === "connected", { timeout: 30000, what: "reconnection" });
  // Every event since the drop arrives, in order, with no gap and no
  // duplicate: the page's activity list holds exactly the update ids the
  // stream itself gives from the same point.
  let seen = {};
  await waitFor(async () => {
    const ids = (await page.locator('[data-testid="activity-item"]').evaluateAll((els) => els.map((e) => Number(e.dataset.eventId))))
      .filter((id) => id > before).sort((a, b) => a - b);
    const last = Number(await page.getAttribute("body", "data-last-event-id"));
    seen = { before, last, ids };
    return ids.length >= 2 && ids[ids.length - 1] === last;
  }, { what: () => `the events missed while disconnected to appear (${JSON.stringify(seen)})` });
  const want = await streamIDs(daemon.url, await sessionHeader(signedIn()), before, seen.last);
  assert.deepEqual(seen.ids, want, "the page applied every event after the drop, once each");
  // The reconnected stream keeps the page's scope (what the overview shows).
  assert.match(await page.getAttribute("body", "sse-connect"), /^\/events\?since=\d+&view=overview(&|$)/, "the stream after the drop is the overview's");
  // The counts follow too (they come a second after a burst of events).
  await waitFor(async () => (await page.getAttribute('[data-testid="agent-counts"] [data-label="connected"]', "data-n")) === "1" &&
    (await page.getAttribute('[data-testid="status-counts"] [data-label="Running"]', "data-n")) === "1",
    { what: "the overview counts to show web2 running with its agent connected" });
  await page.screenshot({ path: shot("dashboard-overview.png"), fullPage: true });
  await page.close();
});

test("actions work as plain forms without JavaScript", async () => {
  await daemon.cli("launch", "web3", "--backend", "sim");
  const noJS = await chrome.newContext({ javaScriptEnabled: false });
  await noJS.addCookies(await signedIn().cookies());
  const page = await noJS.newPage();
  await page.goto(daemon.url + "/instances?q=web3");
  await page.check('input[name="names"][value="web3"]');
  await page.click('[data-testid="bulk-force-stop"]');
  await page.waitForSelector('[data-testid="outcome"]');
  assert.equal(await page.locator('[data-testid="outcome"][data-name="web3"]').getAttribute("data-ok"), "true");
  const info = await daemon.info("web3");
  assert.equal(info.status, "Stopped");
  await noJS.close();
});

test("a post without a session, a cross-site post and a post without the token are refused", async () => {
  const post = (headers) => fetch(daemon.url + "/instances/actions", {
    method: "POST",
    redirect: "manual",
    headers: { "Content-Type": "application/x-www-form-urlencoded", ...headers },
    body: "action=stop&names=web1",
  });
  const cookie = await sessionHeader(signedIn());
  assert.equal((await post({})).status, 401, "no session");
  assert.equal((await post({ Cookie: cookie, "Sec-Fetch-Site": "cross-site" })).status, 403, "cross-site");
  assert.equal((await post({ Cookie: cookie })).status, 403, "no CSRF token");
  const stream = await fetch(daemon.url + "/events", { headers: { Accept: "text/event-stream" } });
  assert.equal(stream.status, 401, "no live stream without a session");
});

test("Log out ends the session, and its other open pages go to the login page", async () => {
  const page = await signedIn().newPage();
  const other = await signedIn().newPage();
  await page.goto(daemon.url + "/instances");
  await other.goto(daemon.url + "/");
  for (const p of [page, other]) {
    await waitFor(async () => (await p.getAttribute("#live-indicator", "data-state")) === "connected", { what: "the live indicator" });
  }
  const cookie = await sessionHeader(signedIn());
  await page.click('[data-testid="logout"]');
  await page.waitForSelector('[data-testid="login-page"]');
  assert.equal(new URL(page.url()).pathname, "/login");
  assert.equal(await page.textContent('[data-testid="login-notice"]'), "You are signed out.");
  assert.equal((await signedIn().cookies()).some((c) => c.name === SESSION_COOKIE && c.value), false, "the cookie is cleared");
  // The old cookie, replayed, opens nothing.
  const res = await fetch(daemon.url + "/", { headers: { Cookie: cookie, Accept: "text/html" } });
  assert.equal(res.status, 401);
  // The other page's live stream ends at its next heartbeat; the page
  // then finds the session gone and shows the login page.
  await other.waitForSelector('[data-testid="login-page"]', { timeout: 45000 });
  assert.match(await other.textContent('[data-testid="login-notice"]'), /session has ended/);
  await page.close();
  await other.close();
});

test("a login link followed from another site asks for a click, then signs in", async () => {
  // A fresh one-time URL: the daemon prints one at each start.
  await daemon.restart();
  const url = await daemon.loginURL();
  const browserCtx = await chrome.newContext();
  const page = await browserCtx.newPage();
  // A page of no origin of ours links to the login URL (a chat, a mail).
  await page.setContent(`<a id="go" href="${url}">dashboard</a>`);
  await page.click("#go");
  await page.waitForSelector('[data-testid="login-confirm"]');
  assert.equal((await browserCtx.cookies()).some((c) => c.name === SESSION_COOKIE), false, "not signed in by another site's link alone");
  await page.click('[data-testid="login-confirm"] button');
  await page.waitForURL(daemon.url + "/");
  await waitFor(async () => (await page.getAttribute("#live-indicator", "data-state")) === "connected", { what: "the live indicator after confirming" });
  assert.match(await page.textContent('[data-testid="who"]'), /^session\//);
  await browserCtx.close();
});
