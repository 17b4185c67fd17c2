//! `muster serve`: the master daemon.

use std::io::Write as _;

use anyhow::Context as _;
use muster_master::config::{Config, Listen};
use muster_master::store::StoreError;
use muster_master::{Listeners, Master, MasterError};

use crate::exit;
use crate::query::UsageError;

const AFTER_HELP: &str = "\
Every face is on by default, on IPv4 and IPv6:
  gameagent    UDP 9005    Serious Sam GameAgent master
  gamespy-udp  UDP 27900   GameSpy heartbeats (verified by \\secure\\ or \\status\\)
  gamespy-tcp  TCP 28900   GameSpy lists
  teeworlds07  UDP 8283    Teeworlds 0.7 master (firewall check from 8284)
  teeworlds06  UDP 8300    Teeworlds 0.6 list
  http         TCP 8080    DDNet register + servers.json, UT2003 lists, /api/v1/servers,
                           /healthz, /metrics
  mgmt         TCP 51963   management server (Bomberman)

A face flag takes one or more comma-separated addresses (port 0 picks a free port) or `off`,
and overrides the config file. One line `listening <face> <udp|tcp> <address>` is printed per
socket, with the real port. The registry lives in SQLite under --data-dir and survives a
restart, also after kill -9. SIGINT or SIGTERM shuts down gracefully.

examples/muster.toml in the source tree is a complete --config file: every key with its default
and a comment.";

/// Flags of `muster serve`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct ServeArgs {
    /// The daemon's configuration (TOML; every key is shown in examples/muster.toml).
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Where the registry is stored (default: ./muster-data).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<std::path::PathBuf>,
    /// The registry's store: sqlite:PATH (default: muster.sqlite3 in --data-dir) or
    /// postgres://USER:PASS@HOST:PORT/DB, which several instances may share (overrides
    /// the url of the config file's store section).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// GameAgent master, UDP.
    #[arg(long, value_name = "ADDR|off")]
    pub gameagent: Option<String>,
    /// GameSpy heartbeats, UDP.
    #[arg(long, value_name = "ADDR|off")]
    pub gamespy_udp: Option<String>,
    /// GameSpy lists, TCP.
    #[arg(long, value_name = "ADDR|off")]
    pub gamespy_tcp: Option<String>,
    /// Teeworlds 0.7 master, UDP (the firewall checker takes the next port).
    #[arg(long, value_name = "ADDR|off")]
    pub teeworlds07: Option<String>,
    /// Teeworlds 0.6 list, UDP.
    #[arg(long, value_name = "ADDR|off")]
    pub teeworlds06: Option<String>,
    /// HTTP, TCP.
    #[arg(long, value_name = "ADDR|off")]
    pub http: Option<String>,
    /// Management server, TCP.
    #[arg(long, value_name = "ADDR|off")]
    pub mgmt: Option<String>,
    /// Repair a damaged registry instead of serving: copy every readable record of
    /// `<data-dir>/muster.sqlite3` into a new file (the damaged one is kept beside it), say how
    /// many were lost, and exit. Run it with the daemon stopped.
    #[arg(long)]
    pub repair: bool,
}

fn apply(target: &mut Listen, flag: &str, value: Option<&String>) -> anyhow::Result<()> {
    if let Some(v) = value {
        *target = Listen::parse(v).map_err(|e| UsageError(format!("--{flag} {v:?}: {e}")))?;
    }
    Ok(())
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<u8> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path).map_err(|e| UsageError(format!("{e:#}")))?,
        None => Config::default(),
    };
    if let Some(dir) = &args.data_dir {
        config.data_dir.clone_from(dir);
    }
    if let Some(url) = &args.store {
        config.store.url = Some(url.clone());
    }
    let l = &mut config.listen;
    apply(&mut l.gameagent, "gameagent", args.gameagent.as_ref())?;
    apply(&mut l.gamespy_udp, "gamespy-udp", args.gamespy_udp.as_ref())?;
    apply(&mut l.gamespy_tcp, "gamespy-tcp", args.gamespy_tcp.as_ref())?;
    apply(&mut l.teeworlds07, "teeworlds07", args.teeworlds07.as_ref())?;
    apply(&mut l.teeworlds06, "teeworlds06", args.teeworlds06.as_ref())?;
    apply(&mut l.http, "http", args.http.as_ref())?;
    apply(&mut l.mgmt, "mgmt", args.mgmt.as_ref())?;

    // One daemon per data directory: a second one would corrupt the store's view of itself.
    let _lock = muster_master::store::lock_data_dir(&config.data_dir).map_err(store_usage)?;
    if args.repair {
        return repair(&config.data_dir);
    }
    let master = Master::open(config.clone(), muster_master::registry::Timestamp::now()).map_err(
        |e| match e {
            MasterError::Store(s) if s.is_fatal_at_start() => store_usage(s),
            e => anyhow::Error::new(e).context(format!(
                "opening the registry in {}",
                muster_master::store_url(&config)
                    .map_or_else(|_| config.data_dir.display().to_string(), |u| u.redacted())
            )),
        },
    )?;
    let listeners = Listeners::bind(&config)?;
    {
        let mut out = std::io::stdout().lock();
        for b in listeners.bound()? {
            writeln!(out, "listening {} {} {}", b.face, b.transport, b.addr)?;
        }
        out.flush()?;
    }
    master.run(listeners, crate::signal::shutdown()).await?;
    Ok(exit::OK)
}

/// A store that cannot be used as it is (damaged, of an unknown version, in use) is the
/// user's to fix: exit 2 with the message, which names the file and what to do.
fn store_usage(e: StoreError) -> anyhow::Error {
    UsageError(muster_master::error_chain(&e)).into()
}

fn repair(dir: &std::path::Path) -> anyhow::Result<u8> {
    let r = muster_master::store::repair(dir)
        .with_context(|| format!("repairing the registry in {}", dir.display()))?;
    let mut out = std::io::stdout().lock();
    let lost = r
        .lost
        .map_or_else(|| "an unknown number".to_owned(), |n| n.to_string());
    writeln!(
        out,
        "repaired {}: {} records kept, {lost} lost, {} unreadable by this build; the damaged \
         file is now {}",
        r.path.display(),
        r.recovered,
        r.unreadable,
        r.moved_to.display()
    )?;
    Ok(exit::OK)
}
