//! One resolved server to query: what `query`, `scan` and `watch` share, below the commands
//! and above the protocol flags.

use std::net::SocketAddr;

use muster_proto::model::{Protocol, RawValue, ServerInfo};

use crate::dto::{Resolved, ServerResult};
use crate::protocols::ProtocolArg;

/// One resolved server to query.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// Position in the input, to print results in input order.
    pub index: usize,
    /// The game address.
    pub address: SocketAddr,
    /// The query address (the conventional one, or exactly the given one).
    pub query_address: SocketAddr,
    /// The protocol to query it with.
    pub protocol: ProtocolArg,
    /// Query exactly `query_address` instead of the protocol's conventional ports.
    pub given_port_only: bool,
    /// A GameSpy v1 query address known from a master list (UT2003 text list).
    pub gamespy_address: Option<SocketAddr>,
    /// The host name the address was given as, to show instead of the address it resolved to.
    pub host: Option<String>,
}

/// The game port a server's answer reports: GameSpy's `hostport` rule, the UE2 native
/// reply's port.
fn reported_game_port(info: &ServerInfo) -> Option<u16> {
    let rule = info
        .rules
        .iter()
        .find(|r| r.key.plain.eq_ignore_ascii_case("hostport"))
        .and_then(|r| r.value.plain.trim().parse::<u16>().ok());
    let native = match (info.protocol, info.raw_field("port")) {
        (Protocol::Unreal2, Some(RawValue::Int(p))) => u16::try_from(*p).ok(),
        _ => None,
    };
    rule.or(native).filter(|p| *p != 0)
}

impl Target {
    /// Where a player connects: the address given, unless its port is the query port
    /// (`--given-port-only`, GameSpy lists); then the game port the answer reports, if any.
    pub(crate) fn game_address(&self, info: &ServerInfo) -> SocketAddr {
        match reported_game_port(info) {
            Some(port) if self.given_port_only => SocketAddr::new(self.address.ip(), port),
            _ => self.address,
        }
    }

    /// `r` as shown: a server given by host name keeps the name, with the address it
    /// resolved to beside it.
    pub(crate) fn shown(&self, mut r: ServerResult, game: SocketAddr) -> ServerResult {
        if let Some(host) = &self.host {
            r.address = format!("{host}:{}", game.port());
            r.resolved_address = Resolved::To(game);
        }
        r
    }

    /// The library's view of this target: it decides ports and merges.
    pub(crate) fn library(&self) -> muster_query::Target {
        muster_query::Target {
            // Exactly the given port: the query address (the game address for `query`).
            address: if self.given_port_only {
                self.query_address
            } else {
                self.address
            },
            protocol: self.protocol.query(),
            given_port_only: self.given_port_only,
            gamespy_address: self.gamespy_address,
        }
    }
}
