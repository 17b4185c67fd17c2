//! `muster-bench scan`: one farm of emulated servers, three query tools timed on it.
//!
//! The GameSpy v1 farm (`--protocol gamespy1`, the default): N servers (style `ut99`, gamename
//! `ut`, query port = game port + 1), each with K players whose Latin-1 names are long enough
//! that every `\status\` reply is exactly two datagrams (checked against the responder before
//! the farm starts); `reorder = 0.5` sends half of the replies in reverse order and `loss = P`
//! drops that share of requests.
//!
//! The Quake III farm (`--protocol quake3`): N ioquake3-style servers (query on the game port
//! itself, Windows-1252 text), each with K players whose Latin-1 names are 16 characters long
//! (one `statusResponse` datagram each), the same `loss`; qstat asks them as `q3s`, GameDig as
//! `q3a`, Muster with `-p quake3`.
//!
//! The A2S farm (`--protocol a2s`): N Source-style servers (Counter-Strike: Source, query on
//! the game port), every other one requiring the challenge round for INFO too (PLAYER and
//! RULES always do), each with K players (30 by default, one PLAYER datagram) and
//! [`A2S_RULES`] rules whose RULES reply is exactly three split datagrams (checked against the
//! farm's own responders before it starts), half of the split replies sent in reverse order,
//! the same `loss`. Every tool must read INFO, PLAYER and RULES: qstat asks `a2s` with `-P -R`,
//! GameDig `css` with `requestRules`, Muster `-p a2s` (which always asks all three).

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::respond::{PlayerState, Responder, ServerState};

use crate::procs::{self, Finished, KillOnDrop};
use crate::table;

/// Longest time any one tool may run.
const TOOL_LIMIT: Duration = Duration::from_secs(120);
/// How long the loopback limit is measured.
const LOOPBACK_MEASURE: Duration = Duration::from_secs(1);
/// Longest time the farm may take to bind.
const FARM_START_LIMIT: Duration = Duration::from_secs(60);
/// Latin-1 syllables the generated names are built from.
const SYLLABLES: [&str; 12] = [
    "Jé", "rô", "mé", "Æs", "kø", "bïng", "Çà", "ñö", "Üß", "grå", "Ðé", "þór",
];

/// The protocol of the farm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ScanProtocol {
    /// GameSpy v1 (Unreal Tournament), two-datagram replies.
    Gamespy1,
    /// Quake III (ioquake3), one-datagram replies.
    Quake3,
    /// Valve A2S (Source), INFO + PLAYER + RULES, RULES split in three datagrams.
    A2s,
}

impl ScanProtocol {
    /// Ports one server holds: game and query port, or the game port alone.
    fn ports(self) -> u32 {
        match self {
            Self::Gamespy1 => 2,
            Self::Quake3 | Self::A2s => 1,
        }
    }

    /// The name `muster scan -p` and the farm use.
    fn name(self) -> &'static str {
        match self {
            Self::Gamespy1 => "gamespy1",
            Self::Quake3 => "quake3",
            Self::A2s => "a2s",
        }
    }

    /// qstat's server type.
    fn qstat_type(self) -> &'static str {
        match self {
            Self::Gamespy1 => "gps",
            Self::Quake3 => "q3s",
            Self::A2s => "a2s",
        }
    }

    /// GameDig's game type.
    fn gamedig_type(self) -> &'static str {
        match self {
            Self::Gamespy1 => "unrealtournament",
            Self::Quake3 => "q3a",
            Self::A2s => "css",
        }
    }

    /// Offset of the query port from the game port.
    fn query_offset(self) -> u32 {
        match self {
            Self::Gamespy1 => 1,
            Self::Quake3 | Self::A2s => 0,
        }
    }

    /// Players per server unless `--players` says otherwise.
    fn default_players(self) -> usize {
        match self {
            Self::Gamespy1 | Self::Quake3 => 16,
            Self::A2s => 30,
        }
    }

    /// Rules every server of the farm carries (and every tool must read).
    fn rules(self) -> usize {
        match self {
            Self::Gamespy1 | Self::Quake3 => 0,
            Self::A2s => A2S_RULES,
        }
    }
}

/// Player-name length (before the two-digit slot) of the A2S farm: 30 players in one PLAYER
/// datagram.
const A2S_NAME_CHARS: usize = 12;

/// Rules of every A2S server: 96 rules of 32 bytes make a RULES reply of about 3 KB, three
/// split parts of [`muster_proto::a2s::respond::SPLIT_PAYLOAD`] bytes.
const A2S_RULES: usize = 96;

/// Split datagrams the RULES reply of every A2S server must take.
const A2S_RULES_PARTS: usize = 3;

/// Player-name length (before the two-digit slot) of the Quake III farm.
const QUAKE3_NAME_CHARS: usize = 16;

/// Flags of `muster-bench scan`.
#[derive(Debug, clap::Args)]
pub(crate) struct ScanArgs {
    /// The farm's protocol.
    #[arg(long, value_enum, default_value_t = ScanProtocol::Gamespy1)]
    protocol: ScanProtocol,
    /// Emulated servers.
    #[arg(long, default_value_t = 2000)]
    servers: usize,
    /// Share of requests each server ignores (0–1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Players on every server; default 16 (30 with `--protocol a2s`).
    #[arg(long)]
    players: Option<usize>,
    /// Tools to time, comma-separated: muster, qstat, gamedig.
    #[arg(long, value_delimiter = ',', default_value = "muster,qstat,gamedig")]
    peers: Vec<String>,
    /// Muster's `--timeout`; default: Muster's own default.
    #[arg(long, value_parser = crate::parse_duration)]
    muster_timeout: Option<Duration>,
    /// Muster's `--retries`; default: Muster's own default.
    #[arg(long)]
    muster_retries: Option<u32>,
    /// Muster's `--rate` in packets per second (`0` = unlimited), or `default` for Muster's own
    /// default (paced).
    #[arg(long, default_value = "0")]
    muster_rate: String,
    /// First game port of the farm; server i uses BASE + 2i (game) and BASE + 2i + 1 (query),
    /// or BASE + i for Quake III. Keep the range below the ephemeral ports (32768+).
    #[arg(long, default_value_t = 10_000)]
    base_port: u16,
    /// Seed of the farm.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Rounds: every tool runs once per round, in turn, and the table shows each tool's median
    /// run (with the fastest and slowest), so a busy moment of the machine does not decide.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Write the farm (`farm.toml`) and the server lists (`muster-servers.txt` with game
    /// addresses, `query-servers.txt` with query addresses) into DIR and exit without timing
    /// anything: to run the same farm by hand, e.g. under a profiler.
    #[arg(long, value_name = "DIR")]
    write_farm: Option<std::path::PathBuf>,
}

impl ScanArgs {
    /// Players on every server.
    fn players(&self) -> usize {
        self.players
            .unwrap_or_else(|| self.protocol.default_players())
    }

    /// Whether an answer with `players` players and `rules` of the farm's rules is complete.
    fn complete(&self, players: usize, rules: usize) -> bool {
        players == self.players() && rules == self.protocol.rules()
    }
}

/// What one tool achieved.
#[derive(Debug)]
struct Outcome {
    tool: &'static str,
    wall: Duration,
    answered: usize,
    full: usize,
    note: String,
    /// Muster's own count: datagrams sent and received, and the engine's run time.
    datagrams: Option<EngineStats>,
}

/// The counters of Muster's query engine, from its debug log line.
#[derive(Debug, Clone, Copy)]
struct EngineStats {
    sent: u64,
    received: u64,
    seconds: f64,
}

impl EngineStats {
    /// Parses `query engine finished sent=… received=… … seconds=…` from Muster's log.
    fn parse(log: &str) -> Option<Self> {
        let line = log
            .lines()
            .rev()
            .find(|l| l.contains("query engine finished"))?;
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_owned)
        };
        Some(Self {
            sent: field("sent")?.parse().ok()?,
            received: field("received")?.parse().ok()?,
            seconds: field("seconds")?.parse().ok()?,
        })
    }

    fn per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            (self.sent + self.received) as f64 / self.seconds
        } else {
            0.0
        }
    }
}

fn latin1_name(seed: usize, chars: usize) -> String {
    let mut s = String::new();
    let mut i = seed;
    while s.chars().count() < chars {
        s.push_str(SYLLABLES.get(i % SYLLABLES.len()).copied().unwrap_or("é"));
        i = i.wrapping_mul(7).wrapping_add(3);
    }
    s.chars().take(chars).collect()
}

fn server_state(
    protocol: ScanProtocol,
    base: u16,
    index: usize,
    players: usize,
    name_chars: usize,
) -> ServerState {
    let game_port =
        u16::try_from(u32::from(base) + protocol.ports() * index as u32).unwrap_or(u16::MAX);
    let (map, game_type, version, game) = match protocol {
        ScanProtocol::Gamespy1 => ("DM-Deck16][", "DeathMatchPlus", "451", "ut"),
        ScanProtocol::Quake3 => ("q3dm17", "0", "ioq3 1.36 linux-x86_64", "Quake3Arena"),
        ScanProtocol::A2s => ("de_dust2", "Counter-Strike: Source", "1.0.0.71", "cstrike"),
    };
    ServerState {
        name: format!("Bénch Sérvér {index:05}"),
        map: map.to_owned(),
        game_type: game_type.to_owned(),
        version: version.to_owned(),
        game: game.to_owned(),
        game_port,
        password: false,
        max_players: u32::try_from(players.max(16)).unwrap_or(u32::MAX),
        players: (0..players)
            .map(|p| PlayerState {
                // Fixed width: the name, then a two-digit slot number.
                name: format!("{}{p:02}", latin1_name(index + p, name_chars)),
                score: i64::try_from(p).unwrap_or(0),
                ping_ms: 40,
                team: Some(0),
                clan: String::new(),
                country: -1,
                spectator: false,
                bot: false,
            })
            .collect(),
        // Fixed width: 32 bytes per rule on the A2S wire (key, value, two NULs).
        rules: (0..protocol.rules())
            .map(|r| {
                (
                    format!("{A2S_RULE_PREFIX}{r:03}"),
                    format!("value-{index:05}-{r:04}"),
                )
            })
            .collect(),
    }
}

/// The prefix of every rule the A2S farm sets (qstat adds rules of its own from INFO).
const A2S_RULE_PREFIX: &str = "bench_rule_";

/// The farm's rules in a tool's JSON object of rules.
fn farm_rules(rules: &serde_json::Value) -> usize {
    rules.as_object().map_or(0, |o| {
        o.keys().filter(|k| k.starts_with(A2S_RULE_PREFIX)).count()
    })
}

fn datagrams(state: &ServerState) -> usize {
    GameSpyResponder::with_profile(Profile::Ut99)
        .answer(b"\\status\\", state)
        .len()
}

/// The longest player-name length (≤ 24 characters) for which every reply is two datagrams.
fn pick_name_len(base: u16, servers: usize, players: usize) -> anyhow::Result<usize> {
    for chars in (1..=24).rev() {
        let two = |i: usize| {
            datagrams(&server_state(
                ScanProtocol::Gamespy1,
                base,
                i,
                players,
                chars,
            )) == 2
        };
        if two(0) && two(servers.saturating_sub(1)) && (0..servers).all(two) {
            return Ok(chars);
        }
    }
    bail!(
        "no player-name length makes {players}-player replies exactly two datagrams; try another --players"
    )
}

/// What one A2S server sends a client that asks INFO, PLAYER and RULES in turn, each as a
/// fresh client does (no challenge first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct A2sShape {
    /// INFO came back as a challenge first.
    info_challenged: bool,
    /// Datagrams of the PLAYER reply, and the players in it.
    player_datagrams: usize,
    players: usize,
    /// Datagrams of the RULES reply, and the rules in it.
    rules_datagrams: usize,
    rules: usize,
}

/// Asks `responder` (serving `state`) as a client would and describes its replies.
fn a2s_shape(responder: &mut dyn Responder, state: &ServerState) -> anyhow::Result<A2sShape> {
    use muster_proto::a2s::{NO_CHALLENGE, Packet, Reassembler};
    let from: std::net::SocketAddr = "127.0.0.1:40000".parse()?;
    let mut ask = |p: &Packet| -> anyhow::Result<(usize, Packet)> {
        let mut request = Vec::new();
        p.encode(&mut request);
        let mut replies = Vec::new();
        let now = Instant::now();
        responder.handle_datagram(now, from, &request, state, &mut replies);
        let mut re = Reassembler::new(Duration::from_secs(1));
        let mut whole = None;
        for r in &replies {
            if Reassembler::is_split(&r.bytes) {
                if let Some(w) = re.push(now, &r.bytes)? {
                    whole = Some(w);
                }
            } else {
                whole = Some(r.bytes.clone());
            }
        }
        let whole = whole.with_context(|| format!("no whole reply to {p:?}"))?;
        Ok((replies.len(), Packet::decode(&whole)?))
    };
    let (info_challenged, challenge) = match ask(&Packet::InfoRequest { challenge: None })? {
        (_, Packet::Info(_)) => (false, None),
        (_, Packet::Challenge(c)) => {
            let (_, again) = ask(&Packet::InfoRequest { challenge: Some(c) })?;
            if !matches!(again, Packet::Info(_)) {
                bail!("INFO with the challenge: {again:?}");
            }
            (true, Some(c))
        }
        (_, other) => bail!("INFO: {other:?}"),
    };
    let challenge = match challenge {
        Some(c) => c,
        None => match ask(&Packet::PlayerRequest {
            challenge: NO_CHALLENGE,
        })? {
            (_, Packet::Challenge(c)) => c,
            (_, other) => bail!("PLAYER without a challenge: {other:?}"),
        },
    };
    let (player_datagrams, players) = match ask(&Packet::PlayerRequest { challenge })? {
        (n, Packet::Players(p)) => (n, p.players.len()),
        (_, other) => bail!("PLAYER: {other:?}"),
    };
    let (rules_datagrams, rules) = match ask(&Packet::RulesRequest { challenge })? {
        (n, Packet::Rules(r)) => (n, r.rules.len()),
        (_, other) => bail!("RULES: {other:?}"),
    };
    Ok(A2sShape {
        info_challenged,
        player_datagrams,
        players,
        rules_datagrams,
        rules,
    })
}

/// Checks every server of an A2S farm file with the responder the farm gives it: INFO behind
/// the challenge on even servers only, every player in one PLAYER datagram, every rule in a
/// RULES reply of exactly [`A2S_RULES_PARTS`] split datagrams.
fn check_a2s_farm(toml: &str, players: usize) -> anyhow::Result<()> {
    let farm = muster_server::farm::FarmSpec::from_toml(toml)?;
    for (i, server) in farm.expand()?.iter().enumerate() {
        let mut endpoint =
            muster_server::endpoints::endpoint(server).map_err(|e| anyhow::anyhow!(e))?;
        let shape = a2s_shape(endpoint.responder.as_mut(), &server.state)
            .with_context(|| format!("A2S server {i}"))?;
        let want = A2sShape {
            info_challenged: i % 2 == 0,
            player_datagrams: 1,
            players,
            rules_datagrams: A2S_RULES_PARTS,
            rules: A2S_RULES,
        };
        if shape != want {
            bail!(
                "A2S server {i} answers {shape:?}, the bench wants {want:?}; try fewer --players"
            );
        }
    }
    Ok(())
}

fn farm_toml(args: &ScanArgs, chars: usize) -> String {
    let (servers, players, loss, seed) = (args.servers, args.players(), args.loss, args.seed);
    let mut out = format!("seed = {seed}\nbind = \"127.0.0.1\"\n");
    // The GameSpy farm names its style; the Quake III farm is ioquake3 and the A2S farm
    // Source, the default styles.
    let style = match args.protocol {
        ScanProtocol::Gamespy1 => "style = \"ut99\"\n",
        ScanProtocol::Quake3 | ScanProtocol::A2s => "",
    };
    let protocol = args.protocol.name();
    for i in 0..servers {
        let s = server_state(args.protocol, args.base_port, i, players, chars);
        let _ = write!(
            out,
            "\n[[server]]\nprotocol = \"{protocol}\"\n{style}port = {}\nname = \"{}\"\n\
             map = \"{}\"\ngame_type = \"{}\"\nmax_players = {}\nloss = {loss}\nreorder = 0.5\n",
            s.game_port, s.name, s.map, s.game_type, s.max_players
        );
        if args.protocol == ScanProtocol::A2s {
            // Every other server wants the challenge for INFO as well.
            let _ = writeln!(out, "require_challenge = {}", i % 2 == 0);
        }
        if !s.rules.is_empty() {
            out.push_str("rules = { ");
            for (n, (k, v)) in s.rules.iter().enumerate() {
                let sep = if n == 0 { "" } else { ", " };
                let _ = write!(out, "{sep}{k} = \"{v}\"");
            }
            out.push_str(" }\n");
        }
        out.push_str("players = [\n");
        for p in &s.players {
            let _ = writeln!(
                out,
                "  {{ name = \"{}\", score = {}, ping = {}, team = 0 }},",
                p.name, p.score, p.ping_ms
            );
        }
        out.push_str("]\n");
    }
    out
}

/// Starts `muster emulate` and waits until every server is bound.
fn start_farm(muster: &Path, config: &Path, servers: usize) -> anyhow::Result<KillOnDrop> {
    procs::start_farm(muster, config, servers, Stdio::inherit(), FARM_START_LIMIT)?
        .with_context(|| format!("muster emulate exited or did not report every server listening within {} s (see its messages above)", FARM_START_LIMIT.as_secs()))
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".to_owned()
    }
}

fn failed_note(f: &Finished) -> String {
    match f.status {
        None => format!("killed after {} s", TOOL_LIMIT.as_secs()),
        Some(s) if !s.success() => {
            let err = String::from_utf8_lossy(&f.stderr);
            // Muster's engine counters are a debug line, not the error.
            let last = err
                .lines()
                .rev()
                .find(|l| !l.contains(" DEBUG "))
                .unwrap_or("")
                .trim()
                .to_owned();
            format!("exit {s}: {last}")
        }
        Some(_) => String::new(),
    }
}

fn run_muster(
    muster: &Path,
    dir: &Path,
    args: &ScanArgs,
    game_file: &Path,
) -> anyhow::Result<Outcome> {
    let mut cmd = Command::new(muster);
    cmd.arg("scan")
        .arg("--servers")
        .arg(game_file)
        .args(["--protocol", args.protocol.name(), "-f", "ndjson"])
        // The engine's counters, for datagrams per second.
        .env("RUST_LOG", "muster_query=debug")
        .env("NO_COLOR", "1");
    if args.muster_rate != "default" {
        cmd.arg("--rate").arg(&args.muster_rate);
    }
    if let Some(t) = args.muster_timeout {
        cmd.arg("--timeout")
            .arg(humantime::format_duration(t).to_string());
    }
    if let Some(r) = args.muster_retries {
        cmd.arg("--retries").arg(r.to_string());
    }
    let f = procs::run_bounded(cmd, dir, "muster", TOOL_LIMIT)?;
    let (mut answered, mut full) = (0, 0);
    for line in String::from_utf8_lossy(&f.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["status"] == "ok" {
            answered += 1;
            let players = v["players"].as_array().map_or(0, Vec::len);
            if args.complete(players, farm_rules(&v["rules"])) && v["partial"] != true {
                full += 1;
            }
        }
    }
    Ok(Outcome {
        tool: "muster",
        wall: f.wall,
        answered,
        full,
        note: failed_note(&f),
        datagrams: EngineStats::parse(&String::from_utf8_lossy(&f.stderr)),
    })
}

fn run_qstat(
    quakestat: &Path,
    dir: &Path,
    args: &ScanArgs,
    query_addrs: &[String],
) -> anyhow::Result<Outcome> {
    let file = dir.join("qstat-servers.txt");
    let kind = args.protocol.qstat_type();
    let text: String = query_addrs
        .iter()
        .map(|a| format!("{kind} {a}\n"))
        .collect();
    std::fs::write(&file, text)?;
    let mut cmd = Command::new(quakestat);
    cmd.args([
        "-maxsim",
        "1000",
        "-sendinterval",
        "0",
        "-interval",
        "0.2",
        "-json",
        "-P",
    ]);
    if args.protocol.rules() > 0 {
        cmd.arg("-R");
    }
    cmd.arg("-f").arg(&file);
    let f = procs::run_bounded(cmd, dir, "qstat", TOOL_LIMIT)?;
    let (mut answered, mut full) = (0, 0);
    let text = String::from_utf8_lossy(&f.stdout);
    let parsed: Result<serde_json::Value, _> = serde_json::from_str(&text);
    let mut note = failed_note(&f);
    match parsed {
        Ok(serde_json::Value::Array(servers)) => {
            for s in servers {
                if s["status"] == "online" {
                    answered += 1;
                    let players = s["players"].as_array().map_or(0, Vec::len);
                    if args.complete(players, farm_rules(&s["rules"])) {
                        full += 1;
                    }
                }
            }
        }
        _ => note.push_str(" (output is not a JSON array)"),
    }
    Ok(Outcome {
        tool: "qstat",
        wall: f.wall,
        answered,
        full,
        note,
        datagrams: None,
    })
}

fn run_gamedig(
    node: &Path,
    gamedig: &Path,
    script: &Path,
    dir: &Path,
    args: &ScanArgs,
    query_addrs: &[String],
) -> anyhow::Result<Outcome> {
    let file = dir.join("gamedig-servers.txt");
    let text: String = query_addrs.iter().map(|a| format!("{a}\n")).collect();
    std::fs::write(&file, text)?;
    let mut cmd = Command::new(node);
    cmd.arg(script)
        .arg(gamedig)
        .arg(&file)
        .arg(args.protocol.gamedig_type());
    if args.protocol.rules() > 0 {
        // GameDig asks RULES only when told to (players it asks by default).
        cmd.arg(r#"{"requestRules":true}"#);
    }
    let f = procs::run_bounded(cmd, dir, "gamedig", TOOL_LIMIT)?;
    let (mut answered, mut full) = (0, 0);
    for line in String::from_utf8_lossy(&f.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["ok"] == true {
            answered += 1;
            let count = |k: &str| usize::try_from(v[k].as_u64().unwrap_or(0)).unwrap_or(0);
            if args.complete(count("players"), count("rules")) {
                full += 1;
            }
        }
    }
    Ok(Outcome {
        tool: "gamedig",
        wall: f.wall,
        answered,
        full,
        note: failed_note(&f),
        datagrams: None,
    })
}

/// Runs the scan bench and prints its table.
pub(crate) fn run(args: &ScanArgs) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&args.loss) {
        bail!("--loss must be between 0 and 1");
    }
    let max =
        (usize::from(u16::MAX) - usize::from(args.base_port)) / args.protocol.ports() as usize;
    if args.servers == 0 || args.servers > max {
        bail!("--servers must be between 1 and {max}");
    }
    let exe_dir = procs::exe_dir()?;
    let muster = exe_dir.join("muster");
    if !muster.is_file() {
        bail!(
            "{} not found: build it first with `cargo build --release -p muster`",
            muster.display()
        );
    }
    if let Some(dir) = &args.write_farm {
        std::fs::create_dir_all(dir)?;
        write_farm(args, dir)?;
        println!(
            "wrote {0}/farm.toml, {0}/muster-servers.txt and {0}/query-servers.txt\n\
             run: muster emulate --config {0}/farm.toml\n\
             then: muster scan -p {1} --servers {0}/muster-servers.txt -f ndjson --rate 0",
            dir.display(),
            args.protocol.name()
        );
        return Ok(());
    }
    let root = procs::workspace_root();
    let dir = std::env::temp_dir().join(format!("muster-bench-scan-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run_in(args, &muster, &root, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The farm's files in `dir`: the farm, the game addresses (for Muster) and the query
/// addresses (for qstat and GameDig).
struct FarmFiles {
    config: std::path::PathBuf,
    game_file: std::path::PathBuf,
    query_addrs: Vec<String>,
    name_chars: usize,
}

fn write_farm(args: &ScanArgs, dir: &Path) -> anyhow::Result<FarmFiles> {
    let chars = match args.protocol {
        ScanProtocol::Gamespy1 => pick_name_len(args.base_port, args.servers, args.players())?,
        ScanProtocol::Quake3 => QUAKE3_NAME_CHARS,
        ScanProtocol::A2s => A2S_NAME_CHARS,
    };
    let base = u32::from(args.base_port);
    let (stride, offset) = (args.protocol.ports(), args.protocol.query_offset());
    let config = dir.join("farm.toml");
    let toml = farm_toml(args, chars);
    if args.protocol == ScanProtocol::A2s {
        check_a2s_farm(&toml, args.players())?;
    }
    std::fs::write(&config, toml)?;
    let game_addrs: Vec<String> = (0..args.servers)
        .map(|i| format!("127.0.0.1:{}", base + stride * i as u32))
        .collect();
    let query_addrs: Vec<String> = (0..args.servers)
        .map(|i| format!("127.0.0.1:{}", base + stride * i as u32 + offset))
        .collect();
    let game_file = dir.join("muster-servers.txt");
    std::fs::write(&game_file, game_addrs.join("\n") + "\n")?;
    std::fs::write(dir.join("query-servers.txt"), query_addrs.join("\n") + "\n")?;
    Ok(FarmFiles {
        config,
        game_file,
        query_addrs,
        name_chars: chars,
    })
}

fn run_in(args: &ScanArgs, muster: &Path, root: &Path, dir: &Path) -> anyhow::Result<()> {
    let base = u32::from(args.base_port);
    if let Some(busy) = (base..base + args.protocol.ports() * args.servers as u32)
        .find(|&p| std::net::UdpSocket::bind(("127.0.0.1", u16::try_from(p).unwrap_or(0))).is_err())
    {
        bail!("UDP port {busy} is in use: pick another --base-port");
    }
    let FarmFiles {
        config,
        game_file,
        query_addrs,
        name_chars: chars,
    } = write_farm(args, dir)?;

    let kind = match args.protocol {
        ScanProtocol::Gamespy1 => "GameSpy v1 servers (ut99)",
        ScanProtocol::Quake3 => "Quake III servers (ioquake3)",
        ScanProtocol::A2s => "A2S servers (Source, INFO challenge on every other one)",
    };
    let replies = match args.protocol {
        ScanProtocol::Gamespy1 => "2 datagrams per reply, reorder 0.5".to_owned(),
        ScanProtocol::Quake3 => "1 datagram per reply".to_owned(),
        ScanProtocol::A2s => format!(
            "PLAYER in 1 datagram, {A2S_RULES} rules in {A2S_RULES_PARTS} split datagrams, reorder 0.5"
        ),
    };
    eprintln!(
        "farm: {} {kind}, {} players with {}-character Latin-1 names, {replies}, loss {}",
        args.servers,
        args.players(),
        chars + 2,
        args.loss
    );
    let started = Instant::now();
    let _farm = start_farm(muster, &config, args.servers)?;
    eprintln!(
        "farm listening after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let wants = |t: &str| args.peers.iter().any(|p| p.eq_ignore_ascii_case(t));
    let mut skipped = Vec::new();
    let qstat = if wants("qstat") {
        let q = procs::which("quakestat");
        if q.is_none() {
            skipped.push("qstat: quakestat not on PATH (scripts/install-peers.sh)");
        }
        q
    } else {
        None
    };
    let gamedig = root.join(".peers/node/node_modules/gamedig");
    let script = root.join("scripts/bench/gamedig-scan.mjs");
    let node = if wants("gamedig") {
        match (procs::which("node"), gamedig.is_dir(), script.is_file()) {
            (Some(node), true, true) => Some(node),
            (None, _, _) => {
                skipped.push("gamedig: node not on PATH");
                None
            }
            (_, false, _) => {
                skipped.push("gamedig: .peers/node has no gamedig (scripts/install-peers.sh)");
                None
            }
            (_, _, false) => {
                skipped.push("gamedig: scripts/bench/gamedig-scan.mjs missing");
                None
            }
        }
    } else {
        None
    };
    // runs[tool] = every run of that tool, in round order.
    let mut runs: Vec<Vec<Outcome>> = Vec::new();
    for round in 0..args.runs.max(1) {
        let mut this_round = Vec::new();
        if wants("muster") {
            this_round.push(run_muster(muster, dir, args, &game_file)?);
        }
        if let Some(q) = &qstat {
            this_round.push(run_qstat(q, dir, args, &query_addrs)?);
        }
        if let Some(node) = &node {
            this_round.push(run_gamedig(
                node,
                &gamedig,
                &script,
                dir,
                args,
                &query_addrs,
            )?);
        }
        for (i, o) in this_round.into_iter().enumerate() {
            eprintln!(
                "round {}: {} {:.3} s, {} full lists",
                round + 1,
                o.tool,
                o.wall.as_secs_f64(),
                o.full
            );
            match runs.get_mut(i) {
                Some(v) => v.push(o),
                None => runs.push(vec![o]),
            }
        }
    }
    let outcomes: Vec<Summary> = runs.into_iter().filter_map(Summary::of).collect();
    let limit = if wants("muster") {
        let limit = crate::loopback::measure(LOOPBACK_MEASURE)?;
        eprintln!("loopback limit: {limit:.0} datagrams/s");
        Some(limit)
    } else {
        None
    };
    print_table(args, &outcomes, limit);
    for s in skipped {
        println!("skipped {s}");
    }
    Ok(())
}

/// A tool's runs: the median run, and the fastest and slowest wall times.
#[derive(Debug)]
struct Summary {
    median: Outcome,
    fastest: Duration,
    slowest: Duration,
    runs: usize,
}

impl Summary {
    fn of(mut runs: Vec<Outcome>) -> Option<Self> {
        runs.sort_by_key(|o| o.wall);
        let fastest = runs.first()?.wall;
        let slowest = runs.last()?.wall;
        let n = runs.len();
        let median = runs.into_iter().nth(n / 2)?;
        Some(Self {
            median,
            fastest,
            slowest,
            runs: n,
        })
    }
}

fn print_table(args: &ScanArgs, summaries: &[Summary], limit: Option<f64>) {
    let base = summaries
        .iter()
        .map(|s| &s.median)
        .find(|o| o.tool == "muster");
    let header = [
        "tool",
        "wall time (median)",
        "fastest-slowest",
        "per server",
        "answered",
        if args.protocol.rules() > 0 {
            "with all players and rules"
        } else {
            "with all players"
        },
        "time vs muster",
        "full lists vs muster",
        "datagrams/s (vs loopback limit)",
        "note",
    ];
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|sum| {
            let o = &sum.median;
            let (t, a) = base.map_or(("-".to_owned(), "-".to_owned()), |b| {
                (
                    ratio(o.wall.as_secs_f64(), b.wall.as_secs_f64()),
                    ratio(o.full as f64, b.full as f64),
                )
            });
            let rate = o.datagrams.map_or("-".to_owned(), |d| {
                let per_s = d.per_second();
                match limit {
                    Some(l) => format!("{per_s:.0} ({})", ratio(per_s, l)),
                    None => format!("{per_s:.0}"),
                }
            });
            vec![
                o.tool.to_owned(),
                format!("{:.3} s", o.wall.as_secs_f64()),
                format!(
                    "{:.3}-{:.3} s ({} runs)",
                    sum.fastest.as_secs_f64(),
                    sum.slowest.as_secs_f64(),
                    sum.runs
                ),
                format!(
                    "{:.1} µs",
                    o.wall.as_secs_f64() * 1e6 / args.servers.max(1) as f64
                ),
                format!("{}/{}", o.answered, args.servers),
                format!("{}/{}", o.full, args.servers),
                t,
                a,
                rate,
                o.note.clone(),
            ]
        })
        .collect();
    let flags = format!(
        "muster flags: --rate {}{}{}",
        args.muster_rate,
        args.muster_timeout
            .map(|t| format!(" --timeout {}", humantime::format_duration(t)))
            .unwrap_or_default(),
        args.muster_retries
            .map(|r| format!(" --retries {r}"))
            .unwrap_or_default(),
    );
    let reorder = match args.protocol {
        ScanProtocol::Gamespy1 | ScanProtocol::A2s => ", reorder 50 %",
        ScanProtocol::Quake3 => "",
    };
    let rules = match args.protocol.rules() {
        0 => String::new(),
        n => format!(" and {n} rules"),
    };
    println!(
        "scan: {} {} servers, {} players{rules} each, loss {:.0} %{reorder}; {flags}",
        args.servers,
        args.protocol.name(),
        args.players(),
        args.loss * 100.0
    );
    print!("{}", table::render(&header, &rows));
    if let Some(l) = limit {
        println!("loopback limit (sendmmsg/recvmmsg echo, one socket): {l:.0} datagrams/s");
    }
    let fastest_peer = summaries
        .iter()
        .filter(|s| s.median.tool != "muster")
        .min_by_key(|s| s.median.wall);
    if let (Some(m), Some(p)) = (base, fastest_peer) {
        println!(
            "muster is {}x as fast as the faster peer ({}), with {} vs {} full lists",
            ratio(p.median.wall.as_secs_f64(), m.wall.as_secs_f64()),
            p.median.tool,
            m.full,
            p.median.full
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arguments of a farm of `servers` `protocol` servers from port 10000, loss 0.1.
    fn test_args(protocol: ScanProtocol, servers: usize, players: Option<usize>) -> ScanArgs {
        ScanArgs {
            protocol,
            servers,
            loss: 0.1,
            players,
            peers: Vec::new(),
            muster_timeout: None,
            muster_retries: None,
            muster_rate: "0".to_owned(),
            base_port: 10_000,
            seed: 1,
            runs: 1,
            write_farm: None,
        }
    }

    /// The servers `muster emulate` makes of the farm file for `args` (names of `chars`).
    fn farm_servers(args: &ScanArgs, chars: usize) -> Vec<muster_server::farm::FarmServer> {
        let text = farm_toml(args, chars);
        let farm = muster_server::farm::FarmSpec::from_toml(&text).unwrap();
        farm.expand().unwrap()
    }

    #[test]
    fn replies_are_two_datagrams() {
        let chars = pick_name_len(10_000, 20, 16).unwrap();
        assert!(chars >= 8, "names should be long, got {chars}");
        assert_eq!(
            datagrams(&server_state(ScanProtocol::Gamespy1, 10_000, 3, 16, chars)),
            2
        );
    }

    #[test]
    fn farm_file_parses() {
        let servers = farm_servers(&test_args(ScanProtocol::Gamespy1, 3, Some(4)), 10);
        assert_eq!(servers.len(), 3);
        assert_eq!(servers[2].state.players.len(), 4);
        assert_eq!(
            servers[2].state.players[0].name,
            server_state(ScanProtocol::Gamespy1, 10_000, 2, 4, 10).players[0].name
        );
    }

    #[test]
    fn quake3_farm_uses_one_port_per_server_and_one_datagram_per_status() {
        let args = test_args(ScanProtocol::Quake3, 3, Some(16));
        let servers = farm_servers(&args, QUAKE3_NAME_CHARS);
        assert_eq!(servers.len(), 3);
        assert_eq!(servers[2].state.game_port, 10_002);
        assert_eq!(servers[2].state.players.len(), 16);
        assert_eq!(servers[2].state.game, "Quake3Arena");
        // Every player in one statusResponse.
        let state = server_state(ScanProtocol::Quake3, 10_000, 2, 16, QUAKE3_NAME_CHARS);
        let responder = muster_proto::quake3::respond::Quake3Responder::new(
            muster_proto::quake3::respond::Style::Ioquake3,
        );
        let mut bytes = Vec::new();
        responder.status_response(&state, None).encode(&mut bytes);
        assert!(
            bytes.len() <= muster_proto::quake3::LIST_DATAGRAM_LIMIT,
            "{}",
            bytes.len()
        );
        let Ok(muster_proto::quake3::Packet::StatusResponse { players, .. }) =
            muster_proto::quake3::Packet::decode(&bytes)
        else {
            panic!("not a statusResponse");
        };
        assert_eq!(players.len(), 16);
    }

    #[test]
    fn a2s_farm_splits_rules_in_three_and_challenges_every_other_info() {
        let args = test_args(ScanProtocol::A2s, 4, None);
        let servers = farm_servers(&args, A2S_NAME_CHARS);
        assert_eq!(servers.len(), 4);
        for (i, server) in servers.iter().enumerate() {
            assert_eq!(server.state.game_port, 10_000 + i as u16);
            assert_eq!(server.require_challenge, i % 2 == 0);
            assert_eq!(server.impairment.loss, 0.1);
            // Asked through the responder the farm itself builds for this server.
            let mut endpoint = muster_server::endpoints::endpoint(server).unwrap();
            assert_eq!(endpoint.port, server.state.game_port);
            let shape = a2s_shape(endpoint.responder.as_mut(), &server.state).unwrap();
            assert_eq!(
                shape,
                A2sShape {
                    info_challenged: i % 2 == 0,
                    player_datagrams: 1,
                    players: 30,
                    rules_datagrams: 3,
                    rules: 96,
                },
                "server {i}"
            );
        }
        check_a2s_farm(&farm_toml(&args, A2S_NAME_CHARS), 30).unwrap();
    }

    #[test]
    fn a2s_farm_check_refuses_a_farm_whose_players_need_a_split() {
        // 60 players no longer fit one PLAYER datagram: the bench must refuse to start.
        let args = test_args(ScanProtocol::A2s, 2, Some(60));
        let err = check_a2s_farm(&farm_toml(&args, A2S_NAME_CHARS), 60).unwrap_err();
        assert!(err.to_string().contains("player_datagrams: 2"), "{err}");
    }

    #[test]
    fn a2s_answers_count_only_when_every_player_and_rule_came() {
        let args = test_args(ScanProtocol::A2s, 1, None);
        let rules: serde_json::Map<String, serde_json::Value> = (0..A2S_RULES)
            .map(|r| (format!("{A2S_RULE_PREFIX}{r:03}"), "v".into()))
            .chain([("gamedir".to_owned(), "cstrike".into())])
            .collect();
        let rules = serde_json::Value::Object(rules);
        assert_eq!(farm_rules(&rules), A2S_RULES);
        assert!(args.complete(30, farm_rules(&rules)));
        assert!(!args.complete(30, A2S_RULES - 1));
        assert!(!args.complete(29, A2S_RULES));
    }
}
