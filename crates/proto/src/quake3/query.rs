//! Sans-IO Quake III / DarkPlaces queries: [`ServerQuery`] (`getstatus` or `getinfo` to one
//! game server) and [`ListQuery`] (`getservers` / `getserversExt` to a dpmaster-style master).
//!
//! Neither machine reads a clock or touches a socket; see [`crate::query`] for the driving loop.
//! Spec: `docs/protocols/quake3.md` (§2 queries, §3 lists, §5 the client's decisions).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::packet::{FilterOption, Packet, PlayerLine};
use super::{InfoString, Word, decode_text};
use crate::model::{
    ListedServer, Partial, Player, Protocol, RawValue, Rule, ServerInfo, ServerList,
};
use crate::query::{
    Event, ListEvent, QueryConfig, QueryError, QueryEvent, QueryMachine, RetryAction,
    RetrySchedule, Transmit,
};
use crate::wire::DecodeError;

/// The conventional game port of Quake III servers (queries go to the game port itself).
pub const DEFAULT_GAME_PORT: u16 = 27960;

/// The protocol number Quake III Arena 1.32 clients ask masters for.
pub const DEFAULT_PROTOCOL: i32 = 68;

/// After a list datagram without `EOT`, the list is over when nothing more came for this long.
pub const LIST_IDLE: Duration = Duration::from_millis(1000);

/// After a list datagram that ends with `EOT`, wait this long for datagrams the network
/// reordered behind it (and for the rest of a list from a pre-2.0 dpmaster, which ends every
/// datagram with `EOT`).
pub const LIST_EOT_GRACE: Duration = Duration::from_millis(150);

/// Most list datagrams one list may take.
pub const MAX_LIST_DATAGRAMS: usize = 1024;

/// Most distinct servers one list may hold; more are dropped and the list is marked partial.
pub const MAX_LIST_SERVERS: usize = 65_536;

/// What to ask a game server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `getstatus`: every server-info key and the player list.
    Status,
    /// `getinfo`: the short info string only (no players).
    Info,
}

/// Asks one server `getstatus <challenge>` (or `getinfo`) and maps the answer into a
/// [`ServerInfo`] with [`Protocol::Quake3`].
///
/// * Replies are taken only from the target address, and only when the `challenge` key they
///   echo equals the one sent (a reply without the key is taken: the source address is
///   checked; one with another challenge is ignored, as a stray or forged answer).
/// * The request is re-sent after each attempt timeout; when attempts run out (or on
///   [`QueryMachine::abort`]) the query fails with the last decode error, else a timeout.
/// * `ping` is the time from the latest request to the answer.
#[derive(Debug)]
pub struct ServerQuery {
    target: SocketAddr,
    request: Request,
    challenge: Word,
    retry: RetrySchedule,
    send: bool,
    last_error: Option<DecodeError>,
    event: Option<QueryEvent>,
    done: bool,
}

impl ServerQuery {
    /// A query of `target` (the game address: Quake III answers on the game port) with the
    /// challenge `challenge` (the caller draws it at random).
    #[must_use]
    pub fn new(target: SocketAddr, request: Request, challenge: Word, config: QueryConfig) -> Self {
        Self {
            target,
            request,
            challenge,
            retry: RetrySchedule::new(config),
            send: true,
            last_error: None,
            event: None,
            done: false,
        }
    }

    fn finish(&mut self, ev: QueryEvent) {
        self.done = true;
        self.send = false;
        self.retry.stop();
        self.event = Some(ev);
    }

    fn fail(&mut self) {
        let err = self
            .last_error
            .clone()
            .map_or(QueryError::Timeout, QueryError::Decode);
        self.finish(Event::Failed(err));
    }

    fn echoed(&self, info: &InfoString) -> bool {
        info.get(b"challenge")
            .is_none_or(|c| c == self.challenge.as_bytes())
    }
}

impl QueryMachine for ServerQuery {
    type Output = Box<ServerInfo>;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.done || from != self.target {
            return;
        }
        let packet = match Packet::decode(datagram) {
            Ok(p) => p,
            Err(e) => {
                self.last_error = Some(e);
                return;
            }
        };
        let ping = self
            .retry
            .last_sent()
            .map(|t| now.saturating_duration_since(t));
        let mut info = match packet {
            Packet::StatusResponse { info, players } if self.echoed(&info) => {
                to_server_info(&info, Some(&players))
            }
            Packet::InfoResponse { info } if self.echoed(&info) => to_server_info(&info, None),
            Packet::StatusResponse { .. } | Packet::InfoResponse { .. } => {
                self.last_error = Some(DecodeError::Invalid("challenge not echoed"));
                return;
            }
            // Another message (a request echoed back, a list): not an answer.
            _ => return,
        };
        info.ping = ping;
        self.finish(Event::Done(Box::new(info)));
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        match self.retry.on_timeout(now) {
            RetryAction::Resend => self.send = true,
            RetryAction::GiveUp => self.fail(),
            RetryAction::Wait => {}
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.send || self.done {
            return None;
        }
        self.send = false;
        let challenge = Some(self.challenge.clone());
        let packet = match self.request {
            Request::Status => Packet::GetStatus { challenge },
            Request::Info => Packet::GetInfo { challenge },
        };
        packet.encode(buf);
        self.retry.on_send(now);
        Some(Transmit {
            destination: self.target,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done {
            None
        } else {
            self.retry.deadline()
        }
    }

    fn poll_event(&mut self) -> Option<QueryEvent> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.retry.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, _now: Instant) {
        if !self.done {
            self.fail();
        }
    }
}

/// Keys mapped onto the neutral model's fields rather than kept as rules.
const MAPPED_KEYS: [&[u8]; 4] = [b"sv_hostname", b"hostname", b"mapname", b"challenge"];

fn int_key(info: &InfoString, keys: &[&[u8]]) -> Option<i64> {
    keys.iter().find_map(|k| info.get_int(k))
}

fn text_key(info: &InfoString, keys: &[&[u8]]) -> Option<crate::model::Text> {
    keys.iter().find_map(|k| info.get_text(k))
}

/// The answer in the neutral model (spec §5):
///
/// * `name` = `sv_hostname` (status) or `hostname` (info); `map` = `mapname`;
///   `game_type` = Xonotic's game mode from `qcstatus` when sent, else `g_gametype` /
///   `gametype` as the number sent; `version` = `version` or DarkPlaces' `gameversion`;
///   `password` = `g_needpass` ≠ 0 when sent;
/// * players: one per status line, bots included (a line with ping 0 is marked
///   `raw["bot"]`: the protocol has no bot flag, and servers report bots with ping 0);
///   `num_players` = the lines (status) or `clients` (info); `max_players` =
///   `sv_maxclients`;
/// * raw: `gamename`, `protocol`, `qcstatus`, `bots` (DarkPlaces' count), `humans`
///   (`g_humanplayers`) when sent; every other key is a rule, in wire order.
#[must_use]
pub fn to_server_info(info: &InfoString, players: Option<&[PlayerLine]>) -> ServerInfo {
    let mut out = ServerInfo::new(Protocol::Quake3);
    if let Some(t) = text_key(info, &[b"sv_hostname", b"hostname"]) {
        out.name = t;
    }
    if let Some(t) = info.get_text(b"mapname") {
        out.map = t;
    }
    let qcstatus = info.get_text(b"qcstatus");
    let mode = qcstatus
        .as_ref()
        .and_then(|q| q.text.split(':').next().map(str::to_owned))
        .filter(|m| !m.is_empty());
    out.game_type = match mode {
        Some(m) => crate::model::Text::from_utf8_str(&m),
        None => text_key(info, &[b"g_gametype", b"gametype"]).unwrap_or_default(),
    };
    if let Some(t) = text_key(info, &[b"version", b"gameversion"]) {
        out.version = t;
    }
    out.password = info.get_int(b"g_needpass").map(|n| n != 0);
    out.max_players = clamp_u32(info.get_int(b"sv_maxclients"));
    match players {
        Some(lines) => {
            out.players = lines.iter().map(to_player).collect();
            out.num_players = u32::try_from(lines.len()).unwrap_or(u32::MAX);
        }
        None => out.num_players = clamp_u32(info.get_int(b"clients")),
    }
    for key in [&b"gamename"[..], b"qcstatus"] {
        if let Some(t) = info.get_text(key) {
            out.raw
                .push((String::from_utf8_lossy(key).into_owned(), RawValue::Text(t)));
        }
    }
    for (key, name) in [
        (&b"protocol"[..], "protocol"),
        (b"bots", "bots"),
        (b"g_humanplayers", "humans"),
    ] {
        if let Some(n) = int_key(info, &[key]) {
            out.raw.push((name.to_owned(), RawValue::Int(n)));
        }
    }
    for (k, v) in info.iter() {
        if MAPPED_KEYS.iter().any(|m| m.eq_ignore_ascii_case(k)) {
            continue;
        }
        out.rules.push(Rule {
            key: decode_text(k),
            value: decode_text(v),
        });
    }
    out
}

fn clamp_u32(n: Option<i64>) -> u32 {
    n.map_or(0, |n| u32::try_from(n.max(0)).unwrap_or(u32::MAX))
}

fn to_player(line: &PlayerLine) -> Player {
    let mut p = Player {
        name: decode_text(line.name()),
        score: Some(i64::from(line.score)),
        ping_ms: u32::try_from(line.ping).ok(),
        ..Player::default()
    };
    if line.ping == 0 {
        p.raw.push(("bot".to_owned(), RawValue::Bool(true)));
    }
    if !line.extra().is_empty() {
        p.raw.push((
            "extra".to_owned(),
            RawValue::Text(decode_text(line.extra())),
        ));
    }
    p
}

// ---------------------------------------------------------------------------------------------
// ListQuery
// ---------------------------------------------------------------------------------------------

/// What to ask a master for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// The game name: with it the request is `getserversExt` (IPv4 and IPv6); without,
    /// `getservers <protocol>` (IPv4 only, the anonymous games of §3.5).
    pub game: Option<Word>,
    /// The protocol number of the game's clients (68 for Quake III Arena 1.32).
    pub protocol: i32,
    /// List empty servers too.
    pub empty: bool,
    /// List full servers too.
    pub full: bool,
    /// `getserversExt` only: which families to list (both when neither is set).
    pub ipv4: bool,
    /// See `ipv4`.
    pub ipv6: bool,
    /// Only servers of this gametype.
    pub gametype: Option<Word>,
}

impl ListRequest {
    /// Every server (empty and full too) of `game` (or of the anonymous games) at `protocol`.
    #[must_use]
    pub fn everything(game: Option<Word>, protocol: i32) -> Self {
        Self {
            game,
            protocol,
            empty: true,
            full: true,
            ipv4: false,
            ipv6: false,
            gametype: None,
        }
    }

    /// The request datagram.
    #[must_use]
    pub fn packet(&self) -> Packet {
        let mut options = Vec::new();
        if self.game.is_some() {
            if self.ipv4 {
                options.push(FilterOption::Ipv4);
            }
            if self.ipv6 {
                options.push(FilterOption::Ipv6);
            }
        }
        if self.empty {
            options.push(FilterOption::Empty);
        }
        if self.full {
            options.push(FilterOption::Full);
        }
        if let Some(g) = &self.gametype {
            options.push(FilterOption::Gametype(g.clone()));
        }
        match &self.game {
            Some(game) => Packet::GetServersExt {
                game: game.clone(),
                protocol: self.protocol,
                options,
            },
            None => Packet::GetServers {
                game: None,
                protocol: self.protocol,
                options,
            },
        }
    }
}

/// Asks a master for its list and collects every datagram of the answer (spec §3.6, §5):
///
/// * entries are read by fixed length (see [`super::packet::ServerList`]); duplicates across
///   datagrams are removed, the order of first appearance kept; entries with port 0 or an
///   unspecified address are dropped;
/// * once a datagram ending with `EOT` came, the list is complete [`LIST_EOT_GRACE`] after
///   the last datagram (time for reordered ones); before that, [`LIST_IDLE`] after the last
///   datagram (a master that never sends `EOT`; the list is then marked partial);
/// * at most [`MAX_LIST_DATAGRAMS`] datagrams and [`MAX_LIST_SERVERS`] servers: beyond them
///   the list is marked partial;
/// * the request is re-sent after each attempt timeout until the first datagram comes.
#[derive(Debug)]
pub struct ListQuery {
    master: SocketAddr,
    request: ListRequest,
    retry: RetrySchedule,
    send: bool,
    seen: HashSet<SocketAddr>,
    servers: Vec<ListedServer>,
    datagrams: usize,
    eot: bool,
    overflow: bool,
    dropped: usize,
    wake: Option<Instant>,
    last_error: Option<DecodeError>,
    event: Option<ListEvent>,
    done: bool,
}

impl ListQuery {
    /// A list query to `master`.
    #[must_use]
    pub fn new(master: SocketAddr, request: ListRequest, config: QueryConfig) -> Self {
        Self {
            master,
            request,
            retry: RetrySchedule::new(config),
            send: true,
            seen: HashSet::new(),
            servers: Vec::new(),
            datagrams: 0,
            eot: false,
            overflow: false,
            dropped: 0,
            wake: None,
            last_error: None,
            event: None,
            done: false,
        }
    }

    fn finish(&mut self, aborted: bool) {
        if self.done {
            return;
        }
        self.done = true;
        self.send = false;
        self.retry.stop();
        self.wake = None;
        if self.datagrams == 0 {
            let err = self
                .last_error
                .clone()
                .map_or(QueryError::Timeout, QueryError::Decode);
            self.event = Some(Event::Failed(err));
            return;
        }
        let reason = if self.overflow {
            Some(format!(
                "the list exceeded {MAX_LIST_SERVERS} servers or {MAX_LIST_DATAGRAMS} datagrams"
            ))
        } else if aborted && !self.eot {
            Some("aborted before the list was complete".to_owned())
        } else if !self.eot {
            Some("the list ended without EOT".to_owned())
        } else {
            None
        };
        self.event = Some(Event::Done(ServerList {
            servers: std::mem::take(&mut self.servers),
            partial: reason.map(|reason| Partial { reason }),
        }));
    }

    fn on_list(&mut self, now: Instant, list: super::packet::ServerList) {
        if self.datagrams >= MAX_LIST_DATAGRAMS {
            self.overflow = true;
            return;
        }
        self.datagrams += 1;
        self.send = false;
        self.retry.stop();
        for addr in list.servers {
            if addr.port() == 0 || addr.ip().is_unspecified() {
                self.dropped += 1;
                continue;
            }
            if self.seen.len() >= MAX_LIST_SERVERS {
                self.overflow = true;
                break;
            }
            if self.seen.insert(addr) {
                self.servers.push(ListedServer {
                    address: addr,
                    query_address: None,
                });
            }
        }
        self.eot |= list.eot;
        // Once EOT came, what follows is only reordered datagrams: the short wait applies.
        let wait = if self.eot { LIST_EOT_GRACE } else { LIST_IDLE };
        self.wake = now.checked_add(wait);
    }
}

impl QueryMachine for ListQuery {
    type Output = ServerList;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.done || from != self.master {
            return;
        }
        match Packet::decode(datagram) {
            Ok(Packet::ServerList(list)) => self.on_list(now, list),
            Ok(_) => {}
            Err(e) => self.last_error = Some(e),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        if self.wake.is_some_and(|w| now >= w) {
            self.finish(false);
            return;
        }
        if self.datagrams == 0 {
            match self.retry.on_timeout(now) {
                RetryAction::Resend => self.send = true,
                RetryAction::GiveUp => self.finish(false),
                RetryAction::Wait => {}
            }
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.send || self.done {
            return None;
        }
        self.send = false;
        self.request.packet().encode(buf);
        self.retry.on_send(now);
        Some(Transmit {
            destination: self.master,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done {
            return None;
        }
        self.wake.or(self.retry.deadline())
    }

    fn poll_event(&mut self) -> Option<ListEvent> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.retry.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, _now: Instant) {
        self.finish(true);
    }
}

#[cfg(test)]
mod tests;
