//! Which query machine polls which record: pure, no I/O.
//!
//! | record's `query_protocol` | machine |
//! |---|---|
//! | `gameagent` | `ServerQuery` (status `02` + players `03`) at the query address (game port + 1) |
//! | `gamespy1` | `StatusQuery` (`\status\`) at the query address; for the UT2003/UT2004 gamenames with a known game port, merged with the UE2 native query at game port + 1 (`unreal2.md` §14) |
//! | `unreal2` | `Unreal2Query` at the query address |
//! | `teeworlds` | `TeeworldsQuery` (DDNet extended + 0.7 handshake) with fresh random tokens |
//! | none (management server) | not polled: its state comes over its TCP connection |
//!
//! Only listed (verified) records with an IP query address and a non-zero port are polled.

use std::net::SocketAddr;

use muster_proto::probe::BoxedQuery;
use muster_proto::{Protocol, QueryConfig};
use muster_query::machines;

use muster_core::registry::{Record, UT2003_LIST_GAMES};

/// How one record is polled: everything a machine needs, small and `Copy`, so a query job can
/// carry it without holding the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollTarget {
    /// The query protocol.
    pub protocol: Protocol,
    /// Where the query goes.
    pub query_addr: SocketAddr,
    /// For GameSpy-polled UE2 servers: the native query address to merge with.
    pub native: Option<SocketAddr>,
}

impl PollTarget {
    /// How `rec` is polled, or `None` when it is not: not listed, no query protocol
    /// (management server), or no usable query address.
    #[must_use]
    pub fn of(rec: &Record) -> Option<Self> {
        if !rec.is_listed() {
            return None;
        }
        let protocol = rec.query_protocol?;
        let query_addr = rec.query_addr()?;
        if query_addr.port() == 0 || query_addr.ip().is_unspecified() {
            return None;
        }
        // GameAgent: the machine asks (query port − 1) + 1; port 1 would mean game port 0.
        if protocol == Protocol::GameAgent && query_addr.port() < 2 {
            return None;
        }
        let native = match (protocol, rec.game_port) {
            (Protocol::GameSpy1, Some(gp))
                if UT2003_LIST_GAMES.contains(&rec.key.game.as_str()) =>
            {
                gp.checked_add(1)
                    .map(|p| SocketAddr::new(query_addr.ip(), p))
            }
            _ => None,
        };
        Some(Self {
            protocol,
            query_addr,
            native,
        })
    }

    /// A fresh machine for this target, with the engine's timing.
    #[must_use]
    pub fn machine(&self, config: QueryConfig) -> BoxedQuery {
        let q = self.query_addr;
        match self.protocol {
            Protocol::GameAgent => machines::gameagent(q, config),
            Protocol::GameSpy1 => match self.native {
                Some(native) => machines::unreal2_with_gamespy(native, q, config),
                None => machines::gamespy1(q, config),
            },
            Protocol::Unreal2 => machines::unreal2(q, config),
            Protocol::Teeworlds => machines::teeworlds(q, config),
            Protocol::Quake3 => machines::quake3(q, config),
            Protocol::A2s => machines::a2s(q, config),
        }
    }
}

/// The machine that polls `rec`, or `None` when it is not polled (see [`PollTarget::of`]).
#[must_use]
pub fn machine_for(rec: &Record, config: QueryConfig) -> Option<BoxedQuery> {
    PollTarget::of(rec).map(|t| t.machine(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::registry::{Face, GameAddr, Registration, ServerKey, Timestamp, Verification};
    use muster_proto::limit::SourceKey;
    use std::time::Instant;

    fn rec(game: &str, face: Face, proto: Option<Protocol>, query: Option<&str>) -> Record {
        let addr: SocketAddr = "192.0.2.7:7777".parse().unwrap();
        let mut r = Record::new(
            0,
            Registration {
                key: ServerKey::new(game, GameAddr::Ip(addr)),
                face,
                game_port: Some(7777),
                query_addr: query.map(|q| q.parse().unwrap()),
                query_protocol: proto,
                source: SourceKey::of(addr.ip()),
            },
            Timestamp::from_secs(1),
        );
        r.state = Verification::Verified;
        r
    }

    /// Where the machine's first transmissions go.
    fn destinations(m: &mut BoxedQuery) -> Vec<SocketAddr> {
        let now = Instant::now();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for _ in 0..8 {
            let Some(t) = m.poll_transmit(now, &mut buf) else {
                break;
            };
            buf.clear();
            if !out.contains(&t.destination) {
                out.push(t.destination);
            }
        }
        out.sort();
        out
    }

    fn check(r: &Record, expect: Option<&[&str]>) {
        let got = machine_for(r, QueryConfig::default()).map(|mut m| destinations(&mut m));
        let expect = expect.map(|e| {
            let mut v: Vec<SocketAddr> = e.iter().map(|a| a.parse().unwrap()).collect();
            v.sort();
            v
        });
        assert_eq!(got, expect, "{:?} {:?}", r.key, r.query_protocol);
    }

    #[test]
    fn each_protocol_gets_its_machine_at_its_address() {
        let ga = rec(
            "serioussam",
            Face::GameAgent,
            Some(Protocol::GameAgent),
            Some("192.0.2.7:25601"),
        );
        check(&ga, Some(&["192.0.2.7:25601"]));
        let gs = rec(
            "serioussamse",
            Face::GameSpy,
            Some(Protocol::GameSpy1),
            Some("192.0.2.7:25601"),
        );
        check(&gs, Some(&["192.0.2.7:25601"]));
        let tw = rec(
            "teeworlds",
            Face::Teeworlds07,
            Some(Protocol::Teeworlds),
            Some("[2001:db8::1]:8303"),
        );
        check(&tw, Some(&["[2001:db8::1]:8303"]));
        let u2 = rec(
            "ut2004",
            Face::GameSpy,
            Some(Protocol::Unreal2),
            Some("192.0.2.7:7778"),
        );
        check(&u2, Some(&["192.0.2.7:7778"]));
    }

    #[test]
    fn ue2_gamespy_records_merge_the_native_query() {
        let ut = rec(
            "ut2004",
            Face::GameSpy,
            Some(Protocol::GameSpy1),
            Some("192.0.2.7:7787"),
        );
        assert_eq!(
            PollTarget::of(&ut).unwrap().native,
            Some("192.0.2.7:7778".parse().unwrap())
        );
        check(&ut, Some(&["192.0.2.7:7778", "192.0.2.7:7787"]));
        let mut no_port = ut.clone();
        no_port.game_port = None;
        check(&no_port, Some(&["192.0.2.7:7787"]));
    }

    #[test]
    fn unpollable_records_get_no_machine() {
        let mgmt = rec("bomberman", Face::Mgmt, None, None);
        check(&mgmt, None);
        let no_addr = rec(
            "teeworlds",
            Face::Teeworlds07,
            Some(Protocol::Teeworlds),
            None,
        );
        check(&no_addr, None);
        let zero = rec(
            "teeworlds",
            Face::Teeworlds07,
            Some(Protocol::Teeworlds),
            Some("192.0.2.7:0"),
        );
        check(&zero, None);
        let unspec = rec(
            "teeworlds",
            Face::Teeworlds07,
            Some(Protocol::Teeworlds),
            Some("0.0.0.0:8303"),
        );
        check(&unspec, None);
        let ga1 = rec(
            "serioussam",
            Face::GameAgent,
            Some(Protocol::GameAgent),
            Some("192.0.2.7:1"),
        );
        check(&ga1, None);
        let mut pending = rec(
            "teeworlds",
            Face::Teeworlds07,
            Some(Protocol::Teeworlds),
            Some("192.0.2.7:8303"),
        );
        pending.state = Verification::Delisted;
        check(&pending, None);
    }
}
