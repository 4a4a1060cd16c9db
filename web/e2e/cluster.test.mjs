// Browser test of a cluster: three guestlinkd members on one private
// PostgreSQL, and a guest's Ready on member c shown live on member a's
// dashboard (issue 13).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Daemon, browser, waitFor, freePort } from "./harness.mjs";
import { startPostgres } from "./postgres.mjs";

let pg;
let members = [];
let chrome;

const badge = (page, id) => page.locator(`#${id}`).getAttribute("data-value");

before(async () => {
  pg = await startPostgres();
  const url = pg.createDatabase("glcluster");
  const flags = async (name) => ["--database", url, "--name", name, "--cluster-address", `127.0.0.1:${await freePort()}`,
    "--cluster-heartbeat", "500ms", "--cluster-offline-after", "5s"];
  const a = await Daemon.start(await flags("a"));
  members.push(a);
  for (const name of ["b", "c"]) {
    const token = (await a.cli("cluster", "add", name)).trim();
    members.push(await Daemon.start([...(await flags(name)), "--join", token]));
  }
  chrome = await browser();
});

after(async () => {
  await chrome?.close();
  for (const m of members.reverse()) await m.stop().catch(() => {});
  await pg?.stop();
});

test("a guest's Ready on member c shows live on member a's dashboard", async () => {
  const [a, , c] = members;
  const ctx = await chrome.newContext();
  await a.login(ctx);
  const page = await ctx.newPage();
  await page.goto(a.url + "/instances");
  await waitFor(async () => (await page.getAttribute("#live-indicator", "data-state")) === "connected", { what: "the live indicator" });

  await a.cli("launch", "far1", "--backend", "sim", "--target", "c");
  await waitFor(async () => (await badge(page, "agent-far1")) === "connected", { timeout: 60000, what: "far1's agent badge (a guest on c) connected on a's page" });
  assert.equal((await page.textContent('[data-testid="instance-row"][data-name="far1"] [data-testid="location"]')).trim(), "on c");
  assert.equal(await badge(page, "status-far1"), "Running");

  await c.guest("far1", "ready"); // PATCH /1.0 {"state":"Ready"} through c's devlxd, answered once c stored it
  const t0 = Date.now();
  await waitFor(async () => (await badge(page, "status-far1")) === "Ready", { timeout: 10000, interval: 10, what: "far1's status badge Ready on a's page" });
  const ms = Date.now() - t0;
  console.log(`cluster: Ready on member c shown on member a's dashboard ${ms} ms after c answered the guest`);
  assert.ok(ms <= 10000);

  // The guest's page on a tells where it runs.
  await page.click('a[href="/instances/far1"]');
  await page.waitForSelector('[data-testid="facts"]');
  assert.equal((await page.textContent('[data-testid="facts"] [data-testid="location"]')).trim(), "c");

  // Stopping it from a's page: member c does it.
  await page.click('[data-testid="action-stop"]');
  await page.waitForLoadState();
  await waitFor(async () => (await badge(page, "istatus-far1")) === "Stopped", { timeout: 60000, what: "far1 Stopped after a stop from a's page" });
  assert.equal((await c.info("far1")).status, "Stopped", "member c ran the stop");
  await ctx.close();
});
