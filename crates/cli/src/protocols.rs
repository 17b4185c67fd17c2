//! Which machine queries which protocol, at which port.

use std::net::SocketAddr;

use muster_proto::QueryConfig;
use muster_proto::probe::{BoxedQuery, Policy, Probe};
use muster_query::machines::{self, gameagent, gamespy1 as gamespy, teeworlds, unreal2};

use crate::query::Target;

/// `--protocol` of `muster query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProtocolArg {
    /// Serious Sam GameAgent (query port = game port + 1).
    Gameagent,
    /// GameSpy v1 `\status\` (query port = game port + 1; UT2003/UT2004 use + 10: give it
    /// with --given-port-only, or use unreal2 / auto).
    Gamespy1,
    /// Unreal Engine 2 native query at game port + 1, merged with GameSpy v1 from + 10, + 12
    /// and + 1 when one answers there.
    Unreal2,
    /// Teeworlds / DDNet: the DDNet extended request and the 0.7 handshake at once, on the
    /// game port itself; the richest answer wins.
    Teeworlds,
    /// Probe every protocol's conventional ports and report which answered.
    Auto,
}

impl ProtocolArg {
    /// The name used in output.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Gameagent => "gameagent",
            Self::Gamespy1 => "gamespy1",
            Self::Unreal2 => "unreal2",
            Self::Teeworlds => "teeworlds",
            Self::Auto => "auto",
        }
    }

    /// The game port assumed when an address has none.
    pub(crate) fn default_game_port(self) -> Option<u16> {
        match self {
            Self::Gameagent => Some(25600),
            Self::Unreal2 => Some(7777),
            Self::Teeworlds => Some(8303),
            Self::Gamespy1 | Self::Auto => None,
        }
    }

    /// The conventional query address of a game address.
    pub(crate) fn query_address(self, game: SocketAddr) -> SocketAddr {
        match self {
            Self::Gameagent | Self::Gamespy1 | Self::Unreal2 => offset(game, 1),
            Self::Teeworlds | Self::Auto => game,
        }
    }
}

fn offset(addr: SocketAddr, by: u16) -> SocketAddr {
    SocketAddr::new(addr.ip(), addr.port().saturating_add(by))
}

/// The machine that queries `target`.
pub(crate) fn machine(target: &Target, config: QueryConfig) -> BoxedQuery {
    let game = target.address;
    let q = target.query_address;
    if let (ProtocolArg::Unreal2, Some(gs)) = (target.protocol, target.gamespy_address) {
        // The master said where GameSpy answers: no need to guess.
        return machines::unreal2_with_gamespy(q, gs, config);
    }
    match (target.protocol, target.given_port_only) {
        (ProtocolArg::Gameagent, _) => gameagent(q, config),
        (ProtocolArg::Gamespy1, _) => gamespy(q, config),
        (ProtocolArg::Teeworlds, _) => teeworlds(q, config),
        (ProtocolArg::Unreal2, true) => unreal2(q, config),
        (ProtocolArg::Unreal2, false) => Box::new(
            Probe::new(Policy::MergeUnreal2)
                .with(q, unreal2(q, config))
                .with(offset(game, 10), gamespy(offset(game, 10), config))
                .with(offset(game, 12), gamespy(offset(game, 12), config))
                .with(q, gamespy(q, config)),
        ),
        (ProtocolArg::Auto, true) => Box::new(
            Probe::new(Policy::MergeUnreal2)
                .with(q, unreal2(q, config))
                .with(q, gameagent(q, config))
                .with(q, gamespy(q, config))
                .with(q, teeworlds(q, config)),
        ),
        (ProtocolArg::Auto, false) => {
            let plus1 = offset(game, 1);
            Box::new(
                Probe::new(Policy::MergeUnreal2)
                    .with(plus1, unreal2(plus1, config))
                    .with(plus1, gameagent(plus1, config))
                    .with(plus1, gamespy(plus1, config))
                    .with(offset(game, 10), gamespy(offset(game, 10), config))
                    .with(offset(game, 12), gamespy(offset(game, 12), config))
                    .with(game, teeworlds(game, config)),
            )
        }
    }
}
