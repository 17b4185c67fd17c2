// Drives the page of `muster browse --web` in headless Chromium (run by scripts/web/browse.sh).
//
// The list fills with pings measured by the browser process; the Ping column shows and sorts;
// the star asks the browse process, which saves the favourite in the profile file; the
// favourites filter keeps only it; the phone layout shows the ping under the name.
//
// Env: MUSTER_URL (the printed address, with its token), MUSTER_PROFILE (the profile file),
// MUSTER_EXPECT (servers listed), MUSTER_SCREENSHOTS (a directory; empty: none), CHROMIUM.
import fs from "node:fs";
import { check, launch, rows, shownRe } from "./common.mjs";

const url = process.env.MUSTER_URL;
const profile = process.env.MUSTER_PROFILE;
const expect = Number(process.env.MUSTER_EXPECT || "1");
const shots = process.env.MUSTER_SCREENSHOTS || "";
const TIMEOUT = 30_000;

async function waitRows(page, pred, what) {
  const t0 = Date.now();
  for (;;) {
    const r = await rows(page);
    if (pred(r)) return r;
    if (Date.now() - t0 > TIMEOUT) throw new Error("timed out waiting for " + what + ": " + JSON.stringify(r.slice(0, 3)));
    await page.waitForTimeout(50);
  }
}

async function shot(page, name) {
  if (!shots) return;
  await page.waitForTimeout(300);
  await page.screenshot({ path: shots + "/" + name });
  console.log("    screenshot: " + shots + "/" + name);
}

const ms = (t) => { const m = /^(\d+(?:\.\d)?) ms$/.exec(t || ""); return m ? Number(m[1]) : null; };
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  page.setDefaultTimeout(TIMEOUT);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  let r = await waitRows(page, (r) => r.length === expect && r.every((x) => ms(x.ping) !== null && x.name && !x.name.startsWith("(")),
    expect + " servers answered with a ping");
  check(await page.isVisible("#thead .c-ping"), "the Ping column is shown");
  check(r.every((x) => ms(x.ping) < 5000), "every ping is in milliseconds: " + r.map((x) => x.ping).join(", "));
  const m = shownRe.exec(await page.textContent("#status"));
  check(m && Number(m[1]) === expect, "the status counts " + expect + " servers");

  await page.click("#thead .c-ping");
  r = await rows(page);
  const pings = r.map((x) => ms(x.ping));
  check(pings.every((p, i) => i === 0 || pings[i - 1] <= p), "sorted by ping, lowest first: " + pings.join(", "));
  check(new URL(page.url()).searchParams.get("sort") === "ping", "the sort is in the URL");
  await page.click("#thead .c-players");

  // The star: saved by the browse process in the profile file.
  r = await rows(page);
  const target = r[0];
  await page.click(`#spacer .row[data-key="${target.key}"] .star`);
  await waitRows(page, (rs) => rs.find((x) => x.key === target.key).star === "★", "the star on");
  const t0 = Date.now();
  let saved = null;
  while (Date.now() - t0 < TIMEOUT) {
    try { saved = JSON.parse(fs.readFileSync(profile, "utf8")); } catch (e) { saved = null; }
    if (saved && saved.favourites.length === 1) break;
    await page.waitForTimeout(50);
  }
  check(saved && saved.favourites.length === 1 && saved.favourites[0].endsWith(" " + target.key.split("|")[0]),
    "the favourite is in the profile: " + JSON.stringify(saved && saved.favourites));
  await page.check("#fav");
  await waitRows(page, (rs) => rs.length === 1 && rs[0].key === target.key, "only the favourite");
  check(true, "the favourites filter shows only it");
  // A reload reads it back from the browse process, not from localStorage.
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  await waitRows(page, (rs) => rs.length === 1 && rs[0].star === "★", "the favourite after a reload");
  check(true, "the favourite survives a reload with localStorage cleared");
  await page.uncheck("#fav");
  await waitRows(page, (rs) => rs.length === expect, "every server again");
  await shot(page, "browse-web-desktop.png");

  const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  phone.setDefaultTimeout(TIMEOUT);
  phone.on("pageerror", (e) => errors.push(String(e)));
  await phone.goto(url);
  await phone.waitForFunction(() => [...document.querySelectorAll("#spacer .row .sub")].some((s) => /^\d+(\.\d)? ms · /.test(s.textContent)));
  check(!(await phone.isVisible("#thead .c-ping")), "the phone layout has no Ping column");
  check(true, "the phone layout shows the ping under the name");
  await shot(phone, "browse-web-phone.png");
  check(errors.length === 0, "no page errors: " + errors.join("; "));
} finally {
  await browser.close();
}
