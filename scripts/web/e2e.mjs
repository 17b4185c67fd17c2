// Drives the Muster server browser in headless Chromium (run by scripts/web/e2e.sh, twice).
//
// MUSTER_PHASE=empty: the master lists nothing yet. The page says how servers register, one
//   line per bound face; a management server registered while the page is open appears, its
//   change shows, its removal takes it away again, without reading the list again.
// MUSTER_PHASE=list: the master lists the farm. The list, filters, sort, search, the URL
//   (reload, back, forward), favourites, copying, connect links, the detail view with bots,
//   rule names and the history chart, regions, lobbies, live changes; screenshots.
//
// Env: MUSTER_URL (the master's HTTP face), MUSTER_MGMT (its management face), MUSTER_EXPECT
// (servers listed at least), MUSTER_SCREENSHOTS (a directory; empty: none), CHROMIUM.
// Exits 1 on the first failed check.
import net from "node:net";
import { once } from "node:events";
import { check, launch, rows, shownRe } from "./common.mjs";

const base = process.env.MUSTER_URL;
const mgmtAddr = process.env.MUSTER_MGMT;
const expect = Number(process.env.MUSTER_EXPECT || "0");
const shots = process.env.MUSTER_SCREENSHOTS || "";
const phase = process.env.MUSTER_PHASE || "list";
const TIMEOUT = 30_000;

async function api(path) {
  const res = await fetch(base + path);
  if (!res.ok) throw new Error(path + ": HTTP " + res.status);
  return res.json();
}

// A game server on the management face: one TCP connection, frames `<length><json>\n`
// (`management-server.md` §2).
async function mgmtServer(name, address, port) {
  const [host, p] = [mgmtAddr.slice(0, mgmtAddr.lastIndexOf(":")), Number(mgmtAddr.slice(mgmtAddr.lastIndexOf(":") + 1))];
  const sock = net.connect(p, host);
  await once(sock, "connect");
  const send = (obj) => {
    const json = Buffer.from(JSON.stringify(obj));
    sock.write(Buffer.concat([Buffer.from(String(json.length + 1)), json, Buffer.from("\n")]));
  };
  send({ command: "msRegisterGameServer", content: { serverName: name, serverAddress: address, serverPort: port } });
  return {
    address: address + ":" + port,
    stats: (current, max, open, mode) => send({ command: "msUpdateGameServerStats",
      content: { players: { current, max }, isLobbyOpen: open, gameplayMode: mode } }),
    unregister: () => send({ command: "msUnregisterGameServer" }),
    close: () => sock.destroy(),
  };
}

const counts = async (page) => {
  const m = shownRe.exec((await page.textContent("#status")) || "");
  return m ? { shown: Number(m[1]), total: Number(m[2]) } : null;
};

// Waits until the status line says `n` servers are shown (and, when given, `total` listed).
async function waitShown(page, n, what, total) {
  await page.waitForFunction(
    ({ n, total, re }) => {
      const m = new RegExp(re).exec(document.getElementById("status").textContent) || [];
      return m[1] === String(n) && (total === null || m[2] === String(total));
    },
    { n, total: total === undefined ? null : total, re: shownRe.source }, { timeout: TIMEOUT },
  ).catch(() => { throw new Error("timed out waiting for " + what + " (" + n + " shown)"); });
}

// Waits until `pred(rows)` holds for the rows in the DOM.
async function waitRows(page, pred, what) {
  const t0 = Date.now();
  for (;;) {
    const r = await rows(page);
    if (pred(r)) return r;
    if (Date.now() - t0 > TIMEOUT) throw new Error("timed out waiting for " + what + ": " + JSON.stringify(r.slice(0, 3)));
    await page.waitForTimeout(50);
  }
}

async function shot(page, name, opts) {
  if (!shots) return;
  await page.waitForTimeout(300);
  await page.screenshot(Object.assign({ path: shots + "/" + name }, opts || {}));
  console.log("    screenshot: " + shots + "/" + name);
}

// Full reads of the list (`sort=` pages) the page made; a live page makes them only at load.
function listReads(page) {
  const n = { count: 0 };
  page.on("request", (r) => { if (/\/api\/v1\/servers\?sort=/.test(r.url())) n.count++; });
  return n;
}

async function emptyPhase(browser) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  page.setDefaultTimeout(TIMEOUT);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const reads = listReads(page);
  const missing = [];
  page.on("response", (r) => { if (r.status() === 404) missing.push(r.url()); });
  await page.goto(base + "/");
  await page.waitForSelector("#blank li[data-face]");
  await waitShown(page, 0, "the empty list", 0);
  const lines = await page.$$eval("#blank li", (ls) => Object.fromEntries(ls.map((l) => [l.dataset.face, l.textContent])));
  const info = await api("/api/v1/info");
  const http = info.faces.find((f) => f.face === "http").address;
  check(Object.keys(lines).sort().join() === "ddnet,gameagent,gamespy-udp,mgmt",
    "the empty page has one line per bound face: " + Object.keys(lines).join(", "));
  check(lines.ddnet.includes(`sv_register_url "http://${http}/ddnet/15/register"`), "DDNet line names the register URL");
  check(lines.mgmt.includes("mgmt:" + mgmtAddr) && lines.mgmt.includes("msRegisterGameServer"), "management line names its address");
  check(lines.gameagent.includes("ga_strServer") && lines["gamespy-udp"].includes("MasterServerAddress="),
    "GameAgent and GameSpy lines say what to set");
  await shot(page, "browser-empty.png");
  const icon = await page.evaluate(async () => (await fetch(document.querySelector("link[rel=icon]").href)).headers.get("content-type"));
  check(icon === "image/svg+xml", "the page has an icon (" + icon + ")");

  // The API's page shows the document's `code` as code, not as backticks.
  const docs = await browser.newPage();
  docs.on("response", (r) => { if (r.status() === 404) missing.push(r.url()); });
  await docs.goto(base + "/api/docs");
  await docs.waitForSelector("#doc table");
  const ticks = await docs.$eval("#doc", (d) => (d.textContent.match(/`/g) || []).length);
  const codes = await docs.$$eval("#doc td code", (cs) => cs.map((c) => c.textContent));
  check(ticks === 0 && codes.includes("gameagent"), `the API page has no literal backticks (${ticks}) and shows code (${codes.length} code spans)`);
  await docs.waitForTimeout(300);
  await docs.close();
  check(missing.length === 0, "no request of either page answers 404" + (missing.length ? ": " + missing.join(", ") : ""));

  // Live: added, changed, removed through the management face, the page never reloading.
  const loadsBefore = reads.count;
  const srv = await mgmtServer("Live arrival", "127.0.5.9", 20000);
  try {
    await waitShown(page, 1, "the registered management server", 1);
    let r = await waitRows(page, (r) => r.length === 1, "one row");
    check(r[0].name === "Live arrival" && r[0].addr === "127.0.5.9:20000" && await page.isHidden("#blank"),
      "a server registered while the page is open appears without a reload");
    check(r[0].region === "Japan", `its region comes from the locations table (${r[0].region})`);
    srv.stats(4, 4, false, 2);
    r = await waitRows(page, (r) => r.length === 1 && r[0].players === "4 / 4" && r[0].badge === "lobby closed",
      "the changed row");
    check(true, "a change (4 / 4 players, lobby closed) shows in place");
    // The management server is not polled: its history comes from what it reports.
    const t0 = Date.now();
    while ((await api("/api/v1/servers/127.0.5.9:20000/history")).length === 0) {
      if (Date.now() - t0 > TIMEOUT) throw new Error("no history for the management server");
      await page.waitForTimeout(200);
    }
    await page.click("#spacer .row");
    await page.waitForSelector("#detail.open #chart svg");
    await page.waitForSelector("#chart svg .history-dot, #chart svg path.history-line", { state: "attached" });
    const det = await page.textContent("#facts");
    check(det.includes("Lobbyclosed") && det.includes("ModeStandard A+B"), "detail shows lobby and mode");
    check(!(await page.textContent("#chart")).includes("no samples yet"), "a management server has history samples");
    check((await page.textContent("#detail-address")) === "127.0.5.9:20000" && (await page.$("#connect")) === null,
      "detail shows the game address, no connect link for this game");
    srv.unregister();
    await waitShown(page, 0, "the unregistered server", 0);
    await page.waitForSelector("#blank li[data-face]");
    check((await rows(page)).length === 0, "a server removed while the page is open disappears");
    check((await page.textContent("#detail")).includes("no longer listed"), "the open detail says it is gone");
    check(reads.count === loadsBefore, `no list read while following the changes (${reads.count} at load)`);
  } finally {
    srv.close();
  }
  // Without the stream (here refused as the daemon refuses one too many): the page reads the
  // list every `refresh` seconds and still shows what changed.
  const polled = await browser.newPage();
  polled.setDefaultTimeout(TIMEOUT);
  polled.on("pageerror", (e) => errors.push(String(e)));
  await polled.route((u) => u.pathname === "/api/v1/events", (route) => route.fulfill({
    status: 503, contentType: "application/json", body: '{"error":"too many event streams are open"}' }));
  await polled.goto(base + "/?refresh=5");
  await polled.waitForSelector("#live.off");
  const late = await mgmtServer("Polled arrival", "127.0.5.10", 20010);
  try {
    await waitShown(polled, 1, "a server, by reading the list again", 1);
    late.unregister();
    await waitShown(polled, 0, "its removal, by reading the list again", 0);
    check(true, "without the event stream the list is read every 5 s (?refresh=5)");
  } finally {
    late.close();
  }
  check(errors.length === 0, "no page errors" + (errors.length ? ": " + errors.join("; ") : ""));
  await polled.close();
  await page.close();
}

// What has the keyboard focus: its tag, id, classes, sort key or row key, whether it is in
// the detail view, and whether an outline shows it.
async function focused(page) {
  return page.evaluate(() => {
    const a = document.activeElement;
    const cs = getComputedStyle(a);
    return {
      tag: a.tagName, id: a.id, cls: a.className, sort: a.dataset.sort || "", key: a.dataset.key || "",
      inDetail: document.getElementById("detail").contains(a),
      outline: cs.outlineStyle !== "none" && parseFloat(cs.outlineWidth) > 0,
    };
  });
}

// Presses Tab (at most `max` times) until `pred(focused)` holds.
async function tabTo(page, pred, what, max = 40) {
  for (let i = 0; i < max; i++) {
    await page.keyboard.press("Tab");
    const f = await focused(page);
    if (pred(f)) return f;
  }
  throw new Error("Tab never reached " + what);
}

async function keyboard(page, total) {
  await page.goto(base + "/");
  await waitShown(page, total, "the list, for the keyboard");
  await page.focus("#q");
  const head = await tabTo(page, (f) => f.sort === "fav", "the first column header");
  check(head.outline, "a focused column header shows an outline");
  const name = await tabTo(page, (f) => f.sort === "name", "the Name header", 2);
  check(name.outline, "Tab moves along the column headers");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => new URL(location.href).searchParams.get("sort") === "name");
  let sorted = await page.$eval("#thead [data-sort=name]", (d) => d.getAttribute("aria-sort"));
  check(sorted === "ascending", "Enter on a column header sorts by it (aria-sort " + sorted + ")");
  await page.keyboard.press(" ");
  await page.waitForFunction(() => new URL(location.href).searchParams.get("order") === "desc");
  sorted = await page.$eval("#thead [data-sort=name]", (d) => d.getAttribute("aria-sort"));
  check(sorted === "descending", "Space on it turns the order (aria-sort " + sorted + ")");
  check((await focused(page)).sort === "name", "the header keeps the focus while sorting");

  const shown = await rows(page);
  const row = await tabTo(page, (f) => f.key !== "" && / row /.test(" " + f.cls + " "), "a row");
  check(row.key === shown[0].key, `Tab reaches the rows at the top of the list (${row.key})`);
  check(row.outline, "a focused row shows an outline");
  await page.keyboard.press("ArrowDown");
  let f = await focused(page);
  check(f.key === shown[1].key && f.outline, "ArrowDown moves the focus to the next row");
  await page.keyboard.press("End");
  f = await focused(page);
  const last = await page.evaluate(() => document.getElementById("spacer").lastElementChild.dataset.key);
  check(f.key === last && f.outline, `End moves to the last row (${f.key})`);
  const lastTop = await page.evaluate(() => { const v = document.getElementById("viewport"); return v.scrollTop + v.clientHeight >= v.scrollHeight - 1; });
  check(lastTop, "the list scrolled to show the last row");
  await page.keyboard.press("Home");
  f = await focused(page);
  check(f.key === shown[0].key, "Home moves back to the first row");
  await page.keyboard.press("ArrowDown");

  await page.keyboard.press("Enter");
  await page.waitForSelector("#detail.open #detail-address");
  await page.waitForFunction(() => document.getElementById("detail").contains(document.activeElement));
  const opened = new URL(page.url()).searchParams.get("server");
  check(opened === shown[1].key.split("|")[0], `Enter on a row opens its detail (${opened})`);
  check((await focused(page)).inDetail, "the focus moves into the detail view");
  const close = await tabTo(page, (f) => f.id === "close", "the detail's close button", 5);
  check(close.outline, "the detail's buttons show the focus");
  await page.keyboard.press("Escape");
  await page.waitForSelector("#detail.open", { state: "detached" });
  f = await focused(page);
  check(!new URL(page.url()).searchParams.get("server") && f.key === shown[1].key,
    "Escape closes the detail and the focus goes back to its row");
  await page.keyboard.press(" ");
  await page.waitForSelector("#detail.open #detail-address");
  check(new URL(page.url()).searchParams.get("server") === shown[1].key.split("|")[0], "Space on a row opens its detail too");
  await page.keyboard.press("Escape");
  await page.waitForSelector("#detail.open", { state: "detached" });

  // The row's star is a button in the Tab order after its row: Enter stars the server and
  // the focus stays on the star of the redrawn row.
  await tabTo(page, (f) => / star /.test(" " + f.cls + " "), "a row's star", 3);
  const starKey = await page.evaluate(() => document.activeElement.closest(".row").dataset.key);
  await page.keyboard.press("Enter");
  await page.waitForFunction((k) => JSON.parse(localStorage.getItem("muster.favourites") || "[]").includes(k), starKey);
  await page.waitForFunction(() => document.activeElement.classList.contains("star") && document.activeElement.textContent === "★");
  check(true, "Enter on a row's star stars it and the focus stays on the star");
  await page.keyboard.press("Enter");
  await page.waitForFunction((k) => !JSON.parse(localStorage.getItem("muster.favourites") || "[]").includes(k), starKey);
  await page.goto(base + "/");
  await waitShown(page, total, "the list again");
}

async function listPhase(browser) {
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const reads = listReads(page);
  // Two management servers kept registered for the whole run: one lobby open, one closed.
  const lobbies = [await mgmtServer("Bomber Lobby", "127.0.5.1", 20001), await mgmtServer("Bomber Round", "127.0.5.2", 20002)];
  lobbies[0].stats(1, 4, true, 1);
  lobbies[1].stats(4, 4, false, 2);
  // The open lobby's players come and go (the lobby stays open): its history chart moves. Three
  // players for 30 s, then one for 30 s: a minute's point (its mean, rounded) starts at the
  // phase's value and moves towards 2 as the minute's samples come, so two reads a few
  // seconds apart differ. (A cycle of 15 s averaged 1.8 in every minute: always 2.)
  let tick = 0;
  const churn = setInterval(() => lobbies[0].stats(++tick % 40 < 20 ? 3 : 1, 4, true, 1), 1500);
  try {
    // The list shows every listed server.
    await page.goto(base + "/");
    const listed = (await api("/api/v1/servers?per_page=1")).total;
    check(listed >= expect + 2, `API lists ${listed} >= ${expect} + 2 servers`);
    await page.waitForFunction(
      ({ n, re }) => Number((new RegExp(re).exec(document.getElementById("status").textContent) || [])[2]) >= n,
      { n: expect + 2, re: shownRe.source }, { timeout: TIMEOUT });
    const c = await counts(page);
    check(c.total >= expect && c.shown === c.total, `page lists all servers (${c.shown} of ${c.total})`);
    check(!(await page.isVisible("#thead .c-ping")), "no Ping column: a master's list has no pings (muster browse's has)");
    const drawn = (await rows(page)).length;
    check(drawn > 0 && drawn < c.total, `rows are virtualised (${drawn} in the DOM for ${c.total})`);

    // Game and protocol columns are wide enough for every value.
    const clipped = await page.$$eval("#spacer .row [data-col=game], #spacer .row [data-col=proto], #spacer .row [data-col=region]",
      (cs) => cs.filter((c) => c.scrollWidth > c.clientWidth + 1).map((c) => c.textContent));
    check(clipped.length === 0, "game, protocol and region are not cut off" + (clipped.length ? ": " + clipped.join(", ") : ""));
    await shot(page, "browser-desktop.png");

    // Filter by protocol; it is in the URL: reload keeps it, back and forward move through it.
    await page.selectOption("#protocol", "ddnet");
    const ddnet = (await api("/api/v1/servers?per_page=1&protocol=ddnet")).total;
    await waitShown(page, ddnet, "protocol filter");
    check((await rows(page)).every((r) => r.proto === "ddnet"), `protocol filter: ${ddnet} ddnet servers, every row ddnet`);
    check(new URL(page.url()).searchParams.get("protocol") === "ddnet", "the filter is in the URL");
    await page.reload();
    await waitShown(page, ddnet, "protocol filter after a reload");
    check(await page.inputValue("#protocol") === "ddnet", "a reload keeps the filter");
    await page.goBack();
    await waitShown(page, c.total, "back: no filter");
    check(await page.inputValue("#protocol") === "", "back undoes the filter");
    await page.goForward();
    await waitShown(page, ddnet, "forward: the filter again");
    await page.selectOption("#protocol", "");
    await waitShown(page, c.total, "protocol filter cleared");

    // Non-empty + not full.
    await page.check("#non_empty");
    await page.check("#not_full");
    const busy = (await api("/api/v1/servers?per_page=1&non_empty=1&not_full=1")).total;
    await waitShown(page, busy, "non-empty/not-full filter");
    check((await rows(page)).every((r) => { const [n, m] = r.players.split(" / ").map(Number); return n > 0 && n < m; }),
      `non-empty + not-full: ${busy} servers, all with 0 < players < max`);
    const u = new URL(page.url()).searchParams;
    check(u.get("non_empty") === "1" && u.get("not_full") === "1", "checkboxes are in the URL, spelt as the API spells them");
    await page.uncheck("#non_empty");
    await page.uncheck("#not_full");

    // One game key, shown by its display name: the game filter's values are the API's keys.
    await page.selectOption("#game", "ddnet");
    const ddnetGame = (await api("/api/v1/servers?per_page=1&game=ddnet")).total;
    await waitShown(page, ddnetGame, "game filter");
    check(ddnetGame > 0 && (await rows(page)).every((r) => r.game === "DDNet"), `game filter ddnet: ${ddnetGame} servers, every row shows "DDNet"`);
    check(new URL(page.url()).searchParams.get("game") === "ddnet", "the game key is in the URL");
    const gameLabel = await page.$eval("#game", (s) => s.options[s.selectedIndex].textContent);
    check(gameLabel === "DDNet", `the game filter names the game (${gameLabel})`);
    await page.selectOption("#game", "");
    await waitShown(page, c.total, "game filter cleared");

    // Region: a continent, then a country; the same servers as the API's ?region=.
    const eu = (await api("/api/v1/servers?per_page=1&region=eu")).total;
    await page.selectOption("#region", "eu");
    await waitShown(page, eu, "region filter");
    check(eu > 0 && (await rows(page)).every((r) => r.region === "Germany" || r.region === "France"),
      `region eu: ${eu} servers, all in Germany or France`);
    const fr = (await api("/api/v1/servers?per_page=1&region=eu:fr")).total;
    await page.selectOption("#region", "eu:fr");
    await waitShown(page, fr, "country filter");
    check((await rows(page)).every((r) => r.region === "France"), `region eu:fr: ${fr} servers in France`);
    await page.selectOption("#region", "");

    // Lobby (management servers).
    await page.selectOption("#lobby", "open");
    await waitShown(page, 1, "lobby open");
    let r = await rows(page);
    check(r[0].name === "Bomber Lobby" && r[0].badge === "lobby open", "lobby filter: open");
    await page.selectOption("#lobby", "closed");
    await waitShown(page, 1, "lobby closed");
    r = await rows(page);
    check(r[0].name === "Bomber Round" && r[0].badge === "lobby closed", "lobby filter: closed");
    await page.selectOption("#lobby", "");
    await waitShown(page, c.total, "filters cleared");

    // Sort by players, descending then ascending; by name; the sort is in the URL.
    const players = (x) => Number(x.players.split(" / ")[0]);
    await page.click('#thead [data-sort="players"]');
    r = await rows(page);
    const asc = r.every((x, i) => i === 0 || players(r[i - 1]) <= players(x));
    await page.click('#thead [data-sort="players"]');
    r = await rows(page);
    const desc = r.every((x, i) => i === 0 || players(r[i - 1]) >= players(x));
    check(asc && desc && players(r[0]) > 0, "sort by players works both ways");
    await page.click('#thead [data-sort="name"]');
    r = await rows(page);
    const names = r.map((x) => x.name);
    const sorted = [...names].sort((a, b) => a.localeCompare(b, undefined, { sensitivity: "base", numeric: true }));
    check(JSON.stringify(names) === JSON.stringify(sorted), "sort by name");
    const su = new URL(page.url()).searchParams;
    check(su.get("sort") === "name" && su.get("order") === "asc", "the sort is in the URL");

    // Favourites: a star per row, kept in localStorage, a filter in the URL.
    const first = (await rows(page))[0];
    await page.click(`#spacer .row[data-key="${first.key}"] .star`);
    check(JSON.parse(await page.evaluate(() => localStorage.getItem("muster.favourites"))).includes(first.key),
      "a star keeps the server in localStorage");
    await page.check("#fav");
    await waitShown(page, 1, "favourites only");
    await page.reload();
    await waitShown(page, 1, "favourites after a reload");
    r = await rows(page);
    check(r[0].key === first.key && r[0].star === "★", "favourites survive a reload");
    await page.click(`#spacer .row[data-key="${first.key}"] .star`);
    await waitShown(page, 0, "unstarred");
    await page.uncheck("#fav");
    await page.click('#thead [data-sort="players"]');

    // Text search finds a server by a player's name (the API searches player names).
    await page.fill("#q", "needle-player");
    await waitShown(page, 1, "player-name search");
    r = await rows(page);
    check(r.length === 1 && r[0].name === "Muster e2e target", "search by player name finds its server");
    check(new URL(page.url()).searchParams.get("q") === "needle-player", "the search is in the URL");
    const target = r[0];

    // The detail view: the game address first, a connect link (DDNet has ddnet://), copying,
    // players apart from bots (the API's answer gets a bot added here: no emulated server
    // flags one), the history chart; Esc closes it, back opens it again.
    const detailOfTarget = (u) => u.pathname === "/api/v1/servers/" + encodeURIComponent(target.addr);
    await page.route(detailOfTarget, async (route) => {
      const res = await route.fetch();
      const body = await res.json();
      body.players = body.players.map((p) => Object.assign(p, { bot: false })).concat([{ name: "robot", score: 0, bot: true }]);
      await route.fulfill({ response: res, json: body });
    });
    await page.click("#spacer .row");
    const split = await page.waitForFunction(() => {
      const names = (sel) => [...document.querySelectorAll(sel)].map((t) => t.firstChild.textContent);
      const h = names("#players tr.player td:first-child"), b = names("#bots tr.bot td:first-child");
      return h.length && b.length ? { humans: h, bots: b } : null;
    }).then((h) => h.jsonValue());
    check(split.humans.includes("needle-player") && split.humans.includes("second") && split.bots.join() === "robot",
      `detail lists humans (${split.humans.join(", ")}) apart from bots (${split.bots.join(", ")})`);
    await page.unroute(detailOfTarget);
    check(await page.textContent("#detail-address") === target.addr, `detail shows the game address ${target.addr}`);
    const listedBy = await page.textContent("#facts");
    check(/Listed byregistered here \(\d+[smhd] ago\)/.test(listedBy), "detail says where the master knows the server from");
    check(await page.getAttribute("#connect", "href") === "ddnet://" + target.addr, "a DDNet server has a ddnet:// link");
    await page.click("#copy-address");
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    check(copied === target.addr, `copy puts the address on the clipboard (${copied})`);
    check(new URL(page.url()).searchParams.get("server") === target.key.split("|")[0], "the open server is in the URL");
    // A flat line has an empty bounding box, so "attached", not "visible".
    await page.waitForSelector("#chart svg path.history-line", { state: "attached" });
    const d = await page.getAttribute("#chart svg path.history-line", "d");
    check(/^M[\d.]+,[\d.]+/.test(d || ""), "history chart renders an SVG path");
    const ticks = await page.$$eval("#chart svg text.axis", (ts) => ts.map((t) => t.textContent));
    check(ticks.some((t) => /^\d\d:\d\d/.test(t)) && ticks.includes("0"), `chart has time and count ticks (${ticks.join(" ")})`);
    const hist = await api("/api/v1/servers/" + encodeURIComponent(target.addr) + "/history");
    check(Array.isArray(hist) && hist.length > 0 && "at" in hist[0] && "ok" in hist[0], `history API returns ${hist.length} samples`);
    await page.keyboard.press("Escape");
    await page.waitForSelector("#detail.open", { state: "detached" }).catch(() => {});
    check(!(await page.$("#detail.open")) && !new URL(page.url()).searchParams.get("server"), "Esc closes the detail view");
    await page.goBack();
    await page.waitForSelector("#detail.open #detail-address");
    check(await page.textContent("#detail-address") === target.addr, "back opens it again");

    // Rules get display names where the protocol has them; other games copy their address.
    await page.fill("#q", "");
    await page.selectOption("#protocol", "gamespy");
    await page.click("#spacer .row");
    await page.waitForSelector("#rules tr th[title=hostport]");
    const rule = await page.textContent("#rules tr th[title=hostport]");
    check(rule.startsWith("Game Port"), `rules show display names ("${rule}")`);
    check((await page.getAttribute("#connect", "href") || "").startsWith("unreal://"), "UT99 servers have an unreal:// link");
    await page.selectOption("#protocol", "gameagent");
    await page.click("#spacer .row");
    await page.waitForFunction(() => /Protocolgameagent/.test(document.getElementById("facts").textContent));
    check((await page.$("#connect")) === null, "Serious Sam servers have no connect link (copy only)");
    await page.selectOption("#protocol", "");
    await page.keyboard.press("Escape");

    // The keyboard alone: Tab reaches the column headers and the rows in the order shown,
    // Enter and Space sort and open, the arrows move between rows, Escape closes the detail
    // and gives the focus back to its row, and the focus is always visible.
    await keyboard(page, c.total);

    // Live, among many: a server added, changed and removed while the page is open.
    const before = (await counts(page)).total;
    const readsBefore = reads.count;
    const live = await mgmtServer("Live arrival", "127.0.5.3", 20003);
    try {
      await waitShown(page, before + 1, "the added server", before + 1);
      await page.fill("#q", "Live arrival");
      r = await waitRows(page, (r) => r.length === 1 && r[0].name === "Live arrival", "the added row");
      live.stats(3, 4, false, 1);
      await waitRows(page, (r) => r.length === 1 && r[0].players === "3 / 4" && r[0].badge === "lobby closed", "the changed row");
      live.unregister();
      await waitShown(page, 0, "the removed server", before);
      check(true, "among " + before + " servers, one added, changed and removed live");
    } finally {
      live.close();
    }
    await page.fill("#q", "");
    check(reads.count === readsBefore, "no list read while the page follows the changes");

    // ETag: an unchanged list answers 304 (the page's fallback while its stream is refused).
    const e1 = await fetch(base + "/api/v1/servers?per_page=5&sort=address");
    const etag = e1.headers.get("etag");
    const e2 = await fetch(base + "/api/v1/servers?per_page=5&sort=address", { headers: { "If-None-Match": etag } });
    check(etag && (e2.status === 304 || e2.headers.get("etag") !== etag), `ETag ${etag} revalidates (${e2.status})`);

    // A shared link opens a server's detail: the open lobby, whose players come and go. For
    // the screenshot, its chart gets a minute of samples first.
    const lobby = "127.0.5.1:20001";
    const t0 = Date.now();
    while (shots && (await api("/api/v1/servers/" + lobby + "/history")).length < 25 && Date.now() - t0 < 60_000) {
      await page.waitForTimeout(1000);
    }
    await page.goto(base + "/?server=" + encodeURIComponent(lobby) + "&server_game=bomberman");
    await page.waitForSelector("#detail.open #chart svg path.history-line", { state: "attached" });
    check(await page.textContent("#detail-address") === lobby, "a shared link opens the server's detail");
    // Its players change every 30 s and unpolled servers are sampled every 2 s. The history
    // keeps one point a minute (its mean players), so the current minute's point moves as
    // samples come: collect what the route says over the fetches, for at most 75 s (a minute
    // boundary comes within it, and a new minute's first samples are one phase's value).
    const steps = new Set();
    for (const t1 = Date.now(); steps.size < 2 && Date.now() - t1 < 75_000; await page.waitForTimeout(500)) {
      for (const p of await api("/api/v1/servers/" + lobby + "/history")) steps.add(p.num_players);
    }
    check(steps.size > 1, `the management server's history follows its changes (${[...steps].join(", ")} players)`);
    await shot(page, "browser-detail.png");
    check(errors.length === 0, "no page errors" + (errors.length ? ": " + errors.join("; ") : ""));

    // A phone: name, players; the detail fills the screen.
    const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    await phone.goto(base + "/");
    await phone.waitForSelector("#spacer .row");
    await waitShown(phone, (await counts(page)).total, "the phone's list");
    const hidden = await phone.$eval("#spacer .row [data-col=game]", (c) => getComputedStyle(c).display);
    check(hidden === "none", "the phone layout shows name and players only");
    await shot(phone, "browser-phone.png");
    await phone.close();
  } finally {
    clearInterval(churn);
    for (const l of lobbies) l.close();
  }
}

const browser = await launch();
let failed = false;
try {
  if (phase === "empty") await emptyPhase(browser);
  else await listPhase(browser);
} catch (e) {
  console.error("e2e: " + e.message);
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
