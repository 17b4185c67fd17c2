// What the browser scripts (e2e.mjs, scale.mjs) share: the checks, the browser, the rows.
import { chromium } from "playwright-core";

// Throws when `cond` is false; prints the check otherwise.
export function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
  console.log("    ok: " + what);
}

// Headless Debian Chromium (env CHROMIUM overrides /usr/bin/chromium).
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
}

// The cells of the list rows in the DOM, top to bottom.
export async function rows(page) {
  return page.$$eval("#spacer .row", (rs) => rs
    .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
    .map((r) => [...r.children].map((c) => c.textContent)));
}
