// Drives the Muster server browser in headless Chromium (run by scripts/web/e2e.sh).
//
// Env: MUSTER_URL (the master's HTTP face), MUSTER_EXPECT (servers listed at least),
// MUSTER_SCREENSHOT (PNG path), CHROMIUM (browser binary). Exits 1 on the first failed check.
import { check, launch, rows } from "./common.mjs";

const base = process.env.MUSTER_URL;
const expect = Number(process.env.MUSTER_EXPECT || "1");
const shot = process.env.MUSTER_SCREENSHOT;
const TIMEOUT = 30_000;


async function api(path) {
  const res = await fetch(base + path);
  if (!res.ok) throw new Error(path + ": HTTP " + res.status);
  return res.json();
}

// Text of `#status`, e.g. "120 of 300 servers, 912 players · updated …".
async function counts(page) {
  const t = await page.textContent("#status");
  const m = /^(\d+) of (\d+) servers/.exec(t || "");
  return m ? { shown: Number(m[1]), total: Number(m[2]) } : null;
}

async function waitShown(page, n, what) {
  await page.waitForFunction(
    (n) => (/^(\d+) of/.exec(document.getElementById("status").textContent) || [])[1] === String(n),
    n, { timeout: TIMEOUT },
  ).catch(() => { throw new Error("timed out waiting for " + what + " (" + n + " shown)"); });
}


const browser = await launch();
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.setDefaultTimeout(TIMEOUT);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));

  // The list shows every listed server.
  await page.goto(base + "/?refresh=2");
  const listed = (await api("/api/v1/servers?per_page=1")).total;
  check(listed >= expect, `API lists ${listed} >= ${expect} servers`);
  await page.waitForFunction(
    (n) => Number((/ of (\d+) servers/.exec(document.getElementById("status").textContent) || [])[1]) >= n,
    expect, { timeout: TIMEOUT });
  const c = await counts(page);
  check(c.total >= expect && c.shown === c.total, `page lists all servers (${c.shown} of ${c.total})`);
  const drawn = (await rows(page)).length;
  check(drawn > 0 && drawn < c.total, `rows are virtualised (${drawn} in the DOM for ${c.total})`);

  // Filter by protocol.
  await page.selectOption("#protocol", "ddnet");
  const ddnet = (await api("/api/v1/servers?per_page=1&protocol=ddnet")).total;
  await waitShown(page, ddnet, "protocol filter");
  check((await rows(page)).every((r) => r[2] === "ddnet"), `protocol filter: ${ddnet} ddnet servers, every row ddnet`);
  await page.selectOption("#protocol", "");

  // Non-empty + not full.
  await page.check("#nonempty");
  await page.check("#notfull");
  const busy = (await api("/api/v1/servers?per_page=1&non_empty=1&not_full=1")).total;
  await waitShown(page, busy, "non-empty/not-full filter");
  const busyRows = await rows(page);
  check(busyRows.every((r) => { const [n, m] = r[4].split(" / ").map(Number); return n > 0 && n < m; }),
    `non-empty + not-full: ${busy} servers, all with 0 < players < max`);
  await page.uncheck("#nonempty");
  await page.uncheck("#notfull");

  // Sort by players, descending then ascending.
  const players = (r) => Number(r[4].split(" / ")[0]);
  await page.click('#thead [data-sort="players"]');
  let r = await rows(page);
  const asc = r.every((x, i) => i === 0 || players(r[i - 1]) <= players(x));
  await page.click('#thead [data-sort="players"]');
  r = await rows(page);
  const desc = r.every((x, i) => i === 0 || players(r[i - 1]) >= players(x));
  check(asc && desc && players(r[0]) > 0, "sort by players works both ways");
  await page.click('#thead [data-sort="name"]');
  r = await rows(page);
  const names = r.map((x) => x[0]);
  const sorted = [...names].sort((a, b) => a.localeCompare(b, undefined, { sensitivity: "base", numeric: true }));
  check(JSON.stringify(names) === JSON.stringify(sorted), "sort by name");

  // Text search finds a server by a player's name (the API searches player names).
  await page.fill("#q", "needle-player");
  await waitShown(page, 1, "player-name search");
  r = await rows(page);
  check(r.length === 1 && r[0][0] === "Muster e2e target", "search by player name finds its server");

  // The detail view shows players; the history chart draws a line.
  await page.click("#spacer .row");
  await page.waitForSelector("#detail.open #players tr.player");
  const pl = await page.$$eval("#players tr.player td:first-child", (t) => t.map((x) => x.textContent));
  check(pl.includes("needle-player") && pl.includes("second"), `detail lists players (${pl.join(", ")})`);
  // A flat line has an empty bounding box, so "attached", not "visible".
  await page.waitForSelector("#chart svg path.history-line", { state: "attached", timeout: TIMEOUT });
  const d = await page.getAttribute("#chart svg path.history-line", "d");
  check(/^M[\d.]+,[\d.]+/.test(d || ""), "history chart renders an SVG path");
  const hist = await api("/api/v1/servers/" + encodeURIComponent((await rows(page))[0][6]) + "/history");
  check(Array.isArray(hist) && hist.length > 0 && "at" in hist[0] && "ok" in hist[0], `history API returns ${hist.length} samples`);

  // ETag: an unchanged list answers 304.
  const first = await fetch(base + "/api/v1/servers?per_page=5&sort=address");
  const etag = first.headers.get("etag");
  const again = await fetch(base + "/api/v1/servers?per_page=5&sort=address", { headers: { "If-None-Match": etag } });
  check(etag && (again.status === 304 || again.headers.get("etag") !== etag), `ETag ${etag} revalidates (${again.status})`);

  // Screenshot: the whole list, busiest first, with a detail view open.
  await page.fill("#q", "");
  await page.click('#thead [data-sort="players"]');
  await waitShown(page, c.total, "cleared search");
  await page.click("#spacer .row");
  await page.waitForSelector("#chart svg");
  if (shot) {
    // The page redraws an open detail view on every refresh: give the busiest server's first
    // poll a few seconds to reach its history, so the chart in the picture is not empty.
    await page.waitForSelector("#chart svg path.history-line", { state: "attached", timeout: 15_000 })
      .catch(() => console.log("    (screenshot without history samples)"));
    await page.waitForTimeout(300);
    await page.screenshot({ path: shot });
  }
  check(errors.length === 0, "no page errors" + (errors.length ? ": " + errors.join("; ") : ""));
} catch (e) {
  console.error("e2e: " + e.message);
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
