//! The sans-IO master list query: ask one UDP master for its list.
//!
//! * **0.6 face** (as qstat `-teem` and the 0.6 client do it): send `cou2` and `req2` (and the
//!   0.5 `reqt` when asked to) in a 0.6 header, collect `siz2` and every `lis2` (and `list`).
//! * **0.7 face**: first the token handshake (520-byte request carrying the caller's token,
//!   12-byte reply with the master's), then `cou2` and `req2` in the 9-byte header; answers
//!   must carry the caller's token.
//!
//! **Completion rule.** `lis2` has no count, sequence number or end marker (spec §2.3, quirk 3).
//! The query is done as soon as the number of distinct servers received reaches the count from
//! `siz2` (a count of 0 finishes with an empty list at once). Otherwise, once the first list
//! datagram has arrived, it is done when no list datagram has come for the idle gap
//! ([`DEFAULT_IDLE_GAP`], see [`MasterListQuery::with_idle_gap`]); the result is marked
//! partial when `siz2` announced more servers than arrived. Until the first list datagram (or
//! a zero count), the request is re-sent every `attempt_timeout`, `retries` times; after that
//! the query fails with [`QueryError::Timeout`] (or [`QueryError::Decode`] when only garbage
//! came). The 0.7 handshake and the list request each get their own `retries`.
//!
//! Only datagrams from the master's exact address are looked at; duplicates across datagrams
//! are removed; at most [`MAX_LIST_SERVERS`] servers are stored.

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::MAX_LIST_SERVERS;
use super::packet::{Framing, Message, Packet, Token};
use crate::model::{ListedServer, Partial, ServerList};
use crate::query::{
    Event, ListEvent, QueryConfig, QueryError, QueryMachine, RetryAction, RetrySchedule, Transmit,
};
use crate::wire::DecodeError;

/// How long to wait after the last list datagram before calling the list complete, when the
/// count reply has not settled it.
pub const DEFAULT_IDLE_GAP: Duration = Duration::from_millis(1000);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Face {
    V06 { legacy: bool },
    V07 { own_token: Token },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// 0.7 only: waiting for the token reply.
    Handshake,
    /// Waiting for `siz2` / `lis2`.
    Listing { master_token: Option<Token> },
    /// The event is decided.
    Finished,
}

/// A sans-IO query for the server list of one Teeworlds UDP master. See the module docs for
/// the exchange and the completion rule, and [`QueryMachine`] for the driving loop.
#[derive(Debug)]
pub struct MasterListQuery {
    master: SocketAddr,
    face: Face,
    config: QueryConfig,
    idle_gap: Duration,
    retry: RetrySchedule,
    phase: Phase,
    send_due: bool,
    outgoing: VecDeque<Packet>,
    count: Option<u16>,
    seen: HashSet<SocketAddr>,
    servers: Vec<ListedServer>,
    last_list_at: Option<Instant>,
    truncated: bool,
    last_error: Option<DecodeError>,
    event: Option<ListEvent>,
}

impl MasterListQuery {
    /// A 0.6-face query (`cou2` + `req2`; with `legacy` also the 0.5 `reqt`, whose `list`
    /// entries are merged in). Nothing is sent until the first `poll_transmit`.
    #[must_use]
    pub fn new_06(master: SocketAddr, config: QueryConfig, legacy: bool) -> Self {
        Self::new(
            master,
            config,
            Face::V06 { legacy },
            Phase::Listing { master_token: None },
        )
    }

    /// A 0.7-face query: token handshake with `own_token` (caller-chosen, random), then
    /// `cou2` + `req2`.
    #[must_use]
    pub fn new_07(master: SocketAddr, config: QueryConfig, own_token: Token) -> Self {
        Self::new(master, config, Face::V07 { own_token }, Phase::Handshake)
    }

    fn new(master: SocketAddr, config: QueryConfig, face: Face, phase: Phase) -> Self {
        Self {
            master,
            face,
            config,
            idle_gap: DEFAULT_IDLE_GAP,
            retry: RetrySchedule::new(config),
            phase,
            send_due: true,
            outgoing: VecDeque::new(),
            count: None,
            seen: HashSet::new(),
            servers: Vec::new(),
            last_list_at: None,
            truncated: false,
            last_error: None,
            event: None,
        }
    }

    /// Use `gap` instead of [`DEFAULT_IDLE_GAP`] as the silence that ends a list.
    #[must_use]
    pub fn with_idle_gap(mut self, gap: Duration) -> Self {
        self.idle_gap = gap;
        self
    }

    /// The count the master announced in `siz2`, once it came.
    #[must_use]
    pub fn announced_count(&self) -> Option<u16> {
        self.count
    }

    fn queue_attempt(&mut self) {
        match (self.face, self.phase) {
            (Face::V07 { own_token }, Phase::Handshake) => {
                self.outgoing.push_back(Packet::token_request(own_token));
            }
            (Face::V06 { legacy }, Phase::Listing { .. }) => {
                let framing = Framing::STANDARD_06;
                for message in [Message::CountRequest, Message::ListRequest] {
                    self.outgoing
                        .push_back(Packet::Connless { framing, message });
                }
                if legacy {
                    self.outgoing.push_back(Packet::Connless {
                        framing,
                        message: Message::ListRequestLegacy,
                    });
                }
            }
            (
                Face::V07 { own_token },
                Phase::Listing {
                    master_token: Some(token),
                },
            ) => {
                let framing = Framing::V07 {
                    token,
                    response_token: own_token,
                };
                for message in [Message::CountRequest, Message::ListRequest] {
                    self.outgoing
                        .push_back(Packet::Connless { framing, message });
                }
            }
            _ => {}
        }
    }

    fn add(&mut self, address: SocketAddr) {
        if self.seen.contains(&address) {
            return;
        }
        if self.servers.len() >= MAX_LIST_SERVERS {
            self.truncated = true;
            return;
        }
        self.seen.insert(address);
        self.servers.push(ListedServer {
            address,
            query_address: None,
        });
    }

    fn complete_by_count(&self) -> bool {
        self.count
            .is_some_and(|c| self.servers.len() >= usize::from(c))
    }

    fn finish(&mut self, aborted: bool) {
        if self.phase == Phase::Finished {
            return;
        }
        self.phase = Phase::Finished;
        self.outgoing.clear();
        self.send_due = false;
        self.retry.stop();
        let useful = self.last_list_at.is_some() || self.count == Some(0);
        if !useful {
            let err = match self.last_error.take() {
                Some(e) => QueryError::Decode(e),
                None => QueryError::Timeout,
            };
            self.event = Some(Event::Failed(err));
            return;
        }
        let got = self.servers.len();
        let partial = if self.truncated {
            Some(format!("list longer than {MAX_LIST_SERVERS} servers"))
        } else if let Some(c) = self.count.filter(|&c| got < usize::from(c)) {
            Some(format!("received {got} of {c} servers"))
        } else if aborted && self.count.is_none() {
            Some("aborted before the list was complete".to_owned())
        } else {
            None
        };
        self.event = Some(Event::Done(ServerList {
            servers: std::mem::take(&mut self.servers),
            partial: partial.map(|reason| Partial { reason }),
        }));
    }

    fn on_packet(&mut self, now: Instant, packet: Packet) {
        match (self.face, self.phase, packet) {
            (
                Face::V07 { own_token },
                Phase::Handshake,
                Packet::Token {
                    to,
                    token,
                    padded: _,
                },
            ) if to == own_token => {
                self.phase = Phase::Listing {
                    master_token: Some(token),
                };
                self.retry = RetrySchedule::new(self.config);
                self.send_due = true;
            }
            (
                Face::V06 { .. },
                Phase::Listing { .. },
                Packet::Connless {
                    framing: Framing::V06(_),
                    message,
                },
            ) => self.on_message(now, message),
            (
                Face::V07 { own_token },
                Phase::Listing { .. },
                Packet::Connless {
                    framing: Framing::V07 { token, .. },
                    message,
                },
            ) if token == own_token => self.on_message(now, message),
            _ => {}
        }
    }

    fn on_message(&mut self, now: Instant, message: Message) {
        let legacy = matches!(self.face, Face::V06 { legacy: true });
        match message {
            Message::CountReply { count } => self.count = Some(count),
            Message::CountReplyLegacy { count } if legacy => self.count = Some(count),
            Message::List(list) => {
                for e in list.entries() {
                    self.add(e.socket_addr());
                }
                self.last_list_at = Some(now);
            }
            Message::ListLegacy(list) if legacy => {
                for e in list.entries() {
                    self.add(e.socket_addr());
                }
                self.last_list_at = Some(now);
            }
            _ => return,
        }
        if self.count == Some(0) || (self.last_list_at.is_some() && self.complete_by_count()) {
            self.finish(false);
        }
    }
}

impl QueryMachine for MasterListQuery {
    type Output = ServerList;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.phase == Phase::Finished || from != self.master {
            return;
        }
        match Packet::decode(datagram) {
            Ok(p) => self.on_packet(now, p),
            Err(e) => self.last_error = Some(e),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Finished {
            return;
        }
        if let Some(last) = self.last_list_at {
            if now >= last + self.idle_gap {
                self.finish(false);
            }
            return;
        }
        match self.retry.on_timeout(now) {
            RetryAction::Resend => self.send_due = true,
            RetryAction::GiveUp => self.finish(false),
            RetryAction::Wait => {}
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.send_due && self.phase != Phase::Finished {
            self.send_due = false;
            self.queue_attempt();
            self.retry.on_send(now);
        }
        let packet = self.outgoing.pop_front()?;
        packet.encode(buf);
        Some(Transmit {
            destination: self.master,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Finished {
            return None;
        }
        match self.last_list_at {
            Some(last) => Some(last + self.idle_gap),
            None => self.retry.deadline(),
        }
    }

    fn poll_event(&mut self) -> Option<ListEvent> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        // Kept for the schedule made again when the listing phase starts.
        self.config.attempt_timeout = timeout;
        self.retry.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, _now: Instant) {
        self.finish(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::teeworlds_master::packet::{LegacyListEntry, LegacyListReply, ListEntry, ListReply};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const OWN: Token = Token([0xc0, 0xff, 0xee, 0x01]);
    const MASTER_TOKEN: Token = Token(*b"MSTR");

    fn master() -> SocketAddr {
        "127.0.0.1:8300".parse().expect("addr")
    }

    fn cfg(retries: u32) -> QueryConfig {
        QueryConfig {
            attempt_timeout: MS(500),
            retries,
        }
    }

    fn drain(q: &mut MasterListQuery, now: Instant) -> Vec<Packet> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some(t) = q.poll_transmit(now, &mut buf) {
            assert_eq!(t.destination, q.master);
            out.push(Packet::decode(&buf).expect("own packets decode"));
            buf.clear();
        }
        out
    }

    fn addr(i: u16) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 8300 + i))
    }

    fn lis2(framing: Framing, ports: std::ops::Range<u16>) -> Vec<u8> {
        let entries: Vec<ListEntry> = ports
            .map(|i| ListEntry::from_socket_addr(addr(i)))
            .collect();
        let mut out = Vec::new();
        Packet::Connless {
            framing,
            message: Message::List(ListReply::new(entries).expect("fits")),
        }
        .encode(&mut out);
        out
    }

    fn siz2(framing: Framing, count: u16) -> Vec<u8> {
        let mut out = Vec::new();
        Packet::Connless {
            framing,
            message: Message::CountReply { count },
        }
        .encode(&mut out);
        out
    }

    fn std06() -> Framing {
        Framing::STANDARD_06
    }

    fn done(q: &mut MasterListQuery) -> ServerList {
        match q.poll_event() {
            Some(Event::Done(l)) => l,
            other => panic!("not done: {other:?}"),
        }
    }

    #[test]
    fn v06_sends_cou2_and_req2_and_completes_by_count() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(2), false);
        let sent = drain(&mut q, t0);
        assert_eq!(
            sent,
            vec![
                Packet::Connless {
                    framing: std06(),
                    message: Message::CountRequest
                },
                Packet::Connless {
                    framing: std06(),
                    message: Message::ListRequest
                },
            ]
        );
        assert_eq!(q.poll_timeout(), Some(t0 + MS(500)));
        q.handle_datagram(t0 + MS(10), master(), &siz2(std06(), 80));
        q.handle_datagram(t0 + MS(11), master(), &lis2(std06(), 0..75));
        assert_eq!(q.poll_event(), None);
        assert_eq!(q.poll_timeout(), Some(t0 + MS(11) + DEFAULT_IDLE_GAP));
        q.handle_datagram(t0 + MS(12), master(), &lis2(std06(), 75..80));
        let list = done(&mut q);
        assert_eq!(list.servers.len(), 80);
        assert_eq!(list.partial, None);
        assert_eq!(q.poll_timeout(), None);
        assert_eq!(q.poll_event(), None);
    }

    #[test]
    fn reassembly_in_any_order_with_duplicates() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(2), false);
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0, master(), &lis2(std06(), 75..80));
        q.handle_datagram(t0, master(), &lis2(std06(), 75..80));
        q.handle_datagram(t0, master(), &lis2(std06(), 0..75));
        q.handle_datagram(t0, master(), &siz2(std06(), 80));
        let list = done(&mut q);
        assert_eq!(list.servers.len(), 80);
        assert_eq!(list.servers.first().map(|s| s.address), Some(addr(75)));
    }

    #[test]
    fn quirk_no_end_marker_idle_gap_ends_list() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(2), false).with_idle_gap(MS(300));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + MS(5), master(), &lis2(std06(), 0..2));
        assert_eq!(q.poll_timeout(), Some(t0 + MS(305)));
        q.handle_timeout(t0 + MS(200));
        assert_eq!(q.poll_event(), None);
        q.handle_timeout(t0 + MS(305));
        let list = done(&mut q);
        assert_eq!(list.servers.len(), 2);
        assert_eq!(list.partial, None);
    }

    #[test]
    fn count_larger_than_received_is_partial() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(2), false);
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0, master(), &siz2(std06(), 100));
        q.handle_datagram(t0, master(), &lis2(std06(), 0..75));
        q.handle_timeout(t0 + DEFAULT_IDLE_GAP);
        let list = done(&mut q);
        assert_eq!(list.servers.len(), 75);
        assert_eq!(
            list.partial,
            Some(Partial {
                reason: "received 75 of 100 servers".into()
            })
        );
    }

    #[test]
    fn zero_count_finishes_empty() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(2), false);
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0, master(), &siz2(std06(), 0));
        let list = done(&mut q);
        assert!(list.servers.is_empty());
        assert_eq!(list.partial, None);
    }

    #[test]
    fn retries_then_timeout() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(1), false);
        assert_eq!(drain(&mut q, t0).len(), 2);
        q.handle_timeout(t0 + MS(499));
        assert!(drain(&mut q, t0 + MS(499)).is_empty());
        q.handle_timeout(t0 + MS(500));
        assert_eq!(drain(&mut q, t0 + MS(500)).len(), 2);
        assert_eq!(q.poll_timeout(), Some(t0 + MS(1000)));
        q.handle_timeout(t0 + MS(1000));
        assert!(drain(&mut q, t0 + MS(1000)).is_empty());
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
        assert_eq!(q.poll_timeout(), None);
    }

    #[test]
    fn retries_zero_sends_once() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(0), true);
        let sent = drain(&mut q, t0);
        assert_eq!(sent.len(), 3, "cou2, req2, reqt");
        q.handle_timeout(t0 + MS(500));
        assert!(drain(&mut q, t0 + MS(500)).is_empty());
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
    }

    #[test]
    fn garbage_and_strangers_are_ignored() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(0), false);
        let _ = drain(&mut q, t0);
        let stranger: SocketAddr = "127.0.0.9:8300".parse().expect("addr");
        q.handle_datagram(t0, stranger, &lis2(std06(), 0..3));
        q.handle_datagram(
            t0,
            master(),
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfflis2\x01",
        );
        q.handle_datagram(t0, master(), &[]);
        q.handle_timeout(t0 + MS(500));
        assert_eq!(
            q.poll_event(),
            Some(Event::Failed(QueryError::Decode(DecodeError::Truncated(
                "header"
            ))))
        );
    }

    #[test]
    fn legacy_list_merged_when_asked() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(0), true);
        let _ = drain(&mut q, t0);
        let entry = LegacyListEntry {
            ip: Ipv4Addr::new(10, 0, 0, 1),
            port: 8300,
        };
        let mut legacy = Vec::new();
        Packet::Connless {
            framing: std06(),
            message: Message::ListLegacy(LegacyListReply::new(vec![entry]).expect("fits")),
        }
        .encode(&mut legacy);
        q.handle_datagram(t0, master(), &legacy);
        q.handle_datagram(t0, master(), &lis2(std06(), 0..2));
        q.handle_datagram(t0, master(), &siz2(std06(), 2));
        let list = done(&mut q);
        assert_eq!(
            list.servers.len(),
            2,
            "the legacy entry is a duplicate of addr(0)"
        );
    }

    #[test]
    fn abort_returns_partial_or_timeout() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_06(master(), cfg(2), false);
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0, master(), &lis2(std06(), 0..3));
        q.abort(t0 + MS(10));
        let list = done(&mut q);
        assert_eq!(list.servers.len(), 3);
        assert!(list.partial.is_some());

        let mut q = MasterListQuery::new_06(master(), cfg(2), false);
        let _ = drain(&mut q, t0);
        q.abort(t0);
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
        assert!(drain(&mut q, t0).is_empty());
    }

    #[test]
    fn v07_handshake_then_list() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_07(master(), cfg(1), OWN);
        assert_eq!(drain(&mut q, t0), vec![Packet::token_request(OWN)]);
        // A reply for someone else's token is ignored; the handshake is retried.
        let mut reply = Vec::new();
        Packet::token_reply(Token([1, 2, 3, 4]), MASTER_TOKEN).encode(&mut reply);
        q.handle_datagram(t0 + MS(1), master(), &reply);
        q.handle_timeout(t0 + MS(500));
        assert_eq!(
            drain(&mut q, t0 + MS(500)),
            vec![Packet::token_request(OWN)]
        );
        reply.clear();
        Packet::token_reply(OWN, MASTER_TOKEN).encode(&mut reply);
        q.handle_datagram(t0 + MS(600), master(), &reply);
        let to_master = Framing::V07 {
            token: MASTER_TOKEN,
            response_token: OWN,
        };
        assert_eq!(
            drain(&mut q, t0 + MS(600)),
            vec![
                Packet::Connless {
                    framing: to_master,
                    message: Message::CountRequest
                },
                Packet::Connless {
                    framing: to_master,
                    message: Message::ListRequest
                },
            ]
        );
        // The list phase has its own retries.
        assert_eq!(q.poll_timeout(), Some(t0 + MS(1100)));
        let to_us = Framing::V07 {
            token: OWN,
            response_token: MASTER_TOKEN,
        };
        let wrong = Framing::V07 {
            token: Token::NONE,
            response_token: MASTER_TOKEN,
        };
        q.handle_datagram(t0 + MS(610), master(), &lis2(wrong, 0..5));
        q.handle_datagram(t0 + MS(610), master(), &lis2(std06(), 0..5));
        q.handle_datagram(t0 + MS(610), master(), &siz2(to_us, 2));
        q.handle_datagram(t0 + MS(611), master(), &lis2(to_us, 0..2));
        let list = done(&mut q);
        assert_eq!(list.servers.len(), 2);
    }

    #[test]
    fn v07_handshake_timeout() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new_07(master(), cfg(0), OWN);
        let _ = drain(&mut q, t0);
        q.handle_timeout(t0 + MS(500));
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
    }

    proptest! {
        #[test]
        fn arbitrary_datagrams_and_timeouts_never_panic(
            steps in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..200), 0u64..2000), 0..30),
            v07 in any::<bool>(),
        ) {
            let t0 = Instant::now();
            let mut q = if v07 {
                MasterListQuery::new_07(master(), cfg(1), OWN)
            } else {
                MasterListQuery::new_06(master(), cfg(1), true)
            };
            let mut now = t0;
            let mut events = 0;
            for (timeout, bytes, dt) in steps {
                now += MS(dt);
                let _ = drain(&mut q, now);
                if timeout { q.handle_timeout(now) } else { q.handle_datagram(now, master(), &bytes) }
                if q.poll_event().is_some() { events += 1; }
            }
            prop_assert!(events <= 1);
        }
    }
}
