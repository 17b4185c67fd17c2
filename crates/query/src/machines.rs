//! The query machine for each protocol, built the same way wherever Muster queries a server
//! (the CLI, the master's poller, benchmarks): one place decides timing defaults, tokens and
//! the UE2 + GameSpy merge.

use std::net::SocketAddr;

use muster_proto::QueryConfig;
use muster_proto::gameagent::query::ServerQuery;
use muster_proto::gamespy1::query::{StatusConfig, StatusQuery};
use muster_proto::probe::{BoxedQuery, Policy, Probe};
use muster_proto::quake3::query::{Request as Quake3Request, ServerQuery as Quake3Query};
use muster_proto::teeworlds::query::{TeeworldsQuery, Tokens};
use muster_proto::unreal2::query::{Unreal2Config, Unreal2Query};

/// GameAgent status and players from `query` (the query port, game port + 1).
#[must_use]
pub fn gameagent(query: SocketAddr, config: QueryConfig) -> BoxedQuery {
    // ServerQuery takes the game address and asks game port + 1.
    let game = SocketAddr::new(query.ip(), query.port().saturating_sub(1));
    Box::new(ServerQuery::new(game, config))
}

/// GameSpy v1 `\status\` from `query`.
#[must_use]
pub fn gamespy1(query: SocketAddr, config: QueryConfig) -> BoxedQuery {
    Box::new(StatusQuery::new(
        query,
        StatusConfig {
            retry: config,
            ..StatusConfig::default()
        },
    ))
}

/// The Unreal Engine 2 native query of `query` (game port + 1).
#[must_use]
pub fn unreal2(query: SocketAddr, config: QueryConfig) -> BoxedQuery {
    Box::new(Unreal2Query::new(
        query,
        Unreal2Config {
            query: config,
            ..Unreal2Config::default()
        },
    ))
}

/// UE2 native at `native` merged with GameSpy v1 at `gamespy` (`unreal2.md` §14).
#[must_use]
pub fn unreal2_with_gamespy(
    native: SocketAddr,
    gamespy: SocketAddr,
    config: QueryConfig,
) -> BoxedQuery {
    Box::new(
        Probe::new(Policy::MergeUnreal2)
            .with(native, unreal2(native, config))
            .with(gamespy, gamespy1(gamespy, config)),
    )
}

/// Teeworlds / DDNet (extended and 0.7 at once) on `addr`, with fresh random tokens: they tie
/// replies to requests (`teeworlds.md` §13), so a forged reply cannot pass for an answer.
#[must_use]
pub fn teeworlds(addr: SocketAddr, config: QueryConfig) -> BoxedQuery {
    let tokens = loop {
        let extended = rand::random::<u32>() & 0x00ff_ffff;
        let client = rand::random::<u32>();
        let browse = i32::try_from(rand::random::<u32>() >> 1).unwrap_or(0);
        if let Ok(t) = Tokens::new(extended, client, browse) {
            break t;
        }
    };
    Box::new(TeeworldsQuery::new(addr, config, tokens))
}

/// Quake III / DarkPlaces `getstatus` on `addr` (the game port), with a fresh random challenge
/// the reply must echo (`quake3.md` §5).
#[must_use]
pub fn quake3(addr: SocketAddr, config: QueryConfig) -> BoxedQuery {
    Box::new(Quake3Query::new(
        addr,
        Quake3Request::Status,
        quake3_challenge(),
        config,
    ))
}

/// Valve's A2S on `addr` (the query port): INFO, then PLAYER and RULES, each through the
/// challenge round when the server asks for one; split and compressed replies reassembled.
#[must_use]
pub fn a2s(addr: SocketAddr, config: QueryConfig) -> BoxedQuery {
    Box::new(muster_proto::a2s::query::ServerQuery::new(
        addr,
        muster_proto::Protocol::A2s,
        muster_proto::a2s::query::Request::ALL,
        config,
    ))
}

/// A random challenge of dpmaster's alphabet (9 to 12 characters).
fn quake3_challenge() -> muster_proto::quake3::Word {
    muster_proto::quake3::generate_challenge(rand::random())
}

/// Quake III / DarkPlaces `getinfo` on `addr`: the short info string only (name, map, counts,
/// `gamename`; no player list), for callers that need no players.
#[must_use]
pub fn quake3_info(addr: SocketAddr, config: QueryConfig) -> BoxedQuery {
    Box::new(Quake3Query::new(
        addr,
        Quake3Request::Info,
        quake3_challenge(),
        config,
    ))
}
