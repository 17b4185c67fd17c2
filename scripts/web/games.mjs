// Drives the per-game pages and the badges in headless Chromium (run by scripts/web/games.sh).
//
// The master lists six emulated servers: game `ut` (11, 2 and 0 players up; one killed, down)
// and game `ut2` (7 and 3 players). /games lists both with their counts; /games/ut shows its
// counts, draws players over time from /api/v1/games/ut/history (every point of the API, the
// axis scaled to its most), lists its busiest servers with their badges, and switches range;
// the badges show name and players, `down`, or `unknown` (404).
//
// Env: MUSTER_URL (the HTTP face), MUSTER_BUSY (the busiest server's address), MUSTER_DOWN
// (the killed one's), MUSTER_SCREENSHOTS (a directory; empty: none), CHROMIUM.
import { check, launch } from "./common.mjs";

const base = process.env.MUSTER_URL;
const busy = process.env.MUSTER_BUSY;
const down = process.env.MUSTER_DOWN;
const shots = process.env.MUSTER_SCREENSHOTS || "";
const TIMEOUT = 30_000;

async function api(path) {
  const r = await fetch(base + path);
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

async function shot(target, name) {
  if (!shots) return;
  await target.screenshot({ path: shots + "/" + name });
  console.log("    screenshot: " + shots + "/" + name);
}

const cells = (page, sel) => page.$$eval(sel, (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent.trim())));

const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  page.setDefaultTimeout(TIMEOUT);
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));

  // The overview: both games, busiest first, with the counts the emulators give.
  const games = await api("/api/v1/games");
  const name = Object.fromEntries(games.map((g) => [g.game, g.name]));
  check(name.ut && name.ut2, "the API lists games ut and ut2: " + JSON.stringify(games));
  await page.goto(base + "/games");
  await page.waitForSelector("#games tr");
  const all = await cells(page, "#games tr");
  check(all.length === 2, "/games has a row per game: " + JSON.stringify(all));
  check(JSON.stringify(all[0]) === JSON.stringify([name.ut, "4", "3", "13"]),
    `${name.ut}: 4 servers, 3 answering, 13 players (busiest first): ${JSON.stringify(all[0])}`);
  check(JSON.stringify(all[1]) === JSON.stringify([name.ut2, "2", "2", "10"]),
    `${name.ut2}: 2 servers, 2 answering, 10 players: ${JSON.stringify(all[1])}`);
  await shot(page, "games-all.png");

  // One game's page: its counts, the chart of its history, its busiest servers.
  await page.click(`#games a[href="/games/ut"]`);
  await page.waitForURL(/\/games\/ut/);
  await page.waitForSelector("#busiest tr");
  await page.waitForFunction(() => document.querySelectorAll("#chart polyline").length === 2);
  const stat = (id) => page.$eval("#" + id, (e) => e.textContent);
  check(await page.title() === name.ut + " · Muster", "the page is titled by the game");
  check(await stat("s-servers") === "4" && await stat("s-up") === "3" && await stat("s-players") === "13",
    "the game's counts: 4 listed, 3 answering, 13 players");
  const hist = await api("/api/v1/games/ut/history?range=48h");
  check(hist.points.length >= 2 && hist.step === 60, `the API has ${hist.points.length} minute point(s)`);
  const drawn = await page.$$eval("#chart polyline", (ls) => ls.map((l) => l.getAttribute("points").trim().split(/\s+/).length));
  check(drawn[0] === hist.points.length && drawn[1] === hist.points.length,
    `the players and servers lines have a vertex per API point (${drawn})`);
  const most = Math.max(1, ...hist.points.map((p) => Math.max(p.players_max, p.up_max)));
  const labels = await page.$$eval("#chart text", (ts) => ts.map((t) => t.textContent));
  check(labels.includes(String(most)), `the axis is scaled to the API's most, ${most}: ${labels}`);
  // The players line's last vertex sits at the API's last mean, on that scale.
  const last = hist.points[hist.points.length - 1];
  const lastY = await page.$eval("#chart polyline", (l) => Number(l.getAttribute("points").trim().split(/\s+/).pop().split(",")[1]));
  const H = 240, T = 10, B = 24;
  const want = H - B - last.players_avg / most * (H - T - B);
  check(Math.abs(lastY - want) < 0.5, `the last players vertex is at the API's ${last.players_avg} (y ${lastY}, want ${want})`);
  const busiest = await cells(page, "#busiest tr");
  check(busiest.length === 4, "four busiest servers listed");
  check(busiest[0][0].startsWith("Muster Busy Facing Worlds") && busiest[0][0].endsWith(busy) && busiest[0][2] === "11/16",
    "the busiest is Muster Busy Facing Worlds, 11/16: " + JSON.stringify(busiest[0]));
  check(busiest.some((r) => r[0].startsWith("Gone Away") && r[2] === "down"), "the killed server is down");
  await page.waitForFunction(() => [...document.querySelectorAll("#busiest img")].every((i) => i.complete && i.naturalWidth > 0));
  check(true, "every busiest server's badge image loaded");
  await shot(page, "games-live-48h.png");
  await page.click('.ranges button[data-range="30d"]');
  await page.waitForFunction(() => new URL(location.href).searchParams.get("range") === "30d");
  const hours = await api("/api/v1/games/ut/history?range=30d");
  await page.waitForFunction((n) => {
    const l = document.querySelector("#chart polyline");
    return l && l.getAttribute("points").trim().split(/\s+/).length === n;
  }, hours.points.length);
  check(await page.$eval('.ranges button[data-range="30d"]', (b) => b.getAttribute("aria-pressed")) === "true",
    `30 days: drawn from the ${hours.points.length} hourly point(s), the button pressed`);

  // The badges, as an <img> elsewhere would load them.
  for (const [addr, status, words, file] of [
    [busy, 200, ["Muster Busy Facing Worlds", "11/16"], "badge-up.png"],
    [down, 200, ["Gone Away", "down"], "badge-down.png"],
    ["127.0.0.1:1", 404, ["unknown"], "badge-unknown.png"],
  ]) {
    const r = await page.goto(`${base}/badge/${addr}.svg`);
    check(r.status() === status && r.headers()["content-type"].startsWith("image/svg+xml"),
      `/badge/${addr}.svg: ${status}, an SVG`);
    const text = await page.evaluate(() => document.documentElement.textContent);
    for (const w of words) check(text.includes(w), `the badge of ${addr} says ${w}`);
    await shot(page.locator("svg").first(), file);
  }
  check(errors.length === 0, "no script errors: " + errors.join("; "));
} finally {
  await browser.close();
}
