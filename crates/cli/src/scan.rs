//! `muster scan`: fetch lists from masters and/or a file, then query every server found.

use std::collections::HashSet;
use std::io::IsTerminal as _;
use std::net::SocketAddr;

use anyhow::Context as _;
use muster_query::{AddressError, ResolveError, resolve_inputs};

use crate::dto::ServerResult;
use crate::exit;
use crate::list::{self, Listed, MasterKind};
use crate::output::{Filter, Format, Sink, SortSpec, Summary, note, plural};
use crate::protocols::ProtocolArg;
use crate::query::{self, Tally, UsageError, bad_address};
use crate::target::Target;
use crate::timing::TimingArgs;
use crate::verbosity::Verbosity;

/// Flags of `muster scan`.
#[derive(Debug, clap::Args)]
pub(crate) struct ScanArgs {
    /// A master to list, as PROTOCOL:SOURCE: `teeworlds:HOST:PORT`, `gameagent:HOST:PORT`,
    /// `gamespy:HOST:PORT` (with --game), `ddnet:URL-or-FILE`, `ut2003-text:URL-or-FILE`,
    /// `mgmt:HOST:PORT`, `quake3:HOST:PORT` (dpmaster; --game, --protocol-version).
    /// Repeatable.
    #[arg(long = "master", value_name = "PROTOCOL:SOURCE")]
    pub masters: Vec<String>,
    /// The game whose GameSpy list to ask for (e.g. ut2, serioussamse), or the game name of
    /// quake3 masters (e.g. Quake3Arena, Xonotic; see `muster list --help`).
    #[arg(long, short)]
    pub game: Option<String>,
    /// quake3 masters: the protocol number of the game's clients (see `muster list --help`).
    #[arg(long, value_name = "N", allow_negative_numbers = true, default_value_t = muster_proto::quake3::query::DEFAULT_PROTOCOL)]
    pub protocol_version: i32,
    /// A file of servers, one per line: `host:port` or `PROTOCOL host:port` (# starts a
    /// comment).
    #[arg(long, value_name = "FILE")]
    pub servers: Option<std::path::PathBuf>,
    /// The protocol of file lines that name none.
    #[arg(long, short, value_enum, default_value = "auto")]
    pub protocol: ProtocolArg,
    /// The ports in the --servers file are query ports: query exactly them instead of
    /// deriving the query port from the game port (the game port is then read from the
    /// answer, where it says one). Masters' lists say their ports themselves.
    #[arg(long, requires = "servers")]
    pub given_port_only: bool,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    pub format: Format,
    /// Keep only servers matching EXPR (repeatable, all must hold): `players>0`,
    /// `players>=N`, `game=ut2` (the game key, as `game` in the results), `gametype=ctf`,
    /// `name~text`, `map=NAME`, `map~text`, `protocol=gamespy1`, `password=false`,
    /// `full=false`, `lobby=open` (management servers).
    #[arg(long = "filter", value_name = "EXPR", value_parser = parse_filter)]
    pub filters: Vec<Filter>,
    /// Sort by COLUMN (address, protocol, ping, players, map, name, status), ascending or
    /// with `:desc` descending.
    #[arg(long, value_name = "COLUMN[:desc]", value_parser = parse_sort)]
    pub sort: Option<SortSpec>,
    #[command(flatten)]
    pub timing: TimingArgs,
}

fn parse_filter(s: &str) -> Result<Filter, String> {
    Filter::parse(s)
}

fn parse_sort(s: &str) -> Result<SortSpec, String> {
    SortSpec::parse(s)
}

pub(crate) fn parse_master(s: &str) -> anyhow::Result<(MasterKind, String)> {
    let (proto, source) = s
        .split_once(':')
        .ok_or_else(|| UsageError(format!("--master {s:?}: expected PROTOCOL:SOURCE")))?;
    let kind = <MasterKind as clap::ValueEnum>::from_str(proto, true)
        .map_err(|_| UsageError(format!("--master {s:?}: unknown master protocol {proto:?}")))?;
    Ok((kind, source.to_owned()))
}

fn parse_protocol(s: &str) -> Option<ProtocolArg> {
    <ProtocolArg as clap::ValueEnum>::from_str(s, true).ok()
}

/// The servers of a `--servers` file, each with its address as written, and one message per
/// line that could not be used.
pub(crate) async fn file_targets(
    path: &std::path::Path,
    default: ProtocolArg,
    next_index: &mut usize,
) -> anyhow::Result<(Vec<(Target, String)>, Vec<String>)> {
    // A list that cannot be read is the user's to fix: exit 2, naming the file.
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("--servers {}: {e}", path.display())))?;
    let mut targets = Vec::new();
    let mut errors = Vec::new();
    // (line number, protocol, address as written), resolved together below.
    let mut entries: Vec<(usize, ProtocolArg, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (protocol, addr) = match (words.next(), words.next()) {
            (Some(p), Some(a)) => match parse_protocol(p) {
                Some(p) => (p, a),
                None => {
                    errors.push(format!(
                        "{}:{}: unknown protocol {p:?}",
                        path.display(),
                        n + 1
                    ));
                    continue;
                }
            },
            (Some(a), None) => (default, a),
            _ => continue,
        };
        entries.push((n, protocol, addr.to_owned()));
    }
    let inputs: Vec<(String, Option<u16>)> = entries
        .iter()
        .map(|(_, protocol, addr)| (addr.clone(), protocol.default_game_port()))
        .collect();
    let resolved = resolve_inputs(&inputs).await;
    for ((n, protocol, addr), result) in entries.into_iter().zip(resolved) {
        let address = match result {
            Ok(a) => a,
            Err(ResolveError::Address(AddressError::NoPort(_))) => {
                errors.push(format!("{}:{}: no port in {addr:?}", path.display(), n + 1));
                continue;
            }
            Err(ResolveError::Address(e)) => {
                errors.push(format!(
                    "{}:{}: {}",
                    path.display(),
                    n + 1,
                    bad_address(&addr, &e)
                ));
                continue;
            }
            Err(_) => {
                errors.push(format!("{addr}: cannot resolve host name"));
                continue;
            }
        };
        let target = Target {
            index: *next_index,
            address,
            query_address: protocol.query_address(address),
            protocol,
            given_port_only: false,
            gamespy_address: None,
            host: query::host_name(&addr),
        };
        targets.push((target, addr));
        *next_index += 1;
    }
    if targets.is_empty() && errors.is_empty() {
        return Err(UsageError(format!(
            "--servers {}: the file lists no servers (one host:port or PROTOCOL host:port per line)",
            path.display()
        ))
        .into());
    }
    Ok((targets, errors))
}

/// The target that queries a server `kind`'s master listed (`None` for management-server
/// entries, which carry their state and are not queried, and for host names).
pub(crate) fn master_target(kind: MasterKind, l: &Listed, index: usize) -> Option<Target> {
    let protocol = kind.query_protocol()?;
    let address = l.game?;
    let (query_address, given, gamespy) = match kind {
        // GameSpy lists give the query address itself.
        MasterKind::Gamespy => (
            l.query.unwrap_or_else(|| protocol.query_address(address)),
            true,
            None,
        ),
        // The UT2003 list gives the GameSpy port beside the game port.
        MasterKind::Ut2003Text => (protocol.query_address(address), false, l.query),
        _ => (protocol.query_address(address), false, None),
    };
    Some(Target {
        index,
        address,
        query_address,
        protocol,
        given_port_only: given,
        gamespy_address: gamespy,
        host: None,
    })
}

pub(crate) async fn run(args: ScanArgs, verbosity: Verbosity) -> anyhow::Result<u8> {
    let started = std::time::Instant::now();
    if args.masters.is_empty() && args.servers.is_none() {
        return Err(UsageError("nothing to scan: give --master and/or --servers".into()).into());
    }
    let masters: Vec<(MasterKind, String)> = args
        .masters
        .iter()
        .map(|m| parse_master(m))
        .collect::<anyhow::Result<_>>()?;

    let mut errors: Vec<String> = Vec::new();
    let mut targets: Vec<Target> = Vec::new();
    let mut listed_only: Vec<ServerResult> = Vec::new();
    let mut index = 0usize;
    let mut seen: HashSet<(SocketAddr, &'static str)> = HashSet::new();

    // The masters are asked one after another; each bounds its own time.
    for (kind, source) in &masters {
        let (found, error) = list::fetch(
            *kind,
            source,
            list::ListAsk {
                game: args.game.as_deref(),
                protocol_version: args.protocol_version,
                master_filter: None,
            },
            &args.timing,
            tracing::Level::INFO,
        )
        .await?;
        if let Some(e) = error {
            errors.push(format!("master {source}: {e}"));
        }
        for l in found {
            match master_target(*kind, &l, index) {
                Some(target) => {
                    if !seen.insert((target.address, target.protocol.name())) {
                        continue;
                    }
                    targets.push(target);
                }
                _ => {
                    // Management-server entries carry their state; there is nothing to query.
                    listed_only.push(ServerResult {
                        address: l.address.clone(),
                        query_address: None,
                        resolved_address: l.resolved_address.clone(),
                        name: l.name.clone(),
                        num_players: l.num_players,
                        max_players: l.max_players,
                        lobby: l.lobby.clone(),
                        ..ServerResult::listed(kind.name())
                    });
                }
            }
            index += 1;
        }
    }
    if let Some(path) = &args.servers {
        let (t, e) = file_targets(path, args.protocol, &mut index).await?;
        targets.extend(t.into_iter().map(|(mut t, _)| {
            if args.given_port_only {
                t.given_port_only = true;
                t.query_address = t.address;
            }
            t
        }));
        errors.extend(e);
    }

    let total = targets.len() + listed_only.len();
    tracing::info!(
        "querying {}{}",
        plural(targets.len(), "server"),
        if listed_only.is_empty() {
            String::new()
        } else {
            format!(
                " ({} more listed with their state, not queried)",
                listed_only.len()
            )
        }
    );
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(total as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {pos}/{len} servers [{elapsed_precise}] {wide_bar} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let stdout = crate::stdout::stdout();
    let mut sink =
        Sink::new(args.format, stdout, false).with_selection(args.filters.clone(), args.sort);
    let listed_only_count = listed_only.len();
    for r in listed_only {
        bar.inc(1);
        sink.push(r).context("writing output")?;
    }
    let mut tally = Tally {
        answered: listed_only_count,
        failed: 0,
    };
    let all_ok = query::run_targets(targets, &args.timing, &mut sink, &mut |r| {
        tally.count(r);
        bar.inc(1);
        bar.set_message(format!("{} answered", tally.answered));
    })
    .await?;
    bar.finish_and_clear();
    let filtering = sink.filtering();
    let shown = sink.finish().context("writing output")?;
    for e in &errors {
        note(&format!("muster: {e}"));
    }
    if args.format == Format::Table && verbosity.chatty() {
        note(
            &Summary {
                servers: total,
                answered: tally.answered,
                failed: tally.failed,
                shown: filtering.then_some(shown),
                elapsed: started.elapsed(),
            }
            .to_string(),
        );
    }
    Ok(if all_ok && errors.is_empty() {
        exit::OK
    } else {
        exit::SOME_FAILED
    })
}
