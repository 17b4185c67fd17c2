//! Which machine queries which protocol, at which port.

use std::net::SocketAddr;

use muster_query::QueryProtocol;

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
    /// Quake III / DarkPlaces family (ioquake3, OpenArena, Xonotic, Urban Terror, …):
    /// `getstatus` with a challenge on the game port itself (default 27960).
    Quake3,
    /// Valve's A2S (Counter-Strike, Team Fortress 2, Garry's Mod, Rust, every Source and
    /// GoldSrc game, Xash3D): INFO, PLAYER and RULES on the game port (default 27015), with
    /// the challenge round and split replies; give a separate query port with
    /// --given-port-only.
    A2s,
    /// Probe every protocol's conventional ports and report which answered.
    Auto,
}

impl ProtocolArg {
    /// The library's protocol for this flag.
    pub(crate) fn query(self) -> QueryProtocol {
        match self {
            Self::Gameagent => QueryProtocol::GameAgent,
            Self::Gamespy1 => QueryProtocol::Gamespy1,
            Self::Unreal2 => QueryProtocol::Unreal2,
            Self::Teeworlds => QueryProtocol::Teeworlds,
            Self::Quake3 => QueryProtocol::Quake3,
            Self::A2s => QueryProtocol::A2s,
            Self::Auto => QueryProtocol::Auto,
        }
    }

    /// The name used in output.
    pub(crate) fn name(self) -> &'static str {
        self.query().name()
    }

    /// The game port assumed when an address has none.
    pub(crate) fn default_game_port(self) -> Option<u16> {
        self.query().default_game_port()
    }

    /// The conventional query address of a game address.
    pub(crate) fn query_address(self, game: SocketAddr) -> SocketAddr {
        self.query().query_address(game)
    }
}
