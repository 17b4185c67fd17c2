//! The small library API: ask one server, or many, by protocol and game address.
//!
//! ```no_run
//! # async fn demo() -> Result<(), muster_query::Failure> {
//! use muster_query::{Options, QueryProtocol, Target, query_one};
//!
//! let target = Target::new("127.0.0.1:8303".parse().unwrap(), QueryProtocol::Teeworlds);
//! let answer = query_one(target, Options::default()).await?;
//! println!("{} on {}", answer.info.name.plain, answer.info.map.plain);
//! # Ok(())
//! # }
//! ```
//!
//! [`query_many`] runs any number of targets through one [`crate::engine`] and yields each
//! result as it completes, as a [`Stream`].

use std::net::SocketAddr;

use muster_proto::probe::{BoxedQuery, Policy, Probe, QUERY_ADDRESS_FIELD};
use muster_proto::query::QueryError;
use muster_proto::{QueryConfig, RawValue, ServerInfo};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt as _};

use crate::engine::spawn;
use crate::error::Failure;
use crate::machines;
use crate::scheduler::{Completed, Job, Options};

/// How to ask a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueryProtocol {
    /// Serious Sam GameAgent: status and players at game port + 1.
    GameAgent,
    /// GameSpy v1 `\status\` at game port + 1.
    Gamespy1,
    /// Unreal Engine 2 native query at game port + 1, merged with GameSpy v1 from + 10, + 12 or
    /// + 1 when one answers there (`unreal2.md` §14).
    Unreal2,
    /// Teeworlds / DDNet on the game port: the DDNet extended request and the 0.7 handshake at
    /// once; the richest answer wins.
    Teeworlds,
    /// Quake III / DarkPlaces (ioquake3, OpenArena, Xonotic, …): `getstatus` on the game port.
    Quake3,
    /// Valve's A2S (Source, GoldSrc, Xash3D): INFO, PLAYER and RULES, on the game port unless
    /// the server's query port is given.
    A2s,
    /// Every protocol's conventional ports at once; the answer says which one replied.
    Auto,
}

impl QueryProtocol {
    /// The name used in output (`gameagent`, `gamespy1`, `unreal2`, `teeworlds`, `quake3`,
    /// `a2s`, `auto`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::GameAgent => "gameagent",
            Self::Gamespy1 => "gamespy1",
            Self::Unreal2 => "unreal2",
            Self::Teeworlds => "teeworlds",
            Self::Quake3 => "quake3",
            Self::A2s => "a2s",
            Self::Auto => "auto",
        }
    }

    /// The game port assumed when an address has none (`None`: the protocol has no convention).
    #[must_use]
    pub fn default_game_port(self) -> Option<u16> {
        match self {
            Self::GameAgent => Some(25600),
            Self::Unreal2 => Some(7777),
            Self::Teeworlds => Some(8303),
            Self::Quake3 => Some(muster_proto::quake3::query::DEFAULT_GAME_PORT),
            Self::A2s => Some(muster_proto::a2s::query::DEFAULT_PORT),
            Self::Gamespy1 | Self::Auto => None,
        }
    }

    /// The conventional query address of a game address (for `Auto`, the game address: it
    /// probes several).
    #[must_use]
    pub fn query_address(self, game: SocketAddr) -> SocketAddr {
        match self {
            Self::GameAgent | Self::Gamespy1 | Self::Unreal2 => offset(game, 1),
            Self::Teeworlds | Self::Quake3 | Self::A2s | Self::Auto => game,
        }
    }
}

fn offset(addr: SocketAddr, by: u16) -> SocketAddr {
    SocketAddr::new(addr.ip(), addr.port().saturating_add(by))
}

/// One server to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The game address (what a player connects to), or with `given_port_only` the exact
    /// address to query.
    pub address: SocketAddr,
    /// How to ask.
    pub protocol: QueryProtocol,
    /// Query exactly `address` instead of the protocol's conventional ports.
    pub given_port_only: bool,
    /// Where the server answers GameSpy v1, when a master list said so (UT2003 text list);
    /// used by [`QueryProtocol::Unreal2`] instead of guessing.
    pub gamespy_address: Option<SocketAddr>,
}

impl Target {
    /// Ask the server playing at `address` with `protocol`, on its conventional ports.
    #[must_use]
    pub fn new(address: SocketAddr, protocol: QueryProtocol) -> Self {
        Self {
            address,
            protocol,
            given_port_only: false,
            gamespy_address: None,
        }
    }

    /// Query exactly the address given (GameDig's option of this name).
    #[must_use]
    pub fn given_port_only(mut self) -> Self {
        self.given_port_only = true;
        self
    }

    /// The address the query goes to first (the conventional one, or exactly the given one).
    #[must_use]
    pub fn query_address(&self) -> SocketAddr {
        if self.given_port_only {
            self.address
        } else {
            self.protocol.query_address(self.address)
        }
    }

    /// The machine that asks this server, with the engine's timing.
    #[must_use]
    pub fn machine(&self, config: QueryConfig) -> BoxedQuery {
        let game = self.address;
        let q = self.query_address();
        if let (QueryProtocol::Unreal2, Some(gs)) = (self.protocol, self.gamespy_address) {
            // The master said where GameSpy answers: no need to guess.
            return machines::unreal2_with_gamespy(q, gs, config);
        }
        let gamespy = machines::gamespy1;
        match (self.protocol, self.given_port_only) {
            (QueryProtocol::GameAgent, _) => machines::gameagent(q, config),
            (QueryProtocol::Gamespy1, _) => gamespy(q, config),
            (QueryProtocol::Teeworlds, _) => machines::teeworlds(q, config),
            (QueryProtocol::Quake3, _) => machines::quake3(q, config),
            (QueryProtocol::A2s, _) => machines::a2s(q, config),
            (QueryProtocol::Unreal2, true) => machines::unreal2(q, config),
            (QueryProtocol::Unreal2, false) => Box::new(
                Probe::new(Policy::MergeUnreal2)
                    .with(q, machines::unreal2(q, config))
                    .with(offset(game, 10), gamespy(offset(game, 10), config))
                    .with(offset(game, 12), gamespy(offset(game, 12), config))
                    .with(q, gamespy(q, config)),
            ),
            (QueryProtocol::Auto, true) => Box::new(
                Probe::new(Policy::MergeUnreal2)
                    .with(q, machines::unreal2(q, config))
                    .with(q, machines::gameagent(q, config))
                    .with(q, gamespy(q, config))
                    .with(q, machines::teeworlds(q, config))
                    .with(q, machines::quake3(q, config))
                    .with(q, machines::a2s(q, config)),
            ),
            (QueryProtocol::Auto, false) => {
                let plus1 = offset(game, 1);
                Box::new(
                    Probe::new(Policy::MergeUnreal2)
                        .with(plus1, machines::unreal2(plus1, config))
                        .with(plus1, machines::gameagent(plus1, config))
                        .with(plus1, gamespy(plus1, config))
                        .with(offset(game, 10), gamespy(offset(game, 10), config))
                        .with(offset(game, 12), gamespy(offset(game, 12), config))
                        .with(game, machines::teeworlds(game, config))
                        .with(game, machines::quake3(game, config))
                        .with(game, machines::a2s(game, config)),
                )
            }
        }
    }
}

/// What a server answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status, players and rules.
    pub info: ServerInfo,
    /// The address that answered (for probes: the one of the tried ports that did).
    pub query_address: SocketAddr,
}

impl Answer {
    /// `info` as answered to a query of `target`: probes record which address replied.
    #[must_use]
    pub fn new(target: &Target, info: ServerInfo) -> Self {
        let answered = match info.raw_field(QUERY_ADDRESS_FIELD) {
            Some(RawValue::Text(t)) => t.text.parse().ok(),
            _ => None,
        };
        Self {
            query_address: answered.unwrap_or_else(|| target.query_address()),
            info,
        }
    }
}

/// The result of one target of [`query_many`].
pub type Outcome = Completed<Target, Answer>;

/// Ask many servers at once; each result comes as soon as its query ends, in completion order.
///
/// All targets share one engine (one socket per address family, the send budget and the
/// deadline of `options`). The stream yields exactly one item per target and then ends.
/// Must be called within a tokio runtime; dropping the stream stops the queries.
pub fn query_many<I>(targets: I, options: Options) -> impl Stream<Item = Outcome> + Send + Unpin
where
    I: IntoIterator<Item = Target>,
    I::IntoIter: Send + 'static,
{
    let jobs = targets.into_iter().map(|t| Job {
        build: {
            let t = t.clone();
            move |config| t.machine(config)
        },
        tag: t,
    });
    ReceiverStream::new(spawn(jobs, options)).map(|done| Completed {
        outcome: done.outcome.map(|info| Answer::new(&done.tag, *info)),
        tag: done.tag,
        elapsed: done.elapsed,
    })
}

/// Ask one server: its answer, or why there is none ([`QueryError::Timeout`] when it never
/// answered within `options`' retries and deadline).
///
/// # Errors
///
/// [`Failure`] when the server did not answer, answered garbage, or the socket failed.
pub async fn query_one(target: Target, options: Options) -> Result<Answer, Failure> {
    let mut stream = query_many([target], options);
    match stream.next().await {
        Some(done) => done.outcome,
        None => Err(Failure::Query(QueryError::Timeout)),
    }
}
