// Browser test of the instance page's terminal and file download: a real
// daemon, a simulated guest running the real agent (exec and files go
// through it), and Debian's Chromium typing into xterm.js.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Daemon, browser, waitFor, shot, axeViolations, cspWatch, tabTo } from "./harness.mjs";

let daemon;
let chrome;
let ctx;
let dir;

before(async () => {
  daemon = await Daemon.start();
  chrome = await browser();
  ctx = await chrome.newContext({ acceptDownloads: true });
  await daemon.login(ctx);
  dir = mkdtempSync(join(tmpdir(), "guestlink-e2e-terminal-"));
});

after(async () => {
  await chrome?.close();
  await daemon?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// screen returns the text the terminal shows (xterm's DOM renderer rows).
const screen = (page) => page.locator('[data-testid="terminal"] .xterm-rows').textContent();

// inTerminal reports whether the keyboard focus is inside the terminal.
const inTerminal = (page) => page.evaluate(() => !!document.activeElement?.closest('[data-testid="terminal"]'));

async function launchConnected(name) {
  await daemon.cli("launch", name, "--backend", "sim");
  await waitFor(async () => (await daemon.info(name)).agent?.state === "connected", { timeout: 60000, what: `${name}'s agent to connect` });
}

test("the terminal runs a shell in the guest: typed input, its output, resize, focus out with Ctrl+], the exit code", async () => {
  await launchConnected("term1");
  const page = await ctx.newPage();
  const problems = cspWatch(page);
  await page.goto(daemon.url + "/instances/term1");

  // A real button, reached and pressed from the keyboard.
  const open = page.locator('[data-testid="terminal-open"]');
  assert.equal(await open.evaluate((b) => b.tagName), "BUTTON");
  assert.equal((await open.textContent()).trim(), "Open terminal");
  await tabTo(page, '[data-testid="terminal-open"]');
  await page.keyboard.press("Enter");
  const state = page.locator('[data-testid="terminal-state"]');
  await waitFor(async () => (await state.getAttribute("data-value")) === "connected", { what: () => `the terminal to connect (state: ${problems.join("; ")})` });
  assert.equal(await inTerminal(page), true, "the focus moves into the terminal when it opens");

  await page.keyboard.type("echo hello-$((6*7))");
  await page.keyboard.press("Enter");
  await waitFor(async () => (await screen(page)).includes("hello-42"), { what: "hello-42 in the terminal" });
  await page.locator('[data-testid="terminal-panel"]').screenshot({ path: shot("dashboard-terminal.png") });

  // The PTY has the terminal's size, and follows it when the page resizes
  // (LXD's window-resize on the control socket).
  const size = async () => page.locator('[data-testid="terminal"]').evaluate((t) => `${t.dataset.rows} ${t.dataset.cols}`);
  await page.keyboard.type("stty size");
  await page.keyboard.press("Enter");
  const before = await size();
  await waitFor(async () => (await screen(page)).includes(before), { what: `stty size to print ${before}` });
  await page.setViewportSize({ width: 900, height: 700 });
  await waitFor(async () => (await size()) !== before, { what: "the terminal to take the new width" });
  const after = await size();
  await page.keyboard.type("clear; stty size");
  await page.keyboard.press("Enter");
  await waitFor(async () => (await screen(page)).includes(after), { what: `stty size to print the new size ${after}` });

  assert.deepEqual(await axeViolations(page), [], "axe on the instance page with the terminal open");

  // Tab belongs to the shell (it completes "ech"); Ctrl+] moves the focus
  // out, to Close.
  await page.keyboard.type("ech");
  await page.keyboard.press("Tab");
  assert.equal(await inTerminal(page), true, "Tab stays in the terminal (the shell's completion)");
  await page.keyboard.press("Control+BracketRight");
  assert.equal(await page.evaluate(() => document.activeElement?.dataset.testid), "terminal-close", "Ctrl+] moves the focus to Close terminal");

  // Back in and out: exit 3 ends the terminal with its code shown.
  await page.locator('[data-testid="terminal"]').click();
  await page.keyboard.press("Control+U"); // whatever Tab completed
  await page.keyboard.type("exit 3");
  await page.keyboard.press("Enter");
  await waitFor(async () => (await state.getAttribute("data-value")) === "exit:3", { what: "the exit code 3" });
  assert.match(await state.textContent(), /exited with code 3/);
  assert.match(await screen(page), /the shell exited with code 3/);
  assert.equal(await open.isVisible(), true, "the page offers a new terminal");
  assert.deepEqual(problems, [], "no Content-Security-Policy violation or script error");
  await page.close();
});

test("the download form streams a guest file as an attachment, and says why it cannot", async () => {
  await launchConnected("files1");
  const bytes = Buffer.concat([randomBytes(300 << 10), Buffer.from("\x00end\n")]);
  const src = join(dir, "blob.bin");
  writeFileSync(src, bytes);
  await daemon.cli("file", "push", "-p", src, "files1/srv/out/blob.bin");

  const page = await ctx.newPage();
  const problems = cspWatch(page);
  await page.goto(daemon.url + "/instances/files1");
  await page.fill('[data-testid="download-path"]', "/srv/out/blob.bin");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click('[data-testid="download-submit"]')]);
  assert.equal(download.suggestedFilename(), "blob.bin");
  const saved = join(dir, "saved.bin");
  await download.saveAs(saved);
  assert.ok(readFileSync(saved).equals(bytes), "the downloaded bytes are the pushed file's");

  // What cannot be downloaded: the instance page again, the reason beside
  // the form, the path kept, the status the API would answer.
  const cases = [
    { path: "/srv/out/missing", status: 404, want: /no file \/srv\/out\/missing in instance "files1"/ },
    { path: "/srv/out", status: 422, want: /is a directory/ },
    { path: "relative/path", status: 400, want: /absolute/ },
  ];
  for (const c of cases) {
    const res = await page.goto(`${daemon.url}/instances/files1/files?path=${encodeURIComponent(c.path)}`);
    assert.equal(res.status(), c.status, `GET ${c.path}`);
    assert.match(await page.textContent('[data-testid="download-error"]'), c.want, `the message for ${c.path}`);
    assert.equal(await page.inputValue('[data-testid="download-path"]'), c.path);
    assert.equal(await page.getAttribute('[data-testid="download-path"]', "aria-invalid"), "true");
  }
  assert.deepEqual(await axeViolations(page), [], "axe on the instance page with a download error");

  // A stopped guest has no agent: said so, not a JSON page.
  await daemon.cli("stop", "--force", "files1");
  const res = await page.goto(`${daemon.url}/instances/files1/files?path=/srv/out/blob.bin`);
  assert.equal(res.status(), 409);
  assert.match(await page.textContent('[data-testid="download-error"]'), /not running|not connected/);
  assert.equal(await page.locator('[data-testid="terminal-unavailable"]').isVisible(), true, "no terminal button without an agent");
  assert.deepEqual(problems, [], "no Content-Security-Policy violation or script error");
  await page.close();
});
