//! Sans-IO GameAgent queries: [`ServerQuery`] (status `02` + players `03` of one server) and
//! [`MasterListQuery`] (`e` to a master, `s` datagrams back).
//!
//! Neither machine reads a clock or touches a socket; see [`crate::query`] for the driving loop.

use std::collections::{BTreeMap, HashSet};
use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::packet::{
    CountReply, ListReply, PlayerRecords, PlayersDatagram, ServerRequest, StatusReply,
};
use super::{MAX_LIST_RECORDS_PER_DATAGRAM, MAX_PLAYER_RECORDS, decode_text, name_mark_reason};
use crate::model::{
    ListedServer, Partial, Player, Protocol, RawValue, Rule, ServerInfo, ServerList,
};
use crate::query::{
    Event, QueryConfig, QueryError, QueryMachine, RetryAction, RetrySchedule, Transmit,
};
use crate::wire::{DecodeError, parse_decimal};

/// After the `04` trailer arrived without the header datagram, wait this long for a reordered
/// head before finishing as partial (spec §9.3.3).
pub const PLAYERS_REORDER_GRACE: Duration = Duration::from_millis(200);

/// Most player datagrams accepted for one reply (spec §9.3.3).
pub const MAX_PLAYER_DATAGRAMS: usize = 16;

/// Most player-reply bytes accepted for one reply (spec §9.3.3).
pub const MAX_PLAYER_BYTES: usize = 32 * 1024;

/// A list is complete this long after its last `s` datagram (spec §9.3.1).
pub const LIST_IDLE: Duration = Duration::from_millis(1500);

/// After an `s` datagram with fewer than 170 records (the stock master's last one), the list is
/// complete this much sooner than [`LIST_IDLE`]: only a reordered earlier datagram can follow.
pub const LIST_SHORT_DATAGRAM_GRACE: Duration = Duration::from_millis(200);

/// Most `s` datagrams accepted for one list (spec §9.3.1).
pub const MAX_LIST_DATAGRAMS: usize = 256;

/// Most records accepted for one list (spec §9.3.1).
pub const MAX_LIST_RECORDS: usize = 16_384;

/// The query port of a game server: game port + 1 (`None` for game port 65535).
#[must_use]
pub fn query_address(game: SocketAddr) -> Option<SocketAddr> {
    let port = game.port().checked_add(1)?;
    Some(SocketAddr::new(game.ip(), port))
}

/// The game address of a query port: query port − 1 (`None` for query port 0).
#[must_use]
pub fn game_address(query: SocketAddr) -> Option<SocketAddr> {
    let port = query.port().checked_sub(1)?;
    Some(SocketAddr::new(query.ip(), port))
}

// ---------------------------------------------------------------------------------------------
// ServerQuery
// ---------------------------------------------------------------------------------------------

/// Queries one server's status (`02`) and player list (`03`) on its query port and merges them
/// into a [`ServerInfo`] with [`Protocol::GameAgent`].
///
/// * Both requests go out together; each retry re-sends only what is still missing.
/// * Replies are accepted only from the exact query address; unsolicited, duplicate, late and
///   undecodable datagrams are ignored (the last decode error is reported if nothing useful
///   came).
/// * `ping` is the time from the most recent `02` to the status reply.
/// * Done when the status arrived and the player list is complete: both the header datagram
///   and the `04` trailer arrived (one datagram may be both). If the trailer came without the
///   header, the machine waits [`PLAYERS_REORDER_GRACE`] more, then finishes partial.
/// * When attempts run out or on [`QueryMachine::abort`]: a result marked partial if the
///   status or any player datagram arrived, otherwise [`QueryError::Timeout`] (or
///   [`QueryError::Decode`] when only garbage came).
#[derive(Debug)]
pub struct ServerQuery {
    target: Option<SocketAddr>,
    retry: RetrySchedule,
    send_status: bool,
    send_players: bool,
    attempt_pending: bool,
    status_sent_at: Option<Instant>,
    status: Option<(StatusReply, Duration)>,
    players: PlayerState,
    last_error: Option<DecodeError>,
    grace: Option<Instant>,
    grace_over: bool,
    event: Option<Event<Box<ServerInfo>>>,
    done: bool,
}

#[derive(Debug, Default)]
struct PlayerState {
    header: Option<u32>,
    trailer: bool,
    datagrams: usize,
    bytes: usize,
    records: BTreeMap<u32, super::packet::PlayerRecord>,
    gamespy: Vec<Vec<u8>>,
    overflow: bool,
}

impl PlayerState {
    fn any(&self) -> bool {
        self.datagrams > 0
    }

    fn complete(&self) -> bool {
        self.header.is_some() && self.trailer
    }
}

impl ServerQuery {
    /// A query for the server whose **game** address is `game`; requests go to game port + 1.
    /// For game port 65535 (no query port) the query fails at once with
    /// [`QueryError::Rejected`].
    #[must_use]
    pub fn new(game: SocketAddr, config: QueryConfig) -> Self {
        let target = query_address(game);
        let mut q = Self {
            target,
            retry: RetrySchedule::new(config),
            send_status: true,
            send_players: true,
            attempt_pending: true,
            status_sent_at: None,
            status: None,
            players: PlayerState::default(),
            last_error: None,
            grace: None,
            grace_over: false,
            event: None,
            done: false,
        };
        if target.is_none() {
            q.finish_with(Event::Failed(QueryError::Rejected(
                "game port has no query port",
            )));
        }
        q
    }

    /// The query address datagrams go to and are accepted from.
    #[must_use]
    pub fn target(&self) -> Option<SocketAddr> {
        self.target
    }

    fn finish_with(&mut self, ev: Event<Box<ServerInfo>>) {
        self.done = true;
        self.send_status = false;
        self.send_players = false;
        self.retry.stop();
        self.grace = None;
        self.event = Some(ev);
    }

    fn check_done(&mut self) {
        if self.done || self.status.is_none() {
            return;
        }
        if self.players.complete() {
            let info = self.build(None);
            self.finish_with(Event::Done(Box::new(info)));
        } else if self.grace_over {
            let info = self.build(Some("player list header datagram missing"));
            self.finish_with(Event::Done(Box::new(info)));
        }
    }

    fn give_up(&mut self) {
        if self.done {
            return;
        }
        if self.status.is_some() || self.players.any() {
            let reason = match (
                self.status.is_some(),
                self.players.header,
                self.players.trailer,
            ) {
                (false, _, _) => "no status reply",
                (true, None, false) if !self.players.any() => "no player list reply",
                (true, None, _) => "player list header datagram missing",
                (true, Some(_), _) => "player list trailer datagram missing",
            };
            let info = self.build(Some(reason));
            self.finish_with(Event::Done(Box::new(info)));
        } else {
            let err = self
                .last_error
                .clone()
                .map_or(QueryError::Timeout, QueryError::Decode);
            self.finish_with(Event::Failed(err));
        }
    }

    fn on_status(&mut self, now: Instant, s: StatusReply) {
        if self.status.is_some() {
            return;
        }
        let sent = self.status_sent_at.unwrap_or(now);
        self.status = Some((s, now.saturating_duration_since(sent)));
        self.send_status = false;
    }

    fn on_players(&mut self, now: Instant, len: usize, d: PlayersDatagram) {
        let p = &mut self.players;
        if p.datagrams >= MAX_PLAYER_DATAGRAMS || p.bytes.saturating_add(len) > MAX_PLAYER_BYTES {
            p.overflow = true;
            return;
        }
        p.datagrams += 1;
        p.bytes += len;
        if let Some(n) = d.count {
            p.header.get_or_insert(n);
        }
        p.trailer |= d.trailer;
        match d.records {
            PlayerRecords::Stock(recs) => {
                for r in recs {
                    // Duplicates (re-sent replies) keep the first copy.
                    p.records.entry(r.slot()).or_insert(r);
                }
            }
            PlayerRecords::GameSpy(raw) => p.gamespy.push(raw),
        }
        if p.complete() {
            self.send_players = false;
            self.grace = None;
        } else if p.trailer && self.grace.is_none() && !self.grace_over {
            self.grace = now.checked_add(PLAYERS_REORDER_GRACE);
        }
    }

    fn build(&self, partial: Option<&str>) -> ServerInfo {
        let mut info = ServerInfo::new(Protocol::GameAgent);
        if let Some((s, ping)) = &self.status {
            info.ping = Some(*ping);
            info.num_players = s.players();
            info.max_players = s.max_players();
            for p in s.pairs() {
                let value = decode_text(&p.value);
                match p.key.as_slice() {
                    b"players" | b"maxplayers" => {}
                    b"level" => info.map = value,
                    b"gametype" => info.game_type = value,
                    b"version" => info.version = value,
                    b"gamename" => info
                        .raw
                        .push(("gamename".to_owned(), RawValue::Text(value))),
                    _ => info.rules.push(Rule {
                        key: decode_text(&p.key),
                        value,
                    }),
                }
            }
            if let Some(name) = s.sessionname() {
                info.name = decode_text(name);
            }
        }
        if let Some(n) = self.players.header {
            info.raw
                .push(("players_header_count".to_owned(), RawValue::Int(n.into())));
        }
        info.players = self.players.records.values().map(to_player).collect();
        for raw in &self.players.gamespy {
            info.players.extend(gamespy_players(raw));
        }
        info.partial = partial.map(|r| Partial {
            reason: r.to_owned(),
        });
        if self.players.overflow && info.partial.is_none() {
            info.partial = Some(Partial {
                reason: "player list exceeded its limits".to_owned(),
            });
        }
        info
    }
}

/// One player record in the neutral model: `name` through [`decode_text`] (marks give an empty
/// `plain`, with the reason in `raw["invalid_name"]`), `score` = frags, `ping_ms` = the
/// client-reported ping (negative values dropped), `raw["slot"]` = the slot index.
fn to_player(r: &super::packet::PlayerRecord) -> Player {
    let mut p = Player {
        name: decode_text(r.name()),
        score: Some(r.frags().into()),
        ping_ms: u32::try_from(r.ping()).ok(),
        ..Player::default()
    };
    p.raw
        .push(("slot".to_owned(), RawValue::Int(r.slot().into())));
    if let Some(reason) = name_mark_reason(r.name()) {
        p.raw.push((
            "invalid_name".to_owned(),
            RawValue::Text(crate::model::Text::from_utf8_str(reason)),
        ));
    }
    p
}

/// Players from GameSpy-style `\player_<i>\name\frags_<i>\n\ping_<i>\n` text inside the
/// players frame (Classics Patch on retail builds, spec §7 item 12). Unknown keys are skipped;
/// at most [`MAX_PLAYER_RECORDS`] distinct slots are kept.
fn gamespy_players(raw: &[u8]) -> Vec<Player> {
    let mut by_slot: BTreeMap<u32, Player> = BTreeMap::new();
    let mut tokens = raw.split(|&b| b == b'\\').skip(1);
    while let (Some(key), Some(value)) = (tokens.next(), tokens.next()) {
        let Some((field, slot)) = split_slot(key) else {
            continue;
        };
        if by_slot.len() >= MAX_PLAYER_RECORDS && !by_slot.contains_key(&slot) {
            continue;
        }
        let p = by_slot.entry(slot).or_insert_with(|| {
            let mut p = Player::default();
            p.raw.push(("slot".to_owned(), RawValue::Int(slot.into())));
            p
        });
        let num = || parse_decimal(value, "gamespy player field").ok();
        match field {
            b"player" => p.name = decode_text(value),
            b"frags" => p.score = num(),
            b"ping" => p.ping_ms = num().and_then(|n| u32::try_from(n).ok()),
            _ => {}
        }
    }
    by_slot.into_values().collect()
}

/// `frags_12` -> (`frags`, 12).
fn split_slot(key: &[u8]) -> Option<(&[u8], u32)> {
    let pos = key.iter().rposition(|&b| b == b'_')?;
    let (field, digits) = key.split_at_checked(pos)?;
    let digits = digits.get(1..)?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = parse_decimal(digits, "gamespy player slot").ok()?;
    Some((field, u32::try_from(n).ok()?))
}

impl QueryMachine for ServerQuery {
    type Output = Box<ServerInfo>;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.done || Some(from) != self.target {
            return;
        }
        match datagram.first() {
            Some(&super::packet::HEARTBEAT) => match StatusReply::decode(datagram) {
                Ok(s) => self.on_status(now, s),
                Err(e) => self.last_error = Some(e),
            },
            Some(_) => match PlayersDatagram::decode(datagram) {
                Ok(d) => self.on_players(now, datagram.len(), d),
                Err(e) => self.last_error = Some(e),
            },
            None => self.last_error = Some(DecodeError::Truncated("reply")),
        }
        self.check_done();
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        if self.grace.is_some_and(|g| now >= g) {
            self.grace = None;
            self.grace_over = true;
            self.check_done();
            if self.done {
                return;
            }
        }
        match self.retry.on_timeout(now) {
            RetryAction::Resend => {
                self.attempt_pending = true;
                self.send_status = self.status.is_none();
                self.send_players = !self.players.complete() && !self.grace_over;
            }
            RetryAction::GiveUp => self.give_up(),
            RetryAction::Wait => {}
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let destination = self.target?;
        let req = if self.send_status {
            self.send_status = false;
            self.status_sent_at = Some(now);
            ServerRequest::Status
        } else if self.send_players {
            self.send_players = false;
            ServerRequest::Players
        } else {
            return None;
        };
        if self.attempt_pending {
            // The retry timer is armed once per attempt, by its first datagram.
            self.attempt_pending = false;
            self.retry.on_send(now);
        }
        req.encode(buf);
        Some(Transmit { destination })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done {
            return None;
        }
        match (self.retry.deadline(), self.grace) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_event(&mut self) -> Option<Event<Box<ServerInfo>>> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.retry.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, _now: Instant) {
        self.give_up();
    }
}

// ---------------------------------------------------------------------------------------------
// Count query helper
// ---------------------------------------------------------------------------------------------

/// Decode the reply to a `04` request: the caller knows it sent `04`, so a datagram starting
/// with `04` is the count, not a players trailer (spec §7 item 15).
pub fn decode_count_reply(datagram: &[u8]) -> Result<u32, DecodeError> {
    CountReply::decode(datagram).map(|c| c.0)
}

// ---------------------------------------------------------------------------------------------
// MasterListQuery
// ---------------------------------------------------------------------------------------------

/// Fetches the server list from a GameAgent master: sends `e`, collects `s` datagrams.
///
/// Completion: the protocol has no count and no end marker (spec §2.3), so the list is taken as
/// complete [`LIST_IDLE`] after the last `s` datagram, or [`LIST_SHORT_DATAGRAM_GRACE`] after a
/// datagram with fewer than 170 records (the stock master fills every datagram but the last),
/// whichever comes first. Until the first `s` arrives, `e` is re-sent every
/// `attempt_timeout` up to `retries` times; then the query fails with
/// [`QueryError::Timeout`] (or [`QueryError::Decode`] if only garbage came).
///
/// Records: the address is the game address exactly as listed (`query_address` is `None`: the
/// query port is game port + 1). Duplicates, port 0, 0.0.0.0 and 255.255.255.255 are
/// dropped. Datagrams are accepted only from the master's exact address. A trailing partial
/// record, or hitting [`MAX_LIST_DATAGRAMS`] / [`MAX_LIST_RECORDS`], marks the list partial.
#[derive(Debug)]
pub struct MasterListQuery {
    master: SocketAddr,
    retry: RetrySchedule,
    send: bool,
    seen: HashSet<SocketAddrV4>,
    list: ServerList,
    datagrams: usize,
    got_any: bool,
    partial_records: usize,
    overflow: bool,
    last_error: Option<DecodeError>,
    last_at: Option<Instant>,
    short_at: Option<Instant>,
    event: Option<Event<ServerList>>,
    done: bool,
}

impl MasterListQuery {
    /// A list query to `master` (normally UDP port [`super::MASTER_PORT`]).
    #[must_use]
    pub fn new(master: SocketAddr, config: QueryConfig) -> Self {
        Self {
            master,
            retry: RetrySchedule::new(config),
            send: true,
            seen: HashSet::new(),
            list: ServerList::default(),
            datagrams: 0,
            got_any: false,
            partial_records: 0,
            overflow: false,
            last_error: None,
            last_at: None,
            short_at: None,
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
        if !self.got_any {
            let err = self
                .last_error
                .clone()
                .map_or(QueryError::Timeout, QueryError::Decode);
            self.event = Some(Event::Failed(err));
            return;
        }
        let mut list = std::mem::take(&mut self.list);
        let reason = if self.overflow {
            Some("list exceeded its limits".to_owned())
        } else if self.partial_records > 0 {
            Some(format!(
                "{} truncated list record(s) ignored",
                self.partial_records
            ))
        } else if aborted {
            Some("aborted before the list was complete".to_owned())
        } else {
            None
        };
        list.partial = reason.map(|reason| Partial { reason });
        self.event = Some(Event::Done(list));
    }

    fn on_list(&mut self, now: Instant, l: &ListReply) {
        if self.datagrams >= MAX_LIST_DATAGRAMS {
            self.overflow = true;
            return;
        }
        self.datagrams += 1;
        self.got_any = true;
        self.retry.stop();
        self.send = false;
        if !l.partial_record().is_empty() {
            self.partial_records += 1;
        }
        for &s in l.servers() {
            if s.port() == 0 || s.ip().is_unspecified() || s.ip().is_broadcast() {
                continue;
            }
            if self.seen.len() >= MAX_LIST_RECORDS {
                self.overflow = true;
                break;
            }
            if self.seen.insert(s) {
                self.list.servers.push(ListedServer {
                    address: SocketAddr::V4(s),
                    query_address: None,
                });
            }
        }
        self.last_at = Some(now);
        if l.servers().len() < MAX_LIST_RECORDS_PER_DATAGRAM && self.short_at.is_none() {
            self.short_at = Some(now);
        }
    }

    /// When the list counts as complete (see the type docs).
    fn complete_at(&self) -> Option<Instant> {
        let idle = self.last_at.and_then(|t| t.checked_add(LIST_IDLE));
        let short = self
            .short_at
            .and_then(|t| t.checked_add(LIST_SHORT_DATAGRAM_GRACE));
        match (idle, short) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl QueryMachine for MasterListQuery {
    type Output = ServerList;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.done || from != self.master {
            return;
        }
        match ListReply::decode(datagram) {
            Ok(l) => self.on_list(now, &l),
            Err(e) => self.last_error = Some(e),
        }
        if self.overflow {
            self.finish(false);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        if self.complete_at().is_some_and(|t| now >= t) {
            self.finish(false);
            return;
        }
        match self.retry.on_timeout(now) {
            RetryAction::Resend => self.send = true,
            RetryAction::GiveUp => self.finish(false),
            RetryAction::Wait => {}
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.send {
            return None;
        }
        self.send = false;
        self.retry.on_send(now);
        buf.push(super::packet::LIST_REQUEST);
        Some(Transmit {
            destination: self.master,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done {
            return None;
        }
        self.complete_at().or(self.retry.deadline())
    }

    fn poll_event(&mut self) -> Option<Event<ServerList>> {
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
mod tests {
    use super::*;
    use crate::gameagent::packet::{PlayerRecord, PlayersReply, StatusFields, encode_list};
    use std::net::Ipv4Addr;

    const GAME: &str = "10.0.0.5:25600";
    const QUERY: &str = "10.0.0.5:25601";
    const MASTER: &str = "10.0.0.9:9005";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn cfg(retries: u32) -> QueryConfig {
        QueryConfig {
            attempt_timeout: ms(1000),
            retries,
        }
    }

    fn drain<M: QueryMachine>(m: &mut M, now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some(t) = m.poll_transmit(now, &mut buf) {
            out.push((t.destination, std::mem::take(&mut buf)));
        }
        out
    }

    fn status_bytes() -> Vec<u8> {
        let mut out = Vec::new();
        StatusReply::stock(&StatusFields {
            players: 2,
            max_players: 16,
            level: b"Yodeller".to_vec(),
            gametype: b"Fragmatch".to_vec(),
            version: b"1.10".to_vec(),
            gamename: b"serioussamse".to_vec(),
            sessionname: b"^cff0000Red Server".to_vec(),
        })
        .encode(&mut out);
        out
    }

    /// Players in slots 0..n, names long enough to split into several datagrams.
    fn players_datagrams(n: u32, name_len: usize) -> Vec<Vec<u8>> {
        PlayersReply {
            count: n,
            records: (0..n)
                .map(|i| PlayerRecord::stock(i, &vec![b'a'; name_len], i as i32 - 1, 50))
                .collect(),
        }
        .encode_datagrams()
    }

    fn done(ev: Option<Event<Box<ServerInfo>>>) -> Box<ServerInfo> {
        match ev {
            Some(Event::Done(info)) => info,
            other => panic!("expected Done, got {other:?}"),
        }
    }

    #[test]
    fn server_query_sends_status_and_players_to_query_port() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(1));
        let tx = drain(&mut q, t0);
        assert_eq!(tx, vec![(addr(QUERY), vec![2]), (addr(QUERY), vec![3])]);
        assert_eq!(q.poll_timeout(), Some(t0 + ms(1000)));
        assert_eq!(q.poll_event(), None);
    }

    #[test]
    fn server_query_completes_on_status_and_trailer() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(1));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(40), addr(QUERY), &status_bytes());
        assert_eq!(q.poll_event(), None);
        for dg in players_datagrams(2, 10) {
            q.handle_datagram(t0 + ms(45), addr(QUERY), &dg);
        }
        let info = done(q.poll_event());
        assert_eq!(info.protocol, Protocol::GameAgent);
        assert_eq!(info.ping, Some(ms(40)));
        assert_eq!(info.name.plain, "Red Server");
        assert_eq!(info.map.text, "Yodeller");
        assert_eq!(info.game_type.text, "Fragmatch");
        assert_eq!(info.version.text, "1.10");
        assert_eq!((info.num_players, info.max_players), (2, 16));
        assert_eq!(info.players.len(), 2);
        assert_eq!(info.players[0].score, Some(-1));
        assert_eq!(info.players[1].ping_ms, Some(50));
        assert_eq!(info.partial, None);
        assert_eq!(q.poll_timeout(), None);
        assert_eq!(q.poll_event(), None);
        assert!(drain(&mut q, t0 + ms(50)).is_empty());
    }

    #[test]
    fn server_query_reassembles_in_any_order_with_duplicates() {
        let t0 = Instant::now();
        let mut dgs = players_datagrams(16, 200);
        assert_eq!(dgs.len(), 2);
        dgs.reverse();
        let mut q = ServerQuery::new(addr(GAME), cfg(1));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(5), addr(QUERY), &dgs[0]);
        q.handle_datagram(t0 + ms(6), addr(QUERY), &dgs[0]);
        q.handle_datagram(t0 + ms(7), addr(QUERY), &dgs[1]);
        assert_eq!(q.poll_event(), None, "status still missing");
        q.handle_datagram(t0 + ms(8), addr(QUERY), &status_bytes());
        q.handle_datagram(t0 + ms(9), addr(QUERY), &status_bytes());
        let info = done(q.poll_event());
        let slots: Vec<_> = info.players.iter().map(|p| p.raw[0].1.clone()).collect();
        assert_eq!(slots.len(), 16);
        assert_eq!(slots[15], RawValue::Int(15));
        assert_eq!(info.partial, None);
    }

    #[test]
    fn server_query_ignores_other_sources_and_garbage() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(0));
        let _ = drain(&mut q, t0);
        // From the game port, not the query port: ignored.
        q.handle_datagram(t0 + ms(1), addr(GAME), &status_bytes());
        q.handle_datagram(t0 + ms(1), addr("10.0.0.6:25601"), &status_bytes());
        q.handle_datagram(t0 + ms(2), addr(QUERY), b"");
        q.handle_datagram(t0 + ms(2), addr(QUERY), b"\xffgarbage");
        assert_eq!(q.poll_event(), None);
        q.handle_timeout(t0 + ms(1000));
        assert_eq!(
            q.poll_event(),
            Some(Event::Failed(QueryError::Decode(
                DecodeError::Unterminated("player key")
            )))
        );
    }

    #[test]
    fn server_query_retries_zero_sends_once() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(0));
        assert_eq!(drain(&mut q, t0).len(), 2);
        q.handle_timeout(t0 + ms(999));
        assert!(drain(&mut q, t0 + ms(999)).is_empty());
        assert_eq!(q.poll_event(), None);
        q.handle_timeout(t0 + ms(1000));
        assert!(drain(&mut q, t0 + ms(1000)).is_empty());
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
        assert_eq!(q.poll_timeout(), None);
    }

    #[test]
    fn server_query_retry_resends_only_what_is_missing() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(2));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(30), addr(QUERY), &status_bytes());
        q.handle_timeout(t0 + ms(1000));
        assert_eq!(drain(&mut q, t0 + ms(1000)), vec![(addr(QUERY), vec![3])]);
        assert_eq!(q.poll_timeout(), Some(t0 + ms(2000)));
        q.handle_timeout(t0 + ms(2000));
        assert_eq!(drain(&mut q, t0 + ms(2000)), vec![(addr(QUERY), vec![3])]);
        q.handle_timeout(t0 + ms(3000));
        let info = done(q.poll_event());
        assert_eq!(info.ping, Some(ms(30)));
        assert_eq!(
            info.partial.map(|p| p.reason),
            Some("no player list reply".to_owned())
        );
    }

    #[test]
    fn server_query_ping_measured_from_latest_status_request() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(1));
        let _ = drain(&mut q, t0);
        q.handle_timeout(t0 + ms(1000));
        assert_eq!(
            drain(&mut q, t0 + ms(1000)),
            vec![(addr(QUERY), vec![2]), (addr(QUERY), vec![3])]
        );
        q.handle_datagram(t0 + ms(1070), addr(QUERY), &status_bytes());
        for dg in players_datagrams(1, 3) {
            q.handle_datagram(t0 + ms(1071), addr(QUERY), &dg);
        }
        assert_eq!(done(q.poll_event()).ping, Some(ms(70)));
    }

    #[test]
    fn server_query_partial_when_trailer_arrives_without_header() {
        let t0 = Instant::now();
        let dgs = players_datagrams(16, 200);
        let mut q = ServerQuery::new(addr(GAME), cfg(2));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(10), addr(QUERY), &status_bytes());
        q.handle_datagram(t0 + ms(11), addr(QUERY), &dgs[1]);
        assert_eq!(q.poll_timeout(), Some(t0 + ms(211)));
        q.handle_timeout(t0 + ms(211));
        let info = done(q.poll_event());
        assert_eq!(info.players.len(), 8);
        assert_eq!(
            info.partial.map(|p| p.reason),
            Some("player list header datagram missing".to_owned())
        );
    }

    #[test]
    fn server_query_reordered_head_within_grace_completes() {
        let t0 = Instant::now();
        let dgs = players_datagrams(16, 200);
        let mut q = ServerQuery::new(addr(GAME), cfg(2));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(10), addr(QUERY), &status_bytes());
        q.handle_datagram(t0 + ms(11), addr(QUERY), &dgs[1]);
        q.handle_datagram(t0 + ms(100), addr(QUERY), &dgs[0]);
        let info = done(q.poll_event());
        assert_eq!(info.players.len(), 16);
        assert_eq!(info.partial, None);
    }

    #[test]
    fn server_query_players_without_status_is_partial() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(0));
        let _ = drain(&mut q, t0);
        for dg in players_datagrams(3, 5) {
            q.handle_datagram(t0 + ms(10), addr(QUERY), &dg);
        }
        assert_eq!(q.poll_event(), None);
        q.handle_timeout(t0 + ms(1000));
        let info = done(q.poll_event());
        assert_eq!(info.players.len(), 3);
        assert_eq!(info.ping, None);
        assert_eq!(
            info.partial.map(|p| p.reason),
            Some("no status reply".to_owned())
        );
    }

    #[test]
    fn server_query_abort() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(3));
        let _ = drain(&mut q, t0);
        q.abort(t0 + ms(10));
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
        let mut q = ServerQuery::new(addr(GAME), cfg(3));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(5), addr(QUERY), &status_bytes());
        q.abort(t0 + ms(10));
        let info = done(q.poll_event());
        assert!(info.partial.is_some());
        // Late replies after completion are ignored.
        q.handle_datagram(t0 + ms(20), addr(QUERY), &status_bytes());
        assert_eq!(q.poll_event(), None);
    }

    #[test]
    fn server_query_game_port_65535_is_rejected() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr("10.0.0.5:65535"), cfg(1));
        assert!(drain(&mut q, t0).is_empty());
        assert_eq!(
            q.poll_event(),
            Some(Event::Failed(QueryError::Rejected(
                "game port has no query port"
            )))
        );
    }

    #[test]
    fn server_query_invalid_name_marks_keep_reason() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(0));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(1), addr(QUERY), &status_bytes());
        let reply = PlayersReply {
            count: 2,
            records: vec![
                PlayerRecord::stock(0, b"bad\nname", 0, 1),
                PlayerRecord::stock(1, b"J\xe9r\xf4me", 0, 1),
            ],
        };
        for dg in reply.encode_datagrams() {
            q.handle_datagram(t0 + ms(2), addr(QUERY), &dg);
        }
        let info = done(q.poll_event());
        assert_eq!(info.players[0].name.raw, vec![0x11]);
        assert_eq!(info.players[0].name.plain, "");
        assert_eq!(
            info.players[0].raw[1],
            (
                "invalid_name".to_owned(),
                RawValue::Text(crate::model::Text::from_utf8_str(
                    crate::gameagent::NAME_MARK_LINE_BREAK
                ))
            )
        );
        assert_eq!(info.players[1].name.raw, vec![0x12]);
    }

    fn list_of(n: usize) -> Vec<SocketAddrV4> {
        (0..n)
            .map(|i| {
                let [a, b] = u16::try_from(i).unwrap().to_be_bytes();
                SocketAddrV4::new(Ipv4Addr::new(10, 1, a, b), 25600)
            })
            .collect()
    }

    fn list_done(ev: Option<Event<ServerList>>) -> ServerList {
        match ev {
            Some(Event::Done(l)) => l,
            other => panic!("expected Done, got {other:?}"),
        }
    }

    #[test]
    fn master_list_sends_e_and_completes_after_short_datagram() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new(addr(MASTER), cfg(1));
        assert_eq!(drain(&mut q, t0), vec![(addr(MASTER), vec![0x65])]);
        let dgs = encode_list(&list_of(200));
        q.handle_datagram(t0 + ms(20), addr(MASTER), &dgs[0]);
        assert_eq!(q.poll_timeout(), Some(t0 + ms(1520)));
        q.handle_datagram(t0 + ms(21), addr(MASTER), &dgs[1]);
        assert_eq!(q.poll_timeout(), Some(t0 + ms(221)));
        q.handle_timeout(t0 + ms(221));
        let l = list_done(q.poll_event());
        assert_eq!(l.servers.len(), 200);
        assert_eq!(l.servers[0].address, addr("10.1.0.0:25600"));
        assert_eq!(l.servers[0].query_address, None);
        assert_eq!(l.partial, None);
        assert_eq!(q.poll_timeout(), None);
    }

    #[test]
    fn master_list_full_last_datagram_completes_after_idle_gap() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new(addr(MASTER), cfg(1));
        let _ = drain(&mut q, t0);
        let dgs = encode_list(&list_of(340));
        // Reverse order, and a duplicate datagram.
        q.handle_datagram(t0 + ms(10), addr(MASTER), &dgs[1]);
        q.handle_datagram(t0 + ms(11), addr(MASTER), &dgs[0]);
        q.handle_datagram(t0 + ms(12), addr(MASTER), &dgs[1]);
        q.handle_timeout(t0 + ms(1511));
        assert_eq!(q.poll_event(), None);
        q.handle_timeout(t0 + ms(1512));
        assert_eq!(list_done(q.poll_event()).servers.len(), 340);
    }

    #[test]
    fn master_list_empty_list() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new(addr(MASTER), cfg(0));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(5), addr(MASTER), &[0x73]);
        q.handle_timeout(t0 + ms(205));
        let l = list_done(q.poll_event());
        assert!(l.servers.is_empty());
        assert_eq!(l.partial, None);
    }

    #[test]
    fn master_list_retries_then_times_out() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new(addr(MASTER), cfg(1));
        assert_eq!(drain(&mut q, t0).len(), 1);
        q.handle_timeout(t0 + ms(1000));
        assert_eq!(
            drain(&mut q, t0 + ms(1000)),
            vec![(addr(MASTER), vec![0x65])]
        );
        q.handle_timeout(t0 + ms(2000));
        assert!(drain(&mut q, t0 + ms(2000)).is_empty());
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
    }

    #[test]
    fn master_list_retries_zero_sends_once() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new(addr(MASTER), cfg(0));
        assert_eq!(drain(&mut q, t0).len(), 1);
        q.handle_timeout(t0 + ms(1000));
        assert!(drain(&mut q, t0 + ms(1000)).is_empty());
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
    }

    #[test]
    fn master_list_filters_sources_bad_records_and_duplicates() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new(addr(MASTER), cfg(0));
        let _ = drain(&mut q, t0);
        let dg = [
            0x73, 1, 2, 3, 4, 0x00, 0x64, // ok
            1, 2, 3, 4, 0x00, 0x64, // duplicate
            0, 0, 0, 0, 0x00, 0x64, // 0.0.0.0
            255, 255, 255, 255, 0x00, 0x64, // broadcast
            5, 6, 7, 8, 0, 0, // port 0
            9, 9, 9, // partial record
        ];
        q.handle_datagram(
            t0 + ms(1),
            addr("10.0.0.10:9005"),
            &[0x73, 1, 1, 1, 1, 1, 1],
        );
        q.handle_datagram(t0 + ms(1), addr(MASTER), b"garbage");
        q.handle_datagram(t0 + ms(2), addr(MASTER), &dg);
        q.abort(t0 + ms(3));
        let l = list_done(q.poll_event());
        assert_eq!(l.servers.len(), 1);
        assert_eq!(l.servers[0].address, addr("1.2.3.4:25600"));
        assert_eq!(
            l.partial.map(|p| p.reason),
            Some("1 truncated list record(s) ignored".to_owned())
        );
    }

    #[test]
    fn master_list_abort_without_data_fails() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new(addr(MASTER), cfg(2));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(1), addr(MASTER), b"");
        q.abort(t0 + ms(2));
        assert_eq!(
            q.poll_event(),
            Some(Event::Failed(QueryError::Decode(DecodeError::Truncated(
                "list reply"
            ))))
        );
    }

    #[test]
    fn master_list_abort_with_data_is_partial() {
        let t0 = Instant::now();
        let mut q = MasterListQuery::new(addr(MASTER), cfg(2));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(1), addr(MASTER), &encode_list(&list_of(170))[0]);
        q.abort(t0 + ms(2));
        let l = list_done(q.poll_event());
        assert_eq!(l.servers.len(), 170);
        assert_eq!(
            l.partial.map(|p| p.reason),
            Some("aborted before the list was complete".to_owned())
        );
    }

    #[test]
    fn server_query_gamespy_style_records_become_players() {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(addr(GAME), cfg(0));
        let _ = drain(&mut q, t0);
        q.handle_datagram(t0 + ms(1), addr(QUERY), &status_bytes());
        q.handle_datagram(
            t0 + ms(2),
            addr(QUERY),
            b"\x01players\x022\x03\\player_0\\Sam\\frags_0\\-3\\ping_0\\42\\player_4\\J\xe9\\frags_4\\1\\x\\y\x04",
        );
        let info = done(q.poll_event());
        assert_eq!(info.players.len(), 2);
        assert_eq!(info.players[0].name.text, "Sam");
        assert_eq!(info.players[0].score, Some(-3));
        assert_eq!(info.players[0].ping_ms, Some(42));
        assert_eq!(info.players[1].name.text, "Jé");
        assert_eq!(
            info.players[1].raw[0],
            ("slot".to_owned(), RawValue::Int(4))
        );
        assert_eq!(info.players[1].ping_ms, None);
    }

    #[test]
    fn count_reply_helper() {
        assert_eq!(decode_count_reply(&[4, b'1', b'2']), Ok(12));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn machines_never_panic(steps in proptest::collection::vec(
                (0u64..3000, any::<bool>(), proptest::collection::vec(any::<u8>(), 0..64)), 0..20)) {
                let t0 = Instant::now();
                let mut s = ServerQuery::new(addr(GAME), cfg(1));
                let mut m = MasterListQuery::new(addr(MASTER), cfg(1));
                for (dt, timeout, bytes) in steps {
                    let now = t0 + ms(dt);
                    if timeout {
                        s.handle_timeout(now);
                        m.handle_timeout(now);
                    } else {
                        s.handle_datagram(now, addr(QUERY), &bytes);
                        m.handle_datagram(now, addr(MASTER), &bytes);
                    }
                    let _ = drain(&mut s, now);
                    let _ = drain(&mut m, now);
                }
                s.abort(t0);
                m.abort(t0);
                prop_assert!(s.poll_event().is_some() || s.poll_timeout().is_none());
                prop_assert!(m.poll_timeout().is_none());
            }
        }
    }
}
