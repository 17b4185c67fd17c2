//! `muster emulate`: run emulated game servers from a farm file or from flags.

use std::io::Write as _;
use std::net::IpAddr;

use anyhow::Context as _;
use muster_server::farm::{FarmProtocol, FarmSpec, PlayerSpec, ServerSpec};
use muster_server::{Limits, endpoints, run};

use crate::exit;
use crate::query::UsageError;

const AFTER_HELP: &str = "\
Examples:
  muster emulate --protocol teeworlds --port 8303 --name 'Jérôme' --players 8
  muster emulate --protocol gamespy1 --port 7777 --style ut99 --master gamespy:127.0.0.1:27900
  muster emulate --protocol unreal2 --port 7777 --style ut2003 --gamespy-offset 10
  muster emulate --protocol quake3 --port 27960 --players 3 --master quake3:127.0.0.1:27950
  muster emulate --protocol quake3 --port 26000 --style darkplaces --map stormkeep
  muster emulate --protocol a2s --port 27015 --require-challenge --rules 150
  muster emulate --protocol a2s --port 27015 --style goldsrc --master valve:127.0.0.1:27010
  muster emulate --config examples/farm.toml

Query ports follow each protocol's convention: game port + 1 for gameagent, gamespy1 and
unreal2; the game port itself for teeworlds, quake3 and a2s. UT2003 moved GameSpy v1 to game
port + 10, so gamespy1 with --style ut2003 or ut2003demo answers at + 10. --gamespy-offset N puts
GameSpy v1 at game port + N: instead of + 1 (or + 10) for gamespy1, and besides the native
query at + 1 for unreal2 (UT2003/UT2004 servers answer GameSpy at + 10). One line
`listening <protocol> udp <address>` is printed per socket before serving starts. SIGINT or
SIGTERM stops every server (registered servers say goodbye to their masters first). The farm
file format is described in crates/server/src/farm.rs and shown in examples/farm.toml.

A quake3 server answers getinfo and getstatus as ioquake3 does (or, with --style darkplaces,
as DarkPlaces/Xonotic does, with gamename and qcstatus); --bots N makes the last N players
bots, listed with ping 0. With --master quake3:HOST:PORT it heartbeats a dpmaster
(`heartbeat QuakeArena-1`, or `heartbeat DarkPlaces`) every 5 minutes and when it becomes
empty or full, and answers the master's getinfo challenge.

An a2s server answers A2S_INFO, A2S_PLAYER and A2S_RULES as a Source server does (--style
goldsrc: Half-Life's protocol 48 and the GoldSrc split layout; --style ship: The Ship's extra
fields). PLAYER and RULES always go through the challenge round; --require-challenge makes INFO
do so too, as servers have since 2020. --rules N adds N rules; replies over 1,400 bytes are
split (--compress: bzip2-compressed, source and ship styles). With --master valve:HOST:PORT
it registers with a Half-Life / Xash3D master (xash3d-master, muster serve --valve): it asks a
challenge (`q ff`), heartbeats with it (game directory, map, players, protocol 48, engine
version 0.21), refreshes every 2 minutes and when it becomes empty or full, and says goodbye
(`b`) on shutdown.";

/// Flags of `muster emulate`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct EmulateArgs {
    /// A farm description (TOML): explicit servers and generated ones.
    #[arg(long, short, value_name = "FILE", conflicts_with_all = ["protocol", "port"])]
    pub config: Option<std::path::PathBuf>,
    /// The protocol of the one server to run (without --config).
    #[arg(long, short, value_parser = ["gameagent", "gamespy1", "unreal2", "teeworlds", "quake3", "a2s"])]
    pub protocol: Option<String>,
    /// Its game port.
    #[arg(long)]
    pub port: Option<u16>,
    /// Its name.
    #[arg(long, default_value = "Muster emulated server")]
    pub name: String,
    /// Its map.
    #[arg(long, default_value = "")]
    pub map: String,
    /// How many players it reports (named Player 1, Player 2, …).
    #[arg(long, default_value_t = 0)]
    pub players: u32,
    /// How many of those players are bots (the last ones, named Bot 1, Bot 2, …; quake3
    /// lists them with ping 0, protocols that leave bots out do not list them).
    #[arg(long, default_value_t = 0)]
    pub bots: u32,
    /// Its player slots.
    #[arg(long, default_value_t = 16)]
    pub max_players: u32,
    /// The reply style (gamespy1: ut2003, ut2003demo, ut99, unreal, serioussam; unreal2:
    /// ut2004, ut2003; gameagent: seed (default, names as typed), x86, arm (stock `^o…^r`
    /// names); quake3: ioquake3 (default), darkplaces; a2s: source (default), goldsrc, ship).
    #[arg(long)]
    pub style: Option<String>,
    /// Register with a master: PROTOCOL:HOST:PORT (gameagent, gamespy, teeworlds07, quake3,
    /// valve) or ddnet:URL. Repeatable.
    #[arg(long = "master", value_name = "PROTOCOL:ADDRESS")]
    pub masters: Vec<String>,
    /// GameSpy v1 at game port + N (gamespy1: instead of + 1, or + 10 for the UT2003 styles;
    /// unreal2: also, besides the native query at + 1, as UT2003/UT2004 servers answer at
    /// + 10).
    #[arg(long, value_name = "N")]
    pub gamespy_offset: Option<u16>,
    /// a2s: INFO too needs the challenge round (PLAYER and RULES always do).
    #[arg(long)]
    pub require_challenge: bool,
    /// a2s (source, ship): send split replies bzip2-compressed, as 2006-era Source servers.
    #[arg(long)]
    pub compress: bool,
    /// Add N rules (`rule_001` … with 20-character values), to make RULES replies that
    /// split.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub rules: u32,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Apply the per-source rate limits of a public server (off by default: farms are for
    /// testing clients, which query fast).
    #[arg(long)]
    pub limit: bool,
}

fn farm_from_flags(args: &EmulateArgs) -> anyhow::Result<FarmSpec> {
    let (Some(protocol), Some(port)) = (args.protocol.as_deref(), args.port) else {
        return Err(UsageError("give --config FILE, or --protocol and --port".into()).into());
    };
    let protocol = FarmProtocol::parse(protocol)
        .ok_or_else(|| UsageError(format!("unknown protocol {protocol:?}")))?;
    let humans = args.players.saturating_sub(args.bots);
    let players = (1..=args.players)
        .map(|i| {
            let bot = i > humans;
            PlayerSpec {
                name: if bot {
                    format!("Bot {}", i - humans)
                } else {
                    format!("Player {i}")
                },
                score: i64::from(i),
                ping: if bot { 0 } else { 20 + i },
                team: None,
                clan: String::new(),
                country: -1,
                spectator: false,
                bot,
            }
        })
        .collect();
    Ok(FarmSpec {
        seed: 0,
        bind: args.bind,
        server: vec![ServerSpec {
            protocol,
            port,
            name: args.name.clone(),
            map: args.map.clone(),
            game_type: String::new(),
            version: None,
            game: None,
            password: false,
            max_players: args.max_players.max(args.players),
            players,
            rules: (1..=args.rules)
                .map(|i| (format!("rule_{i:03}"), format!("value-{i:014}")))
                .collect(),
            style: args.style.clone(),
            masters: args.masters.clone(),
            loss: 0.0,
            reorder: 0.0,
            delay: None,
            gamespy_offset: args.gamespy_offset,
            require_challenge: args.require_challenge,
            compress: args.compress,
        }],
        generate: Vec::new(),
    })
}

pub(crate) async fn run(args: EmulateArgs) -> anyhow::Result<u8> {
    let farm = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| UsageError(format!("--config {}: {e}", path.display())))?;
            FarmSpec::from_toml(&text)
                .map_err(|e| UsageError(format!("{}: {e}: {}", path.display(), source_text(&e))))?
        }
        None => farm_from_flags(&args)?,
    };
    let servers = farm.expand().map_err(|e| UsageError(format!("{e}")))?;
    let limits = if args.limit {
        Limits::default()
    } else {
        Limits::unlimited()
    };
    let mut farm = run::start(servers, limits, None, endpoints::endpoint)
        .await
        .map_err(|e| match e {
            // A server that cannot be made from its description is the user's to fix.
            e @ run::FarmRunError::Endpoint { .. } => UsageError(e.to_string()).into(),
            e => anyhow::anyhow!(e),
        })?;
    {
        let mut out = std::io::stdout().lock();
        for l in &farm.listening {
            writeln!(out, "listening {} udp {}", l.protocol.name(), l.addr)?;
        }
        out.flush()?;
    }
    let stopper = farm.stopper();
    tokio::spawn(async move {
        crate::signal::shutdown().await;
        let _ = stopper.send(true);
    });
    farm.wait().await.context("serving")?;
    Ok(exit::OK)
}

fn source_text(e: &muster_server::farm::FarmError) -> String {
    use std::error::Error as _;
    e.source().map(ToString::to_string).unwrap_or_default()
}
