//! One management connection as a pure machine ([`Conversation`]): bytes and time in; answers,
//! registry calls, waits and close out. See [`super`] for the rules it keeps.
//!
//! ```text
//! input ─> session ─> events, one at a time while the connection owes < pause_at:
//!   Register / UpdateStats  bucket (else: held, tried again in 50 ms) -> registry
//!   Unregister              registry
//!   Query                   bucket -> Wait: stored, visible -> answer from the view
//!                           -> egress queue (head spends; else tried again in 20 ms) -> write
//!   Discarded               counted;  Closed -> close (flush what is owed for 2 s at most)
//! after every step: unsent output over either cap -> closed (output overflow)
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use muster_proto::mgmt::{
    CloseReason, Discard, GameServer, MAX_WIRE_FRAME_LEN, Message, ServerSession, SessionConfig,
    SessionEvent, Stats,
};

use super::{BUCKET_RETRY, Bucket, CLOSE_FLUSH, EGRESS_RETRY, Shared, entry};
use crate::runtime::conversation::{Close, ConnCx, Conversation, Wait};
use muster_core::drops::DropReason as Reason;
use muster_core::registry::{Face, Outcome, ServerKey};

/// Connection ids are process-wide so two faces on one handle never share a key.
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Where a query's answer stands.
#[derive(Debug)]
enum Answering {
    /// Waiting for the store and the lists ([`Wait::StoredThenVisible`]).
    Waiting,
    /// Made; waiting for its turn at the egress budget.
    Egress { ticket: u64, bytes: Vec<u8> },
}

/// One management connection. See the module docs.
#[derive(Debug)]
pub struct MgmtConversation {
    shared: Arc<Shared>,
    id: u64,
    peer: SocketAddr,
    session: ServerSession,
    /// The registry entry of this connection; removed when the connection ends.
    current: Option<(ServerKey, GameServer)>,
    /// This connection's share of [`Shared::unsent_total`].
    accounted: usize,
    /// An event that waits for its bucket, tried again at `retry_at`.
    held: Option<SessionEvent>,
    /// The source was counted as limited for the held event.
    limited_counted: bool,
    answering: Option<Answering>,
    /// When a held event or an answer in the egress queue is tried again.
    retry_at: Option<Instant>,
    /// Set while the session counts a registration the registry refused (cap, name too long):
    /// the session then runs no idle timer, so this machine runs it, from the last complete
    /// message.
    orphan_since: Option<Instant>,
    /// The conversation is over (closing: flushing what it owes until `flush_until`).
    closed: bool,
    flush_until: Option<Instant>,
}

impl MgmtConversation {
    pub(super) fn new(shared: Arc<Shared>, peer: SocketAddr, now: Instant) -> Self {
        let config = SessionConfig {
            idle_timeout: shared.settings.idle_timeout,
        };
        Self {
            id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            peer,
            session: ServerSession::new(now, config),
            current: None,
            accounted: 0,
            held: None,
            limited_counted: false,
            answering: None,
            retry_at: None,
            orphan_since: None,
            closed: false,
            flush_until: None,
            shared,
        }
    }

    /// What this connection owes the peer: what the kernel has not taken, and what this step
    /// queued.
    fn unsent(cx: &ConnCx<'_>) -> usize {
        cx.unsent + cx.out.write.len()
    }

    /// Back-pressure: no answer is made for a connection that owes this much output (one
    /// frame, or half its cap if that is less) until the peer reads, and no input is read
    /// while commands wait. A client that pipelines queries and does not read holds at most
    /// that plus one answer here (and what the kernel buffers), and spends no more of the
    /// face's egress budget.
    fn pause_at(&self) -> usize {
        MAX_WIRE_FRAME_LEN
            .min(self.shared.settings.max_unsent / 2)
            .max(1)
    }

    /// Brings this connection's share of the face-wide unsent total up to date; returns
    /// whether the connection is over either output cap.
    fn account(&mut self, cx: &ConnCx<'_>) -> bool {
        let now_unsent = Self::unsent(cx);
        let total = &self.shared.unsent_total;
        if now_unsent >= self.accounted {
            total.fetch_add(now_unsent - self.accounted, Ordering::Relaxed);
        } else {
            total.fetch_sub(self.accounted - now_unsent, Ordering::Relaxed);
        }
        self.accounted = now_unsent;
        let s = &self.shared.settings;
        now_unsent > s.max_unsent
            || (now_unsent > 0 && total.load(Ordering::Relaxed) > s.max_unsent_total)
    }

    /// Removes this connection's server from the registry.
    fn clear(&mut self, cx: &mut ConnCx<'_>) {
        if let Some((key, _)) = self.current.take() {
            cx.registry.lock().remove(&key);
        }
    }

    /// Ends the conversation: `Flush` sends what is owed for [`CLOSE_FLUSH`] at most.
    fn close(&mut self, cx: &mut ConnCx<'_>, how: Close) {
        self.closed = true;
        self.held = None;
        self.retry_at = None;
        if let Some(Answering::Egress { ticket, .. }) = self.answering.take() {
            self.shared.leave_egress(ticket);
        }
        self.clear(cx);
        if how == Close::Flush && Self::unsent(cx) > 0 {
            self.flush_until = Some(cx.now + CLOSE_FLUSH);
        }
        cx.out.close(how);
    }

    fn overflow(&mut self, cx: &mut ConnCx<'_>) {
        self.shared
            .handle
            .metrics()
            .count_drop(Reason::MgmtOutputOverflow);
        self.log_bad(cx.now, "output overflow, closing");
        self.close(cx, Close::Now);
    }

    /// Runs what the session and the waits allow now, then checks the output caps.
    fn pump(&mut self, cx: &mut ConnCx<'_>) {
        if self.closed {
            return;
        }
        self.apply_events(cx);
        if !self.closed && self.account(cx) {
            self.overflow(cx);
        }
    }

    /// Whether the connection is held up by a bucket, the store or the egress budget.
    fn blocked(&self) -> bool {
        self.held.is_some() || self.answering.is_some()
    }

    /// Takes a token of `bucket` for the peer; when there is none, holds `ev` and tries again
    /// in [`BUCKET_RETRY`] (the source counted as limited once per held command).
    fn take(
        &mut self,
        cx: &mut ConnCx<'_>,
        bucket: Bucket,
        ev: SessionEvent,
    ) -> Option<SessionEvent> {
        let ip = self.peer.ip();
        let registry = &mut *cx.registry;
        if self
            .shared
            .try_take(bucket, ip, cx.now, |k| registry.lock().count_of_source(k))
        {
            self.limited_counted = false;
            return Some(ev);
        }
        if !self.limited_counted {
            cx.out.rate_limited.push(ip);
            self.limited_counted = true;
        }
        self.held = Some(ev);
        self.retry_at = Some(cx.now + BUCKET_RETRY);
        None
    }

    /// Applies queued session events while the connection owes less than
    /// [`MgmtConversation::pause_at`] and nothing holds it up.
    fn apply_events(&mut self, cx: &mut ConnCx<'_>) {
        let pause_at = self.pause_at();
        while !self.closed && !self.blocked() && Self::unsent(cx) < pause_at {
            let Some(ev) = self.session.poll_event() else {
                break;
            };
            if self.orphan_since.is_some() {
                self.orphan_since = Some(cx.now);
            }
            self.event(cx, ev);
        }
    }

    fn event(&mut self, cx: &mut ConnCx<'_>, ev: SessionEvent) {
        match ev {
            SessionEvent::Register(_) | SessionEvent::UpdateStats(_) => {
                let Some(ev) = self.take(cx, Bucket::State, ev) else {
                    return;
                };
                match ev {
                    SessionEvent::Register(server) => {
                        self.register(cx, server);
                        self.orphan_since = self.current.is_none().then_some(cx.now);
                    }
                    SessionEvent::UpdateStats(stats) => self.update(cx, &stats),
                    _ => {}
                }
            }
            SessionEvent::Unregister => {
                self.clear(cx);
                self.orphan_since = None;
            }
            SessionEvent::Query => {
                if self.take(cx, Bucket::Query, SessionEvent::Query).is_none() {
                    return;
                }
                // No answer goes out before this connection's registration is stored, and
                // answers are linearizable: a query sees every change made before it (a
                // client that registers and then queries sees its own server). The driver
                // waits for both (at most one publish interval for the lists).
                self.answering = Some(Answering::Waiting);
                cx.out.wait = Some(Wait::StoredThenVisible(
                    self.current.as_ref().map(|(k, _)| k.clone()),
                ));
            }
            SessionEvent::Discarded(d) => {
                let reason = match &d {
                    Discard::Invalid(_) => Reason::MgmtInvalid,
                    Discard::NotRegistered => Reason::MgmtNotRegistered,
                    Discard::NotACommand(_) => Reason::MgmtNotACommand,
                };
                self.shared.handle.metrics().count_drop(reason);
                self.log_discard(cx.now, &d);
            }
            SessionEvent::Closed(reason) => {
                let how = match reason {
                    CloseReason::Framing(e) => {
                        self.shared.handle.metrics().count_drop(Reason::MgmtFraming);
                        self.log_bad(cx.now, &format!("framing error, closing: {e}"));
                        Close::Flush
                    }
                    CloseReason::IdleTimeout => {
                        self.shared
                            .handle
                            .metrics()
                            .count_drop(Reason::MgmtIdleTimeout);
                        tracing::debug!(peer = %self.peer, "mgmt idle timeout");
                        Close::Flush
                    }
                    CloseReason::PeerClosed => Close::Flush,
                    CloseReason::Aborted => Close::Now,
                };
                self.close(cx, how);
            }
        }
    }

    fn register(&mut self, cx: &mut ConnCx<'_>, server: GameServer) {
        if !entry::name_fits(&server) {
            self.shared
                .handle
                .metrics()
                .count_drop(Reason::MgmtNameTooLong);
            self.log_bad(cx.now, "registration discarded: name too long");
            return;
        }
        if server.port().is_well_known() && self.shared.may_log(cx.now).is_some() {
            tracing::warn!(peer = %self.peer, port = server.port().get(), "mgmt registration on a well-known port");
        }
        let reg = entry::registration(&server, self.id, self.peer.ip());
        let key = reg.key.clone();
        if self.current.as_ref().is_some_and(|(k, _)| *k != key) {
            self.clear(cx);
        }
        // The TCP handshake proved the peer; the record is listed at once, with the default
        // state until the first stats update.
        let info = entry::info(&server, &Stats::default());
        let r = cx.registry.lock();
        let out = r.register(reg, cx.wall);
        if out.is_listed() {
            r.set_info(&key, info);
            // The next answer on this connection waits until the store has it.
            cx.out.unstored.push((key.clone(), r.version()));
        }
        match out {
            Outcome::Added => cx.out.registrations += 1,
            Outcome::Refreshed | Outcome::Relisted => {}
            Outcome::Rejected(r) => {
                self.shared.handle.metrics().count_drop(r.into());
                // The old entry (if any) is already gone.
                self.current = None;
                self.log_bad(cx.now, &format!("registration refused: {}", r.name()));
                return;
            }
        }
        tracing::debug!(peer = %self.peer, conn = self.id, %key.addr, "mgmt registered");
        self.current = Some((key, server));
    }

    fn update(&mut self, cx: &mut ConnCx<'_>, stats: &Stats) {
        let Some((key, server)) = &self.current else {
            // The registration was refused by the registry; the session does not know.
            self.shared
                .handle
                .metrics()
                .count_drop(Reason::MgmtNotRegistered);
            return;
        };
        let info = entry::info(server, stats);
        let r = cx.registry.lock();
        r.set_info(key, info);
        r.heartbeat(key, cx.wall);
    }

    /// The answer to a query, from the view the wait ended on; then its turn at the egress
    /// budget.
    fn make_answer(&mut self, cx: &mut ConnCx<'_>) {
        let handle = &self.shared.handle;
        handle.metrics().count_list_request(Face::Mgmt.name());
        let entries: Vec<_> = cx
            .view
            .listed()
            .iter()
            .filter_map(|r| entry::listed(r).map(|e| (r.source(), e)))
            .collect();
        let turn = self.shared.answers.fetch_add(1, Ordering::Relaxed);
        let (answer, left_out) = entry::answer(entries, turn);
        if left_out > 0 {
            handle.metrics().count_drop(Reason::MgmtAnswerTruncated);
            if self.shared.may_log(cx.now).is_some() {
                tracing::warn!(left_out, "mgmt answer exceeds one frame; entries left out");
            }
        }
        let mut bytes = Vec::new();
        Message::QueryGameServersAnswer(answer).encode(&mut bytes);
        // Answers waiting for the egress budget take it in turn (first come, first served; a
        // paused connection has at most one answer in the queue), rather than whichever
        // tries first after a refill.
        let ticket = self.shared.queue_for_egress();
        self.answering = Some(Answering::Egress { ticket, bytes });
        self.try_send(cx);
    }

    /// Sends the made answer if its turn and the budget allow, else tries again soon.
    fn try_send(&mut self, cx: &mut ConnCx<'_>) {
        let Some(Answering::Egress { ticket, bytes }) = &self.answering else {
            return;
        };
        if self.shared.try_egress(*ticket, bytes.len(), cx.now) {
            cx.out.write(bytes);
            self.answering = None;
            self.retry_at = None;
            // Checked as each answer is made, not after the whole queue.
            if self.account(cx) {
                self.overflow(cx);
            }
        } else {
            self.retry_at = Some(cx.now + EGRESS_RETRY);
        }
    }

    /// The idle deadline: the session's, or while a refused registration is counted, the
    /// machine's own.
    fn idle_deadline(&self) -> Option<Instant> {
        if self.closed || self.blocked() {
            // Waits do not count as idleness.
            return None;
        }
        let idle = self.shared.settings.idle_timeout;
        self.session
            .poll_timeout()
            .or_else(|| self.orphan_since.map(|t| t + idle))
    }

    fn log_discard(&self, now: Instant, d: &Discard) {
        if let Some(held) = self.shared.may_log(now) {
            tracing::info!(peer = %self.peer, conn = self.id, reason = ?d, held_back = held, "mgmt message discarded");
        }
    }

    fn log_bad(&self, now: Instant, what: &str) {
        if let Some(held) = self.shared.may_log(now) {
            tracing::info!(peer = %self.peer, conn = self.id, held_back = held, "mgmt: {what}");
        }
    }
}

impl Conversation for MgmtConversation {
    fn on_input(&mut self, cx: &mut ConnCx<'_>, data: &[u8]) {
        self.session.handle_input(cx.now, data);
        self.pump(cx);
    }

    fn on_eof(&mut self, cx: &mut ConnCx<'_>) {
        self.session.handle_eof(cx.now);
        self.pump(cx);
    }

    fn on_timeout(&mut self, cx: &mut ConnCx<'_>) {
        let now = cx.now;
        if self.flush_until.is_some_and(|t| now >= t) {
            // What is still owed after the close's flush time is not sent.
            self.flush_until = None;
            cx.out.close(Close::Now);
            return;
        }
        if self.closed {
            return;
        }
        if self.retry_at.is_some_and(|t| now >= t) {
            self.retry_at = None;
            if let Some(ev) = self.held.take() {
                self.event(cx, ev);
            } else {
                self.try_send(cx);
            }
            self.pump(cx);
            return;
        }
        if self.idle_deadline().is_none_or(|t| now < t) {
            return;
        }
        if self.session.poll_timeout().is_some() {
            self.session.handle_timeout(now);
            if self.session.is_closed() && Self::unsent(cx) >= self.pause_at() {
                // Paused: the close would wait behind the queued commands, which are not
                // answered.
                self.shared
                    .handle
                    .metrics()
                    .count_drop(Reason::MgmtIdleTimeout);
                self.close(cx, Close::Now);
                return;
            }
        } else {
            self.shared
                .handle
                .metrics()
                .count_drop(Reason::MgmtIdleTimeout);
            tracing::debug!(peer = %self.peer, "mgmt idle timeout (refused registration)");
            // Once: the close waits behind what is owed, if anything.
            self.orphan_since = None;
            self.session.abort(now);
        }
        self.pump(cx);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [self.flush_until, self.retry_at, self.idle_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    fn wants_input(&self) -> bool {
        // Commands left waiting (the connection owes enough, or a wait holds it up): only
        // writing goes on.
        !self.closed && !self.blocked() && !self.session.has_event()
    }

    fn on_written(&mut self, cx: &mut ConnCx<'_>) {
        self.pump(cx);
    }

    fn on_waited(&mut self, cx: &mut ConnCx<'_>) {
        if matches!(self.answering, Some(Answering::Waiting)) && !self.closed {
            self.make_answer(cx);
            self.pump(cx);
        }
    }

    fn on_error(&mut self, cx: &mut ConnCx<'_>, _error: &std::io::Error) {
        // Commands still queued are not answered.
        self.session.abort(cx.now);
        self.close(cx, Close::Now);
    }

    fn on_shutdown(&mut self, cx: &mut ConnCx<'_>) {
        // Commands still queued (or waiting) are not answered.
        self.session.abort(cx.now);
        self.close(cx, Close::Now);
    }

    fn on_end(&mut self, cx: &mut ConnCx<'_>) {
        if let Some(Answering::Egress { ticket, .. }) = self.answering.take() {
            self.shared.leave_egress(ticket);
        }
        self.clear(cx);
        self.shared
            .unsent_total
            .fetch_sub(self.accounted, Ordering::Relaxed);
        self.accounted = 0;
    }
}
