//! `muster list`: a master server's list, and the list sources `scan` shares. The library's
//! [`muster_query::list_one`] fetches; this module maps flags to a source and renders.

use std::net::SocketAddr;

use muster_proto::gamespy_master::packet::Key;
use muster_proto::query::QueryError;
use muster_query::{Document, Failure, MasterEntry, MasterSource, ResolveError, resolve_input};
use serde::Serialize;

use crate::exit;
use crate::output::Format;
use crate::protocols::ProtocolArg;
use crate::query::UsageError;
use crate::timing::TimingArgs;

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
}

impl MasterKind {
    fn default_port(self) -> Option<u16> {
        match self {
            Self::Gameagent => Some(9005),
            Self::Gamespy => Some(28900),
            Self::Teeworlds => Some(8300),
            Self::Mgmt => Some(muster_proto::mgmt::PORT),
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
            Self::Mgmt => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Gameagent => "gameagent",
            Self::Gamespy => "gamespy",
            Self::Teeworlds => "teeworlds",
            Self::Ddnet => "ddnet",
            Self::Ut2003Text => "ut2003-text",
            Self::Mgmt => "mgmt",
        }
    }
}

/// Flags of `muster list`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// The master protocol.
    #[arg(long, short, value_enum)]
    pub protocol: MasterKind,
    /// The game whose list to ask for (GameSpy: the gamename, e.g. ut2, serioussamse).
    #[arg(long, short)]
    pub game: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    pub format: Format,
    #[command(flatten)]
    pub timing: TimingArgs,
    /// The master: host:port (UDP/TCP masters), an http(s) URL or a file (ddnet, ut2003-text).
    #[arg(value_name = "MASTER")]
    pub source: String,
}

/// One listed server.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Listed {
    /// The game address (for GameSpy lists, which carry only the query port, the listed address).
    pub address: SocketAddr,
    /// The query address when the list says it.
    pub query_address: Option<SocketAddr>,
    /// Which master protocol listed it.
    pub master_protocol: &'static str,
    /// The name, when the list carries one (DDNet, management server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Players, when the list carries them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_players: Option<u32>,
    /// Slots, when the list carries them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_players: Option<u32>,
}

impl Listed {
    fn of(entry: MasterEntry, kind: MasterKind) -> Self {
        Self {
            address: entry.address,
            query_address: entry.query_address,
            master_protocol: kind.name(),
            name: entry.name,
            num_players: entry.num_players,
            max_players: entry.max_players,
        }
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
    game: Option<&str>,
) -> anyhow::Result<MasterSource> {
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
        MasterKind::Ddnet => MasterSource::Ddnet(Document::parse(source)),
        MasterKind::Ut2003Text => MasterSource::Ut2003Text(Document::parse(source)),
    })
}

/// Fetch one master's list. `Ok((list, Some(error)))` when the master did not answer; an error
/// when the input is wrong (exit code 2) or a document is unreadable or not a list.
pub(crate) async fn fetch(
    kind: MasterKind,
    source: &str,
    game: Option<&str>,
    timing: &TimingArgs,
) -> anyhow::Result<(Vec<Listed>, Option<String>)> {
    let master = master_source(kind, source, game).await?;
    match muster_query::list_one(&master, &timing.options()).await {
        Ok(list) => Ok((
            list.into_iter().map(|e| Listed::of(e, kind)).collect(),
            None,
        )),
        Err(failure) => match (&master, failure) {
            (MasterSource::Ddnet(_), Failure::Query(QueryError::Decode(e))) => Err(
                anyhow::anyhow!("{source}: not a servers.json document: {e}"),
            ),
            (MasterSource::Ut2003Text(_), Failure::Query(QueryError::Decode(e))) => {
                Err(anyhow::anyhow!("{source}: not a UT2003 list: {e}"))
            }
            (
                MasterSource::Ddnet(Document::File(path))
                | MasterSource::Ut2003Text(Document::File(path)),
                f,
            ) => Err(anyhow::anyhow!("reading {}: {f}", path.display())),
            (MasterSource::Ddnet(_) | MasterSource::Ut2003Text(_), f) => {
                Err(anyhow::anyhow!("{source}: {f}"))
            }
            (
                MasterSource::GameAgent(addr)
                | MasterSource::Teeworlds(addr)
                | MasterSource::Gamespy(addr, _)
                | MasterSource::Mgmt(addr),
                f,
            ) => Ok((Vec::new(), Some(format!("{addr}: {f}")))),
            (_, f) => Ok((Vec::new(), Some(f.to_string()))),
        },
    }
}

pub(crate) async fn run(args: ListArgs) -> anyhow::Result<u8> {
    let (listed, error) = fetch(
        args.protocol,
        &args.source,
        args.game.as_deref(),
        &args.timing,
    )
    .await?;
    let mut out = std::io::stdout().lock();
    use std::io::Write as _;
    match args.format {
        Format::Json | Format::Ndjson => {
            if args.format == Format::Json {
                serde_json::to_writer_pretty(&mut out, &listed)?;
                writeln!(out)?;
            } else {
                for r in &listed {
                    serde_json::to_writer(&mut out, r)?;
                    writeln!(out)?;
                }
            }
        }
        Format::Table => {
            writeln!(out, "{:<40}  {:<40}  NAME", "ADDRESS", "QUERY ADDRESS")?;
            for l in &listed {
                writeln!(
                    out,
                    "{:<40}  {:<40}  {}",
                    l.address.to_string(),
                    l.query_address.map(|a| a.to_string()).unwrap_or_default(),
                    l.name.as_deref().unwrap_or("")
                )?;
            }
            writeln!(out, "{} servers", listed.len())?;
        }
    }
    out.flush()?;
    if let Some(e) = error {
        let _ = writeln!(std::io::stderr(), "muster: {e}");
        return Ok(exit::SOME_FAILED);
    }
    Ok(exit::OK)
}
