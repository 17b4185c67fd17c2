//! `muster list`: a master server's list, and the list sources `scan` shares.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use muster_proto::gamespy_master::conversation::ListClientConfig;
use muster_proto::gamespy_master::packet::{Key, ListForm};
use muster_proto::model::ServerList;
use muster_proto::query::QueryMachine;
use muster_proto::teeworlds_master::{MasterListQuery as TwListQuery, ServersJson, Token};
use muster_proto::ut2003_list::packet::ListFile;
use muster_query::{Completed, HostPort, Job, Options, ResolveError, resolve_input};
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

fn from_server_list(list: &ServerList, kind: MasterKind) -> Vec<Listed> {
    list.servers
        .iter()
        .map(|s| Listed {
            address: s.address,
            query_address: s.query_address,
            master_protocol: kind.name(),
            name: None,
            num_players: None,
            max_players: None,
        })
        .collect()
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

async fn document(source: &str, timeout: Duration) -> anyhow::Result<Vec<u8>> {
    if source.starts_with("http://") || source.starts_with("https://") {
        muster_query::lists::http_get(source, timeout)
            .await
            .with_context(|| source.to_owned())
    } else {
        let path = Path::new(source);
        std::fs::read(path).with_context(|| format!("reading {}", path.display()))
    }
}

async fn udp_lists<M, F>(
    machines: Vec<F>,
    options: Options,
) -> anyhow::Result<(ServerList, Option<String>)>
where
    M: QueryMachine<Output = ServerList> + Send + 'static,
    F: FnOnce(muster_proto::QueryConfig) -> M + Send + 'static,
{
    let jobs: Vec<_> = machines
        .into_iter()
        .enumerate()
        .map(|(tag, build)| Job { tag, build })
        .collect();
    let mut rx = muster_query::spawn(jobs, options);
    let mut merged = ServerList::default();
    let mut error = None;
    let mut any_ok = false;
    while let Some(Completed { outcome, .. }) = rx.recv().await {
        match outcome {
            Ok(list) => {
                any_ok = true;
                for s in list.servers {
                    if !merged.servers.contains(&s) {
                        merged.servers.push(s);
                    }
                }
                if merged.partial.is_none() {
                    merged.partial = list.partial;
                }
            }
            Err(e) => error = Some(e.to_string()),
        }
    }
    if any_ok {
        Ok((merged, None))
    } else {
        Ok((merged, Some(error.unwrap_or_else(|| "no reply".to_owned()))))
    }
}

/// Fetch one master's list. `Ok((list, Some(error)))` when the master did not answer.
pub(crate) async fn fetch(
    kind: MasterKind,
    source: &str,
    game: Option<&str>,
    timing: &TimingArgs,
) -> anyhow::Result<(Vec<Listed>, Option<String>)> {
    let overall = timing
        .deadline
        .unwrap_or(timing.timeout * (timing.retries + 1) + Duration::from_secs(2));
    match kind {
        MasterKind::Gameagent => {
            let addr = resolve_one(source, kind.default_port()).await?;
            let (list, err) = udp_lists(
                vec![move |cfg| muster_proto::gameagent::query::MasterListQuery::new(addr, cfg)],
                timing.options(),
            )
            .await?;
            Ok((
                from_server_list(&list, kind),
                err.map(|e| format!("{addr}: {e}")),
            ))
        }
        MasterKind::Teeworlds => {
            let addr = resolve_one(source, kind.default_port()).await?;
            let token = Token(rand::random());
            let v06 = move |cfg| TwListQuery::new_06(addr, cfg, false);
            let v07 = move |cfg| TwListQuery::new_07(addr, cfg, token);
            type Build = Box<dyn FnOnce(muster_proto::QueryConfig) -> TwListQuery + Send>;
            let builds: Vec<Build> = vec![Box::new(v06), Box::new(v07)];
            let (list, err) = udp_lists(builds, timing.options()).await?;
            Ok((
                from_server_list(&list, kind),
                err.map(|e| format!("{addr}: {e}")),
            ))
        }
        MasterKind::Gamespy => {
            let game = game.ok_or_else(|| {
                UsageError("--game is required for GameSpy lists (e.g. ut2, serioussamse)".into())
            })?;
            let key = Key::new(game.as_bytes().to_vec())
                .map_err(|_| UsageError(format!("bad game name {game:?}")))?;
            let addr = resolve_one(source, kind.default_port()).await?;
            let mut config = ListClientConfig::new(key, ListForm::Cmp);
            config.timeout = overall;
            match muster_query::lists::gamespy_list(addr, config).await {
                Ok(list) => Ok((from_server_list(&list, kind), None)),
                Err(e) => Ok((Vec::new(), Some(format!("{addr}: {e}")))),
            }
        }
        MasterKind::Mgmt => {
            let addr = resolve_one(source, kind.default_port()).await?;
            match muster_query::lists::mgmt_list(addr, overall).await {
                Ok(answer) => {
                    let mut out = Vec::new();
                    for s in answer.servers() {
                        let port = s.server.port().get();
                        let host = HostPort {
                            host: s.server.address().as_str().to_owned(),
                            port: Some(port),
                        };
                        // Registered host names are resolved here; one that does not resolve
                        // is left out of the list (and logged).
                        let Some(address) = host
                            .resolve(port)
                            .await
                            .ok()
                            .and_then(|a| a.first().copied())
                        else {
                            tracing::warn!(host = %host, "listed host name does not resolve");
                            continue;
                        };
                        out.push(Listed {
                            address,
                            query_address: None,
                            master_protocol: kind.name(),
                            name: Some(s.server.name().to_owned()),
                            num_players: Some(s.stats.current.get()),
                            max_players: Some(u32::from(s.stats.max.get())),
                        });
                    }
                    Ok((out, None))
                }
                Err(e) => Ok((Vec::new(), Some(format!("{addr}: {e}")))),
            }
        }
        MasterKind::Ddnet => {
            let body = document(source, overall).await?;
            let doc = ServersJson::decode(&body)
                .map_err(|e| anyhow::anyhow!("{source}: not a servers.json document: {e}"))?;
            // One row per server (its first UDP address), with what the document says of it.
            let mut out = Vec::new();
            for entry in &doc.servers {
                let Some(address) = entry
                    .parsed_addresses()
                    .iter()
                    .find_map(muster_proto::teeworlds_master::ServerAddress::socket_addr)
                else {
                    continue;
                };
                if out.iter().any(|l: &Listed| l.address == address) {
                    continue;
                }
                let info = entry.server_info().ok();
                out.push(Listed {
                    address,
                    query_address: None,
                    master_protocol: kind.name(),
                    name: info.as_ref().map(|i| i.name.plain.clone()),
                    num_players: info.as_ref().map(|i| i.num_players),
                    max_players: info.as_ref().map(|i| i.max_players),
                });
            }
            Ok((out, None))
        }
        MasterKind::Ut2003Text => {
            let body = document(source, overall).await?;
            let file = ListFile::decode(&body)
                .map_err(|e| anyhow::anyhow!("{source}: not a UT2003 list: {e}"))?;
            if file.invalid > 0 {
                tracing::warn!("{source}: {}", file.summary());
            }
            Ok((from_server_list(&file.to_server_list(), kind), None))
        }
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
