//! The GameSpy TCP list server's conversation (`gamespy-master.md` §5, §7): greeting,
//! request, list (or a peer's `\sync\` answer), close. A pure machine
//! ([`Conversation`]) for the runtime's TCP driver: bytes and time in, bytes and close out.
//!
//! ```text
//! open      -> \basic\\secure\ABCDEF
//! input     -> fed to the request parser; a whole request -> checks -> list | sync | close
//! deadlines -> tcp_total_timeout after the open: closed (counted);
//!              1 s of silence after a `\sync\` without `\final\`: taken as the request
//! ```
//!
//! Every refusal closes the connection without a list.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_proto::gamespy_master::{
    Challenge, ClientAuth, ClientRequest, Enctype, Greeting, Key, ListReply, MAX_CLIENT_REQUEST,
    RequestAction, RequestParser, SyncGames, SyncReply, SyncRequest, Token, ValidateCheck,
    check_validate,
};

use super::{GameSpySettings, MESH_GAMENAME, drop_reason, list_of, random6, sync_lists, verify};
use crate::runtime::conversation::{Close, ConnCx, Conversation};
use muster_core::drops::DropReason;

/// A list connection silent this long after sending a `\sync\` has sent its whole request
/// (a Qt5 master's sync may come without `\final\` and without `\msid\`, §14).
const SYNC_IDLE: Duration = Duration::from_secs(1);

/// One list connection. See the module docs.
#[derive(Debug)]
pub struct ListConversation {
    settings: Arc<GameSpySettings>,
    peer: IpAddr,
    challenge: Challenge,
    parser: RequestParser,
    /// Everything received (up to the parser's request limit), to tell a sync.
    seen: Vec<u8>,
    /// When the connection closes whatever it is doing.
    end: Instant,
    /// The last input (or the open): a buffered sync is taken whole [`SYNC_IDLE`] after it.
    last_input: Instant,
    /// The request was answered or refused: nothing more is read.
    done: bool,
}

impl ListConversation {
    /// The conversation with `peer`, opened at `now`, with a fresh challenge.
    #[must_use]
    pub fn new(settings: Arc<GameSpySettings>, peer: IpAddr, now: Instant) -> Self {
        Self::with_challenge(settings, peer, now, Challenge::from_random(random6()))
    }

    /// As [`ListConversation::new`], with the challenge given (tests).
    #[must_use]
    pub fn with_challenge(
        settings: Arc<GameSpySettings>,
        peer: IpAddr,
        now: Instant,
        challenge: Challenge,
    ) -> Self {
        Self {
            end: now + settings.tcp_total_timeout,
            settings,
            peer,
            challenge,
            parser: RequestParser::new(),
            seen: Vec::new(),
            last_input: now,
            done: false,
        }
    }

    fn sync_pending(&self) -> bool {
        !self.done && self.seen.windows(6).any(|w| w == b"\\sync\\")
    }

    fn fed(
        &mut self,
        cx: &mut ConnCx<'_>,
        fed: Result<Option<ClientRequest>, muster_proto::wire::DecodeError>,
    ) {
        match fed {
            Ok(Some(req)) => {
                self.done = true;
                self.answer(cx, &req);
            }
            Ok(None) => {}
            Err(e) => {
                self.done = true;
                cx.out.refuse(drop_reason(&e));
            }
        }
    }

    /// A whole request: a list, or a peer's sync.
    fn answer(&self, cx: &mut ConnCx<'_>, req: &ClientRequest) {
        let list = match &req.action {
            RequestAction::List(list) => list,
            RequestAction::Sync(sync) => return self.sync(cx, &req.auth, sync),
        };
        let Ok(enctype) = req.auth.enctype() else {
            return cx.out.refuse(DropReason::Malformed);
        };
        let auth_game = req.auth.gamename().map(Token::as_bytes).unwrap_or_default();
        let validate = req.auth.validate().map(Token::as_bytes).unwrap_or_default();
        match check_validate(auth_game, &self.challenge, enctype, validate) {
            ValidateCheck::Match => {}
            ValidateCheck::Mismatch { .. } => {
                cx.out.verifications_failed += 1;
                cx.out.drop(DropReason::ClientValidate);
                tracing::debug!(peer = %self.peer, "list client sent a wrong validate");
                if self.settings.require_client_validate {
                    return cx.out.close(Close::Now);
                }
            }
            ValidateCheck::UnknownGame => return cx.out.refuse(DropReason::UnknownGame),
            ValidateCheck::UnsupportedEnctype => {
                return cx.out.refuse(DropReason::UnsupportedEnctype);
            }
        }
        if enctype == Enctype::Two {
            // The client would expect an enctype 2 list, which Muster cannot write (§14).
            return cx.out.refuse(DropReason::Enctype2List);
        }
        let Some(game) = req.list_gamename().and_then(verify::game) else {
            return cx.out.refuse(DropReason::UnknownGame);
        };
        let servers = list_of(cx.view, game.name);
        let mut out = Vec::new();
        ListReply {
            form: list.mode.reply_form(),
            servers: servers.to_vec(),
        }
        .encode(&mut out);
        cx.out.lists.push("gamespy");
        cx.out.write(&out);
        cx.out.close(Close::Flush);
    }

    /// A peer's `\sync\`: refused (closed) unless the peer is allowed and authenticated as
    /// `333networks`; answered with `\final\` alone when it carries this master's own id.
    fn sync(&self, cx: &mut ConnCx<'_>, auth: &ClientAuth, sync: &SyncRequest) {
        let settings = &self.settings;
        let peer = self.peer;
        if !settings.sync.allows(peer) {
            tracing::debug!(%peer, "sync from a source that is no sync peer");
            return cx.out.refuse(DropReason::SyncUnsupported);
        }
        let auth_game = auth.gamename().map(Token::as_bytes).unwrap_or_default();
        let validate = auth.validate().map(Token::as_bytes).unwrap_or_default();
        let enctype = auth.enctype().unwrap_or(Enctype::Zero);
        let mesh = auth_game.eq_ignore_ascii_case(MESH_GAMENAME.as_bytes());
        if !mesh
            || check_validate(auth_game, &self.challenge, enctype, validate) != ValidateCheck::Match
        {
            cx.out.verifications_failed += 1;
            tracing::debug!(%peer, "sync peer failed the 333networks validate");
            return cx.out.refuse(DropReason::ClientValidate);
        }
        let mut out = Vec::new();
        let own = sync
            .msid
            .as_ref()
            .is_some_and(|m| m.as_bytes() == settings.sync.msid.as_bytes());
        if own {
            out.extend_from_slice(b"\\final\\");
        } else {
            let lists = sync_lists(cx.view, settings.sync.export_learned);
            let games = lists
                .iter()
                .filter(|(g, _)| match &sync.games {
                    SyncGames::All => true,
                    SyncGames::Games(want) => want
                        .iter()
                        .any(|k| k.as_bytes().eq_ignore_ascii_case(g.as_bytes())),
                })
                .filter_map(|(g, addrs)| Some((Key::new(g.as_str()).ok()?, addrs.clone())))
                .collect();
            SyncReply { games }.encode(&mut out);
        }
        cx.out.lists.push("gamespy-sync");
        cx.out.write(&out);
        cx.out.close(Close::Flush);
    }
}

impl Conversation for ListConversation {
    fn on_open(&mut self, cx: &mut ConnCx<'_>) {
        let mut out = Vec::with_capacity(64);
        Greeting {
            challenge: self.challenge,
        }
        .encode(&mut out);
        cx.out.write(&out);
    }

    fn on_input(&mut self, cx: &mut ConnCx<'_>, data: &[u8]) {
        if self.done {
            return;
        }
        self.last_input = cx.now;
        if self.seen.len() < MAX_CLIENT_REQUEST {
            self.seen.extend_from_slice(data);
        }
        let fed = self.parser.feed(data);
        self.fed(cx, fed);
    }

    fn on_eof(&mut self, cx: &mut ConnCx<'_>) {
        if !self.done {
            self.done = true;
            cx.out.refuse(DropReason::ListEof);
        }
    }

    fn on_timeout(&mut self, cx: &mut ConnCx<'_>) {
        if cx.now >= self.end {
            self.done = true;
            return cx.out.refuse(DropReason::TcpTotalTimeout);
        }
        if self.sync_pending() && cx.now >= self.last_input + SYNC_IDLE {
            let fed = self.parser.flush();
            self.fed(cx, fed);
            // Not a whole request yet: tried again after another second of silence.
            self.last_input = cx.now;
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let sync = self
            .sync_pending()
            .then(|| self.last_input + SYNC_IDLE)
            .filter(|t| *t < self.end);
        Some(sync.unwrap_or(self.end))
    }

    fn wants_input(&self) -> bool {
        !self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::conversation::ConnOut;
    use muster_core::registry::{Registry, Timestamp};
    use muster_core::views::Snapshot;

    /// Runs `f` on `c` at `now` over an empty registry; returns what it asked for.
    fn step(
        c: &mut ListConversation,
        now: Instant,
        f: impl FnOnce(&mut ListConversation, &mut ConnCx<'_>),
    ) -> ConnOut {
        let mut registry = Registry::default();
        let view = Snapshot::empty();
        let mut out = ConnOut::default();
        let mut cx = ConnCx {
            now,
            wall: Timestamp::from_secs(1_000_000),
            view: &view,
            registry: &mut registry,
            unsent: 0,
            out: &mut out,
        };
        f(c, &mut cx);
        out
    }

    fn conversation(now: Instant) -> ListConversation {
        let settings = GameSpySettings {
            tcp_total_timeout: Duration::from_secs(30),
            ..GameSpySettings::default()
        };
        ListConversation::new(Arc::new(settings), "10.0.0.1".parse().unwrap(), now)
    }

    #[test]
    fn greeting_then_a_list_then_close() {
        let t0 = Instant::now();
        let mut c = conversation(t0);
        let out = step(&mut c, t0, |c, cx| c.on_open(cx));
        assert!(out.write.starts_with(b"\\basic\\\\secure\\"));
        assert_eq!(out.close, None);
        // A list request for a known game (an empty list), without a validate (counted).
        let out = step(&mut c, t0, |c, cx| {
            c.on_input(
                cx,
                b"\\gamename\\ut\\enctype\\0\\validate\\x\\final\\\\list\\\\gamename\\ut\\final\\",
            );
        });
        assert_eq!(out.close, Some(Close::Flush));
        assert_eq!(out.lists, ["gamespy"]);
        assert!(out.write.ends_with(b"\\final\\"), "{:?}", out.write);
        assert!(!c.wants_input());
    }

    #[test]
    fn deadlines_are_data() {
        let t0 = Instant::now();
        let mut c = conversation(t0);
        assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(30)));
        // A sync without `\final\`: taken whole one second after the last byte.
        let t1 = t0 + Duration::from_millis(500);
        let out = step(&mut c, t1, |c, cx| {
            c.on_input(
                cx,
                b"\\gamename\\333networks\\enctype\\0\\validate\\x\\final\\\\sync\\all",
            );
        });
        assert_eq!(out.close, None);
        assert_eq!(c.poll_timeout(), Some(t1 + SYNC_IDLE));
        // Taken as the request: this peer may not sync, so it is closed without a list.
        let out = step(&mut c, t1 + SYNC_IDLE, |c, cx| c.on_timeout(cx));
        assert_eq!(out.close, Some(Close::Now));
        assert_eq!(out.drops, [(DropReason::SyncUnsupported, None)]);
        assert!(out.write.is_empty());
        // Past the total lifetime: closed at once, counted.
        let mut c = conversation(t0);
        let out = step(&mut c, t0 + Duration::from_secs(30), |c, cx| {
            c.on_timeout(cx)
        });
        assert_eq!(out.close, Some(Close::Now));
        assert_eq!(out.drops, [(DropReason::TcpTotalTimeout, None)]);
    }

    #[test]
    fn an_incomplete_sync_is_tried_again_a_second_later() {
        let t0 = Instant::now();
        let mut c = conversation(t0);
        // An authentication without `\final\` that names a sync: the flush takes it as the
        // authentication only, and the request is still to come.
        let out = step(&mut c, t0, |c, cx| {
            c.on_input(
                cx,
                b"\\gamename\\333networks\\enctype\\0\\validate\\x\\sync\\all",
            );
        });
        assert!(out.write.is_empty());
        let t1 = t0 + SYNC_IDLE;
        let out = step(&mut c, t1, |c, cx| c.on_timeout(cx));
        assert_eq!(out.drops, []);
        assert_eq!(out.close, None);
        // The next try is a second later, not at once again.
        assert_eq!(c.poll_timeout(), Some(t1 + SYNC_IDLE));
    }

    #[test]
    fn eof_before_a_request_is_counted() {
        let t0 = Instant::now();
        let mut c = conversation(t0);
        let out = step(&mut c, t0, |c, cx| c.on_eof(cx));
        assert_eq!(out.drops, [(DropReason::ListEof, None)]);
        assert_eq!(out.close, Some(Close::Now));
    }
}
