//! `muster exporter`: the probe exporter alone (`GET /probe`), for Prometheus.

use std::io::Write as _;

use anyhow::Context as _;
use muster_master::probe::{ProbeSettings, route};

use crate::exit;
use crate::query::UsageError;

const AFTER_HELP: &str = "\
GET /probe?target=HOST:PORT&protocol=P asks that game server once (P: gameagent, gamespy1,
unreal2, teeworlds, quake3, a2s or auto, the default) and answers Prometheus metrics:
muster_probe_success, muster_probe_duration_seconds, muster_server_players,
muster_server_max_players, muster_server_bots (where known), muster_server_ping_seconds,
muster_server_info (name, map, game type, game as labels) and muster_player_score.
GET /probe?master=KIND:ADDRESS lists a master (gameagent, gamespy with game=NAME, teeworlds,
quake3, valve, mgmt, ddnet:URL, ut2003-text:URL) and asks every listed server, one series
each under a `server` label (at most 1000 servers).

A probe ends within Prometheus' scrape timeout (X-Prometheus-Scrape-Timeout-Seconds, less half
a second; 5 s without it). Bad parameters are answered 400, more than --max-concurrent probes
at once 503. One line `listening exporter tcp <address>` is printed once serving; SIGINT or
SIGTERM stops. docs/exporter.md has a Prometheus scrape_config. `muster serve` answers the same
/probe on its HTTP address.";

/// Flags of `muster exporter`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct ExporterArgs {
    /// The address to serve /probe on (port 0 picks a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9725")]
    pub listen: std::net::SocketAddr,
    /// Probes running at once; one more is answered 503.
    #[arg(long, value_name = "N", default_value_t = route::DEFAULT_MAX_CONCURRENT_PROBES)]
    pub max_concurrent: usize,
}

pub(crate) async fn run(args: ExporterArgs) -> anyhow::Result<u8> {
    if args.max_concurrent == 0 {
        return Err(UsageError("--max-concurrent must be at least 1".into()).into());
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening exporter tcp {addr}")?;
        out.flush()?;
    }
    let stop = muster_master::CancellationToken::new();
    let settings = ProbeSettings {
        max_concurrent: args.max_concurrent,
        ..ProbeSettings::default()
    };
    let serving = tokio::spawn(muster_master::probe::serve(
        listener,
        settings,
        stop.clone(),
    ));
    crate::signal::shutdown().await;
    stop.cancel();
    serving.await.context("the exporter task failed")?;
    Ok(exit::OK)
}
