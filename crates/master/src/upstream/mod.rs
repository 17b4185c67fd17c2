//! Federation: learning servers from other masters (`[[upstream]]`), verifying them before
//! they are listed, and the status of each upstream.
//!
//! ```text
//!  every interval (+ jitter; sooner after a failure, backing off)
//!   fetch (per kind: \sync\ or \list\, UDP lists, servers.json, UT2003 text, Muster's API)
//!     │ Vec<Listed>
//!     ├─ known here ──> Registry::upstream_pull: the source refreshed on them, dropped from the
//!     │                 ones it no longer lists (a record without sources is removed)
//!     └─ unknown ──> Candidates (bounded per upstream, failures cool down)
//!                      └──> queries (muster_query, paced) ──answered──> Registry::learn
//!                                                          └─ silent ──> nothing listed
//! ```
//!
//! Nothing an upstream says reaches the registry before this master queried the server
//! itself and it answered as the game the list named: an upstream that lies adds load
//! (bounded by `max_unverified` and `verify_per_second`), never records. Records learned
//! from an upstream carry its name as their source ([`muster_core::registry::Origin`]); the
//! GameSpy face shares only direct records with syncing peers and the API shows every
//! record's sources, so two masters that pull from each other learn each other's own
//! servers once and stop there.
//!
//! Does not: push to peers (each side pulls), send the 333networks uplink heartbeat, follow
//! a Muster's event stream (its list is re-read with `If-None-Match`).

pub mod api;
pub mod bounded;
pub mod download;
pub mod fetch;
pub mod learn;
pub mod settings;

pub mod sync;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_proto::ServerInfo;
use muster_query::{Completed, Failure, Job, Options};
use tokio_util::sync::CancellationToken;

use crate::poller::PollTarget;
use fetch::{Fetcher, PullError, Pulled};
use learn::{Candidates, Listed, is_local, plausible};
use muster_core::MasterHandle;
use muster_core::registry::{GameAddr, Outcome, PollInfo, ServerKey, Timestamp};
use settings::UpstreamConfig;

pub use muster_core::board::{Board, UpstreamStatus};

/// After a failed pull the next one comes this long after, doubling with each failure in a
/// row, never later than the upstream's interval.
pub const RETRY_BASE: Duration = Duration::from_secs(15);
/// A server that did not answer is not asked again for this many intervals.
pub const COOL_INTERVALS: u32 = 3;

/// What one pull did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PullReport {
    /// The upstream said nothing changed.
    pub unchanged: bool,
    /// Servers it listed (after dropping implausible addresses and unwanted games).
    pub listed: usize,
    /// Of those, known here already (their source refreshed).
    pub known: usize,
    /// Records whose source it was and which it no longer lists.
    pub dropped: usize,
    /// Of those, removed (no source left).
    pub removed: usize,
    /// Servers queried for verification.
    pub queried: usize,
    /// Of those, listed now.
    pub verified: usize,
    /// Of those, silent or not the game the list said.
    pub unanswered: usize,
    /// Left for a later pull (the cap of unverified servers).
    pub over_cap: usize,
    /// Not asked because they did not answer lately.
    pub cooling: usize,
    /// Left out because they are local addresses listed by an upstream that is not local.
    pub local: usize,
}

/// One upstream: how it is fetched, its unverified servers, its status row.
#[derive(Debug)]
pub struct Upstream {
    name: Arc<str>,
    config: UpstreamConfig,
    fetcher: Fetcher,
    candidates: Candidates,
    row: usize,
    query: Options,
    /// After a whole list was pulled and every server of it is known here: how many records
    /// have this upstream as a source. While that holds, "unchanged" from the upstream means
    /// nothing is to be done; otherwise the whole list is read again.
    settled: Option<usize>,
}

impl Upstream {
    /// An upstream of `handle` as `config` describes it; `msid` is this master's sync id.
    pub fn new(
        config: UpstreamConfig,
        msid: Arc<str>,
        handle: &MasterHandle,
    ) -> Result<Self, PullError> {
        let name: Arc<str> = Arc::from(config.display_name());
        let row = handle
            .metrics()
            .upstreams()
            .register(&name, config.kind.name());
        // A Quake III upstream's games may carry the protocol to ask with (`Xonotic:3`).
        let games: Vec<String> = if config.kind == settings::UpstreamKind::Quake3 {
            config
                .games
                .iter()
                .map(|g| g.rsplit_once(':').map_or(g.as_str(), |(n, _)| n).to_owned())
                .collect()
        } else {
            config.games.clone()
        };
        let candidates = Candidates::new(
            config.max_unverified,
            config.interval.0.saturating_mul(COOL_INTERVALS),
            &games,
        );
        let rate = config.verify_per_second.max(1);
        let query = Options {
            rate: Some(rate),
            max_in_flight: usize::try_from(rate).unwrap_or(usize::MAX).clamp(16, 1024),
            deadline: None,
            ..Options::default()
        };
        Ok(Self {
            fetcher: Fetcher::new(config.clone(), msid)?,
            name,
            config,
            candidates,
            row,
            query,
            settled: None,
        })
    }

    /// Its name (the records' source).
    #[must_use]
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Sets the time a fetch may take and the timing of verification queries (tests shorten
    /// both).
    #[must_use]
    pub fn with_timing(mut self, fetch: Duration, attempt: Duration) -> Self {
        self.fetcher = self.fetcher.with_timeout(fetch);
        self.query.attempt_timeout = attempt;
        self.query.min_attempt_timeout = self.query.min_attempt_timeout.min(attempt);
        self
    }

    /// Connects to `addr` whenever the upstream's address names `host`, as `curl --resolve`
    /// does (tests; split-horizon setups). Whether the list may name local servers still
    /// follows the address connected to.
    pub fn with_pin(mut self, host: &str, addr: SocketAddr) -> Result<Self, PullError> {
        self.fetcher.pin(host, addr)?;
        Ok(self)
    }

    /// Pulls once, applies what the upstream listed and verifies what is new to this master.
    /// The status row says how it went.
    pub async fn pull_once(&mut self, handle: &MasterHandle) -> Result<PullReport, PullError> {
        let board = handle.metrics().upstreams();
        board.update(self.row, |r| r.last_attempt = Some(Timestamp::now()));
        if self.settled.is_none() {
            self.fetcher.forget_etag();
        }
        let mut fetched = self.fetcher.fetch().await;
        if matches!(fetched, Ok(Pulled::Unchanged)) && self.settled != Some(self.learned(handle)) {
            // Something learned from it left here (a failed poll) since: read it all again.
            self.fetcher.forget_etag();
            fetched = self.fetcher.fetch().await;
        }
        let pulled = match fetched {
            Ok(p) => p,
            Err(e) => {
                let text = muster_proto::errors::error_chain(&e);
                board.update(self.row, |r| {
                    r.pulls_failed += 1;
                    r.failures_in_row = r.failures_in_row.saturating_add(1);
                    r.last_error = Some(text);
                });
                return Err(e);
            }
        };
        let complete = matches!(pulled, Pulled::List { complete: true, .. });
        let report = self.apply(handle, pulled).await;
        let learned = self.learned(handle);
        let all_known = report.over_cap == 0 && report.cooling == 0 && report.unanswered == 0;
        if !report.unchanged {
            self.settled = (complete && all_known).then_some(learned);
        }
        board.update(self.row, |r| {
            r.pulls_ok += 1;
            r.failures_in_row = 0;
            r.last_error = None;
            r.last_success = Some(Timestamp::now());
            if !report.unchanged {
                r.listed = report.listed;
            }
            r.learned = learned;
            r.verified += report.verified as u64;
            r.unanswered += report.unanswered as u64;
            r.unverified = report.over_cap + report.cooling;
            r.over_cap += report.over_cap as u64;
        });
        Ok(report)
    }

    /// Records this upstream is a source of now.
    fn learned(&self, handle: &MasterHandle) -> usize {
        let name = &self.name;
        handle.with_registry(|r| r.iter().filter(|rec| rec.seen_by(name).is_some()).count())
    }

    async fn apply(&mut self, handle: &MasterHandle, pulled: Pulled) -> PullReport {
        let now = Timestamp::now();
        let name = Arc::clone(&self.name);
        let (listed, complete, peers) = match pulled {
            Pulled::Unchanged => {
                let n = handle.write(|r| r.upstream_unchanged(&name, now));
                return PullReport {
                    unchanged: true,
                    known: n,
                    ..PullReport::default()
                };
            }
            Pulled::List {
                listed,
                complete,
                peers,
            } => (listed, complete, peers),
        };
        let learn_learned = self.config.learn_learned;
        // A public upstream cannot make this master query its own network: judged by the
        // addresses the pull actually talked to.
        let local_ok = fetch::may_list_local(&peers);
        let total = listed.len();
        let listed: Vec<Listed> = listed
            .into_iter()
            .filter(|l| local_ok || !(is_local(l.addr.ip()) || is_local(l.query_addr.ip())))
            .collect();
        let local = total - listed.len();
        let listed: Vec<Listed> = listed
            .into_iter()
            .filter(|l| plausible(l.addr) && plausible(l.query_addr))
            .filter(|l| learn_learned || !l.relayed)
            .filter(|l| l.game.as_deref().is_none_or(|g| self.candidates.wants(g)))
            .collect();
        let mut report = PullReport {
            listed: listed.len(),
            local,
            ..PullReport::default()
        };
        let (unknown, applied) = handle.write(|r| {
            let mut known: HashSet<ServerKey> = HashSet::new();
            let mut unknown = Vec::new();
            for l in listed {
                let key = match l.key() {
                    Some(k) => r.get(&k).is_some().then_some(k),
                    // The game comes from the server's answer: a listed record of the same
                    // face at that address is this one.
                    None => r
                        .at_addr(&GameAddr::Ip(l.addr))
                        .find(|rec| rec.face == l.face && rec.is_listed())
                        .map(|rec| rec.key.clone()),
                };
                match key {
                    Some(k) => {
                        known.insert(k);
                    }
                    None => unknown.push(l),
                }
            }
            let applied = r.upstream_pull(&name, &known, now, complete);
            (unknown, applied)
        });
        report.known = applied.seen;
        report.dropped = applied.dropped;
        report.removed = applied.removed;
        let selection = self.candidates.select(unknown, now);
        report.over_cap = selection.over_cap;
        report.cooling = selection.cooling;
        report.queried = selection.verify.len();
        self.verify(handle, selection.verify, &mut report).await;
        report
    }

    async fn verify(
        &mut self,
        handle: &MasterHandle,
        servers: Vec<Listed>,
        report: &mut PullReport,
    ) {
        if servers.is_empty() {
            return;
        }
        let jobs: Vec<_> = servers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let target = PollTarget {
                    protocol: l.protocol,
                    query_addr: l.query_addr,
                    native: None,
                };
                Job {
                    tag: i,
                    build: move |config| target.machine(config),
                }
            })
            .collect();
        let mut results = muster_query::spawn(jobs, self.query.clone());
        while let Some(Completed { tag, outcome, .. }) = results.recv().await {
            let Some(l) = servers.get(tag) else { continue };
            match outcome {
                Ok(info) => self.answered(handle, l, &info, report),
                Err(e @ (Failure::Send(_) | Failure::Unsent)) => {
                    // Our side could not ask: says nothing about the server.
                    tracing::debug!(server = %l.query_addr, error = %e, "verification not sent");
                }
                Err(e) => {
                    tracing::debug!(upstream = %self.name, server = %l.query_addr, error = %e, "listed server did not answer");
                    report.unanswered += 1;
                    self.candidates.failed(l.query_addr, Timestamp::now());
                }
            }
        }
    }

    fn answered(
        &mut self,
        handle: &MasterHandle,
        l: &Listed,
        info: &ServerInfo,
        report: &mut PullReport,
    ) {
        let now = Timestamp::now();
        let reg = match learn::registration(l, info, &self.candidates) {
            Ok(reg) => reg,
            Err(why) => {
                tracing::debug!(upstream = %self.name, server = %l.query_addr, ?why, "listed server answered as something else");
                report.unanswered += 1;
                self.candidates.failed(l.query_addr, now);
                return;
            }
        };
        let key = reg.key.clone();
        let name = Arc::clone(&self.name);
        let poll = PollInfo::from_server_info(info);
        let out = handle.write(|r| {
            let out = r.learn(reg, &name, now);
            if out.is_listed() {
                r.update_poll(&key, Some(poll), now);
            }
            out
        });
        match out {
            Outcome::Added | Outcome::Refreshed | Outcome::Relisted => report.verified += 1,
            Outcome::Rejected(why) => handle.metrics().count_drop(why.into()),
        }
    }
}

/// The wait before the next pull: the interval plus up to a tenth of it at random after a
/// success; after `failures` failures in a row [`RETRY_BASE`] doubled per failure, at most
/// the interval.
#[must_use]
pub fn next_delay(interval: Duration, failures: u32, jitter: f64) -> Duration {
    if failures == 0 {
        return interval + interval.mul_f64(jitter.clamp(0.0, 1.0) / 10.0);
    }
    let exp = failures.saturating_sub(1).min(16);
    RETRY_BASE.saturating_mul(1 << exp).min(interval)
}

/// Pulls every upstream of `configs` at start and then per its interval, until `stop` is
/// cancelled. One task per upstream; a failure is logged once per change of cause and shown
/// in its status row.
pub async fn run(
    handle: MasterHandle,
    configs: Vec<UpstreamConfig>,
    msid: Arc<str>,
    stop: CancellationToken,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for config in configs {
        let interval = config.interval.0;
        let mut up = match Upstream::new(config, Arc::clone(&msid), &handle) {
            Ok(u) => u,
            Err(e) => {
                tracing::error!(error = %muster_proto::errors::error_chain(&e), "an upstream cannot start");
                continue;
            }
        };
        let (handle, stop) = (handle.clone(), stop.clone());
        tasks.spawn(async move {
            let mut failures = 0u32;
            let mut last_error = String::new();
            loop {
                let pulled = tokio::select! {
                    () = stop.cancelled() => return,
                    r = up.pull_once(&handle) => r,
                };
                match pulled {
                    Ok(r) => {
                        if failures > 0 {
                            tracing::info!(upstream = %up.name, "upstream answers again");
                        }
                        failures = 0;
                        last_error.clear();
                        tracing::debug!(upstream = %up.name, ?r, "pulled");
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let text = muster_proto::errors::error_chain(&e);
                        if text != last_error {
                            tracing::warn!(upstream = %up.name, error = %text, "upstream pull failed");
                            last_error = text;
                        }
                    }
                }
                let delay = next_delay(interval, failures, rand::random::<f64>());
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_back_off_and_never_exceed_the_interval() {
        let i = Duration::from_secs(300);
        assert_eq!(next_delay(i, 0, 0.0), i);
        assert_eq!(next_delay(i, 0, 1.0), Duration::from_secs(330));
        assert_eq!(next_delay(i, 1, 0.5), Duration::from_secs(15));
        assert_eq!(next_delay(i, 2, 0.5), Duration::from_secs(30));
        assert_eq!(next_delay(i, 5, 0.5), Duration::from_secs(240));
        assert_eq!(next_delay(i, 6, 0.5), i);
        assert_eq!(next_delay(i, u32::MAX, 0.5), i);
    }
}
