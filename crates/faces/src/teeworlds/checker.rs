//! The firewall check of the Teeworlds UDP master (`teeworlds-master.md` §2.6), as a pure
//! state machine: time comes in as an argument, actions go out as values.
//!
//! ```text
//! bea2 from S announcing port P ──> start(key = (S.ip, P), candidates [S, (S.ip, P)])
//!   every RETRY: fw?? to the next candidate (alternating), at most MAX_TRIES
//!   fw!! from a candidate ──> answer() = Passed { listed under that candidate }
//!   MAX_TRIES without fw!! ──> poll() = Failed (the face sends fwer)
//! ```
//!
//! Memory is bounded: at most `max_checks` checks run at once; more are refused (the face
//! counts them as drops).

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use muster_proto::teeworlds_master::Token;

/// Time between two `fw??` of one check (reference master: once per second).
pub const RETRY: Duration = Duration::from_secs(1);
/// `fw??` sent before the check fails with `fwer` (reference master: 10).
pub const MAX_TRIES: u32 = 10;

#[derive(Debug, Clone)]
struct Check {
    candidates: Vec<SocketAddr>,
    /// The server's own token from its latest packet (0.7), to address our answers.
    token: Token,
    tries: u32,
    next_at: Instant,
}

/// What the face must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send `fw??` to `to`, addressed with the server's `token`.
    Check {
        /// Where.
        to: SocketAddr,
        /// The server's own token (0.7 header).
        token: Token,
    },
    /// The check of `key` failed: send `fwer` to `to` (each candidate), then forget it.
    Failed {
        /// The announced address (source IP, announced port).
        key: SocketAddr,
        /// The candidates.
        to: Vec<SocketAddr>,
        /// The server's own token.
        token: Token,
    },
}

/// Result of [`Checks::start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A new check; the first `fw??` is due now.
    Started,
    /// A check was already running for this key; its token was updated.
    Running,
    /// Too many checks are running; nothing was started.
    Full,
}

/// A passed check, from [`Checks::answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed {
    /// The announced address the check was started for.
    pub key: SocketAddr,
    /// Where `fw!!` came from: the address to list (reference master).
    pub listed: SocketAddr,
}

/// Running firewall checks.
#[derive(Debug, Clone)]
pub struct Checks {
    max_checks: usize,
    checks: HashMap<SocketAddr, Check>,
    by_candidate: HashMap<SocketAddr, SocketAddr>,
    /// (next_at, key) of every check: polling and the next deadline cost O(log n), so a
    /// datagram flood does not make the face scan every running check.
    due: BTreeSet<(Instant, SocketAddr)>,
}

impl Checks {
    /// No checks; at most `max_checks` at once.
    #[must_use]
    pub fn new(max_checks: usize) -> Self {
        Self {
            max_checks,
            checks: HashMap::new(),
            by_candidate: HashMap::new(),
            due: BTreeSet::new(),
        }
    }

    /// Running checks.
    #[must_use]
    pub fn len(&self) -> usize {
        self.checks.len()
    }

    /// Whether none is running.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// A heartbeat from `source` announced `port`: check `(source.ip, port)` and `source`.
    pub fn start(&mut self, source: SocketAddr, port: u16, token: Token, now: Instant) -> Start {
        let key = SocketAddr::new(source.ip(), port);
        if let Some(c) = self.checks.get_mut(&key) {
            c.token = token;
            return Start::Running;
        }
        if self.checks.len() >= self.max_checks {
            return Start::Full;
        }
        let mut candidates = vec![key];
        if source != key {
            candidates.push(source);
        }
        for c in &candidates {
            self.by_candidate.insert(*c, key);
        }
        self.due.insert((now, key));
        self.checks.insert(
            key,
            Check {
                candidates,
                token,
                tries: 0,
                next_at: now,
            },
        );
        Start::Started
    }

    /// `fw!!` arrived from `from`: the check it answers passed (and is over), if any. The
    /// second value is the server's token from the heartbeat (for the `fwok`).
    pub fn answer(&mut self, from: SocketAddr) -> Option<(Passed, Token)> {
        let key = *self.by_candidate.get(&from)?;
        let check = self.remove(key)?;
        Some((Passed { key, listed: from }, check.token))
    }

    fn remove(&mut self, key: SocketAddr) -> Option<Check> {
        let check = self.checks.remove(&key)?;
        self.due.remove(&(check.next_at, key));
        for c in &check.candidates {
            if self.by_candidate.get(c) == Some(&key) {
                self.by_candidate.remove(c);
            }
        }
        Some(check)
    }

    /// Everything due at `now`, appended to `out`.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<Action>) {
        while let Some(&(at, key)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.remove(&(at, key));
            let Some(c) = self.checks.get_mut(&key) else {
                continue;
            };
            if c.tries >= MAX_TRIES {
                if let Some(c) = self.remove(key) {
                    out.push(Action::Failed {
                        key,
                        to: c.candidates,
                        token: c.token,
                    });
                }
                continue;
            }
            let n = c.candidates.len().max(1);
            let idx = usize::try_from(c.tries).unwrap_or(0) % n;
            if let Some(to) = c.candidates.get(idx) {
                out.push(Action::Check {
                    to: *to,
                    token: c.token,
                });
            }
            c.tries += 1;
            c.next_at = now + RETRY;
            self.due.insert((c.next_at, key));
        }
    }

    /// When [`Checks::poll`] next has something to do.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        self.due.first().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    const TOK: Token = Token([0xea, 0xc3, 0x12, 0x4c]);

    #[test]
    fn alternates_candidates_then_fails_after_ten_tries() {
        let t0 = Instant::now();
        let mut c = Checks::new(8);
        assert_eq!(c.start(a("10.0.0.1:40000"), 8303, TOK, t0), Start::Started);
        let mut out = Vec::new();
        let mut sent = Vec::new();
        for i in 0..=MAX_TRIES {
            out.clear();
            c.poll(t0 + RETRY * i, &mut out);
            for act in &out {
                match act {
                    Action::Check { to, token } => {
                        assert_eq!(*token, TOK);
                        sent.push(*to);
                    }
                    Action::Failed { key, to, .. } => {
                        assert_eq!(i, MAX_TRIES);
                        assert_eq!(*key, a("10.0.0.1:8303"));
                        assert_eq!(to.len(), 2);
                    }
                }
            }
        }
        assert_eq!(sent.len(), 10);
        assert_eq!(sent[0], a("10.0.0.1:8303"));
        assert_eq!(sent[1], a("10.0.0.1:40000"));
        assert!(c.is_empty());
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn answer_from_either_candidate_passes_once() {
        let t0 = Instant::now();
        let mut c = Checks::new(8);
        c.start(a("10.0.0.1:40000"), 8303, TOK, t0);
        let newer = Token([1, 2, 3, 4]);
        assert_eq!(
            c.start(a("10.0.0.1:40000"), 8303, newer, t0),
            Start::Running
        );
        assert_eq!(c.answer(a("10.0.0.2:8303")), None);
        let (p, tok) = c.answer(a("10.0.0.1:40000")).unwrap();
        assert_eq!(p.key, a("10.0.0.1:8303"));
        assert_eq!(p.listed, a("10.0.0.1:40000"));
        assert_eq!(tok, newer, "the latest token addresses the answer");
        assert_eq!(c.answer(a("10.0.0.1:8303")), None, "over");
        assert_eq!(c.next_deadline(), None, "nothing left due");
        let mut out = Vec::new();
        c.poll(t0 + RETRY * 20, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn bounded() {
        let t0 = Instant::now();
        let mut c = Checks::new(2);
        assert_eq!(c.start(a("10.0.0.1:1"), 1, TOK, t0), Start::Started);
        assert_eq!(c.start(a("10.0.0.2:1"), 1, TOK, t0), Start::Started);
        assert_eq!(c.start(a("10.0.0.3:1"), 1, TOK, t0), Start::Full);
        assert_eq!(c.len(), 2);
    }
}
