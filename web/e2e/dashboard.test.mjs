// Browser end-to-end tests of the dashboard: a real daemon, real simulated
// guests running the real agent, and Debian's Chromium.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { Daemon, browser, waitFor, root, streamIDs } from "./harness.mjs";

let daemon;
let chrome;

before(async () => {
  daemon = await Daemon.start();
  chrome = await browser();
});

after(async () => {
  await chrome?.close();
  await daemon?.stop();
});

const badge = (page, id) => page.locator(`#${id}`).getAttribute("data-value");

test("a guest goes connected then Ready live, and stops from its page", async () => {
  const page = await chrome.newPage();
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
  await page.screenshot({ path: join(root, "docs", "dashboard-instances.png"), fullPage: true });
  await page.emulateMedia({ colorScheme: "dark" });
  await page.screenshot({ path: join(root, "docs", "dashboard-instances-dark.png"), fullPage: true });
  await page.emulateMedia({ colorScheme: "light" });

  await page.click('a[href="/instances/web1"]');
  await page.waitForSelector('[data-testid="timeline"]');
  assert.equal(await badge(page, "istatus-web1"), "Ready");
  const kinds = await page.locator('[data-testid="timeline-entry"]').evaluateAll((els) => els.map((e) => e.dataset.kind + ":" + e.dataset.to));
  assert.ok(kinds.includes("ready:true"), `timeline shows the Ready change: ${kinds}`);
  await page.screenshot({ path: join(root, "docs", "dashboard-instance.png"), fullPage: true });

  await page.click('[data-testid="action-stop"]');
  await page.waitForLoadState();
  await waitFor(async () => (await badge(page, "istatus-web1")) === "Stopped", { timeout: 60000, what: "status Stopped" });
  const outcome = await page.locator('[data-testid="outcome"]').first().getAttribute("data-ok");
  assert.equal(outcome, "true");
  await page.close();
});

test("after the stream drops, the page resumes and misses nothing", async () => {
  await daemon.cli("launch", "web2", "--backend", "sim");
  const page = await chrome.newPage();
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
  const want = await streamIDs(daemon.url, before, seen.last);
  assert.deepEqual(seen.ids, want, "the page applied every event after the drop, once each");
  // The counts follow too (they come a second after a burst of events).
  await waitFor(async () => (await page.getAttribute('[data-testid="agent-counts"] [data-label="connected"]', "data-n")) === "1" &&
    (await page.getAttribute('[data-testid="status-counts"] [data-label="Running"]', "data-n")) === "1",
    { what: "the overview counts to show web2 running with its agent connected" });
  await page.screenshot({ path: join(root, "docs", "dashboard-overview.png"), fullPage: true });
  await page.close();
});

test("actions work as plain forms without JavaScript", async () => {
  await daemon.cli("launch", "web3", "--backend", "sim");
  const ctx = await chrome.newContext({ javaScriptEnabled: false });
  const page = await ctx.newPage();
  await page.goto(daemon.url + "/instances?q=web3");
  await page.check('input[name="names"][value="web3"]');
  await page.click('[data-testid="bulk-force-stop"]');
  await page.waitForSelector('[data-testid="outcome"]');
  assert.equal(await page.locator('[data-testid="outcome"][data-name="web3"]').getAttribute("data-ok"), "true");
  const info = await daemon.info("web3");
  assert.equal(info.status, "Stopped");
  await ctx.close();
});

test("a cross-site form post is refused", async () => {
  const res = await fetch(daemon.url + "/instances/actions", {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site" },
    body: "action=stop&names=web1",
  });
  assert.equal(res.status, 403);
  const noToken = await fetch(daemon.url + "/instances/actions", {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: "action=stop&names=web1",
  });
  assert.equal(noToken.status, 403);
});
