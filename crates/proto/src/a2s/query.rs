//! Sans-IO A2S query of one game server: INFO, PLAYER and RULES, pipelined behind one
//! challenge, split replies reassembled (spec §8, §9).
//!
//! The machine follows [`crate::query::QueryMachine`]; it reads no clock and opens no socket.
//! It does not know which [`Protocol`] value names A2S in the neutral model (the shared enum
//! has no such variant yet): the caller passes the tag to put in [`ServerInfo::protocol`].

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::packet::{GoldSrcInfo, Info, Packet, Players, Rules};
use super::split::Reassembler;
use super::{NO_CHALLENGE, decode_text};
use crate::model::{Partial, Player, Protocol, RawValue, Rule, ServerInfo};
use crate::query::{
    Event, QueryConfig, QueryError, QueryEvent, QueryMachine, RetryAction, RetrySchedule, Transmit,
};
use crate::wire::DecodeError;

/// The conventional query port of Source servers (the game port).
pub const DEFAULT_PORT: u16 = 27015;

/// Distinct challenges one query accepts. Servers keep one challenge per client address, so
/// INFO and the first PLAYER request (sent together) get the same one; a server that replaces
/// it may do so twice more, the third replacement means it accepts none of ours.
pub const MAX_CHALLENGES: u32 = 3;

/// What to ask besides INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Ask A2S_PLAYER.
    pub players: bool,
    /// Ask A2S_RULES.
    pub rules: bool,
}

impl Request {
    /// INFO, PLAYER and RULES.
    pub const ALL: Self = Self {
        players: true,
        rules: true,
    };
    /// INFO only.
    pub const INFO: Self = Self {
        players: false,
        rules: false,
    };
}

/// The request a reply answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Info,
    Player,
    Rules,
}

impl Kind {
    fn of(p: &Packet) -> Option<Self> {
        match p {
            Packet::InfoRequest { .. } => Some(Self::Info),
            Packet::PlayerRequest { .. } => Some(Self::Player),
            Packet::RulesRequest { .. } => Some(Self::Rules),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
enum InfoReply {
    Source(Box<Info>),
    GoldSrc(Box<GoldSrcInfo>),
}

/// Asks one server INFO (and PLAYER and RULES as requested) and maps the answers into a
/// [`ServerInfo`].
///
/// * Requests go out in rounds, everything still unanswered at once: first INFO and, to learn
///   the challenge, PLAYER (or RULES) with -1; once a challenge is known, INFO (if the server
///   wanted it), PLAYER and RULES with it. A server that answers INFO at once and one that
///   wants the challenge for INFO both take two round trips.
/// * A server answers the requests of a round in the order they came, so an answer to a later
///   request of the round while an earlier one is still unanswered means that the earlier
///   request (or its reply) was lost: it is re-sent at once, once per round, without waiting
///   for the timer (as TCP's fast retransmit does on later data being acknowledged).
/// * A new challenge starts a new round at once. The round is re-sent on the shared
///   [`RetrySchedule`] while nothing comes back; any new answer (a challenge, INFO, PLAYER or
///   RULES) restarts the count for what is still unanswered, so the query gives up after
///   `retries` re-sends in a row that brought nothing back: a silent server ends as quickly
///   as with one request, and a server that answers is not given up for a few lost requests.
/// * Datagrams from other addresses are ignored; split replies are reassembled (expiry one
///   attempt timeout after their first part).
/// * INFO failing fails the query; PLAYER or RULES failing (or a reply cut short) leaves a
///   result marked partial.
/// * `ping` is the time from the latest INFO request to the INFO reply.
#[derive(Debug)]
pub struct ServerQuery {
    target: SocketAddr,
    tag: Protocol,
    request: Request,
    config: QueryConfig,
    challenge: Option<u32>,
    challenges: u32,
    retry: RetrySchedule,
    send: bool,
    queue: VecDeque<Packet>,
    /// What the current round asked, in order (for spotting a lost request early).
    asked: Vec<Kind>,
    /// Requests of this round already re-sent early.
    resent: Vec<Kind>,
    info_sent: Option<Instant>,
    split: Reassembler,
    info: Option<InfoReply>,
    players: Option<Players>,
    rules: Option<Rules>,
    ping: Option<Duration>,
    notes: Vec<String>,
    split_note: Option<String>,
    last_error: Option<DecodeError>,
    event: Option<QueryEvent>,
    done: bool,
}

impl ServerQuery {
    /// A query of `target` (the query port, usually the game port) whose result is tagged
    /// `tag`.
    #[must_use]
    pub fn new(target: SocketAddr, tag: Protocol, request: Request, config: QueryConfig) -> Self {
        Self {
            target,
            tag,
            request,
            config,
            challenge: None,
            challenges: 0,
            retry: RetrySchedule::new(config),
            send: true,
            queue: VecDeque::new(),
            asked: Vec::new(),
            resent: Vec::new(),
            info_sent: None,
            split: Reassembler::new(config.attempt_timeout),
            info: None,
            players: None,
            rules: None,
            ping: None,
            notes: Vec::new(),
            split_note: None,
            last_error: None,
            event: None,
            done: false,
        }
    }

    fn app_id(&self) -> Option<u32> {
        match &self.info {
            Some(InfoReply::Source(i)) => Some(i.full_app_id()),
            _ => None,
        }
    }

    fn players_missing(&self) -> bool {
        self.request.players && self.players.is_none()
    }

    fn rules_missing(&self) -> bool {
        self.request.rules && self.rules.is_none()
    }

    /// The replies still missing, by name.
    fn missing(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.info.is_none() {
            out.push("INFO");
        }
        if self.players_missing() {
            out.push("PLAYER");
        }
        if self.rules_missing() {
            out.push("RULES");
        }
        out
    }

    /// The requests of one round: everything unanswered, with the challenge when known; INFO
    /// first (a challenge that comes before its reply then shows INFO lost, or wanting it).
    fn round(&self) -> Vec<Packet> {
        let mut out = Vec::with_capacity(3);
        if self.info.is_none() {
            out.push(Packet::InfoRequest {
                challenge: self.challenge,
            });
        }
        match self.challenge {
            Some(challenge) => {
                if self.players_missing() {
                    out.push(Packet::PlayerRequest { challenge });
                }
                if self.rules_missing() {
                    out.push(Packet::RulesRequest { challenge });
                }
            }
            // One list request with -1 fetches the challenge for both.
            None => {
                if self.players_missing() {
                    out.push(Packet::PlayerRequest {
                        challenge: NO_CHALLENGE,
                    });
                } else if self.rules_missing() {
                    out.push(Packet::RulesRequest {
                        challenge: NO_CHALLENGE,
                    });
                }
            }
        }
        out
    }

    /// Whether the request `kind` of the current round is still unanswered (a list request
    /// sent with -1 is answered by any challenge, and a new challenge starts a new round).
    fn unanswered(&self, kind: Kind) -> bool {
        match kind {
            Kind::Info => self.info.is_none(),
            Kind::Player => self.players_missing(),
            Kind::Rules => self.rules_missing(),
        }
    }

    /// `kind` was answered: re-send at once the requests asked before it in this round that
    /// are still unanswered (each once per round).
    fn resend_earlier(&mut self, kind: Kind) {
        let Some(pos) = self.asked.iter().position(|k| *k == kind) else {
            return;
        };
        let lost: Vec<Kind> = self
            .asked
            .iter()
            .take(pos)
            .copied()
            .filter(|k| self.unanswered(*k) && !self.resent.contains(k))
            .collect();
        if lost.is_empty() || self.send {
            return;
        }
        let round = self.round();
        for p in round {
            if Kind::of(&p).is_some_and(|k| lost.contains(&k)) {
                self.queue.push_back(p);
            }
        }
        self.resent.extend(lost);
    }

    /// Send a new round now, from a fresh schedule.
    fn new_round(&mut self) {
        self.retry = RetrySchedule::new(self.config);
        self.queue.clear();
        self.send = true;
    }

    /// Something new came back: what is still unanswered gets its re-sends afresh, its timer
    /// still running from the last send; requests of the round asked before `kind` and not
    /// answered are re-sent at once.
    fn answered(&mut self, kind: Kind) {
        self.progress();
        if !self.done {
            self.resend_earlier(kind);
        }
    }

    /// Something new came back: restart the count of re-sends (see [`Self::answered`]).
    fn progress(&mut self) {
        if self.missing().is_empty() {
            self.finish_done();
            return;
        }
        let last = self.retry.last_sent();
        self.retry = RetrySchedule::new(self.config);
        if let Some(at) = last {
            self.retry.on_send(at);
        }
    }

    fn on_challenge(&mut self, c: u32) {
        if self.challenge == Some(c) {
            // The same challenge again: the answer to a request sent with -1 alongside, or
            // to a re-sent one.
            return;
        }
        if self.challenges >= MAX_CHALLENGES {
            if self.info.is_none() {
                self.finish(Event::Failed(QueryError::Rejected(
                    "the server kept changing its challenge",
                )));
            } else {
                self.notes
                    .push("the server kept changing its challenge".to_owned());
                self.finish_done();
            }
            return;
        }
        self.challenges += 1;
        self.challenge = Some(c);
        self.new_round();
    }

    fn on_packet(&mut self, now: Instant, packet: Packet) {
        match packet {
            Packet::Challenge(c) => self.on_challenge(c),
            Packet::Info(i) if self.info.is_none() => self.on_info(now, InfoReply::Source(i)),
            Packet::GoldSrcInfo(i) if self.info.is_none() => {
                self.on_info(now, InfoReply::GoldSrc(i));
            }
            Packet::Players(p) if self.players_missing() => {
                if p.truncated {
                    self.notes.push("the PLAYER reply was cut short".to_owned());
                }
                self.players = Some(p);
                self.answered(Kind::Player);
            }
            Packet::Rules(r) if self.rules_missing() => {
                if r.truncated {
                    self.notes.push("the RULES reply was cut short".to_owned());
                }
                self.rules = Some(r);
                self.answered(Kind::Rules);
            }
            // A duplicate reply (to a re-sent request), one not asked for, or a request.
            _ => {}
        }
    }

    fn on_info(&mut self, now: Instant, info: InfoReply) {
        self.ping = self.info_sent.map(|t| now.saturating_duration_since(t));
        self.info = Some(info);
        self.answered(Kind::Info);
    }

    fn give_up(&mut self) {
        if self.info.is_none() {
            let err = self
                .last_error
                .clone()
                .map_or(QueryError::Timeout, QueryError::Decode);
            self.finish(Event::Failed(err));
            return;
        }
        for name in self.missing() {
            self.notes.push(format!("no {name} reply"));
        }
        if let Some(note) = self.split_note.take() {
            self.notes.push(note);
        }
        self.finish_done();
    }

    fn finish_done(&mut self) {
        let Some(info) = self.info.take() else {
            self.finish(Event::Failed(QueryError::Timeout));
            return;
        };
        let mut out = to_server_info(self.tag, &info, self.players.as_ref(), self.rules.as_ref());
        out.ping = self.ping;
        if !self.notes.is_empty() {
            out.partial = Some(Partial {
                reason: self.notes.join("; "),
            });
        }
        self.finish(Event::Done(Box::new(out)));
    }

    fn finish(&mut self, ev: QueryEvent) {
        self.done = true;
        self.send = false;
        self.queue.clear();
        self.retry.stop();
        self.event = Some(ev);
    }
}

impl QueryMachine for ServerQuery {
    type Output = Box<ServerInfo>;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.done || from != self.target {
            return;
        }
        let message: Cow<'_, [u8]> = if Reassembler::is_split(datagram) {
            match self.split.push(now, datagram) {
                Ok(Some(reply)) => Cow::Owned(reply),
                Ok(None) => return,
                Err(e) => {
                    self.last_error = Some(e);
                    return;
                }
            }
        } else {
            Cow::Borrowed(datagram)
        };
        match Packet::decode_for_app(&message, self.app_id()) {
            Ok(p) => self.on_packet(now, p),
            Err(e) => self.last_error = Some(e),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        for e in self.split.expire(now) {
            let total = e.total.map_or_else(|| "?".to_owned(), |t| t.to_string());
            self.split_note = Some(format!(
                "split reply {:#x}: {} of {} parts came",
                e.id, e.received, total
            ));
        }
        match self.retry.on_timeout(now) {
            RetryAction::Resend => self.send = true,
            RetryAction::GiveUp => self.give_up(),
            RetryAction::Wait => {}
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.done {
            return None;
        }
        if self.send {
            self.send = false;
            let round = self.round();
            self.asked = round.iter().filter_map(Kind::of).collect();
            self.resent.clear();
            self.queue = round.into();
            if !self.queue.is_empty() {
                // One timer for the whole round, started with its first datagram. (Early
                // re-sends leave it running.)
                self.retry.on_send(now);
            }
        }
        let packet = self.queue.pop_front()?;
        if matches!(packet, Packet::InfoRequest { .. }) {
            self.info_sent = Some(now);
        }
        packet.encode(buf);
        Some(Transmit {
            destination: self.target,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done {
            return None;
        }
        match (self.retry.deadline(), self.split.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_event(&mut self) -> Option<QueryEvent> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.config.attempt_timeout = timeout;
        self.retry.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, _now: Instant) {
        if self.done {
            return;
        }
        if self.info.is_some() {
            let missing = self.missing().join(" and ");
            let noun = if missing.contains(" and ") {
                "replies"
            } else {
                "reply"
            };
            self.notes
                .push(format!("aborted before the {missing} {noun}"));
            self.finish_done();
        } else {
            let err = self
                .last_error
                .clone()
                .map_or(QueryError::Timeout, QueryError::Decode);
            self.finish(Event::Failed(err));
        }
    }
}

fn int(key: &str, n: impl Into<i64>) -> (String, RawValue) {
    (key.to_owned(), RawValue::Int(n.into()))
}

fn text(key: &str, raw: &[u8]) -> (String, RawValue) {
    (key.to_owned(), RawValue::Text(decode_text(raw)))
}

fn u64_value(key: &str, n: u64) -> (String, RawValue) {
    match i64::try_from(n) {
        Ok(i) => int(key, i),
        Err(_) => (key.to_owned(), RawValue::Bytes(n.to_le_bytes().to_vec())),
    }
}

/// The answers in the neutral model (spec §8.2):
///
/// * `name`, `map`, `version` as sent; `game_type` = the game description; `password` =
///   visibility ≠ 0; `num_players` / `max_players` = INFO's counts (bots included);
/// * players from PLAYER, every entry (the count byte is not trusted), `raw` holding `index`,
///   `duration_ms` and The Ship's `deaths` / `money`;
/// * rules from RULES in wire order;
/// * raw: `folder`, `app_id` (the full id), `protocol`, `bots`, `server_type`, `environment`,
///   `vac`, the extra-data fields (`port`, `steam_id`, `sourcetv_port`, `sourcetv_name`,
///   `keywords`, `game_id`), The Ship's `ship_mode` / `ship_witnesses` / `ship_duration`;
///   GoldSrc adds `address` and the `mod_*` fields.
#[must_use]
fn to_server_info(
    tag: Protocol,
    info: &InfoReply,
    players: Option<&Players>,
    rules: Option<&Rules>,
) -> ServerInfo {
    let mut out = ServerInfo::new(tag);
    match info {
        InfoReply::Source(i) => {
            out.name = decode_text(&i.name);
            out.map = decode_text(&i.map);
            out.game_type = decode_text(&i.game);
            out.version = decode_text(&i.version);
            out.password = Some(i.visibility != 0);
            out.num_players = u32::from(i.players);
            out.max_players = u32::from(i.max_players);
            out.raw.push(text("folder", &i.folder));
            out.raw.push(int("app_id", i.full_app_id()));
            out.raw.push(int("protocol", i.protocol));
            out.raw.push(int("bots", i.bots));
            out.raw.push(text("server_type", &[i.server_type]));
            out.raw.push(text("environment", &[i.environment]));
            out.raw.push(("vac".to_owned(), RawValue::Bool(i.vac != 0)));
            if let Some(s) = i.the_ship {
                out.raw.push(int("ship_mode", s.mode));
                out.raw.push(int("ship_witnesses", s.witnesses));
                out.raw.push(int("ship_duration", s.duration));
            }
            if let Some(p) = i.port {
                out.raw.push(int("port", p));
            }
            if let Some(s) = i.steam_id {
                out.raw.push(u64_value("steam_id", s));
            }
            if let Some((port, name)) = &i.source_tv {
                out.raw.push(int("sourcetv_port", *port));
                out.raw.push(text("sourcetv_name", name));
            }
            if let Some(k) = &i.keywords {
                out.raw.push(text("keywords", k));
            }
            if let Some(g) = i.game_id {
                out.raw.push(u64_value("game_id", g));
            }
        }
        InfoReply::GoldSrc(i) => {
            out.name = decode_text(&i.name);
            out.map = decode_text(&i.map);
            out.game_type = decode_text(&i.game);
            out.password = Some(i.visibility != 0);
            out.num_players = u32::from(i.players);
            out.max_players = u32::from(i.max_players);
            out.raw.push(text("address", &i.address));
            out.raw.push(text("folder", &i.folder));
            out.raw.push(int("protocol", i.protocol));
            out.raw.push(int("bots", i.bots));
            out.raw.push(text("server_type", &[i.server_type]));
            out.raw.push(text("environment", &[i.environment]));
            out.raw.push(("vac".to_owned(), RawValue::Bool(i.vac != 0)));
            if let Some(m) = &i.mod_info {
                out.raw.push(text("mod_link", &m.link));
                out.raw.push(text("mod_download", &m.download));
                out.raw.push(int("mod_version", m.version));
                out.raw.push(int("mod_size", m.size));
                out.raw.push(int("mod_type", m.kind));
                out.raw.push(int("mod_dll", m.dll));
            }
        }
    }
    if let Some(p) = players {
        out.players = p.players.iter().map(to_player).collect();
    }
    if let Some(r) = rules {
        out.rules = r
            .rules
            .iter()
            .map(|(k, v)| Rule {
                key: decode_text(k),
                value: decode_text(v),
            })
            .collect();
    }
    out
}

fn to_player(e: &super::packet::PlayerEntry) -> Player {
    let mut p = Player {
        name: decode_text(&e.name),
        score: Some(i64::from(e.score)),
        ..Player::default()
    };
    p.raw.push(int("index", e.index));
    if e.duration.is_finite() && e.duration >= 0.0 {
        // Seconds as a float; milliseconds fit an i64 for any finite f32 below 2^53 ms.
        let ms = (f64::from(e.duration) * 1000.0).min(9.0e15);
        p.raw.push(int("duration_ms", ms as i64));
    }
    if let Some(s) = e.ship {
        p.raw.push(int("deaths", s.deaths));
        p.raw.push(int("money", s.money));
    }
    p
}

#[cfg(test)]
mod tests;
