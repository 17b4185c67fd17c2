//! `muster serve`: the master daemon.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::Context as _;
use muster_master::config::{Config, Listen};
use muster_master::store::StoreError;
use muster_master::{Bound, Listeners, Master, MasterError};

use crate::exit;
use crate::query::UsageError;
use crate::verbosity::Verbosity;

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
  quake3       UDP 27950   Quake III / DarkPlaces master (dpmaster's protocol: ioquake3 games,
                           Xonotic, Warsow, Wolfenstein: ET, ...); loopback servers are refused
                           unless [quake3] allow_loopback = true
  valve        UDP 27010   Half-Life / Xash3D master (xash3d-master's protocol, Valve master
                           query); loopback servers are refused unless [valve] allow_loopback =
                           true

--upstream KIND:ADDRESS (repeatable) learns servers from another master (docs/federation.md);
a learned server is listed only after this master queried it successfully itself.

A face flag takes one or more comma-separated addresses (port 0 picks a free port) or `off`,
and overrides the config file. One line `listening <face> <udp|tcp> <address>` is printed per
socket, with the real port; then, on stderr unless -q, the browser's URL and one line per face
saying how a game server registers with it.

--print-config prints the configuration that would be used (defaults, then the file, then
the flags) as TOML and exits. The registry lives in SQLite under --data-dir and survives a
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
    /// Quake III / DarkPlaces master (dpmaster's protocol), UDP.
    #[arg(long, value_name = "ADDR|off")]
    pub quake3: Option<String>,
    /// Half-Life / Xash3D master (xash3d-master's protocol, Valve master query), UDP.
    #[arg(long, value_name = "ADDR|off")]
    pub valve: Option<String>,
    /// Learn servers from another master, as KIND:ADDRESS (repeatable; added to the config's
    /// upstream entries): gamespy:host:28900, gameagent:host:9005, teeworlds06:host:8300,
    /// teeworlds07:host:8283, ddnet:https://host/ddnet/15/servers.json, ut2003-text:URL,
    /// muster:http://host:8080, quake3:host:27950, valve:host:27010. Learned servers are
    /// listed once this master queried them.
    #[arg(long, value_name = "KIND:ADDRESS")]
    pub upstream: Vec<String>,
    /// Print the effective configuration (defaults, then --config, then the flags) as TOML
    /// and exit.
    #[arg(long)]
    pub print_config: bool,
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

pub(crate) async fn run(args: ServeArgs, verbosity: Verbosity) -> anyhow::Result<u8> {
    let mut config = match &args.config {
        Some(path) => {
            Config::from_file(path).map_err(|e| UsageError(muster_master::error_chain(&e)))?
        }
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
    apply(&mut l.quake3, "quake3", args.quake3.as_ref())?;
    apply(&mut l.valve, "valve", args.valve.as_ref())?;
    for u in &args.upstream {
        let parsed = muster_master::upstream::settings::UpstreamConfig::parse_flag(u)
            .map_err(|e| UsageError(format!("--upstream {u:?}: {e}")))?;
        config.upstream.push(parsed);
    }
    config
        .validate()
        .map_err(|e| UsageError(format!("{e:#}")))?;
    if args.print_config {
        let mut out = crate::stdout::stdout();
        out.write_all(config.to_toml().as_bytes())?;
        out.flush()?;
        return Ok(exit::OK);
    }

    // One daemon per data directory: a second one would corrupt the store's view of itself.
    let _lock = muster_master::store::lock_data_dir(&config.data_dir).map_err(store_usage)?;
    if args.repair {
        return repair(&config.data_dir);
    }
    // Bound before the registry is opened: what arrives while it loads (a large registry, a
    // slow disk) waits in the sockets' queues instead of being refused, and a port in use is
    // reported before any loading.
    let listeners = Listeners::bind(&config)?;
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
    {
        let bound = listeners.bound()?;
        let mut out = std::io::stdout().lock();
        for b in &bound {
            writeln!(out, "listening {} {} {}", b.face, b.transport, b.addr)?;
        }
        out.flush()?;
        // For the person at the terminal, on stderr: a script reading the `listening` lines
        // from stdout may close it once it has them.
        if verbosity.chatty() {
            for line in start_notes(&bound) {
                crate::output::note(&line);
            }
        }
    }
    // Memory freed after a burst (every server registering again after a restart, a list
    // build) goes back to the system within seconds, not at the next burst.
    let _upkeep = muster_alloc::Upkeep::start();
    master.run(listeners, crate::signal::shutdown()).await?;
    Ok(exit::OK)
}

/// An address to reach `addr` from this machine: a wildcard bind is reached on loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    }
}

/// What `serve` says after its `listening` lines: where the browser is, and for each face
/// (its first address, IPv4 first) how a game server registers with it or a client lists it:
/// DDNet's `sv_register_url` (teeworlds-master.md §3.1), then each table face's own hint.
pub(crate) fn start_notes(bound: &[Bound]) -> Vec<String> {
    let first = |face: &str| {
        let mut addrs: Vec<SocketAddr> = bound
            .iter()
            .filter(|b| b.face == face)
            .map(|b| reachable(b.addr))
            .collect();
        addrs.sort_by_key(SocketAddr::is_ipv6);
        addrs.first().copied()
    };
    let mut notes = Vec::new();
    if let Some(a) = first("http") {
        notes.push(format!("browser: http://{a}/"));
    }
    let mut faces = Vec::new();
    if let Some(a) = first("http") {
        faces.push(format!(
            "http         DDNet: sv_register_url \"http://{a}/ddnet/15/register\" (and http_allow_insecure 1)"
        ));
    }
    for face in muster_master::table::FACES {
        if let Some(a) = first(face.name) {
            faces.push(format!("{:<12} {}", face.name, (face.register_hint)(a)));
        }
    }
    if !faces.is_empty() {
        notes.push(
            "register game servers (from another machine, use this machine's address):".into(),
        );
        notes.extend(faces.into_iter().map(|f| format!("  {f}")));
    }
    notes
}

/// A store that cannot be used as it is (damaged, of an unknown version, in use) is the
/// user's to fix: exit 2 with the message, which names the file and what to do.
fn store_usage(e: StoreError) -> anyhow::Error {
    UsageError(muster_master::error_chain(&e)).into()
}

fn repair(dir: &std::path::Path) -> anyhow::Result<u8> {
    let r = muster_master::store::repair(dir)
        .with_context(|| format!("repairing the registry in {}", dir.display()))?;
    let mut out = crate::stdout::stdout();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn b(face: &'static str, addr: &str) -> Bound {
        Bound {
            face,
            transport: "udp",
            addr: addr.parse().unwrap(),
        }
    }

    #[test]
    fn notes_give_a_usable_url_and_one_line_per_face() {
        let bound = [
            b("http", "[::]:8080"),
            b("http", "0.0.0.0:8080"),
            b("gameagent", "0.0.0.0:9005"),
            b("gamespy-udp", "192.0.2.7:27901"),
            b("teeworlds07", "127.0.0.1:18283"),
            b("teeworlds07-checker", "127.0.0.1:18284"),
            b("mgmt", "[::1]:51963"),
        ];
        let notes = start_notes(&bound);
        assert_eq!(notes[0], "browser: http://127.0.0.1:8080/");
        let text = notes.join("\n");
        assert!(text.contains("ga_strServer = \"127.0.0.1\";\n"), "{text}");
        assert!(
            text.contains("MasterServerAddress=192.0.2.7 MasterServerPort=27901"),
            "{text}"
        );
        assert!(text.contains("\"127.0.0.1 127.0.0.1\" (the game always sends to port 8283; this face is on 18283)"), "{text}");
        assert!(
            text.contains("sv_register_url \"http://127.0.0.1:8080/ddnet/15/register\""),
            "{text}"
        );
        assert!(text.contains("connect to [::1]:51963"), "{text}");
        assert_eq!(notes.len(), 2 + 5, "{text}");
        assert!(start_notes(&[b("http", "[::]:80")])[0] == "browser: http://[::1]:80/");
    }
}
