//! A record: what registered it, from where, how it was verified, and everything the registry
//! keeps about one server.

use std::net::SocketAddr;
use std::sync::Arc;

use muster_proto::Protocol;
use muster_proto::limit::SourceKey;

use super::ddnet::DdnetData;
use super::key::{Face, GameAddr, ServerKey, Timestamp};
use super::poll::PollInfo;

/// Verification state of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verification {
    /// Proven and listed.
    Verified,
    /// Failed a re-verification or too many polls: not listed, still alive while heartbeats
    /// come, listed again by a new proof.
    Delisted,
}

impl Verification {
    /// The stable name used in the store and the API.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Verified => "verified",
            Self::Delisted => "delisted",
        }
    }

    /// The state called `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "verified" => Some(Self::Verified),
            "delisted" => Some(Self::Delisted),
            _ => None,
        }
    }
}

/// Most sources one record keeps (a direct registration and one per upstream; upstreams come
/// from the configuration, so real records stay far below it).
pub const MAX_SOURCES: usize = 32;

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// A face proved it here: the server registered with this master (a challenge answered,
    /// a handshake).
    Direct,
    /// Learned from the configured upstream master of this name, and listed only after this
    /// master queried the server successfully itself.
    Upstream(Arc<str>),
}

impl Origin {
    /// The upstream's name, for a learned source.
    #[must_use]
    pub fn upstream(&self) -> Option<&str> {
        match self {
            Self::Direct => None,
            Self::Upstream(name) => Some(name),
        }
    }
}

/// One source of a record, and when it last vouched for the server (for [`Origin::Direct`]:
/// the last proof or heartbeat; for an upstream: the last pull that listed it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Who.
    pub origin: Origin,
    /// When it last saw the server.
    pub last_seen: Timestamp,
}

/// A registration request from a face.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The key.
    pub key: ServerKey,
    /// The face registering it.
    pub face: Face,
    /// The game port, when the face knows it (all but GameSpy heartbeats).
    pub game_port: Option<u16>,
    /// Where the poller queries it, if it can.
    pub query_addr: Option<SocketAddr>,
    /// How the poller queries it.
    pub query_protocol: Option<Protocol>,
    /// Who registered it, for the per-source cap.
    pub source: SourceKey,
}

/// One record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Unique while the process runs (given in creation and load order); the views key by it.
    pub id: u64,
    /// The key.
    pub key: ServerKey,
    /// The face that registered it (the latest registration wins).
    pub face: Face,
    /// The game port, when known.
    pub game_port: Option<u16>,
    /// Where the poller queries it.
    pub query_addr: Option<SocketAddr>,
    /// How the poller queries it.
    pub query_protocol: Option<Protocol>,
    /// Verification state.
    pub state: Verification,
    /// When it was first registered (and verified: there is no earlier state); the stable
    /// list order.
    pub first_seen: Timestamp,
    /// The last valid heartbeat (a proof counts as one).
    pub last_heartbeat: Timestamp,
    /// The last proof of ownership (registration or re-verification).
    pub last_proof: Timestamp,
    /// Re-verification challenges sent since the last proof, without an answer.
    pub challenges_unanswered: u8,
    /// When the last of those went out.
    pub last_challenge: Timestamp,
    /// The last successful poll.
    ///
    /// Kept as milliseconds + 1 in a `NonZeroU64`, so that "never" takes no room of its own
    /// (8 bytes where an `Option<Timestamp>` takes 16); read and set it through
    /// [`Record::last_poll_ok`] and [`Record::set_last_poll_ok`].
    last_poll_ok: Option<std::num::NonZeroU64>,
    /// What the last successful poll (or the registration itself) said.
    pub info: Option<Arc<PollInfo>>,
    /// Polls failed in a row since the last success.
    pub poll_failures: u32,
    /// The registering source, for the per-source cap.
    pub source: SourceKey,
    /// What a DDNet server registered at this address.
    pub ddnet: Option<Arc<DdnetData>>,
    /// Where it came from, [`Origin::Direct`] first, then the upstreams by name; at most
    /// [`MAX_SOURCES`]. Empty only for a record built by hand (read as direct). A boxed
    /// slice, not a `Vec`: sources change rarely, and the 8 bytes of a capacity would take
    /// every record into the next allocator size class.
    pub sources: Box<[Source]>,
}

// A record and its `Arc` counts fill one 224-byte allocator size class; 8 bytes more and
// every record takes the next class (256 bytes): 32 bytes per server at any size.
const _: () = assert!(size_of::<Record>() <= 208);

impl Record {
    /// The last successful poll, if any.
    #[must_use]
    pub fn last_poll_ok(&self) -> Option<Timestamp> {
        self.last_poll_ok
            .map(|t| Timestamp(t.get().saturating_sub(1)))
    }

    /// Sets the last successful poll (a time of [`Timestamp::NEVER`] reads back as none).
    pub fn set_last_poll_ok(&mut self, t: Option<Timestamp>) {
        self.last_poll_ok = t.and_then(|t| std::num::NonZeroU64::new(t.0.wrapping_add(1)));
    }

    /// A fresh listed record for `reg` at `now`.
    #[must_use]
    pub fn new(id: u64, reg: Registration, now: Timestamp) -> Self {
        Self {
            id,
            key: reg.key,
            face: reg.face,
            game_port: reg.game_port,
            query_addr: reg.query_addr,
            query_protocol: reg.query_protocol,
            state: Verification::Verified,
            first_seen: now,
            last_heartbeat: now,
            last_proof: now,
            challenges_unanswered: 0,
            last_challenge: Timestamp::default(),
            last_poll_ok: None,
            info: None,
            poll_failures: 0,
            source: reg.source,
            ddnet: None,
            sources: Box::new([Source {
                origin: Origin::Direct,
                last_seen: now,
            }]),
        }
    }

    /// Whether a face registered it here (or it predates sources): the registration's face
    /// rules decide its lifetime, and it is exported as this master's own.
    #[must_use]
    pub fn is_direct(&self) -> bool {
        self.sources.is_empty() || self.sources.iter().any(|s| s.origin == Origin::Direct)
    }

    /// When the upstream `name` last listed it, if it is one of its sources.
    #[must_use]
    pub fn seen_by(&self, name: &str) -> Option<Timestamp> {
        self.sources
            .iter()
            .find(|s| s.origin.upstream() == Some(name))
            .map(|s| s.last_seen)
    }

    /// The last time any upstream listed it (`None`: no upstream source).
    #[must_use]
    pub fn last_learned(&self) -> Option<Timestamp> {
        self.sources
            .iter()
            .filter(|s| s.origin != Origin::Direct)
            .map(|s| s.last_seen)
            .max()
    }

    /// Keeps only the sources `keep` accepts.
    pub fn retain_sources(&mut self, keep: impl FnMut(&Source) -> bool) {
        let mut sources = std::mem::take(&mut self.sources).into_vec();
        sources.retain(keep);
        self.sources = sources.into_boxed_slice();
    }

    /// Adds `origin` or moves its time to `now` (never back); returns whether it was added.
    /// A record already at [`MAX_SOURCES`] keeps its sources.
    pub fn see(&mut self, origin: &Origin, now: Timestamp) -> bool {
        if let Some(s) = self.sources.iter_mut().find(|s| s.origin == *origin) {
            s.last_seen = s.last_seen.max(now);
            return false;
        }
        if self.sources.len() >= MAX_SOURCES {
            return false;
        }
        let mut sources = std::mem::take(&mut self.sources).into_vec();
        sources.push(Source {
            origin: origin.clone(),
            last_seen: now,
        });
        sources.sort_by(|a, b| a.origin.cmp(&b.origin));
        self.sources = sources.into_boxed_slice();
        true
    }

    /// Whether any list shows it.
    #[must_use]
    pub fn is_listed(&self) -> bool {
        self.state == Verification::Verified
    }

    /// The game address when the game port is known: the key's host with [`Record::game_port`].
    #[must_use]
    pub fn game_addr(&self) -> Option<GameAddr> {
        let port = self.game_port?;
        Some(match &self.key.addr {
            GameAddr::Ip(a) => GameAddr::Ip(SocketAddr::new(a.ip(), port)),
            GameAddr::Host { host, .. } => GameAddr::Host {
                host: host.clone(),
                port,
            },
        })
    }

    /// The address lists and the API show: the game address when known, else the registered
    /// one.
    #[must_use]
    pub fn shown_addr(&self) -> String {
        self.game_addr()
            .map_or_else(|| self.key.addr.to_string(), |a| a.to_string())
    }

    /// Players on the server (0 when unknown).
    #[must_use]
    pub fn players(&self) -> u32 {
        self.info.as_ref().map_or(0, |i| i.num_players)
    }

    /// Player slots (0 when unknown).
    #[must_use]
    pub fn max_players(&self) -> u32 {
        self.info.as_ref().map_or(0, |i| i.max_players)
    }

    /// The stable list order: first registration, then id.
    #[must_use]
    pub fn order_key(&self) -> (Timestamp, u64) {
        (self.first_seen, self.id)
    }
}
