//! `muster query`: status, players and rules of the given servers.

use std::net::SocketAddr;

use anyhow::Context as _;
use muster_proto::RawValue;
use muster_proto::probe::QUERY_ADDRESS_FIELD;
use muster_proto::query::QueryError;
use muster_query::{Completed, Failure, HostPort, Job};

use crate::dto::{ServerResult, Status};
use crate::exit;
use crate::output::{Format, Sink};
use crate::protocols::{self, ProtocolArg};
use crate::timing::TimingArgs;

/// A mistake in the user's input; maps to exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub String);

/// Flags of `muster query`.
#[derive(Debug, clap::Args)]
pub(crate) struct QueryArgs {
    /// The query protocol; `auto` probes the conventional ports of every protocol and reports
    /// which answered.
    #[arg(long, short, value_enum)]
    pub protocol: ProtocolArg,
    /// Query exactly the port given instead of deriving the query port from the game port.
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

/// One resolved server to query.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub index: usize,
    pub address: SocketAddr,
    pub query_address: SocketAddr,
}

pub(crate) async fn run(args: QueryArgs) -> anyhow::Result<u8> {
    let mut targets = Vec::new();
    let mut failed_early = Vec::new();
    for (index, input) in args.servers.iter().enumerate() {
        let hp = HostPort::parse(input).map_err(|e| UsageError(format!("{input}: {e}")))?;
        let port = hp
            .port_or(args.protocol.default_game_port())
            .map_err(|e| UsageError(format!("{input}: {e}")))?;
        match hp.resolve(port).await {
            Ok(addrs) => match addrs.first() {
                Some(&address) => {
                    let query_address = if args.given_port_only {
                        address
                    } else {
                        args.protocol.query_address(address)
                    };
                    targets.push(Target {
                        index,
                        address,
                        query_address,
                    });
                }
                None => failed_early.push((index, input.clone(), "host name has no address")),
            },
            Err(_) => failed_early.push((index, input.clone(), "cannot resolve host name")),
        }
    }
    if targets.is_empty() && !failed_early.is_empty() {
        let msgs: Vec<String> = failed_early
            .iter()
            .map(|(_, input, why)| format!("{input}: {why}"))
            .collect();
        return Err(UsageError(msgs.join("; ")).into());
    }

    let protocol = args.protocol;
    let given_port_only = args.given_port_only;
    let jobs: Vec<_> = targets
        .iter()
        .cloned()
        .map(|t| Job {
            tag: t.clone(),
            build: move |config| protocols::machine(protocol, &t, given_port_only, config),
        })
        .collect();

    let stdout = std::io::stdout().lock();
    let mut sink = Sink::new(args.format, stdout, true);
    let mut all_ok = failed_early.is_empty();
    for (_, input, why) in &failed_early {
        tracing::warn!("{input}: {why}");
    }
    let mut rx = muster_query::spawn(jobs, args.timing.options());
    let mut results: Vec<(usize, ServerResult)> = Vec::new();
    while let Some(Completed { tag, outcome, .. }) = rx.recv().await {
        let result = match outcome {
            Ok(info) => {
                // Probes record which of the addresses they tried answered.
                let answered = match info.raw_field(QUERY_ADDRESS_FIELD) {
                    Some(RawValue::Text(t)) => t.text.parse().ok(),
                    _ => None,
                };
                ServerResult::ok(tag.address, answered.unwrap_or(tag.query_address), &info)
            }
            Err(failure) => {
                all_ok = false;
                let status = match failure {
                    Failure::Query(QueryError::Timeout) => Status::Timeout,
                    _ => Status::Error,
                };
                let error = format!("{}: {failure}", tag.query_address);
                ServerResult::failed(
                    tag.address,
                    tag.query_address,
                    protocol.name(),
                    status,
                    error,
                )
            }
        };
        if args.format == Format::Ndjson {
            sink.push(result).context("writing output")?;
        } else {
            results.push((tag.index, result));
        }
    }
    // Table and JSON keep the order the servers were given in.
    results.sort_by_key(|(i, _)| *i);
    for (_, r) in results {
        sink.push(r).context("writing output")?;
    }
    sink.finish().context("writing output")?;
    Ok(if all_ok { exit::OK } else { exit::SOME_FAILED })
}
