//! Sans-IO A2S query of one game server: INFO, then PLAYER and RULES, each through its
//! challenge, split replies reassembled (spec §8).
//!
//! The machine follows [`crate::query::QueryMachine`]; it reads no clock and opens no socket.
//! It does not know which [`Protocol`] value names A2S in the neutral model (the shared enum
//! has no such variant yet): the caller passes the tag to put in [`ServerInfo::protocol`].

use std::borrow::Cow;
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

/// Challenge rounds allowed for A2S_INFO: servers that want one ask once; a second request
/// for a challenge means the server does not accept ours.
pub const MAX_INFO_CHALLENGES: u32 = 1;

/// Challenge rounds allowed for A2S_PLAYER and A2S_RULES: the first request reuses the
/// challenge the server gave for INFO (if any), which it may replace once more.
pub const MAX_LIST_CHALLENGES: u32 = 2;

/// What to ask after INFO.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Info,
    Players,
    Rules,
}

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Self::Info => "INFO",
            Self::Players => "PLAYER",
            Self::Rules => "RULES",
        }
    }
}

#[derive(Debug, Clone)]
enum InfoReply {
    Source(Box<Info>),
    GoldSrc(Box<GoldSrcInfo>),
}

/// Asks one server INFO (then PLAYER and RULES as requested) and maps the answers into a
/// [`ServerInfo`].
///
/// * Datagrams from other addresses are ignored; split replies are reassembled (expiry one
///   attempt timeout after their first part).
/// * Each request is re-sent on the shared [`RetrySchedule`]; a challenge reply starts a
///   fresh schedule for the repeated request.
/// * INFO failing fails the query; PLAYER or RULES failing (or a reply cut short) leaves a
///   result marked partial.
/// * `ping` is the time from the latest INFO request to the INFO reply.
#[derive(Debug)]
pub struct ServerQuery {
    target: SocketAddr,
    tag: Protocol,
    request: Request,
    config: QueryConfig,
    stage: Stage,
    challenge: Option<u32>,
    challenges: u32,
    retry: RetrySchedule,
    send: bool,
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
            stage: Stage::Info,
            challenge: None,
            challenges: 0,
            retry: RetrySchedule::new(config),
            send: true,
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

    /// Send the current stage's request again from a fresh schedule.
    fn restart_stage(&mut self) {
        self.retry = RetrySchedule::new(self.config);
        self.send = true;
    }

    fn on_challenge(&mut self, c: u32) {
        if self.challenge == Some(c) {
            // The answer to a re-sent request: the same challenge again.
            return;
        }
        let limit = match self.stage {
            Stage::Info => MAX_INFO_CHALLENGES,
            Stage::Players | Stage::Rules => MAX_LIST_CHALLENGES,
        };
        if self.challenges >= limit {
            if self.stage == Stage::Info {
                self.finish(Event::Failed(QueryError::Rejected(
                    "the server asked for a challenge again",
                )));
            } else {
                self.notes.push(format!(
                    "the server kept changing its {} challenge",
                    self.stage.name()
                ));
                self.advance();
            }
            return;
        }
        self.challenges += 1;
        self.challenge = Some(c);
        self.restart_stage();
    }

    fn on_packet(&mut self, now: Instant, packet: Packet) {
        match (self.stage, packet) {
            (_, Packet::Challenge(c)) => self.on_challenge(c),
            (Stage::Info, Packet::Info(i)) => self.on_info(now, InfoReply::Source(i)),
            (Stage::Info, Packet::GoldSrcInfo(i)) => self.on_info(now, InfoReply::GoldSrc(i)),
            (Stage::Players, Packet::Players(p)) => {
                if p.truncated {
                    self.notes.push("the PLAYER reply was cut short".to_owned());
                }
                self.players = Some(p);
                self.advance();
            }
            (Stage::Rules, Packet::Rules(r)) => {
                if r.truncated {
                    self.notes.push("the RULES reply was cut short".to_owned());
                }
                self.rules = Some(r);
                self.advance();
            }
            // A late reply to an earlier stage, a second INFO, or a request: not ours now.
            _ => {}
        }
    }

    fn on_info(&mut self, now: Instant, info: InfoReply) {
        self.ping = self
            .retry
            .last_sent()
            .map(|t| now.saturating_duration_since(t));
        self.info = Some(info);
        self.advance();
    }

    /// Move to the next stage the request wants, or finish.
    fn advance(&mut self) {
        self.retry.stop();
        self.send = false;
        self.split_note = None;
        let next = match self.stage {
            Stage::Info if self.request.players => Some(Stage::Players),
            Stage::Info | Stage::Players if self.request.rules => Some(Stage::Rules),
            _ => None,
        };
        match next {
            Some(stage) => {
                self.stage = stage;
                // The INFO challenge is usually the client's challenge for every query.
                self.challenges = 0;
                self.restart_stage();
            }
            None => self.finish_done(),
        }
    }

    fn give_up(&mut self) {
        let mut reason = format!("no {} reply", self.stage.name());
        if let Some(note) = self.split_note.take() {
            reason.push_str(" (");
            reason.push_str(&note);
            reason.push(')');
        }
        if self.info.is_none() {
            let err = self
                .last_error
                .clone()
                .map_or(QueryError::Timeout, QueryError::Decode);
            self.finish(Event::Failed(err));
            return;
        }
        self.notes.push(reason);
        self.advance();
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
        if !self.send || self.done {
            return None;
        }
        self.send = false;
        let packet = match self.stage {
            Stage::Info => Packet::InfoRequest {
                challenge: self.challenge,
            },
            Stage::Players => Packet::PlayerRequest {
                challenge: self.challenge.unwrap_or(NO_CHALLENGE),
            },
            Stage::Rules => Packet::RulesRequest {
                challenge: self.challenge.unwrap_or(NO_CHALLENGE),
            },
        };
        packet.encode(buf);
        self.retry.on_send(now);
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
            self.notes
                .push(format!("aborted before the {} reply", self.stage.name()));
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
