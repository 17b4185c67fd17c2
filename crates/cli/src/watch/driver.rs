//! The polling loop of `muster watch`: every interval, list the masters again, query every
//! server through the query engine, feed each outcome to the [`Watcher`] and its events to
//! the sinks; until SIGINT or SIGTERM.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::SystemTime;

use anyhow::Context as _;
use muster_query::{Answer, Completed, Failure, Job};

use super::WatchArgs;
use super::machine::{Poll, SeenPlayer, ServerKey, Snapshot, Watcher};
use super::notify::StateFile;
use super::sinks::Sinks;
use crate::dto::{Field, ServerResult};
use crate::exit;
use crate::list::{self, MasterKind};
use crate::output::Filter;
use crate::query::{self, UsageError};
use crate::scan;
use crate::signal;
use crate::target::Target;
use crate::timing::TimingArgs;

/// One watched server.
#[derive(Debug, Clone)]
struct Watched {
    key: ServerKey,
    target: Target,
}

impl Watched {
    fn new(address: &str, target: Target) -> Self {
        Self {
            key: ServerKey {
                address: address.into(),
                protocol: target.protocol.name(),
            },
            target,
        }
    }
}

/// A `--master` and the servers of its last good list.
#[derive(Debug)]
struct Master {
    kind: MasterKind,
    source: String,
    listed: Vec<Watched>,
}

pub(crate) async fn run(args: WatchArgs) -> anyhow::Result<u8> {
    if args.addresses.is_empty() && args.servers_file.is_none() && args.masters.is_empty() {
        return Err(UsageError(
            "nothing to watch: give addresses, --servers and/or --master".into(),
        )
        .into());
    }
    let mut masters = Vec::new();
    for spec in &args.masters {
        let (kind, source) = scan::parse_master(spec)?;
        match kind {
            MasterKind::Gamespy => {
                return Err(UsageError(format!(
                    "--master {spec:?}: GameSpy lists need a game name, which watch does not take; \
                     put the servers of `muster list -p gamespy -g GAME` in a --servers file"
                ))
                .into());
            }
            MasterKind::Mgmt => {
                return Err(UsageError(format!(
                    "--master {spec:?}: management-server entries cannot be queried"
                ))
                .into());
            }
            _ => {}
        }
        masters.push(Master {
            kind,
            source,
            listed: Vec::new(),
        });
    }
    let fixed = fixed_servers(&args).await?;
    let mut sinks = Sinks::new(args.format, args.exec.clone(), args.webhook.clone())?;
    let state = match &args.state_file {
        Some(path) => Some(std::sync::Arc::new(StateFile::open(path.clone())?)),
        None => None,
    };
    sinks.set_when(args.when.clone());
    for n in &args.notify {
        sinks.add_notifier(n.clone(), args.status_message, state.clone())?;
    }
    let mut watcher = Watcher::new(&args.friends);
    let poller = Poller {
        timing: &args.timing,
        filters: &args.filters,
        fixed,
    };

    let shutdown = signal::shutdown();
    tokio::pin!(shutdown);
    let mut ticks = tokio::time::interval(args.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listed_before: HashSet<ServerKey> = HashSet::new();
    let mut first = true;
    let result = loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break Ok(()),
            _ = ticks.tick() => {}
        }
        let round = poller.round(
            &mut masters,
            &mut listed_before,
            first,
            &mut watcher,
            &mut sinks,
        );
        first = false;
        tokio::select! {
            biased;
            () = &mut shutdown => break Ok(()),
            r = round => if let Err(e) = r { break Err(e) },
        }
    };
    sinks.close().await;
    result.map(|()| exit::OK)
}

/// The servers given on the command line and in `--servers`, resolved once.
async fn fixed_servers(args: &WatchArgs) -> anyhow::Result<Vec<Watched>> {
    let mut fixed = Vec::new();
    if !args.addresses.is_empty() {
        let (targets, failed) =
            query::resolve_targets(&args.addresses, args.protocol, args.given_port_only).await?;
        for why in failed {
            tracing::warn!("{why}");
        }
        for t in targets {
            let given = args.addresses.get(t.index).cloned().unwrap_or_default();
            fixed.push(Watched::new(&given, t));
        }
    }
    if let Some(path) = &args.servers_file {
        let mut index = fixed.len();
        let (targets, errors) = scan::file_targets(path, args.protocol, &mut index).await?;
        for e in errors {
            tracing::warn!("{e}");
        }
        fixed.extend(
            targets
                .into_iter()
                .map(|(t, given)| Watched::new(&given, t)),
        );
    }
    // One server given twice (command line and file) is watched once, as first given.
    let mut seen = HashSet::new();
    fixed.retain(|w| seen.insert((w.target.address, w.key.protocol)));
    Ok(fixed)
}

/// What every round shares.
#[derive(Debug)]
struct Poller<'a> {
    timing: &'a TimingArgs,
    filters: &'a [Filter],
    fixed: Vec<Watched>,
}

impl Poller<'_> {
    /// One poll of every server.
    async fn round(
        &self,
        masters: &mut [Master],
        listed_before: &mut HashSet<ServerKey>,
        first: bool,
        watcher: &mut Watcher,
        sinks: &mut Sinks,
    ) -> anyhow::Result<()> {
        for m in masters.iter_mut() {
            match list::fetch(
                m.kind,
                &m.source,
                list::ListAsk::game(None),
                self.timing,
                tracing::Level::DEBUG,
            )
            .await
            {
                Ok((found, None)) => {
                    m.listed = found
                        .iter()
                        .enumerate()
                        .filter_map(|(i, l)| {
                            let target = scan::master_target(m.kind, l, i)?;
                            Some(Watched::new(&l.address.to_string(), target))
                        })
                        .collect();
                }
                Ok((_, Some(e))) => {
                    tracing::warn!("master {}: {e}; keeping its last list", m.source);
                }
                Err(e) if first && e.downcast_ref::<UsageError>().is_some() => return Err(e),
                Err(e) => tracing::warn!("master {}: {e:#}; keeping its last list", m.source),
            }
        }
        let mut servers = self.fixed.clone();
        let mut seen: HashSet<(SocketAddr, &'static str)> = servers
            .iter()
            .map(|w| (w.target.address, w.key.protocol))
            .collect();
        let mut listed_now = HashSet::new();
        for w in masters.iter().flat_map(|m| &m.listed) {
            if seen.insert((w.target.address, w.key.protocol)) {
                listed_now.insert(w.key.clone());
                servers.push(w.clone());
            }
        }
        let mut out = std::io::stdout().lock();
        for gone in listed_before.difference(&listed_now) {
            tracing::info!("{}: no longer listed", gone.address);
            let events = watcher.forget(SystemTime::now(), gone);
            sinks.emit(&mut out, &events).context("writing output")?;
        }
        drop(out);
        *listed_before = listed_now;

        let jobs: Vec<_> = servers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let target = w.target.library();
                Job {
                    tag: i,
                    build: move |config| target.machine(config),
                }
            })
            .collect();
        let mut results = muster_query::spawn(jobs, self.timing.options());
        while let Some(Completed { tag, outcome, .. }) = results.recv().await {
            let Some(w) = servers.get(tag) else { continue };
            let poll = self.poll_of(w, outcome);
            let events = watcher.observe(SystemTime::now(), &w.key, poll);
            sinks
                .emit(&mut std::io::stdout().lock(), &events)
                .context("writing output")?;
        }
        Ok(())
    }

    /// What the machine needs of one query's outcome.
    fn poll_of(
        &self,
        w: &Watched,
        outcome: Result<Box<muster_proto::ServerInfo>, Failure>,
    ) -> Poll {
        match outcome {
            Ok(info) => {
                let answer = Answer::new(&w.target.library(), *info);
                let result = ServerResult::ok(w.target.address, answer.query_address, answer.info);
                let selected = self.filters.iter().all(|f| f.matches(&result));
                Poll::Answered {
                    snapshot: snapshot(&result),
                    selected,
                }
            }
            // The deadline came before the request left: nothing was learnt.
            Err(Failure::Unsent) => Poll::Unknown,
            Err(failure) => {
                // The server_down event says it; a server that stays down is asked (and
                // fails) every interval.
                tracing::debug!("{}: {failure}", w.key.address);
                Poll::Failed {
                    error: format!("{}: {failure}", w.target.query_address),
                }
            }
        }
    }
}

/// The machine's view of one answer: plain names, the slots when known, and the player list
/// only when the answer is complete.
fn snapshot(r: &ServerResult) -> Snapshot {
    let players = (!r.partial).then(|| {
        r.players
            .iter()
            .map(|p| SeenPlayer {
                name: p.name.clone(),
                id: player_id(r.protocol, &p.raw),
            })
            .collect()
    });
    Snapshot {
        name: r.name.clone().unwrap_or_default(),
        map: r.map.clone().unwrap_or_default(),
        num_players: r.num_players.unwrap_or(0),
        max_players: r.max_players,
        players,
    }
}

/// The id a protocol keeps for a player while connected. Only Unreal Engine 2 has one: the
/// engine's player number (`docs/protocols/unreal2.md` §7; XMP sends a PlayerID besides).
/// GameAgent and GameSpy v1 number slots, which the next player reuses, and Teeworlds sends
/// none.
fn player_id(protocol: &str, raw: &crate::dto::Fields) -> Option<i64> {
    if protocol != "unreal2" {
        return None;
    }
    match raw.get("player_id").or_else(|| raw.get("player_num")) {
        Some(Field::Int(id)) => Some(*id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use muster_proto::model::{Player, Protocol, RawValue, ServerInfo, Text};

    use super::*;

    fn result(protocol: Protocol, names: &[(&str, i64)]) -> ServerResult {
        let mut info = ServerInfo::new(protocol);
        info.name = Text::from_utf8_str("S");
        info.num_players = u32::try_from(names.len()).unwrap();
        info.max_players = 8;
        for (n, num) in names {
            let mut p = Player {
                name: Text {
                    plain: (*n).to_owned(),
                    ..Text::from_utf8_str(&format!("^cff0000{n}"))
                },
                ..Player::default()
            };
            p.raw.push(("player_num".into(), RawValue::Int(*num)));
            info.players.push(p);
        }
        let addr: SocketAddr = "127.0.0.1:7777".parse().unwrap();
        ServerResult::ok(addr, addr, info)
    }

    #[test]
    fn snapshots_use_plain_names_and_unreal2_player_numbers_only() {
        let s = snapshot(&result(Protocol::Unreal2, &[("Bob", 7)]));
        assert_eq!(
            s.players,
            Some(vec![SeenPlayer {
                name: "Bob".into(),
                id: Some(7)
            }])
        );
        assert_eq!(s.max_players, Some(8));
        let s = snapshot(&result(Protocol::GameAgent, &[("Bob", 7)]));
        assert_eq!(s.players.unwrap()[0].id, None);
    }

    #[test]
    fn a_partial_answer_has_no_player_list() {
        let mut r = result(Protocol::Teeworlds, &[("Bob", 0)]);
        r.partial = true;
        assert_eq!(snapshot(&r).players, None);
        assert_eq!(snapshot(&r).num_players, 1);
    }
}
