// Measures the Muster server browser with many servers in headless Chromium (run by
// scripts/web/scale.sh). Prints a table of timings and memory; exits 1 only on a functional
// error (a wrong count, order or search result, a page error), never because something is slow.
//
// Env: MUSTER_URL (the master's HTTP face), MUSTER_EXPECT (servers listed at least),
// CHROMIUM (browser binary), MUSTER_WEB_PAGE (optional: serve `/` from this file instead of the
// binary's embedded page, to measure a change to crates/master/src/web/index.html without
// rebuilding: `MUSTER_WEB_HOLD=3600 scripts/web/scale.sh`, then
// `MUSTER_URL=http://… MUSTER_WEB_PAGE=crates/master/src/web/index.html node scripts/web/scale.mjs`).
import { readFileSync } from "node:fs";
import http from "node:http";
import { check, launch, rows } from "./common.mjs";

const base = process.env.MUSTER_URL;
const expect = Number(process.env.MUSTER_EXPECT || "1");
const TIMEOUT = 120_000;
const results = [];

function record(what, value, unit, note = "") {
  results.push({ what, value, unit, note });
  console.log(`    ${what}: ${value} ${unit}${note ? " (" + note + ")" : ""}`);
}

// The script's own API requests leave from 127.0.0.3, so that they do not spend the tokens of
// the page's source (127.0.0.1) in the API's per-source bucket.
function api(path) {
  return new Promise((resolve, reject) => {
    const req = http.get(base + path, { localAddress: "127.0.0.3", timeout: 30_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => { body += c; });
      res.on("end", () => {
        if (res.statusCode !== 200) reject(new Error(path + ": HTTP " + res.statusCode));
        else try { resolve(JSON.parse(body)); } catch (e) { reject(e); }
      });
    });
    req.on("timeout", () => req.destroy(new Error(path + ": timed out")));
    req.on("error", reject);
  });
}
const total = async (q) => (await api("/api/v1/servers?per_page=1" + q)).total;

// Every listed server, through the API's pages.
async function everything() {
  const out = [];
  for (let p = 1; ; p++) {
    const r = await api("/api/v1/servers?per_page=500&page=" + p);
    out.push(...r.servers);
    if (p * 500 >= r.total) return out;
  }
}

const shownRe = /^(\d+) of (\d+) servers/;
// Milliseconds until `#status` says `n` servers are shown, measured in the page (rAF-polled).
async function shownAfter(page, n, what) {
  await page.waitForFunction(
    ({ n, re }) => (new RegExp(re).exec(document.getElementById("status").textContent) || [])[1] === String(n),
    { n, re: shownRe.source }, { timeout: TIMEOUT, polling: 20 },
  ).catch(() => { throw new Error(`timed out waiting for ${what} (${n} shown)`); });
}

// Runs `action` in the page and returns the milliseconds until the frame after it was drawn
// (the page filters, sorts and renders synchronously in its event handlers).
async function frameAfter(page, action, arg) {
  return page.evaluate(async ({ action, arg }) => {
    const t0 = performance.now();
    (new Function("arg", action))(arg);
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    return performance.now() - t0;
  }, { action, arg });
}


async function heapMb(cdp) {
  await cdp.send("HeapProfiler.collectGarbage");
  const h = await cdp.send("Runtime.getHeapUsage");
  return (h.usedSize / 1048576).toFixed(1);
}

const ms = (x) => x.toFixed(0);

// The API first: wait until every server was polled at least once (names known), or no more
// are for 15 s, or 2 minutes passed.
{
  const t0 = Date.now();
  let polled = 0, all = [], last = -1, since = Date.now();
  while (Date.now() - t0 < 120_000) {
    all = await everything();
    polled = all.filter((s) => s.last_poll !== null).length;
    if (all.length >= expect && polled >= all.length * 0.99) break;
    if (polled !== last) { last = polled; since = Date.now(); }
    if (Date.now() - since > 15_000) break;
    await new Promise((r) => setTimeout(r, 3000));
  }
  console.log(`    ${all.length} listed, ${polled} polled at least once`);
}

const browser = await launch();
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.setDefaultTimeout(TIMEOUT);
  if (process.env.MUSTER_WEB_PAGE) {
    const html = readFileSync(process.env.MUSTER_WEB_PAGE, "utf8");
    await page.route((u) => u.pathname === "/", (r) => r.fulfill({ contentType: "text/html; charset=utf-8", body: html }));
  }
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const cdp = await page.context().newCDPSession(page);
  // Live events the page receives (Server-Sent Events on /api/v1/events).
  let events = 0;
  await cdp.send("Network.enable");
  cdp.on("Network.eventSourceMessageReceived", () => { events++; });
  let requests = 0, bytes = 0, throttled = 0, notModified = 0;
  // Chromium reports a 304 to a `cache: "no-store"` fetch, and a request a reload cuts off, as
  // ERR_ABORTED; anything else is a real failure.
  let failedRequests = 0;
  page.on("requestfailed", (r) => {
    const why = r.failure() && r.failure().errorText;
    if (!r.url().includes("/api/v1/servers") || why === "net::ERR_ABORTED") return;
    failedRequests++;
    console.log(`    (request failed: ${r.url().replace(base, "")}: ${why})`);
  });
  page.on("response", async (r) => {
    if (!r.url().includes("/api/v1/servers")) return;
    requests++;
    if (r.status() === 304) notModified++;
    if (r.status() === 429) throttled++;
    if (r.status() !== 200 && r.status() !== 304) console.log(`    (HTTP ${r.status()}: ${r.url().replace(base, "")})`);
    // Bytes as transferred (compressed), also for chunked answers without a length.
    const sizes = await r.request().sizes().catch(() => null);
    bytes += sizes ? sizes.responseBodySize : Number(r.headers()["content-length"] || 0);
  });

  // 1. Loading until every server is listed: the first time (a browser that just started),
  // then again (a reload, as a returning visitor).
  const listed = await total("");
  check(listed >= expect, `API lists ${listed} >= ${expect} servers`);
  let t0;
  for (const how of ["first load", "reload"]) {
    const r0 = requests, b0 = bytes;
    t0 = Date.now();
    if (how === "reload") await page.reload(); else await page.goto(base + "/");
    await page.waitForSelector("#spacer .row", { timeout: TIMEOUT });
    const firstRows = Date.now() - t0;
    await page.waitForFunction(
      ({ n, re }) => Number((new RegExp(re).exec(document.getElementById("status").textContent) || [])[2]) >= n,
      { n: expect, re: shownRe.source }, { timeout: TIMEOUT, polling: 20 });
    const fullList = Date.now() - t0;
    const st = shownRe.exec(await page.textContent("#status"));
    check(Number(st[1]) === Number(st[2]) && Number(st[2]) >= expect, `${how}: page lists all servers (${st[1]} of ${st[2]})`);
    record(`${how}: first rows drawn`, firstRows, "ms", "after navigation");
    record(`${how}: full list shown`, fullList, "ms",
      `${st[2]} servers, ${requests - r0} API requests, ${((bytes - b0) / 1e6).toFixed(1)} MB`);
  }
  record("JS heap after load", await heapMb(cdp), "MB", "after GC");

  // 2. Idle for 15 s while the poller changes servers: the page follows the live events, so it
  // should make no list request; the longest main-thread task shows what applying them costs.
  await page.evaluate(() => {
    window.__long = 0;
    new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long = Math.max(window.__long, e.duration); })
      .observe({ type: "longtask", buffered: false });
  });
  const r0 = requests, b0 = bytes, n0 = notModified, e0 = events;
  await page.waitForTimeout(15_000);
  const longest = await page.evaluate(() => window.__long);
  record("idle 15 s (live events): API requests", requests - r0, "requests",
    `${notModified - n0} answered 304; ${((bytes - b0) / 1e6).toFixed(1)} MB`);
  record("idle 15 s: live events received", events - e0, "events");
  record("idle 15 s: longest main-thread task", ms(longest), "ms", longest ? "" : "none over 50 ms");

  // 3. A filter change: protocol = gamespy, then back to all.
  const gs = await total("&protocol=gamespy");
  let t = await frameAfter(page, `const s = document.getElementById("protocol"); s.value = arg;
    s.dispatchEvent(new Event("change"));`, "gamespy");
  await shownAfter(page, gs, "protocol filter");
  check((await rows(page)).every((r) => r.proto === "gamespy"), `protocol filter: ${gs} gamespy servers, every row gamespy`);
  record("filter protocol=gamespy", ms(t), "ms", `${gs} shown`);
  t = await frameAfter(page, `document.getElementById("non_empty").click()`);
  const gsBusy = await total("&protocol=gamespy&non_empty=1");
  await shownAfter(page, gsBusy, "not-empty filter");
  record("filter + not empty", ms(t), "ms", `${gsBusy} shown`);
  t = await frameAfter(page, `document.getElementById("non_empty").click();
    const s = document.getElementById("protocol"); s.value = ""; s.dispatchEvent(new Event("change"));`);
  const now = await total("");
  await shownAfter(page, now, "filters cleared");
  record("filters cleared", ms(t), "ms", `${now} shown`);

  // 4. Sorting: by name (text), by players (numbers), each way.
  const players = (r) => Number(r.players.split(" / ")[0]);
  const coll = new Intl.Collator(undefined, { sensitivity: "base", numeric: true });
  t = await frameAfter(page, `document.querySelector('#thead [data-sort="name"]').click()`);
  let r = await rows(page);
  const names = r.map((x) => x.name);
  check(names.every((n, i) => i === 0 || coll.compare(names[i - 1], n) <= 0), "sort by name (rows in view in order)");
  record("sort by name (click)", ms(t), "ms");
  t = await frameAfter(page, `document.querySelector('#thead [data-sort="name"]').click()`);
  record("sort by name, descending", ms(t), "ms");
  t = await frameAfter(page, `document.querySelector('#thead [data-sort="players"]').click()`);
  r = await rows(page);
  const desc = r.every((x, i) => i === 0 || players(r[i - 1]) >= players(x));
  record("sort by players (click)", ms(t), "ms");
  t = await frameAfter(page, `document.querySelector('#thead [data-sort="address"]').click()`);
  record("sort by address (click)", ms(t), "ms");
  check(desc && players(r[0]) > 0, "sort by players (descending, busiest first)");

  // 5. Scrolling to the middle and the end.
  t = await frameAfter(page, `const v = document.getElementById("viewport"); v.scrollTop = v.scrollHeight / 2;`);
  record("scroll to the middle", ms(t), "ms");
  t = await frameAfter(page, `const v = document.getElementById("viewport"); v.scrollTop = v.scrollHeight;`);
  check((await rows(page)).length > 0, "rows drawn at the end of the list");
  record("scroll to the end", ms(t), "ms");

  // 6. Text search: one keystroke's local filter, and the server-side search (player names).
  await page.focus("#q");
  t = await frameAfter(page, `const q = document.getElementById("q"); q.value = "a";
    q.dispatchEvent(new Event("input"));`);
  record("search: one keystroke (\"a\"), local filter", ms(t), "ms");
  // The API also matches player names, which the page cannot see: a search is shown when the
  // count passed 90 % of the way from the page's own matches (names, maps, addresses) to the
  // API's, since players join and leave while it runs.
  const expectSearch = async (word) => {
    const all = await everything();
    const local = all.filter((x) => (x.name + "\0" + x.map + "\0" + x.address).toLowerCase().includes(word)).length;
    const api = await total("&q=" + word);
    return { local, api, at: Math.floor(local + 0.9 * (api - local)) };
  };
  const shownNow = async () => Number(shownRe.exec(await page.textContent("#status"))[1]);
  const waitAtLeast = (n) => page.waitForFunction(({ n, re }) =>
    Number((new RegExp(re).exec(document.getElementById("status").textContent) || [])[1]) >= n,
    { n, re: shownRe.source }, { timeout: TIMEOUT, polling: 20 });
  let e = await expectSearch("night");
  t0 = Date.now();
  await page.fill("#q", "night");
  await waitAtLeast(e.at);
  record("search \"night\" pasted, until shown", Date.now() - t0, "ms",
    `200 ms debounce + API; ${await shownNow()} shown: ${e.local} by name, ${e.api} with players`);
  await page.fill("#q", "");
  await shownAfter(page, await total(""), "search cleared");
  e = await expectSearch("rock");
  await page.type("#q", "rock", { delay: 150 });
  t0 = Date.now();
  await waitAtLeast(e.at);
  record("search \"rock\" typed (a key every 150 ms), after the last key", Date.now() - t0, "ms",
    `${await shownNow()} shown: ${e.local} by name, ${e.api} with players`);
  t0 = Date.now();
  await page.fill("#q", "needle-player");
  await shownAfter(page, 1, "player-name search");
  record("search \"needle-player\" until shown", Date.now() - t0, "ms", "1 shown (a player's name)");
  r = await rows(page);
  check(r.length === 1 && r[0].name === "Muster scale target", "search by player name finds its server");
  t0 = Date.now();
  await page.fill("#q", "");
  await shownAfter(page, await total(""), "search cleared");
  record("search cleared until all shown", Date.now() - t0, "ms");

  // 7. The detail view.
  t0 = Date.now();
  await page.click("#spacer .row");
  await page.waitForSelector("#detail.open #chart svg");
  record("detail view open", Date.now() - t0, "ms");

  record("JS heap at the end", await heapMb(cdp), "MB", "after GC");
  record("API requests answered 429", throttled, "requests");
  record("API requests failed (network)", failedRequests, "requests");
  check(errors.length === 0, "no page errors" + (errors.length ? ": " + errors.join("; ") : ""));
} catch (e) {
  console.error("scale: " + e.message);
  failed = true;
} finally {
  await browser.close();
}

if (results.length) {
  const w = Math.max(...results.map((r) => r.what.length));
  const v = Math.max(...results.map((r) => String(r.value).length));
  console.log("\n| " + "measurement".padEnd(w) + " | " + "value".padStart(v) + " | unit | note");
  console.log("|" + "-".repeat(w + 2) + "|" + "-".repeat(v + 2) + "|------|-----");
  for (const r of results) {
    console.log("| " + r.what.padEnd(w) + " | " + String(r.value).padStart(v) + " | " + r.unit + " | " + r.note);
  }
}
process.exit(failed ? 1 : 0);
