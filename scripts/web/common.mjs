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

// The list rows in the DOM, top to bottom: one object per row, its cells by column (`star`,
// `name`, `game`, `proto`, `region`, `map`, `players`, `pw`, `addr`, `polled`), plus `key`
// (registered address | game). Name and address are the cell's own text, without the lobby
// badge, the phone layout's second line or the copy button.
export async function rows(page) {
  return page.$$eval("#spacer .row", (rs) => rs
    .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
    .map((r) => {
      const o = { key: r.dataset.key };
      for (const c of r.children) {
        const own = c.firstChild && c.firstChild.nodeType === Node.TEXT_NODE ? c.firstChild.textContent : c.textContent;
        o[c.dataset.col] = c.dataset.col === "name" || c.dataset.col === "addr" ? own : c.textContent;
      }
      o.badge = (r.querySelector(".badge") || {}).textContent || "";
      return o;
    }));
}

// Text of the status line's count, e.g. "120 of 300 servers, 912 players · live".
export const shownRe = /^(\d+) of (\d+) servers/;
