// Copies the pinned browser libraries from node_modules into web/assets so the
// Go build embeds them and needs no Node at run time.
import { copyFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const files = [
  ["node_modules/htmx.org/dist/htmx.min.js", "web/assets/htmx.min.js"],
  ["node_modules/htmx-ext-sse/dist/sse.min.js", "web/assets/htmx-ext-sse.min.js"],
  // The instance page's terminal (terminal.js loads these when it opens).
  ["node_modules/@xterm/xterm/lib/xterm.js", "web/assets/xterm.js"],
  ["node_modules/@xterm/xterm/css/xterm.css", "web/assets/xterm.css"],
  ["node_modules/@xterm/addon-fit/lib/addon-fit.js", "web/assets/xterm-addon-fit.js"],
];
for (const [from, to] of files) {
  copyFileSync(join(root, from), join(root, to));
  console.log(`vendored ${to}`);
}
