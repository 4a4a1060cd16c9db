// bench-console.mjs: a guest flooding its console at about 10 MB/s while
// the console is followed, by the instance page in Chromium and by an admin
// API follow stream (what `guestlink console --follow` reads). Not part of
// `npm test`; run after `make build`:
//
//   node web/e2e/bench-console.mjs                 # 30 s at ~10 MB/s
//   DURATION_S=60 CHUNK_KB=2000 node web/e2e/bench-console.mjs
//
// The sim guest runs the real agent and a loop that writes a 1 MB chunk of
// coloured lines (CHUNK_KB) to its stdout, the console log, every 100 ms.
// Measured: the rate actually written (console.log growth), the daemon's
// RSS (VmRSS, sampled each second: flat means the log is never held), the
// API stream's throughput (it reads every byte), and the page: the
// main-thread lag (a 100 ms timer's lateness: p50, p99, max), how long a
// click on Pause takes to show "paused", and the characters kept in the
// console element (bounded by the scrollback). The run is bounded by
// BENCH_TIMEOUT_S (default 300); the guest and the daemon are removed at
// the end.
import { statSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Daemon, browser, waitFor } from "./harness.mjs";

const DURATION_S = Number(process.env.DURATION_S || 30);
const CHUNK_KB = Number(process.env.CHUNK_KB || 1000);
const TIMEOUT_S = Number(process.env.BENCH_TIMEOUT_S || 300);
const log = (...a) => console.log(new Date().toISOString().slice(11, 23), ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN; };

function rssMiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

const timer = setTimeout(() => { console.error(`bench-console: gave up after ${TIMEOUT_S}s`); process.exit(2); }, TIMEOUT_S * 1000);
const d = await Daemon.start();
let chrome;
try {
  const line = "\\033[32mflood\\033[0m line of console output, 0123456789 abcdefghijklmnopqrstuvwxyz";
  // The guest floods once the file "go" exists in its root: the page is
  // measured quiet first, then under the flood, on the same machine load.
  const cmd = `"$GUESTLINK_AGENT" run & yes "$(printf '${line}')" | head -c ${CHUNK_KB * 1000} > "$GUESTLINK_ROOT/chunk"; ` +
    `while :; do [ -e "$GUESTLINK_ROOT/go" ] && cat "$GUESTLINK_ROOT/chunk"; sleep 0.1; done`;
  await d.cli("launch", "flood", "--backend", "sim", "-c", `sim.command=${cmd}`);
  const info = await d.info("flood");
  const logPath = info.details?.console_log;
  if (!logPath) throw new Error(`no console_log in the instance's details: ${JSON.stringify(info.details)}`);
  const pid = d.proc.pid;

  // The API follow stream, from the end of the log, reading every byte.
  await d.api("GET", "/1.0");
  const ctrl = new AbortController();
  let apiBytes = 0;
  const res = await fetch(`${d.url}/1.0/instances/flood/console?follow=true&tail=1`, { headers: { Authorization: `Bearer ${d.bearer}` }, signal: ctrl.signal });
  if (res.status !== 200) throw new Error(`API follow: ${res.status} ${await res.text()}`);
  const apiReader = (async () => {
    const r = res.body.getReader();
    try { for (;;) { const { done, value } = await r.read(); if (done) break; apiBytes += value.length; } } catch { /* aborted */ }
  })();

  chrome = await browser();
  const ctx = await chrome.newContext();
  await d.login(ctx);
  const page = await ctx.newPage();
  await page.goto(d.url + "/instances/flood");
  await waitFor(async () => (await page.textContent('[data-testid="console-state"]')) === "live", { what: "the console stream" });
  await page.evaluate(() => {
    window.__lags = [];
    let last = performance.now();
    setInterval(() => { const now = performance.now(); window.__lags.push(now - last - 100); last = now; }, 100);
  });

  // Quiet: the page follows a silent console for QUIET_S seconds.
  const QUIET_S = Number(process.env.QUIET_S || 10);
  await sleep(QUIET_S * 1000);
  const quietLags = await page.evaluate(() => window.__lags.splice(0));
  const quietRSS = rssMiB(pid);
  writeFileSync(join(info.details.guest_dir, "rootfs", "go"), "");
  await waitFor(() => statSync(logPath).size > 4 * CHUNK_KB * 1000, { what: "the flood to start" });
  await page.evaluate(() => window.__lags.splice(0));

  const rss = [];
  const size0 = statSync(logPath).size;
  const apiBytes0 = apiBytes;
  const t0 = Date.now();
  const clicks = [];
  for (let s = 1; s <= DURATION_S; s++) {
    await sleep(1000);
    rss.push(rssMiB(pid));
    if (s % 10 === 5) {
      // Input latency under the flood: Pause, then Follow again.
      const start = Date.now();
      await page.click('[data-testid="console-toggle"]');
      await page.waitForFunction(() => document.querySelector('[data-testid="console-state"]').textContent === "paused");
      clicks.push(Date.now() - start);
      await page.click('[data-testid="console-toggle"]');
    }
  }
  const secs = (Date.now() - t0) / 1000;
  const written = statSync(logPath).size - size0;
  const lags = await page.evaluate(() => window.__lags);
  const kept = await page.evaluate(() => document.getElementById("console-log").textContent.length);
  const spans = await page.evaluate(() => document.getElementById("console-log").childNodes.length);
  ctrl.abort();
  await apiReader;

  log(`guest wrote ${(written / 1e6 / secs).toFixed(1)} MB/s for ${secs.toFixed(0)} s (${(written / 1e6).toFixed(0)} MB)`);
  log(`quiet: daemon RSS ${quietRSS.toFixed(1)} MiB; page main-thread lag ms: p50 ${pct(quietLags, 0.5).toFixed(0)}, p99 ${pct(quietLags, 0.99).toFixed(0)}, max ${Math.max(...quietLags).toFixed(0)} (${quietLags.length} samples)`);
  log(`flood: daemon RSS MiB: first ${rss[0].toFixed(1)}, max ${Math.max(...rss).toFixed(1)}, last ${rss[rss.length - 1].toFixed(1)}, min ${Math.min(...rss).toFixed(1)}`);
  log(`API follow stream: ${((apiBytes - apiBytes0) / 1e6 / secs).toFixed(1)} MB/s received`);
  log(`page main-thread lag ms: p50 ${pct(lags, 0.5).toFixed(0)}, p99 ${pct(lags, 0.99).toFixed(0)}, max ${Math.max(...lags).toFixed(0)} (${lags.length} samples)`);
  log(`page Pause click -> "paused" ms: ${clicks.join(", ")}`);
  log(`console element: ${kept} characters in ${spans} nodes`);
} finally {
  await chrome?.close();
  await d.stop();
  clearTimeout(timer);
}
