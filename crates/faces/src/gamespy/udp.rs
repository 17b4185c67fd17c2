//! The GameSpy UDP face (`gamespy-master.md` §3–4, §13–14): heartbeats, their
//! verification (`\secure\` or `\status\`), and the master's own query answers. A pure
//! machine ([`UdpMachine`]) for the UDP runner; see [`super`] for the whole face.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use muster_proto::Protocol;
use muster_proto::gamespy_master::{
    Challenge, Enctype, Heartbeat, Key, MAX_DATAGRAM, MasterQuery, QueryReply, Secure, Token,
    ValidateAnswer, validate_string,
};
use muster_proto::limit::{SourceKey, SourceLimiter};

use super::verify::{self, Answer, Challenges, Finished, Game, Method, Purpose, StatusChecks};
use super::{GameSpySettings, MESH_GAMENAME, drop_reason, random6};
use crate::runtime::udp::{Cx, ReplyKind, UdpMachine};
use muster_core::drops::DropReason;
use muster_core::registry::{
    DelistOutcome, Face, GameAddr, HeartbeatOutcome, PollInfo, Registration, ServerKey,
};
use muster_core::views::Snapshot;

/// How often expired challenges and idle buckets are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

fn key_of(game: &Game, server: SocketAddr) -> ServerKey {
    ServerKey::new(game.name, GameAddr::Ip(server))
}

/// The first key of a `\key\value…` message, if it has one.
fn first_key(data: &[u8]) -> Option<&[u8]> {
    let body = data.strip_prefix(b"\\")?;
    body.split(|&b| b == b'\\').next()
}

/// Where a heartbeat's `\secure\` goes: to its source (game servers answer on their uplink
/// socket, §3.1), except for a 333networks master, whose uplink comes from a random port and
/// which answers only at the beacon port it advertises (`server`).
fn challenge_to(game: &Game, src: SocketAddr, server: SocketAddr) -> SocketAddr {
    if game.name == MESH_GAMENAME {
        server
    } else {
        src
    }
}

fn registration(key: &ServerKey, server: SocketAddr) -> Registration {
    Registration {
        key: key.clone(),
        face: Face::GameSpy,
        game_port: None,
        query_addr: Some(server),
        query_protocol: Some(Protocol::GameSpy1),
        source: SourceKey::of(server.ip()),
    }
}

/// The GameSpy UDP face: heartbeats, their verification, the master's own query answers. See
/// the module docs.
#[derive(Debug)]
pub struct GameSpyFace {
    settings: GameSpySettings,
    challenges: Challenges,
    checks: StatusChecks,
    heartbeats: SourceLimiter,
    query_id: u32,
    next_sweep: Instant,
}

impl GameSpyFace {
    /// A face started at `now`.
    #[must_use]
    pub fn new(settings: GameSpySettings, now: Instant) -> Self {
        Self {
            challenges: Challenges::new(settings.challenges),
            checks: StatusChecks::new(
                settings.status,
                settings.max_status_checks,
                settings.challenges.per_ip,
            ),
            heartbeats: SourceLimiter::new(settings.heartbeat_bucket, settings.max_tracked_sources)
                .with_growth(settings.proven_servers_max),
            settings,
            query_id: 0,
            next_sweep: now + SWEEP_INTERVAL,
        }
    }

    fn start_check(&mut self, cx: &mut Cx<'_>, server: SocketAddr, purpose: Purpose) {
        match self.checks.start(server, purpose) {
            Some(evicted) => {
                for _ in 0..evicted {
                    cx.out.drop(DropReason::PendingEvicted);
                }
                self.send_checks(cx);
            }
            None => cx.out.drop(DropReason::StatusBusy),
        }
    }

    fn send_checks(&mut self, cx: &mut Cx<'_>) {
        loop {
            let mut buf = Vec::new();
            let Some(tx) = self.checks.poll_transmit(cx.now, &mut buf) else {
                break;
            };
            cx.out.send(0, tx.destination, buf, ReplyKind::Control);
        }
    }

    fn on_heartbeat(&mut self, cx: &mut Cx<'_>, src: SocketAddr, data: &[u8]) {
        let hb = match Heartbeat::decode(data) {
            Ok(hb) => hb,
            Err(e) => return cx.out.drop(drop_reason(&e)),
        };
        if !src.is_ipv4() {
            // Lists carry IPv4 only (§13.9).
            return cx.out.drop(DropReason::Ipv6Heartbeat);
        }
        let Some(game) = verify::game(hb.gamename.as_bytes()) else {
            return cx.out.drop(DropReason::UnknownGame);
        };
        let port = match (hb.query_port, game.default_port) {
            (0, Some(p)) => p,
            (0, None) => return cx.out.drop(DropReason::PortZero),
            (p, _) => p,
        };
        let server = SocketAddr::new(src.ip(), port);
        let key = key_of(game, server);
        if cx.registry.lock().heartbeat(&key, cx.wall) == HeartbeatOutcome::Refreshed {
            let (last_proof, unanswered) = cx
                .registry
                .lock()
                .get(&key)
                .map_or((cx.wall, 0), |r| (r.last_proof, r.challenges_unanswered()));
            if hb.state_changed() {
                // §14: an immediate `\status\` poll; no answer de-lists. The poller does it;
                // without one, this face checks a `\status\` game itself.
                if !self.heartbeats.allow(src.ip(), cx.now, 1.0) {
                    return;
                }
                if self.settings.poller {
                    cx.out.poll_soon.push(key);
                } else if game.method == Method::Status {
                    self.start_check(cx, server, Purpose::Recheck(game, true));
                }
            } else if cx.wall >= last_proof.plus(self.settings.reverify_interval)
                && unanswered < self.settings.reverify_failures
                && self.heartbeats.allow(src.ip(), cx.now, 1.0)
            {
                match game.method {
                    Method::Secure => {
                        self.challenge(cx, challenge_to(game, src, server), game, server, true);
                    }
                    Method::Status => self.start_check(cx, server, Purpose::Recheck(game, false)),
                }
            }
            return;
        }
        let registry = &mut *cx.registry;
        let allowed = self.heartbeats.allow_proven(src.ip(), cx.now, 1.0, |k| {
            registry.lock().count_of_source(k)
        });
        if !allowed {
            return cx.out.limited(DropReason::RateLimited, src.ip());
        }
        match game.method {
            Method::Secure => {
                self.challenge(cx, challenge_to(game, src, server), game, server, false)
            }
            Method::Status => self.start_check(cx, server, Purpose::Verify(game)),
        }
    }

    fn challenge(
        &mut self,
        cx: &mut Cx<'_>,
        src: SocketAddr,
        game: &'static Game,
        server: SocketAddr,
        reverify: bool,
    ) {
        let c = Challenge::from_random(random6());
        match self
            .challenges
            .offer(cx.now, src, (game, server, reverify), c)
        {
            Ok((c, evicted)) => {
                for _ in 0..evicted {
                    cx.out.drop(DropReason::PendingEvicted);
                }
                let mut out = Vec::new();
                Secure { challenge: c }.encode(&mut out);
                cx.out.send(0, src, out, ReplyKind::Control);
            }
            Err(r) => cx.out.limited(r.drop(), src.ip()),
        }
    }

    fn on_validate(&mut self, cx: &mut Cx<'_>, src: SocketAddr, data: &[u8]) {
        if data.len() > MAX_DATAGRAM {
            return cx.out.drop(DropReason::TooLarge);
        }
        let answer = match ValidateAnswer::decode(data) {
            Ok(a) => a,
            Err(e) => return cx.out.drop(drop_reason(&e)),
        };
        match self.challenges.answer(cx.now, src, &answer) {
            Answer::Unexpected => cx.out.drop(DropReason::UnexpectedValidate),
            Answer::Match(p) => {
                let key = key_of(p.game, p.server);
                let out = cx
                    .registry
                    .lock()
                    .register(registration(&key, p.server), cx.wall);
                cx.out.registered(out);
                if !out.is_listed() {
                    return;
                }
                let port_known = cx
                    .registry
                    .lock()
                    .get(&key)
                    .and_then(|r| r.game_port)
                    .is_some();
                if !port_known {
                    if self.settings.poller {
                        cx.out.poll_soon.push(key);
                    } else {
                        self.start_check(cx, p.server, Purpose::Info(p.game));
                    }
                }
            }
            Answer::Mismatch(p, expected) => {
                tracing::debug!(%src, game = p.game.name, expected, "wrong validate");
                cx.out.verifications_failed += 1;
                if p.reverify {
                    self.reverify_failed(cx, &key_of(p.game, p.server), true);
                }
            }
        }
    }

    /// A re-verification failed: de-list at once when `hard`, else after
    /// [`GameSpySettings::reverify_failures`] in a row (counted in the record).
    fn reverify_failed(&mut self, cx: &mut Cx<'_>, key: &ServerKey, hard: bool) {
        cx.out.verifications_failed += 1;
        let failures = cx
            .registry
            .lock()
            .challenge_sent(key, cx.wall)
            .unwrap_or(u8::MAX);
        if (hard || failures >= self.settings.reverify_failures)
            && cx.registry.lock().delist(key) == DelistOutcome::Delisted
        {
            tracing::debug!(?key, "de-listed");
        }
    }

    fn on_finished(&mut self, cx: &mut Cx<'_>, f: Finished) {
        let (Purpose::Verify(game) | Purpose::Info(game) | Purpose::Recheck(game, _)) = f.purpose;
        let key = key_of(game, f.server);
        match (f.purpose, f.result) {
            (Purpose::Verify(g), Ok(info)) => {
                let named = info
                    .rules
                    .iter()
                    .find(|r| r.key.plain.eq_ignore_ascii_case("gamename"))
                    .is_some_and(|r| verify::matches_group(g, &r.value.plain));
                if !named {
                    cx.out.verifications_failed += 1;
                    return cx.out.drop(DropReason::StatusGamename);
                }
                let out = cx
                    .registry
                    .lock()
                    .register(registration(&key, f.server), cx.wall);
                cx.out.registered(out);
                if out.is_listed() {
                    cx.registry.lock().update_poll(
                        &key,
                        Some(PollInfo::from_server_info(&info)),
                        cx.wall,
                    );
                }
            }
            (Purpose::Verify(_), Err(_)) => cx.out.verifications_failed += 1,
            (Purpose::Info(_) | Purpose::Recheck(..), Ok(info)) => {
                cx.registry.lock().update_poll(
                    &key,
                    Some(PollInfo::from_server_info(&info)),
                    cx.wall,
                );
                if matches!(f.purpose, Purpose::Recheck(..)) {
                    cx.registry.lock().verify(&key, cx.wall);
                }
            }
            (Purpose::Info(_), Err(_)) => {}
            (Purpose::Recheck(_, hard), Err(_)) => self.reverify_failed(cx, &key, hard),
        }
    }

    fn on_query(&mut self, cx: &mut Cx<'_>, src: SocketAddr, data: &[u8]) {
        let q = match MasterQuery::decode(data) {
            Ok(q) => q,
            Err(e) => return cx.out.drop(drop_reason(&e)),
        };
        let sections = match &q {
            MasterQuery::Echo(_) => return cx.out.drop(DropReason::Echo),
            MasterQuery::Unknown(_) => return cx.out.drop(DropReason::UnknownQuery),
            MasterQuery::Basic => vec![basic()],
            MasterQuery::Info => vec![self.info(cx.view)],
            MasterQuery::Rules => vec![rules()],
            MasterQuery::Status => vec![basic(), self.info(cx.view), rules()],
            MasterQuery::Secure(c) => {
                let v = validate_string(c, b"333NWX", Enctype::Zero).unwrap_or_default();
                vec![pairs(&[("validate", &v)])]
            }
        };
        self.query_id = self.query_id % 99 + 1;
        let mut out = Vec::new();
        QueryReply {
            query_id: self.query_id,
            sections,
        }
        .encode(&mut out);
        // Larger than the request: spends the source's reply budget like a list.
        cx.out.send(0, src, out, ReplyKind::List);
    }

    fn info(&self, view: &Snapshot) -> Vec<(Key, Token)> {
        let direct = view.count(Face::GameSpy);
        let all = view.len();
        pairs(&[
            ("hostname", "Muster master"),
            ("hostport", &self.settings.list_port.to_string()),
            ("gametype", "Masterserver"),
            ("mapname", "muster"),
            ("numplayers", &direct.to_string()),
            ("maxplayers", &all.to_string()),
            ("gamemode", "openplaying"),
        ])
    }
}

impl UdpMachine for GameSpyFace {
    fn name(&self) -> &'static str {
        "gamespy"
    }

    fn on_datagram(&mut self, cx: &mut Cx<'_>, _via: usize, src: SocketAddr, data: &[u8]) {
        let Some(first) = first_key(data) else {
            return cx.out.drop(DropReason::Malformed);
        };
        if first.eq_ignore_ascii_case(b"heartbeat") {
            self.on_heartbeat(cx, src, data);
        } else if first.eq_ignore_ascii_case(b"validate") {
            self.on_validate(cx, src, data);
        } else if self.checks.expects(src) {
            if let Some(f) = self.checks.handle_datagram(cx.now, src, data) {
                self.on_finished(cx, f);
            }
        } else {
            self.on_query(cx, src, data);
        }
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        for f in self.checks.handle_timeout(cx.now) {
            self.on_finished(cx, f);
        }
        self.send_checks(cx);
        if cx.now >= self.next_sweep {
            for p in self.challenges.expire(cx.now) {
                if p.reverify {
                    self.reverify_failed(cx, &key_of(p.game, p.server), false);
                }
            }
            self.heartbeats.prune(cx.now);
            self.next_sweep = cx.now + SWEEP_INTERVAL;
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(
            self.checks
                .poll_timeout()
                .map_or(self.next_sweep, |c| c.min(self.next_sweep)),
        )
    }
}

fn basic() -> Vec<(Key, Token)> {
    let ver = concat!("muster-", env!("CARGO_PKG_VERSION"));
    pairs(&[
        ("gamename", MESH_GAMENAME),
        ("gamever", ver),
        ("location", "0"),
    ])
}

fn rules() -> Vec<(Key, Token)> {
    pairs(&[("mutators", "none"), ("AdminName", "muster")])
}

/// Pairs from constants and numbers (never contain `\`; anything that would is skipped).
fn pairs(kv: &[(&str, &str)]) -> Vec<(Key, Token)> {
    kv.iter()
        .filter_map(|(k, v)| {
            Some((
                Key::new(k.as_bytes().to_vec()).ok()?,
                Token::new(v.as_bytes().to_vec()).ok()?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_key_and_challenges() {
        assert_eq!(first_key(b"\\heartbeat\\1"), Some(&b"heartbeat"[..]));
        assert_eq!(first_key(b"x"), None);
        assert_eq!(first_key(b""), None);
        let a = Challenge::from_random(random6());
        let b = Challenge::from_random(random6());
        assert_ne!(a, b, "fresh challenges");
        assert!(a.as_bytes().iter().all(u8::is_ascii_uppercase));
    }
}
