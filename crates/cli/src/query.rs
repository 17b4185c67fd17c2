//! `muster query`: status, players and rules of the given servers.

use std::net::IpAddr;

use anyhow::Context as _;
use muster_proto::query::QueryError;
use muster_query::{
    AddressError, Answer, Completed, Failure, HostPort, Job, ResolveError, resolve_inputs,
};

use crate::dto::{ServerResult, Status};
use crate::exit;
use crate::output::{Format, Sink, Summary, note, plural};
use crate::protocols::ProtocolArg;
use crate::target::Target;
use crate::timing::TimingArgs;
use crate::verbosity::Verbosity;

/// A mistake in the user's input; maps to exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub String);

/// Why `input` is not an address, naming the input once.
pub(crate) fn bad_address(input: &str, e: &AddressError) -> UsageError {
    match e {
        // The message quotes the input and says how to write it.
        AddressError::AmbiguousIpv6 { .. } => UsageError(e.to_string()),
        _ => UsageError(format!("{input}: {e}")),
    }
}

/// Counts of a run, for its summary.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tally {
    pub answered: usize,
    pub failed: usize,
}

impl Tally {
    pub(crate) fn count(&mut self, r: &ServerResult) {
        if r.status == Status::Ok {
            self.answered += 1;
        } else {
            self.failed += 1;
        }
    }
}

/// Flags of `muster query`.
#[derive(Debug, clap::Args)]
pub(crate) struct QueryArgs {
    /// The query protocol; `auto` probes the conventional ports of every protocol and reports
    /// which answered.
    #[arg(long, short, value_enum, default_value = "auto")]
    pub protocol: ProtocolArg,
    /// The ports given are query ports: query exactly them instead of deriving the query port
    /// from the game port (the game port is then read from the answer, where it says one).
    #[arg(long)]
    pub given_port_only: bool,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    pub format: Format,
    #[command(flatten)]
    pub timing: TimingArgs,
    /// Game addresses: host:port, a.b.c.d:port or `[v6]:port`.
    #[arg(value_name = "HOST:PORT", required = true)]
    pub servers: Vec<String>,
}

/// The host name in `input` (`None` for an IP address).
pub(crate) fn host_name(input: &str) -> Option<String> {
    let given = HostPort::parse(input).ok()?;
    given.host.parse::<IpAddr>().is_err().then_some(given.host)
}

/// Resolve game addresses given on the command line into targets (`index`: the position in
/// `servers`), with one message per host name that did not resolve. An unparseable address, or
/// none resolving at all, is a [`UsageError`].
pub(crate) async fn resolve_targets(
    servers: &[String],
    protocol: ProtocolArg,
    given_port_only: bool,
) -> anyhow::Result<(Vec<Target>, Vec<String>)> {
    let mut targets = Vec::new();
    let mut failed_early = Vec::new();
    let inputs: Vec<(String, Option<u16>)> = servers
        .iter()
        .map(|s| (s.clone(), protocol.default_game_port()))
        .collect();
    let resolved = resolve_inputs(&inputs).await;
    for (index, (input, result)) in servers.iter().zip(resolved).enumerate() {
        match result {
            Ok(address) => {
                let query_address = if given_port_only {
                    address
                } else {
                    protocol.query_address(address)
                };
                targets.push(Target {
                    index,
                    address,
                    query_address,
                    protocol,
                    given_port_only,
                    gamespy_address: None,
                    host: host_name(input),
                });
            }
            Err(ResolveError::Address(e)) => {
                return Err(bad_address(input, &e).into());
            }
            Err(ResolveError::NoAddress) => {
                failed_early.push(format!("{input}: host name has no address"));
            }
            Err(_) => failed_early.push(format!("{input}: cannot resolve host name")),
        }
    }
    if targets.is_empty() && !failed_early.is_empty() {
        return Err(UsageError(failed_early.join("; ")).into());
    }
    Ok((targets, failed_early))
}

pub(crate) async fn run(args: QueryArgs, verbosity: Verbosity) -> anyhow::Result<u8> {
    let started = std::time::Instant::now();
    let (targets, failed_early) =
        resolve_targets(&args.servers, args.protocol, args.given_port_only).await?;
    for why in &failed_early {
        tracing::warn!("{why}");
    }
    tracing::info!(
        "querying {} ({})",
        plural(targets.len(), "server"),
        args.protocol.name()
    );
    let stdout = crate::stdout::stdout();
    let mut sink = Sink::new(args.format, stdout, true);
    let mut tally = Tally::default();
    let all_ok = run_targets(targets, &args.timing, &mut sink, &mut |r| tally.count(r)).await?;
    sink.finish().context("writing output")?;
    if args.format == Format::Table && verbosity.chatty() {
        note(
            &Summary {
                servers: tally.answered + tally.failed + failed_early.len(),
                answered: tally.answered,
                failed: tally.failed + failed_early.len(),
                shown: None,
                elapsed: started.elapsed(),
            }
            .to_string(),
        );
    }
    Ok(if all_ok && failed_early.is_empty() {
        exit::OK
    } else {
        exit::SOME_FAILED
    })
}

/// Query every target, pushing results into `sink` (NDJSON as they arrive, otherwise in input
/// order at the end) and calling `progress` once per finished query. True when all answered.
pub(crate) async fn run_targets<W: std::io::Write>(
    targets: Vec<Target>,
    timing: &TimingArgs,
    sink: &mut Sink<W>,
    progress: &mut dyn FnMut(&ServerResult),
) -> anyhow::Result<bool> {
    let streaming = sink.format() == Format::Ndjson;
    let jobs: Vec<_> = targets
        .into_iter()
        .map(|t| Job {
            tag: t.clone(),
            build: move |config| t.library().machine(config),
        })
        .collect();
    let mut all_ok = true;
    let mut rx = muster_query::spawn(jobs, timing.options());
    let mut results: Vec<(usize, ServerResult)> = Vec::new();
    while let Some(Completed { tag, outcome, .. }) = rx.recv().await {
        let result = match outcome {
            Ok(info) => {
                let answer = Answer::new(&tag.library(), *info);
                let game = tag.game_address(&answer.info);
                tag.shown(
                    ServerResult::ok(game, answer.query_address, answer.info),
                    game,
                )
            }
            Err(failure) => {
                all_ok = false;
                let status = match failure {
                    Failure::Query(QueryError::Timeout) | Failure::Unsent => Status::Timeout,
                    _ => Status::Error,
                };
                let error = format!("{}: {failure}", tag.query_address);
                tag.shown(
                    ServerResult::failed(
                        tag.address,
                        tag.query_address,
                        tag.protocol.name(),
                        status,
                        error,
                    ),
                    tag.address,
                )
            }
        };
        progress(&result);
        if streaming {
            sink.push(result).context("writing output")?;
            if rx.is_empty() {
                // Nothing else is ready: show what came so far.
                sink.flush().context("writing output")?;
            }
        } else {
            results.push((tag.index, result));
        }
    }
    // Table and JSON keep the order the servers were given in.
    results.sort_by_key(|(i, _)| *i);
    for (_, r) in results {
        sink.push(r).context("writing output")?;
    }
    Ok(all_ok)
}
