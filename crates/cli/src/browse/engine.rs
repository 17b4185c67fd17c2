//! The network side of `muster browse`: asks the chosen masters for their lists side by
//! side, queries every listed server with the query engine (paced by `--rate`), then keeps
//! re-querying what is on screen. Everything it learns goes to the terminal as [`Update`]s
//! through a channel, so the interface never waits on the network; a master that does not
//! answer is one `MasterDone` error and the others go on.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use muster_query::{Answer, Completed, Failure, Job};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::directory::Ask;
use super::model::{Key, Listing, Summary};
use crate::list::{self, Listed};
use crate::scan;
use crate::target::Target;
use crate::timing::TimingArgs;

/// What the engine tells the interface.
#[derive(Debug)]
pub(crate) enum Update {
    /// A master is being asked.
    MasterAsking(String),
    /// A master's list: how many servers, or why none.
    MasterDone(String, Result<usize, String>),
    /// Servers a list named, with what it says of them.
    Listed(Vec<Listing>),
    /// A server answered (unix ms).
    Answered(Key, Box<Summary>, u64),
    /// A server did not answer.
    Failed(Key),
}

/// How often the engine asks.
#[derive(Debug, Clone)]
pub(crate) struct Pace {
    /// Between two queries of what is on screen.
    pub refresh: Duration,
    /// Between two askings of every master (and queries of every listed server).
    pub relist: Duration,
    pub timing: TimingArgs,
}

/// Servers queried per engine round: a long list is queried in rounds of this many, so the
/// servers on screen, put first at every refresh, wait for one round at most.
const ROUND_MAX: usize = 512;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

type ListResult = (Ask, anyhow::Result<(Vec<Listed>, Option<String>)>);

/// Lists asked of one master (one `--master` address) at once, at most: masters cap the
/// connections of one address (Muster's GameSpy face takes four), and browsing every game of
/// a GameSpy master used to open one connection per game at once, of which the fifth was
/// refused.
pub(crate) const LISTS_PER_MASTER: usize = 2;

fn spawn_lists(asks: &[Ask], timing: &TimingArgs, lists: &mut JoinSet<ListResult>) {
    let mut gates: HashMap<&str, Arc<Semaphore>> = HashMap::new();
    for ask in asks {
        let gate = Arc::clone(
            gates
                .entry(ask.source.as_str())
                .or_insert_with(|| Arc::new(Semaphore::new(LISTS_PER_MASTER))),
        );
        let ask = ask.clone();
        let timing = timing.clone();
        lists.spawn(async move {
            // Never closed: a permit always comes.
            let _turn = gate.acquire_owned().await;
            let result = list::fetch(
                ask.kind,
                &ask.source,
                list::ListAsk {
                    game: ask.ask.as_deref(),
                    protocol_version: ask.protocol_version,
                    master_filter: None,
                },
                &timing,
                tracing::Level::DEBUG,
            )
            .await;
            (ask, result)
        });
    }
}

type Round = mpsc::Receiver<Completed<Key, Box<muster_proto::ServerInfo>>>;

/// Runs until the interface drops its receiver. `fixed`: the `--servers` targets;
/// `on_screen`: the keys the interface shows (and the favourites), re-queried every refresh.
pub(crate) async fn run(
    asks: Vec<Ask>,
    fixed: Vec<Target>,
    pace: Pace,
    on_screen: watch::Receiver<Vec<Key>>,
    tx: mpsc::Sender<Update>,
) {
    let mut targets: HashMap<Key, Target> = HashMap::new();
    let mut pending: Vec<Key> = Vec::new();
    let mut fixed_rows = Vec::new();
    for t in fixed {
        let key = (t.address, t.protocol.name());
        fixed_rows.push(Listing::bare(key));
        pending.push(key);
        targets.insert(key, t);
    }
    if !fixed_rows.is_empty() && tx.send(Update::Listed(fixed_rows)).await.is_err() {
        return;
    }
    let mut lists: JoinSet<ListResult> = JoinSet::new();
    let mut next_list = Instant::now();
    let mut next_refresh = Instant::now() + pace.refresh;
    let mut round: Option<Round> = None;
    let mut index = 0usize;
    loop {
        if round.is_none() && !pending.is_empty() {
            let mut seen = HashSet::new();
            let take = pending.len().min(ROUND_MAX);
            let jobs: Vec<_> = pending
                .drain(..take)
                .filter(|k| seen.insert(*k))
                .filter_map(|k| {
                    let t = targets.get(&k)?.library();
                    Some(Job {
                        tag: k,
                        build: move |config| t.machine(config),
                    })
                })
                .collect();
            round = Some(muster_query::spawn(jobs, pace.timing.options()));
        }
        tokio::select! {
            () = tokio::time::sleep_until(next_list), if lists.is_empty() => {
                for ask in &asks {
                    if tx.send(Update::MasterAsking(ask.label())).await.is_err() {
                        return;
                    }
                }
                spawn_lists(&asks, &pace.timing, &mut lists);
                next_list = Instant::now() + pace.relist;
            }
            Some(done) = lists.join_next(), if !lists.is_empty() => {
                let Ok((ask, result)) = done else { continue };
                let (found, error) = match result {
                    Ok(r) => r,
                    Err(e) => (Vec::new(), Some(format!("{e:#}"))),
                };
                let mut rows = Vec::with_capacity(found.len());
                for l in &found {
                    let Some(target) = scan::master_target(ask.kind, l, index) else { continue };
                    index += 1;
                    let key = (target.address, target.protocol.name());
                    let game = ask.game.map(str::to_owned).or_else(|| l.game_key.clone());
                    rows.push(Listing {
                        key,
                        game,
                        name: l.name.clone(),
                        num_players: l.num_players,
                        max_players: l.max_players,
                        location: l.location.clone(),
                    });
                    pending.push(key);
                    targets.entry(key).or_insert(target);
                }
                let outcome = match error {
                    Some(e) if found.is_empty() => Err(e),
                    _ => Ok(rows.len()),
                };
                if tx.send(Update::Listed(rows)).await.is_err()
                    || tx.send(Update::MasterDone(ask.label(), outcome)).await.is_err()
                {
                    return;
                }
            }
            completed = async { round.as_mut()?.recv().await }, if round.is_some() => {
                let Some(Completed { tag, outcome, elapsed }) = completed else {
                    round = None;
                    continue;
                };
                let update = match outcome {
                    Ok(info) => {
                        let Some(target) = targets.get(&tag) else { continue };
                        let answer = Answer::new(&target.library(), *info);
                        let mut summary = Summary::of(&answer.info, Some(elapsed));
                        let game = target.game_address(&answer.info);
                        summary.game_address = (game != tag.0).then_some(game);
                        Update::Answered(tag, Box::new(summary), now_ms())
                    }
                    // The round's deadline came first: nothing was learnt.
                    Err(Failure::Unsent) => continue,
                    Err(failure) => {
                        tracing::debug!("{}: {failure}", tag.0);
                        Update::Failed(tag)
                    }
                };
                if tx.send(update).await.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep_until(next_refresh) => {
                // What is on screen goes first, ahead of a long list still being queried.
                let screen: Vec<Key> = on_screen.borrow().clone();
                let first: HashSet<Key> = screen.iter().copied().collect();
                pending.retain(|k| !first.contains(k));
                pending.splice(0..0, screen);
                next_refresh = Instant::now() + pace.refresh;
            }
            () = tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::list::MasterKind;

    /// A TCP "master" that counts the connections it holds at once and closes each after a
    /// while without answering; five GameSpy asks for five games of it.
    #[tokio::test]
    async fn one_master_is_asked_for_at_most_two_lists_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (o, m, a) = (Arc::clone(&open), Arc::clone(&most), Arc::clone(&accepted));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let now = o.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                let o = Arc::clone(&o);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    // Counted closed before the client can see it closed.
                    o.fetch_sub(1, Ordering::SeqCst);
                    drop(stream);
                });
            }
        });
        let asks: Vec<Ask> = ["unreal", "ut", "ut2004", "serioussam", "serioussamse"]
            .iter()
            .map(|g| Ask {
                kind: MasterKind::Gamespy,
                source: addr.to_string(),
                ask: Some((*g).to_owned()),
                protocol_version: 0,
                game: None,
            })
            .collect();
        let timing = TimingArgs {
            timeout: Duration::from_secs(5),
            retries: 0,
            deadline: None,
            rate: 0,
        };
        let mut lists = JoinSet::new();
        spawn_lists(&asks, &timing, &mut lists);
        let mut done = 0;
        while let Some(r) = tokio::time::timeout(Duration::from_secs(30), lists.join_next())
            .await
            .expect("every list ends")
        {
            let (_, result) = r.unwrap();
            // The test master lists nothing: an error, or an empty list with one.
            assert!(
                result
                    .as_ref()
                    .map_or(true, |(found, e)| found.is_empty() && e.is_some()),
                "{result:?}"
            );
            done += 1;
        }
        assert_eq!(done, 5);
        assert_eq!(accepted.load(Ordering::SeqCst), 5);
        assert_eq!(most.load(Ordering::SeqCst), LISTS_PER_MASTER);
    }
}
