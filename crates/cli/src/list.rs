//! `muster list`: a master server's list, and the list sources `scan` shares. The library's
//! [`muster_query::list_one`] fetches; this module maps flags to a source and renders.

use std::net::SocketAddr;

use muster_proto::gamespy_master::packet::Key;
use muster_proto::query::QueryError;
use muster_query::{
    Document, Failure, ListedAddress, MasterEntry, MasterSource, ResolveError, resolve_input,
};
use serde::Serialize;

use crate::dto::{LobbyResult, Resolved, show_addr};
use crate::exit;
use crate::output::{Column, Filter, Filterable, Format, Table, note, plural};
use crate::protocols::ProtocolArg;
use crate::query::UsageError;
use crate::resume;
use crate::steam_web;
use crate::timing::TimingArgs;
use crate::verbosity::Verbosity;

/// `--protocol` of `muster list`: which master protocol to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MasterKind {
    /// Serious Sam GameAgent master, UDP (default port 9005).
    Gameagent,
    /// GameSpy master, TCP list (default port 28900); needs --game.
    Gamespy,
    /// Teeworlds UDP master: 0.6 (`req2`) and 0.7 (token handshake) at once (default port 8300).
    Teeworlds,
    /// DDNet HTTP master: a `servers.json` URL or file.
    Ddnet,
    /// UT2003 plain-text list: a URL or file.
    #[value(name = "ut2003-text")]
    Ut2003Text,
    /// The Bomberman management server, TCP (default port 51963).
    Mgmt,
    /// Quake III / DarkPlaces master (dpmaster), UDP (default port 27950): `getservers`, or
    /// `getserversExt` (IPv4 and IPv6) with --game.
    Quake3,
    /// Valve master query (Valve's masters, Half-Life / Xash3D masters), UDP (default port
    /// 27010): paged, about one page every two seconds; --game asks for one game directory,
    /// --master-filter adds conditions.
    Valve,
}

impl MasterKind {
    fn default_port(self) -> Option<u16> {
        match self {
            Self::Gameagent => Some(9005),
            Self::Gamespy => Some(28900),
            Self::Teeworlds => Some(8300),
            Self::Mgmt => Some(muster_proto::mgmt::PORT),
            Self::Quake3 => Some(muster_proto::quake3::MASTER_PORT),
            Self::Valve => Some(muster_proto::valve_master::MASTER_PORT),
            Self::Ddnet | Self::Ut2003Text => None,
        }
    }

    /// The protocol `scan` queries the listed servers with.
    pub(crate) fn query_protocol(self) -> Option<ProtocolArg> {
        match self {
            Self::Gameagent => Some(ProtocolArg::Gameagent),
            Self::Gamespy => Some(ProtocolArg::Gamespy1),
            Self::Teeworlds | Self::Ddnet => Some(ProtocolArg::Teeworlds),
            Self::Ut2003Text => Some(ProtocolArg::Unreal2),
            Self::Quake3 => Some(ProtocolArg::Quake3),
            Self::Valve => Some(ProtocolArg::A2s),
            Self::Mgmt => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Gameagent => "gameagent",
            Self::Gamespy => "gamespy",
            Self::Teeworlds => "teeworlds",
            Self::Ddnet => "ddnet",
            Self::Ut2003Text => "ut2003-text",
            Self::Mgmt => "mgmt",
            Self::Quake3 => "quake3",
            Self::Valve => "valve",
        }
    }
}

/// Flags of `muster list`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// The master protocol.
    #[arg(long, short, value_enum)]
    pub protocol: MasterKind,
    /// The game whose list to ask for (GameSpy: the gamename, e.g. ut2, serioussamse; quake3:
    /// the master's game name, e.g. Quake3Arena, Xonotic, q3urt43, which asks with
    /// getserversExt and lists IPv6 servers too; without it quake3 asks `getservers`, IPv4
    /// only, for the games that send no name: Quake III Arena, OpenArena, RtCW, ET).
    #[arg(long, short)]
    pub game: Option<String>,
    /// quake3: the protocol number of the game's clients (68: Quake III Arena 1.32; 71:
    /// OpenArena; 3: DarkPlaces games). Empty and full servers are always asked for.
    #[arg(long, value_name = "N", allow_negative_numbers = true, default_value_t = muster_proto::quake3::query::DEFAULT_PROTOCOL)]
    pub protocol_version: i32,
    /// valve: conditions for the master, in its filter language (`\map\de_dust2\empty\1`,
    /// `\appid\240`, `\name_match\*dust*`, `\nand\2\…`); --game adds `\gamedir\GAME`.
    /// `\clver\0.21` is added unless given (Xash3D masters answer only requests naming the
    /// client's version).
    #[arg(long, value_name = "FILTER")]
    pub master_filter: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    pub format: Format,
    /// Keep only servers matching EXPR (repeatable, all must hold), where the list says it:
    /// `players>0`, `name~text`, `full=false`, `lobby=open` (management server).
    #[arg(long = "filter", value_name = "EXPR", value_parser = Filter::parse)]
    pub filters: Vec<Filter>,
    /// valve: read Steam's Web API server list (`IGameServersService/GetServerList`) with
    /// this Web API key instead of asking MASTER over UDP; same filter (without the automatic
    /// `\clver\`). The key is never printed.
    #[arg(
        long,
        value_name = "KEY",
        env = "MUSTER_STEAM_KEY",
        hide_env_values = true
    )]
    pub steam_key: Option<String>,
    /// valve with --steam-key: the Web API's base URL.
    #[arg(long, value_name = "URL", default_value = steam_web::DEFAULT_BASE)]
    pub steam_api: String,
    /// valve with --steam-key: ask for at most N servers.
    #[arg(long, value_name = "N", default_value_t = steam_web::DEFAULT_LIMIT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// valve (UDP): keep the paging position in FILE, written after every page; a later run
    /// with the same FILE, filter and region continues after the last address it holds.
    #[arg(long, value_name = "FILE")]
    pub resume: Option<std::path::PathBuf>,
    /// valve (UDP): stop after N pages (with --resume, the next run goes on from there).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pages: Option<u32>,
    #[command(flatten)]
    pub timing: TimingArgs,
    /// The master: host:port (UDP/TCP masters), an http(s) URL or a file (ddnet, ut2003-text).
    /// Not needed with -p valve --steam-key.
    #[arg(value_name = "MASTER", required_unless_present = "steam_key")]
    pub source: Option<String>,
}

/// One listed server, in the address model of the master's API: `address` is what a player
/// connects to, `query_address` where it is queried.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Listed {
    /// The game address; a management server's game exactly as registered (host names kept).
    /// GameSpy lists carry only query addresses: there it is the listed query address and
    /// `address_is_game` is false.
    pub address: String,
    /// Whether `address` is the game address.
    pub address_is_game: bool,
    /// Where the server is queried: the port the list gives, or the protocol's convention
    /// from the game address; `null` for a management server's game (not queried).
    pub query_address: Option<String>,
    /// A management server's game: the address its registered host resolved to (`null`: the
    /// name has no address).
    #[serde(skip_serializing_if = "Resolved::is_not_applicable")]
    pub resolved_address: Resolved,
    /// Which master protocol listed it.
    pub master_protocol: &'static str,
    /// The name, when the list carries one (DDNet, management server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The map, when the list carries it (Steam's Web API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map: Option<String>,
    /// Players, when the list carries them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_players: Option<u32>,
    /// Slots, when the list carries them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_players: Option<u32>,
    /// What Steam's Web API says besides (steamid, appid, gamedir, bots, …).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub steam: Option<steam_web::SteamFacts>,
    /// A management server's lobby state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lobby: Option<LobbyResult>,
    /// Where the server is, when the list says it (DDNet: `eu`, `eu:de`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The game key, where the list tells it: the game a GameSpy list was asked for
    /// (`-g`), `bomberman` for a management server's games. Other lists name no game.
    #[serde(rename = "game", skip_serializing_if = "Option::is_none")]
    pub game_key: Option<String>,
    /// The game's display name, beside the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub game_name: Option<&'static str>,
    /// The listed game address, to query (`None` for host names).
    #[serde(skip)]
    pub game: Option<SocketAddr>,
    /// The query address, to query.
    #[serde(skip)]
    pub query: Option<SocketAddr>,
}

/// What to ask a master for, besides its address: the game (GameSpy, quake3) and the
/// protocol number (quake3).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListAsk<'a> {
    /// `--game`.
    pub game: Option<&'a str>,
    /// `--protocol-version` (quake3).
    pub protocol_version: i32,
    /// `--master-filter` (valve).
    pub master_filter: Option<&'a str>,
}

impl<'a> ListAsk<'a> {
    /// `game` at the default protocol version.
    pub(crate) fn game(game: Option<&'a str>) -> Self {
        Self {
            game,
            protocol_version: muster_proto::quake3::query::DEFAULT_PROTOCOL,
            master_filter: None,
        }
    }
}

impl Listed {
    async fn of(entry: MasterEntry, kind: MasterKind, asked_game: Option<&str>) -> Self {
        let game_key = match kind {
            MasterKind::Mgmt => Some(muster_proto::games::BOMBERMAN.to_owned()),
            MasterKind::Gamespy | MasterKind::Quake3 | MasterKind::Valve => {
                asked_game.and_then(muster_proto::games::normalize)
            }
            _ => None,
        };
        let game_name = game_key
            .as_deref()
            .and_then(muster_proto::games::display_name);
        let game = entry.address.ip();
        let query = entry.query_address.or_else(|| {
            let protocol = kind.query_protocol()?;
            game.map(|g| protocol.query_address(g))
        });
        // Only a host name needs resolving, and only to show where it leads.
        let resolved_address = match &entry.address {
            ListedAddress::Ip(a) if kind == MasterKind::Mgmt => Resolved::To(*a),
            ListedAddress::Host { .. } => match entry.address.resolve().await {
                Ok(a) => Resolved::To(a),
                Err(e) => {
                    tracing::warn!(
                        "{}: the registered host name does not resolve: {e}",
                        entry.address
                    );
                    Resolved::Failed
                }
            },
            _ => Resolved::NotApplicable,
        };
        Self {
            address: entry.address.to_string(),
            address_is_game: entry.address_is_game,
            query_address: query.map(show_addr),
            resolved_address,
            master_protocol: kind.name(),
            name: entry.name,
            map: None,
            num_players: entry.num_players,
            max_players: entry.max_players,
            steam: None,
            lobby: entry.lobby.map(LobbyResult::of),
            location: entry.location,
            game_key,
            game_name,
            game,
            query,
        }
    }
}

impl Filterable for Listed {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    fn map(&self) -> Option<&str> {
        self.map.as_deref()
    }
    fn num_players(&self) -> Option<u32> {
        self.num_players
    }
    fn max_players(&self) -> Option<u32> {
        self.max_players
    }
    fn is_game(&self, g: &str) -> bool {
        self.game_key
            .as_deref()
            .is_some_and(|k| k.eq_ignore_ascii_case(g))
    }
    fn protocol(&self) -> &str {
        self.master_protocol
    }
    fn password(&self) -> Option<bool> {
        None
    }
    fn lobby_open(&self) -> Option<bool> {
        self.lobby.as_ref().map(|l| l.open)
    }
}

async fn resolve_one(input: &str, default_port: Option<u16>) -> anyhow::Result<SocketAddr> {
    resolve_input(input, default_port).await.map_err(|e| {
        let why = match e {
            ResolveError::Address(e) => e.to_string(),
            ResolveError::NoAddress => "host name has no address".to_owned(),
            _ => "cannot resolve host name".to_owned(),
        };
        UsageError(format!("{input}: {why}")).into()
    })
}

/// The library's source for `--protocol KIND SOURCE` (usage errors: exit code 2).
async fn master_source(
    kind: MasterKind,
    source: &str,
    ask: ListAsk<'_>,
) -> anyhow::Result<MasterSource> {
    let game = ask.game;
    let addr = || resolve_one(source, kind.default_port());
    Ok(match kind {
        MasterKind::Gameagent => MasterSource::GameAgent(addr().await?),
        MasterKind::Teeworlds => MasterSource::Teeworlds(addr().await?),
        MasterKind::Gamespy => {
            let game = game.ok_or_else(|| {
                UsageError("--game is required for GameSpy lists (e.g. ut2, serioussamse)".into())
            })?;
            let key = Key::new(game.as_bytes().to_vec())
                .map_err(|_| UsageError(format!("bad game name {game:?}")))?;
            MasterSource::Gamespy(addr().await?, key)
        }
        MasterKind::Mgmt => MasterSource::Mgmt(addr().await?),
        MasterKind::Quake3 => {
            let game = game
                .map(|g| {
                    muster_proto::quake3::Word::new(g.as_bytes().to_vec()).map_err(|_| {
                        UsageError(format!(
                            "bad game name {g:?} (one word of printable ASCII, at most 64 bytes)"
                        ))
                    })
                })
                .transpose()?;
            let request =
                muster_proto::quake3::query::ListRequest::everything(game, ask.protocol_version);
            MasterSource::Quake3(addr().await?, request)
        }
        MasterKind::Valve => {
            let filter = valve_filter(ask, true)?;
            let addr = addr().await?;
            // A Xash3D master asked over IPv6 answers with 18-byte IPv6 entries.
            let mut list = muster_proto::valve_master::query::ListAsk::new(filter.as_bytes());
            list.ipv6 = addr.is_ipv6();
            MasterSource::Valve(addr, list)
        }
        MasterKind::Ddnet => MasterSource::Ddnet(Document::parse(source)),
        MasterKind::Ut2003Text => MasterSource::Ut2003Text(Document::parse(source)),
    })
}

/// The Valve filter string of `ask`: `\\gamedir\\GAME` for --game, then --master-filter, then
/// (for the UDP masters, `clver`) `\\clver\\0.21` unless the filter names a version.
fn valve_filter(ask: ListAsk<'_>, clver: bool) -> Result<String, UsageError> {
    let mut filter = String::new();
    if let Some(g) = ask.game {
        filter.push_str("\\gamedir\\");
        filter.push_str(g);
    }
    if let Some(f) = ask.master_filter {
        filter.push_str(f);
    }
    if clver && !filter.contains("\\clver\\") {
        filter.push_str("\\clver\\0.21");
    }
    muster_proto::valve_master::Filter::parse(filter.as_bytes())
        .map_err(|e| UsageError(format!("bad master filter {filter:?}: {e}")))?;
    Ok(filter)
}

/// How long the Web API may take without --deadline.
const WEB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Steam's Web API list for `-p valve --steam-key`: the rows, or the error that left none.
async fn fetch_web(args: &ListArgs, key: &str) -> anyhow::Result<(Vec<Listed>, Option<String>)> {
    let ask = ListAsk {
        game: args.game.as_deref(),
        protocol_version: args.protocol_version,
        master_filter: args.master_filter.as_deref(),
    };
    let web = steam_web::WebAsk {
        base: args.steam_api.clone(),
        key: key.to_owned(),
        filter: valve_filter(ask, false)?,
        limit: args.limit,
    };
    let base = web.base.trim_end_matches('/');
    tracing::info!(
        "asking Steam's Web API at {base} for its server list (filter {:?}, at most {})",
        web.filter,
        plural(web.limit as usize, "server")
    );
    match steam_web::list(&web, args.timing.deadline.unwrap_or(WEB_TIMEOUT)).await {
        Ok(entries) => {
            let game_key = args
                .game
                .as_deref()
                .and_then(muster_proto::games::normalize);
            let game_name = game_key
                .as_deref()
                .and_then(muster_proto::games::display_name);
            let out: Vec<Listed> = entries
                .into_iter()
                .map(|e| Listed {
                    address: e.game.to_string(),
                    address_is_game: true,
                    query_address: Some(show_addr(e.query)),
                    resolved_address: Resolved::NotApplicable,
                    master_protocol: MasterKind::Valve.name(),
                    name: e.name,
                    map: e.map,
                    num_players: e.players,
                    max_players: e.max_players,
                    steam: Some(e.facts),
                    lobby: None,
                    location: None,
                    game_key: game_key.clone(),
                    game_name,
                    game: Some(e.game),
                    query: Some(e.query),
                })
                .collect();
            tracing::info!("Steam's Web API listed {}", plural(out.len(), "server"));
            Ok((out, None))
        }
        Err(steam_web::WebError::BadBase(b)) => {
            Err(UsageError(format!("--steam-api {b:?} is not an http(s) URL")).into())
        }
        Err(e) => Ok((Vec::new(), Some(e.to_string()))),
    }
}

/// What the page hook of a paged Valve list shares with the command.
#[derive(Debug, Default)]
struct Paging {
    /// Where the list stands.
    progress: Option<muster_query::lists::ValveProgress>,
    /// Every server of the pages read, in order, once.
    servers: Vec<SocketAddr>,
    seen: std::collections::HashSet<SocketAddr>,
    /// The resume file could not be written.
    save_error: Option<std::io::Error>,
}

/// `-p valve` with `--resume FILE` and/or `--max-pages N`: the paged list from FILE's resume
/// point (or the start), FILE rewritten after every page. Ctrl-C ends the run with the servers
/// read so far printed and FILE holding where they end.
async fn fetch_paged(
    args: &ListArgs,
    source: &str,
) -> anyhow::Result<(Vec<Listed>, Option<String>)> {
    use muster_proto::valve_master::packet::SEED;
    let ask = ListAsk {
        game: args.game.as_deref(),
        protocol_version: args.protocol_version,
        master_filter: args.master_filter.as_deref(),
    };
    let MasterSource::Valve(addr, list_ask) = master_source(MasterKind::Valve, source, ask).await?
    else {
        anyhow::bail!("a valve master source was expected");
    };
    let filter = String::from_utf8_lossy(&list_ask.filter).into_owned();
    let region = list_ask.region.0;
    let file = args.resume.clone();
    let previous = file.as_deref().map(resume::load).transpose()?.flatten();
    let (from, pages_before) = match (&previous, &file) {
        (Some(state), Some(path)) => {
            if state.filter != filter || state.region != region {
                return Err(UsageError(format!(
                    "--resume {}: it holds another query (filter {:?}, region {}), not this \
                     one (filter {filter:?}, region {region}); remove it or name another file",
                    path.display(),
                    state.filter,
                    state.region
                ))
                .into());
            }
            if state.complete {
                note(&format!(
                    "muster: {}: the list was complete; asking it again from {SEED}",
                    path.display()
                ));
                (SEED, 0)
            } else {
                if state.master != addr.to_string() {
                    note(&format!(
                        "muster: {}: recorded at master {}, going on at {addr}",
                        path.display(),
                        state.master
                    ));
                }
                note(&format!(
                    "muster: resuming the list after {} ({} read before, from {})",
                    state.last,
                    plural(state.pages as usize, "page"),
                    path.display()
                ));
                (state.last, state.pages)
            }
        }
        _ => (SEED, 0),
    };
    let shared = std::sync::Arc::new(std::sync::Mutex::new(Paging::default()));
    let hook = {
        let shared = shared.clone();
        let file = file.clone();
        let master = addr.to_string();
        let filter = filter.clone();
        Box::new(
            move |p: &muster_query::lists::ValveProgress, servers: &[SocketAddr]| {
                let Ok(mut paging) = shared.lock() else {
                    return;
                };
                paging.progress = Some(*p);
                for s in servers {
                    if paging.seen.insert(*s) {
                        paging.servers.push(*s);
                    }
                }
                let Some(path) = &file else {
                    return;
                };
                let state = resume::ResumeState {
                    format: resume::FORMAT.to_owned(),
                    master: master.clone(),
                    region,
                    filter: filter.clone(),
                    last: p.last,
                    pages: pages_before.saturating_add(u64::from(p.pages)),
                    complete: p.complete,
                };
                if let Err(e) = resume::save(path, &state) {
                    tracing::error!("cannot write {}: {e}", path.display());
                    paging.save_error.get_or_insert(e);
                }
            },
        )
    };
    tracing::info!("asking the valve master {source} for its list, a page every 2 s");
    let options = args.timing.options();
    let run =
        muster_query::lists::valve_list_from(addr, list_ask, from, args.max_pages, hook, &options);
    let (result, interrupted) = tokio::select! {
        r = run => (Some(r), false),
        () = crate::signal::shutdown() => (None, true),
    };
    let (servers, progress, save_error) = {
        let mut paging = shared
            .lock()
            .map_err(|_| anyhow::anyhow!("page hook panicked"))?;
        (
            std::mem::take(&mut paging.servers),
            paging.progress,
            paging.save_error.take(),
        )
    };
    if let Some(e) = save_error {
        let path = file.as_deref().unwrap_or_else(|| std::path::Path::new("?"));
        anyhow::bail!("cannot write the resume file {}: {e}", path.display());
    }
    let listed = match result {
        Some(Ok(entries)) => {
            let mut out = Vec::with_capacity(entries.len());
            for e in entries {
                out.push(Listed::of(e, MasterKind::Valve, args.game.as_deref()).await);
            }
            out
        }
        Some(Err(f)) => return Ok((Vec::new(), Some(format!("{addr}: {f}")))),
        // Interrupted: what the pages brought so far.
        None => {
            let mut out = Vec::with_capacity(servers.len());
            for e in muster_query::lists::valve_entries(&servers) {
                out.push(Listed::of(e, MasterKind::Valve, args.game.as_deref()).await);
            }
            out
        }
    };
    let Some(p) = progress else {
        return Ok((listed, None));
    };
    let go_on = match &file {
        Some(path) => format!(
            "{} holds {}: run again with --resume {} to go on",
            path.display(),
            p.last,
            path.display()
        ),
        None => format!("the next page starts after {}", p.last),
    };
    let pages = plural(p.pages as usize, "page");
    if p.complete {
        tracing::info!("{addr}: the list is complete after {pages}");
        return Ok((listed, None));
    }
    if interrupted {
        return Ok((listed, Some(format!("interrupted after {pages}; {go_on}"))));
    }
    if args.max_pages.is_some_and(|m| p.pages >= m) {
        note(&format!(
            "muster: stopped after {pages} (--max-pages); {go_on}"
        ));
        return Ok((listed, None));
    }
    Ok((
        listed,
        Some(format!(
            "{addr}: the list ended after {pages}, before its last page (the master \
             stopped answering, or --deadline passed); {go_on}"
        )),
    ))
}

/// Fetch one master's list. `Ok((list, Some(error)))` when the master (or a list URL) did
/// not answer or answered no list; an error when the input is wrong (exit code 2: a bad
/// address, an unreadable file or one that is not a list). `list` and `scan` say what they ask
/// at info level; `muster watch` asks every interval and says it at debug level only.
pub(crate) async fn fetch(
    kind: MasterKind,
    source: &str,
    ask: ListAsk<'_>,
    timing: &TimingArgs,
    verbosity: tracing::Level,
) -> anyhow::Result<(Vec<Listed>, Option<String>)> {
    let game = ask.game;
    let master = master_source(kind, source, ask).await?;
    let say = |text: String| {
        if verbosity == tracing::Level::INFO {
            tracing::info!("{text}");
        } else {
            tracing::debug!("{text}");
        }
    };
    say(format!(
        "asking the {} master {source} for its list",
        kind.name()
    ));
    match muster_query::list_one(&master, &timing.options()).await {
        Ok(list) => {
            let mut out = Vec::with_capacity(list.len());
            for e in list {
                out.push(Listed::of(e, kind, game).await);
            }
            say(format!("{source} listed {}", plural(out.len(), "server")));
            Ok((out, None))
        }
        Err(failure) => match (&master, failure) {
            (
                MasterSource::Ddnet(Document::File(path))
                | MasterSource::Ut2003Text(Document::File(path)),
                Failure::Query(QueryError::Decode(e)),
            ) => {
                Err(UsageError(format!("{}: not a {}: {e}", path.display(), doc_kind(kind))).into())
            }
            (
                MasterSource::Ddnet(Document::File(path))
                | MasterSource::Ut2003Text(Document::File(path)),
                f,
            ) => Err(UsageError(format!("reading {}: {f}", path.display())).into()),
            (_, Failure::Query(QueryError::Decode(e))) => Ok((
                Vec::new(),
                Some(format!("{source}: not a {}: {e}", doc_kind(kind))),
            )),
            (
                MasterSource::GameAgent(addr)
                | MasterSource::Teeworlds(addr)
                | MasterSource::Gamespy(addr, _)
                | MasterSource::Mgmt(addr)
                | MasterSource::Quake3(addr, _)
                | MasterSource::Valve(addr, _),
                f,
            ) => Ok((Vec::new(), Some(format!("{addr}: {f}")))),
            (_, f) => Ok((Vec::new(), Some(format!("{source}: {f}")))),
        },
    }
}

fn doc_kind(kind: MasterKind) -> &'static str {
    match kind {
        MasterKind::Ut2003Text => "UT2003 list",
        MasterKind::Ddnet => "servers.json document",
        _ => "master list",
    }
}

pub(crate) async fn run(args: ListArgs, verbosity: Verbosity) -> anyhow::Result<u8> {
    let started = std::time::Instant::now();
    let key = args.steam_key.as_deref().filter(|k| !k.is_empty());
    let (listed, error) = match (args.protocol, key) {
        (MasterKind::Valve, Some(key)) => {
            if args.resume.is_some() || args.max_pages.is_some() {
                return Err(UsageError(
                    "--resume and --max-pages page the UDP master query; Steam's Web API \
                     (--steam-key) answers in one reply"
                        .into(),
                )
                .into());
            }
            if let Some(master) = &args.source {
                note(&format!(
                    "muster: --steam-key given: reading Steam's Web API, not the master {master}"
                ));
            }
            fetch_web(&args, key).await?
        }
        (MasterKind::Valve, None) if args.resume.is_some() || args.max_pages.is_some() => {
            let Some(source) = args.source.as_deref() else {
                return Err(UsageError("MASTER is required (the master to ask)".into()).into());
            };
            fetch_paged(&args, source).await?
        }
        (kind, _) => {
            let Some(source) = args.source.as_deref() else {
                return Err(UsageError("MASTER is required (the master to ask)".into()).into());
            };
            if kind != MasterKind::Valve && (args.resume.is_some() || args.max_pages.is_some()) {
                return Err(UsageError(
                    "--resume and --max-pages are for the Valve master query (-p valve)".into(),
                )
                .into());
            }
            fetch(
                args.protocol,
                source,
                ListAsk {
                    game: args.game.as_deref(),
                    protocol_version: args.protocol_version,
                    master_filter: args.master_filter.as_deref(),
                },
                &args.timing,
                tracing::Level::INFO,
            )
            .await?
        }
    };
    let total = listed.len();
    let listed: Vec<Listed> = listed
        .into_iter()
        .filter(|l| args.filters.iter().all(|f| f.matches(l)))
        .collect();
    let mut out = crate::stdout::stdout();
    use std::io::Write as _;
    match args.format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &listed)?;
            writeln!(out)?;
        }
        Format::Ndjson => {
            for r in &listed {
                serde_json::to_writer(&mut out, r)?;
                writeln!(out)?;
            }
        }
        Format::Table => {
            for line in table(&listed).lines("") {
                writeln!(out, "{line}")?;
            }
        }
    }
    out.flush()?;
    if let Some(e) = error {
        note(&format!("muster: {e}"));
        return Ok(exit::SOME_FAILED);
    }
    if args.format == Format::Table && verbosity.chatty() {
        let mut line = format!("{} listed", plural(total, "server"));
        if !args.filters.is_empty() {
            line.push_str(&format!(", {} shown", listed.len()));
        }
        line.push_str(&format!(", in {:.2} s", started.elapsed().as_secs_f64()));
        note(&line);
    }
    Ok(exit::OK)
}

/// The list as a table: the address and the query address beside it; the resolved address,
/// players, lobby and name where the list has them.
fn table(listed: &[Listed]) -> Table {
    let mut t = Table::new(vec![
        Column::left("ADDRESS", 45),
        Column::left("QUERY ADDRESS", 45),
        Column::left("RESOLVED", 45),
        Column::right("PLAYERS", 9),
        Column::left("LOBBY", 6),
        Column::left("MODE", 12),
        Column::left("MAP", 24),
        Column::left("NAME", 48),
    ]);
    for l in listed {
        let players = match (l.num_players, l.max_players) {
            (Some(n), Some(m)) => format!("{n}/{m}"),
            (Some(n), None) => n.to_string(),
            _ => String::new(),
        };
        let mut address = l.address.clone();
        if !l.address_is_game {
            address.push_str(" (query)");
        }
        t.push(vec![
            address,
            l.query_address.clone().unwrap_or_default(),
            l.resolved_address.show(),
            players,
            l.lobby
                .as_ref()
                .map(|l| l.state().to_owned())
                .unwrap_or_default(),
            l.lobby
                .as_ref()
                .map(|l| l.mode.to_owned())
                .unwrap_or_default(),
            l.map.clone().unwrap_or_default(),
            l.name.clone().unwrap_or_default(),
        ]);
    }
    t.drop_empty(&["ADDRESS", "QUERY ADDRESS"]);
    t
}
