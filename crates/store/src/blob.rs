//! The compact binary form of a record in the SQLite store (schema 5): the key as one blob, the
//! rest of the record as another. Written into a buffer the store reuses, so a row costs no
//! allocation of its own; read back with every length checked against the bytes left (a
//! damaged blob is an error naming what was wrong, never a panic or a large allocation).
//!
//! Integers are LEB128 varints (signed ones zig-zagged first), texts a varint length and
//! UTF-8 bytes. Names that must stay stable across builds (face, state, protocol) are stored
//! as their names, not as enum positions.
//!
//! Key: address kind (4: IPv4, 6: IPv6, each with its bytes; 1: host name text); port (2
//! bytes, big-endian); game text; instance (the bytes that tell keys apart come first: the
//! table's comparisons stop early).
//!
//! Record: format byte ([`FORMAT`]); face, state, query protocol (empty: none) texts; game
//! port (optional); query address (0: none, else as the key's IP forms with a port; 7: IPv6
//! with a port and a scope id); source
//! IP (4 or 6 and its bytes); first seen, last heartbeat, last proof (ms); last poll ok
//! (optional); poll failures; the sources (count; 0: one direct source last seen at the last
//! heartbeat, as schema 4's NULL column; each: 0 direct or 1 and an upstream's name, then its
//! last-seen ms); the info (0: none; 1 and: name, map, game type texts, players, slots,
//! password (0 unknown, 1 no, 2 yes), game port (optional), rule count (2 bytes,
//! little-endian) and key/value texts, player count and per player: name, a flag byte saying
//! which of score, ping, team, spectator, bot are known (and the two booleans' values), then
//! score, ping, team as known).
//! An optional value is a byte 0 (none) or 1 followed by the value. DDNet data is not here: it
//! keeps schema 4's JSON column.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use muster_core::registry::{
    Face, GameAddr, MAX_POLL_PLAYERS, MAX_POLL_RULES, PollFields, PollInfo, PollPlayer, Record,
    Registration, Rules, ServerKey, Timestamp, Verification, protocol_from_name,
};
use muster_core::store::rows::{SourceRow, sources_from_rows};
use muster_proto::limit::SourceKey;

/// The record blob's format byte; another value is refused.
pub(crate) const FORMAT: u8 = 1;

const ADDR_HOST: u8 = 1;
const ADDR_V4: u8 = 4;
const ADDR_V6: u8 = 6;
/// An IPv6 socket address with a scope (interface) id after its port.
const ADDR_V6_SCOPED: u8 = 7;

// Player flag bits.
const P_SCORE: u8 = 1;
const P_PING: u8 = 2;
const P_TEAM: u8 = 4;
const P_SPECTATOR: u8 = 8;
const P_SPECTATOR_YES: u8 = 16;
const P_BOT: u8 = 32;
const P_BOT_YES: u8 = 64;

fn put_uv(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_iv(out: &mut Vec<u8>, v: i64) {
    put_uv(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uv(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(a) => {
            out.push(ADDR_V4);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.push(ADDR_V6);
            out.extend_from_slice(&a.octets());
        }
    }
}

fn put_opt_uv(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put_uv(out, v);
        }
    }
}

/// Appends the key blob of `key` to `out`.
pub(crate) fn put_key(out: &mut Vec<u8>, key: &ServerKey) {
    match &key.addr {
        GameAddr::Ip(a) => {
            put_ip(out, a.ip());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
        GameAddr::Host { host, port } => {
            out.push(ADDR_HOST);
            put_str(out, host);
            out.extend_from_slice(&port.to_be_bytes());
        }
    }
    put_str(out, key.game.as_str());
    put_uv(out, key.instance);
}

/// Appends the record blob of `r` (all but its key and DDNet data) to `out`.
pub(crate) fn put_record(out: &mut Vec<u8>, r: &Record) {
    out.push(FORMAT);
    put_str(out, r.face.name());
    put_str(out, r.state.name());
    put_str(out, r.query_protocol.map_or("", |p| p.name()));
    put_opt_uv(out, r.game_port.map(u64::from));
    match r.query_addr() {
        None => out.push(0),
        // A link-local query address keeps its interface (schema 4's text kept it too).
        Some(SocketAddr::V6(a)) if a.scope_id() != 0 => {
            out.push(ADDR_V6_SCOPED);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_be_bytes());
            put_uv(out, u64::from(a.scope_id()));
        }
        Some(a) => {
            put_ip(out, a.ip());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
    }
    put_ip(out, r.source().to_ip());
    put_uv(out, r.first_seen.0);
    put_uv(out, r.last_heartbeat.0);
    put_uv(out, r.last_proof.0);
    put_opt_uv(out, r.last_poll_ok().map(|t| t.0));
    put_uv(out, u64::from(r.poll_failures()));
    let direct_only = r.sources().is_empty()
        || matches!(r.sources(), [s] if s.origin == muster_core::registry::Origin::Direct
            && s.last_seen == r.last_heartbeat);
    if direct_only {
        put_uv(out, 0);
    } else {
        put_uv(out, r.sources().len() as u64);
        for s in r.sources() {
            match s.origin.upstream() {
                None => out.push(0),
                Some(u) => {
                    out.push(1);
                    put_str(out, u);
                }
            }
            put_uv(out, s.last_seen.0);
        }
    }
    match r.info.as_deref() {
        None => out.push(0),
        Some(i) => {
            out.push(1);
            put_info(out, i);
        }
    }
}

fn put_info(out: &mut Vec<u8>, i: &PollInfo) {
    for t in i.texts() {
        put_str(out, t);
    }
    put_uv(out, u64::from(i.num_players));
    put_uv(out, u64::from(i.max_players));
    out.push(match i.password {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    });
    put_opt_uv(out, i.game_port.map(u64::from));
    // The count (at most MAX_POLL_RULES) in two bytes, filled in after one pass over the rules.
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    let mut n: u16 = 0;
    for (k, v) in i.rules().iter() {
        put_str(out, k);
        put_str(out, v);
        n = n.saturating_add(1);
    }
    if let Some(c) = out.get_mut(at..at + 2) {
        c.copy_from_slice(&n.to_le_bytes());
    }
    put_uv(out, i.players().len() as u64);
    for p in i.players().iter() {
        put_str(out, &p.name);
        let (score, ping, team) = (p.score(), p.ping_ms(), p.team());
        let mut flags = 0;
        for (known, bit) in [
            (score.is_some(), P_SCORE),
            (ping.is_some(), P_PING),
            (team.is_some(), P_TEAM),
            (p.spectator().is_some(), P_SPECTATOR),
            (p.spectator() == Some(true), P_SPECTATOR_YES),
            (p.bot().is_some(), P_BOT),
            (p.bot() == Some(true), P_BOT_YES),
        ] {
            if known {
                flags |= bit;
            }
        }
        out.push(flags);
        if let Some(s) = score {
            put_iv(out, i64::from(s));
        }
        if let Some(p) = ping {
            put_uv(out, u64::from(p));
        }
        if let Some(t) = team {
            put_iv(out, i64::from(t));
        }
    }
}

/// A reader over a blob: every read checks the bytes left.
struct Reader<'a> {
    b: &'a [u8],
}

type R<T> = Result<T, String>;

impl<'a> Reader<'a> {
    fn u8(&mut self, what: &str) -> R<u8> {
        let (&v, rest) = self
            .b
            .split_first()
            .ok_or_else(|| format!("truncated at {what}"))?;
        self.b = rest;
        Ok(v)
    }

    fn bytes(&mut self, n: usize, what: &str) -> R<&'a [u8]> {
        if n > self.b.len() {
            return Err(format!("truncated at {what}"));
        }
        let (v, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(v)
    }

    fn uv(&mut self, what: &str) -> R<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8(what)?;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("bad number at {what}"))
    }

    fn iv(&mut self, what: &str) -> R<i64> {
        let u = self.uv(what)?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    fn num<T: TryFrom<u64>>(&mut self, what: &str) -> R<T> {
        T::try_from(self.uv(what)?).map_err(|_| format!("{what} out of range"))
    }

    fn str(&mut self, what: &str) -> R<&'a str> {
        let n = self.uv(what)?;
        let n = usize::try_from(n).map_err(|_| format!("truncated at {what}"))?;
        std::str::from_utf8(self.bytes(n, what)?).map_err(|_| format!("bad text at {what}"))
    }

    fn opt_uv(&mut self, what: &str) -> R<Option<u64>> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(self.uv(what)?)),
            t => Err(format!("bad tag {t} at {what}")),
        }
    }

    fn ip_of(&mut self, tag: u8, what: &str) -> R<IpAddr> {
        match tag {
            ADDR_V4 => {
                let b: [u8; 4] = self.bytes(4, what)?.try_into().map_err(|_| what)?;
                Ok(IpAddr::V4(Ipv4Addr::from(b)))
            }
            ADDR_V6 => {
                let b: [u8; 16] = self.bytes(16, what)?.try_into().map_err(|_| what)?;
                Ok(IpAddr::V6(Ipv6Addr::from(b)))
            }
            t => Err(format!("bad address kind {t} at {what}")),
        }
    }

    fn port(&mut self, what: &str) -> R<u16> {
        let b: [u8; 2] = self.bytes(2, what)?.try_into().map_err(|_| what)?;
        Ok(u16::from_be_bytes(b))
    }

    /// At most `cap` items follow, each of at least `min` bytes: the count is checked
    /// against the bytes left before anything is allocated for it.
    fn count(&mut self, min: usize, cap: usize, what: &str) -> R<usize> {
        let n: usize = self.num(what)?;
        if n > cap || n.saturating_mul(min) > self.b.len() {
            return Err(format!("bad count {n} at {what}"));
        }
        Ok(n)
    }
}

/// The key a key blob holds.
pub(crate) fn read_key(b: &[u8]) -> R<ServerKey> {
    let mut r = Reader { b };
    let addr = match r.u8("address kind")? {
        ADDR_HOST => {
            let host = r.str("host")?;
            GameAddr::Host {
                host: host.into(),
                port: r.port("port")?,
            }
        }
        t => {
            let ip = r.ip_of(t, "address")?;
            GameAddr::Ip(SocketAddr::new(ip, r.port("port")?))
        }
    };
    let game = r.str("game")?;
    let instance = r.uv("instance")?;
    if !r.b.is_empty() {
        return Err("bytes after the key".to_owned());
    }
    Ok(ServerKey {
        game: game.into(),
        addr,
        instance,
    })
}

/// The record of `key` a record blob holds (without DDNet data), or why it cannot be used.
pub(crate) fn read_record(key: ServerKey, b: &[u8]) -> R<Record> {
    let mut r = Reader { b };
    let format = r.u8("format")?;
    if format != FORMAT {
        return Err(format!("unknown record format {format}"));
    }
    let face = r.str("face")?;
    let face = Face::from_name(face).ok_or_else(|| format!("unknown face {face:?}"))?;
    let state = r.str("state")?;
    let state = Verification::from_name(state).ok_or_else(|| format!("unknown state {state:?}"))?;
    let query_protocol = match r.str("query protocol")? {
        "" => None,
        p => Some(protocol_from_name(p).ok_or_else(|| format!("unknown protocol {p:?}"))?),
    };
    let game_port = r
        .opt_uv("game port")?
        .map(|p| u16::try_from(p).map_err(|_| "game port out of range"))
        .transpose()?;
    let query_addr = match r.u8("query address")? {
        0 => None,
        ADDR_V6_SCOPED => {
            let ip = r.ip_of(ADDR_V6, "query address")?;
            let port = r.port("query port")?;
            let scope = r.num("query scope")?;
            match SocketAddr::new(ip, port) {
                SocketAddr::V6(mut a) => {
                    a.set_scope_id(scope);
                    Some(SocketAddr::V6(a))
                }
                a @ SocketAddr::V4(_) => Some(a),
            }
        }
        t => {
            let ip = r.ip_of(t, "query address")?;
            Some(SocketAddr::new(ip, r.port("query port")?))
        }
    };
    let tag = r.u8("source")?;
    let source = r.ip_of(tag, "source")?;
    let first_seen = Timestamp(r.uv("first seen")?);
    let reg = Registration {
        key,
        face,
        game_port,
        query_addr,
        query_protocol,
        source: SourceKey::of(source),
    };
    let mut rec = Record::new(0, reg, first_seen);
    rec.state = state;
    rec.last_heartbeat = Timestamp(r.uv("last heartbeat")?);
    rec.last_proof = Timestamp(r.uv("last proof")?);
    rec.set_last_poll_ok(r.opt_uv("last poll")?.map(Timestamp));
    rec.set_poll_failures(r.num("poll failures")?);
    // No sources: a direct registration alone, last seen at the last heartbeat (the record's
    // empty source list says just that).
    let n = r.count(2, usize::MAX, "sources")?;
    if n > 0 {
        let mut rows = Vec::with_capacity(n);
        for _ in 0..n {
            let upstream = match r.u8("source kind")? {
                0 => None,
                1 => Some(r.str("upstream")?.to_owned()),
                t => return Err(format!("bad source kind {t}")),
            };
            rows.push(SourceRow {
                upstream,
                last_seen: r.uv("last seen")?,
            });
        }
        let sources = sources_from_rows(rows);
        if !sources.is_empty() {
            rec.set_sources(sources);
        }
    }
    match r.u8("info")? {
        0 => {}
        1 => rec.info = Some(Arc::new(read_info(&mut r)?)),
        t => return Err(format!("bad info tag {t}")),
    }
    if !r.b.is_empty() {
        return Err("bytes after the record".to_owned());
    }
    Ok(rec)
}

fn read_info(r: &mut Reader<'_>) -> R<PollInfo> {
    let name = r.str("name")?;
    let map = r.str("map")?;
    let game_type = r.str("game type")?;
    let num_players = r.num("players")?;
    let max_players = r.num("slots")?;
    let password = match r.u8("password")? {
        0 => None,
        1 => Some(false),
        2 => Some(true),
        t => return Err(format!("bad password flag {t}")),
    };
    let game_port = r
        .opt_uv("info game port")?
        .map(|p| u16::try_from(p).map_err(|_| "info game port out of range"))
        .transpose()?;
    let c: [u8; 2] = r.bytes(2, "rules")?.try_into().map_err(|_| "rules")?;
    let n = usize::from(u16::from_le_bytes(c));
    if n > MAX_POLL_RULES || n.saturating_mul(2) > r.b.len() {
        return Err(format!("bad count {n} at rules"));
    }
    let mut rules = Vec::with_capacity(n);
    for _ in 0..n {
        rules.push((r.str("rule key")?, r.str("rule value")?));
    }
    let n = r.count(2, MAX_POLL_PLAYERS, "players")?;
    let mut players = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str("player name")?;
        let flags = r.u8("player flags")?;
        let has = |bit: u8| flags & bit != 0;
        let score = if has(P_SCORE) {
            Some(PollPlayer::score_of(r.iv("score")?))
        } else {
            None
        };
        let ping = if has(P_PING) {
            Some(PollPlayer::ping_of(r.num("ping")?))
        } else {
            None
        };
        let team = if has(P_TEAM) {
            let t = i32::try_from(r.iv("team")?).map_err(|_| "team out of range")?;
            Some(PollPlayer::team_of(t))
        } else {
            None
        };
        players.push(
            PollPlayer::new(name)
                .with_score(score)
                .with_ping_ms(ping)
                .with_team(team)
                .with_spectator(has(P_SPECTATOR).then_some(has(P_SPECTATOR_YES)))
                .with_bot(has(P_BOT).then_some(has(P_BOT_YES))),
        );
    }
    Ok(PollInfo::from(PollFields {
        name: name.into(),
        map: map.into(),
        game_type: game_type.into(),
        num_players,
        max_players,
        password,
        players: players.into(),
        rules: Rules::new(rules),
        game_port,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::registry::{Origin, Source};
    use proptest::prelude::*;

    type PlayerParts = (
        String,
        Option<i32>,
        Option<u16>,
        Option<i16>,
        Option<bool>,
        Option<bool>,
    );

    fn player() -> impl Strategy<Value = PlayerParts> {
        (
            "\\PC{0,12}",
            any::<Option<i32>>(),
            any::<Option<u16>>(),
            any::<Option<i16>>(),
            any::<Option<bool>>(),
            any::<Option<bool>>(),
        )
    }

    fn info() -> impl Strategy<Value = PollInfo> {
        (
            ("\\PC{0,20}", "\\PC{0,12}", "\\PC{0,8}"),
            (any::<u32>(), any::<u32>(), any::<Option<bool>>()),
            any::<Option<u16>>(),
            proptest::collection::vec(("\\PC{0,8}", "\\PC{0,8}"), 0..5),
            proptest::collection::vec(player(), 0..4),
        )
            .prop_map(
                |((name, map, gt), (n, max, password), port, rules, players)| {
                    PollInfo::from(PollFields {
                        name: name.as_str().into(),
                        map: map.as_str().into(),
                        game_type: gt.as_str().into(),
                        num_players: n,
                        max_players: max,
                        password,
                        players: players
                            .into_iter()
                            .map(|(name, score, ping, team, spec, bot)| {
                                PollPlayer::new(name.as_str())
                                    .with_score(score)
                                    .with_ping_ms(ping)
                                    .with_team(team)
                                    .with_spectator(spec)
                                    .with_bot(bot)
                            })
                            .collect(),
                        rules: Rules::new(rules),
                        game_port: port,
                    })
                },
            )
    }

    fn key() -> impl Strategy<Value = ServerKey> {
        // A key's address has no scope or flow label (schema 4 kept neither).
        let addr = prop_oneof![
            any::<SocketAddr>().prop_map(|a| GameAddr::Ip(SocketAddr::new(a.ip(), a.port()))),
            ("[a-z0-9.-]{1,20}", any::<u16>()).prop_map(|(h, port)| GameAddr::Host {
                host: h.into(),
                port
            }),
        ];
        ("[a-z0-9]{1,12}", addr, any::<u64>())
            .prop_map(|(g, a, i)| ServerKey::new(&g, a).with_instance(i))
    }

    /// Times well inside what a record holds (milliseconds since 1970, below "never").
    fn time() -> impl Strategy<Value = u64> {
        0..(1u64 << 50)
    }

    prop_compose! {
        fn record()(
            key in key(),
            face in 0..Face::ALL.len(),
            delisted in any::<bool>(),
            game_port in any::<Option<u16>>(),
            query_addr in proptest::option::of((any::<SocketAddr>(), any::<u32>())),
            protocol in proptest::option::of(prop_oneof![
                Just(muster_proto::Protocol::Quake3),
                Just(muster_proto::Protocol::GameSpy1),
                Just(muster_proto::Protocol::GameAgent),
            ]),
            source in any::<IpAddr>(),
            times in (time(), time(), time(), proptest::option::of(time())),
            failures in any::<u32>(),
            direct in any::<Option<u64>>(),
            upstreams in proptest::collection::btree_map("[a-z]{1,6}", time(), 0..3),
            info in proptest::option::of(info()),
        ) -> Record {
            let (first, heartbeat, proof, polled) = times;
            let mut r = Record::new(
                0,
                Registration {
                    key,
                    face: Face::ALL.get(face).copied().unwrap_or(Face::Quake3),
                    game_port,
                    // No flow label (schema 4 kept none); a scope id on an IPv6 one.
                    query_addr: query_addr.map(|(a, scope)| match SocketAddr::new(a.ip(), a.port()) {
                        SocketAddr::V6(mut v6) => {
                            v6.set_scope_id(scope);
                            SocketAddr::V6(v6)
                        }
                        v4 => v4,
                    }),
                    query_protocol: protocol,
                    source: SourceKey::of(source),
                },
                Timestamp(first),
            );
            if delisted {
                r.state = Verification::Delisted;
            }
            r.last_heartbeat = Timestamp(heartbeat);
            r.last_proof = Timestamp(proof);
            r.set_last_poll_ok(polled.map(Timestamp));
            r.set_poll_failures(failures);
            let mut sources: Vec<Source> = direct
                .map(|t| Source { origin: Origin::Direct, last_seen: Timestamp(t % (1 << 50)) })
                .into_iter()
                .chain(upstreams.into_iter().map(|(name, t)| Source {
                    origin: Origin::Upstream(Arc::from(name)),
                    last_seen: Timestamp(t),
                }))
                .collect();
            if sources.is_empty() {
                sources.push(Source { origin: Origin::Direct, last_seen: Timestamp(heartbeat) });
            }
            r.set_sources(sources);
            r.info = info.map(Arc::new);
            r
        }
    }

    proptest! {
        #[test]
        fn records_round_trip(rec in record()) {
            let mut k = Vec::new();
            put_key(&mut k, &rec.key);
            let mut b = Vec::new();
            put_record(&mut b, &rec);
            let back = read_record(read_key(&k).unwrap(), &b).unwrap();
            prop_assert_eq!(back, rec);
        }

        #[test]
        fn any_bytes_decode_without_a_panic(k in proptest::collection::vec(any::<u8>(), 0..64),
                                            b in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(key) = read_key(&k) {
                let _ = read_record(key, &b);
            }
            let key = ServerKey::new("g", GameAddr::Ip("192.0.2.1:1".parse().unwrap()));
            // A valid start, then the arbitrary bytes: the decoder gets further in.
            let mut start = vec![FORMAT];
            put_str(&mut start, "quake3");
            put_str(&mut start, "verified");
            start.extend_from_slice(&b);
            let _ = read_record(key, &start);
        }
    }

    #[test]
    fn varints_round_trip_at_their_edges() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut b = Vec::new();
            put_uv(&mut b, v);
            assert_eq!(Reader { b: &b }.uv("v").unwrap(), v);
        }
        for v in [0, -1, 1, i64::MIN, i64::MAX] {
            let mut b = Vec::new();
            put_iv(&mut b, v);
            assert_eq!(Reader { b: &b }.iv("v").unwrap(), v);
        }
        // Eleven continuation bytes: refused, not wrapped.
        assert!(Reader { b: &[0xff; 11] }.uv("v").is_err());
    }

    #[test]
    fn keys_round_trip() {
        for key in [
            ServerKey::new("q3", GameAddr::Ip("192.0.2.1:27960".parse().unwrap())),
            ServerKey::new("q3", GameAddr::Ip("[2001:db8::1]:27960".parse().unwrap()))
                .with_instance(u64::MAX),
            ServerKey::new(
                "bomberman",
                GameAddr::Host {
                    host: "1.2.3.4".into(),
                    port: 2000,
                },
            )
            .with_instance(7),
        ] {
            let mut b = Vec::new();
            put_key(&mut b, &key);
            assert_eq!(read_key(&b).unwrap(), key);
        }
    }

    #[test]
    fn every_truncation_of_a_record_is_an_error_not_a_panic() {
        let addr: SocketAddr = "192.0.2.9:27960".parse().unwrap();
        let mut rec = Record::new(
            0,
            Registration {
                key: ServerKey::new("q3", GameAddr::Ip(addr)),
                face: Face::Quake3,
                game_port: Some(27960),
                query_addr: Some(addr),
                query_protocol: Some(muster_proto::Protocol::Quake3),
                source: SourceKey::of(addr.ip()),
            },
            Timestamp(5),
        );
        rec.info = Some(Arc::new(PollInfo::from(PollFields {
            name: "n".into(),
            players: vec![
                PollPlayer::new("p")
                    .with_score(Some(-4))
                    .with_bot(Some(true)),
            ]
            .into(),
            rules: Rules::new([("k", "v")]),
            ..PollFields::default()
        })));
        let mut b = Vec::new();
        put_record(&mut b, &rec);
        assert_eq!(read_record(rec.key.clone(), &b).unwrap(), rec);
        for n in 0..b.len() {
            assert!(read_record(rec.key.clone(), &b[..n]).is_err(), "cut at {n}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(read_record(rec.key.clone(), &longer).is_err());
        // A count far beyond the bytes left is refused before anything is allocated.
        let mut huge = Vec::new();
        put_uv(&mut huge, u64::MAX);
        assert!(Reader { b: &huge }.count(2, usize::MAX, "x").is_err());
    }
}
