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

/// Where the poller queries a record, as the record keeps it: nowhere, at the record's own
/// address (most faces: the key's IP address is where the server answers queries), or
/// elsewhere (GameAgent's query port; then the address is in the record's extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueryAt {
    /// No query address.
    None,
    /// The key's address.
    Key,
    /// [`Extra::query_addr`].
    Other,
}

/// What only some records need, kept out of the record itself so that the common one (a
/// server that registered here, is polled successfully, never upstream-learned, not DDNet)
/// fits a smaller allocator size class: one optional box, allocated only while a field differs
/// from its default.
#[derive(Debug, Clone, PartialEq, Default)]
struct Extra {
    /// The query address when it is not the key's.
    query_addr: Option<SocketAddr>,
    /// The sources when they are not just a direct registration last seen at the last
    /// heartbeat (see [`Record::sources`]).
    sources: Box<[Source]>,
    /// What a DDNet server registered at this address.
    ddnet: Option<Arc<DdnetData>>,
    /// Polls failed in a row since the last success.
    poll_failures: u32,
    /// Re-verification challenges sent since the last proof, without an answer.
    challenges_unanswered: u8,
    /// When the last of those went out.
    last_challenge: Timestamp,
    /// The registering source when it is not the one of the key's own address.
    source: Option<SourceKey>,
}

impl Extra {
    fn is_default(&self) -> bool {
        self.query_addr.is_none()
            && self.sources.is_empty()
            && self.ddnet.is_none()
            && self.poll_failures == 0
            && self.challenges_unanswered == 0
            && self.last_challenge == Timestamp::default()
            && self.source.is_none()
    }
}

/// One record.
///
/// The fields few records use (upstream sources, DDNet data, poll failures, re-verification
/// progress, a query address other than the key's) sit in one optional box behind accessors
/// named like the fields they were; a Quake III record without them takes 112 bytes, with its
/// `Arc` counts one 128-byte allocator size class (it took 224 with them inline, 144 with the
/// game name inline and the registering source in the record).
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
    /// How the poller queries it.
    pub query_protocol: Option<Protocol>,
    /// Verification state.
    pub state: Verification,
    /// Where the query address is ([`Record::query_addr`]).
    query_at: QueryAt,
    /// When it was first registered (and verified: there is no earlier state); the stable
    /// list order.
    pub first_seen: Timestamp,
    /// The last valid heartbeat (a proof counts as one).
    pub last_heartbeat: Timestamp,
    /// The last proof of ownership (registration or re-verification).
    pub last_proof: Timestamp,
    /// The last successful poll.
    ///
    /// Kept as milliseconds + 1 in a `NonZeroU64`, so that "never" takes no room of its own
    /// (8 bytes where an `Option<Timestamp>` takes 16); read and set it through
    /// [`Record::last_poll_ok`] and [`Record::set_last_poll_ok`].
    last_poll_ok: Option<std::num::NonZeroU64>,
    /// What the last successful poll (or the registration itself) said.
    pub info: Option<Arc<PollInfo>>,
    /// The rarely used fields; `None` while all of them have their defaults. The registering
    /// source ([`Record::source`]) is there only when it is not the key's own address's.
    extra: Option<Box<Extra>>,
}

// A record and its `Arc` counts fill one 128-byte allocator size class; 8 bytes more and
// every record takes the next class (160 bytes): 32 bytes per server at any size.
const _: () = assert!(size_of::<Record>() <= 112);

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

    /// A fresh listed record for `reg` at `now`, direct (see [`Record::sources`]).
    #[must_use]
    pub fn new(id: u64, reg: Registration, now: Timestamp) -> Self {
        let mut rec = Self {
            id,
            key: reg.key,
            face: reg.face,
            game_port: reg.game_port,
            query_protocol: reg.query_protocol,
            state: Verification::Verified,
            query_at: QueryAt::None,
            first_seen: now,
            last_heartbeat: now,
            last_proof: now,
            last_poll_ok: None,
            info: None,
            extra: None,
        };
        rec.set_query_addr(reg.query_addr);
        rec.set_source(reg.source);
        rec
    }

    fn extra(&self) -> Option<&Extra> {
        self.extra.as_deref()
    }

    /// The extension, made when there is none; [`Record::tidy`] must follow a change.
    fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// Drops the extension when everything in it is at its default again.
    fn tidy(&mut self) {
        if self.extra.as_deref().is_some_and(Extra::is_default) {
            self.extra = None;
        }
    }

    /// The source of the key's own address, which most records registered from (for a host
    /// name, which has none, the unspecified IPv4 address's).
    fn key_source(&self) -> SourceKey {
        self.key.addr.ip().map_or(SourceKey::V4(0), SourceKey::of)
    }

    /// The registering source, for the per-source cap.
    #[must_use]
    pub fn source(&self) -> SourceKey {
        self.extra()
            .and_then(|e| e.source)
            .unwrap_or_else(|| self.key_source())
    }

    /// Sets the registering source (kept in the extension only when it is not the key's own
    /// address's).
    pub fn set_source(&mut self, source: SourceKey) {
        if source == self.key_source() {
            if let Some(e) = &mut self.extra {
                e.source = None;
                self.tidy();
            }
        } else {
            self.extra_mut().source = Some(source);
        }
    }

    /// Where the poller queries it.
    #[must_use]
    pub fn query_addr(&self) -> Option<SocketAddr> {
        match (self.query_at, &self.key.addr) {
            (QueryAt::None, _) => None,
            (QueryAt::Key, GameAddr::Ip(a)) => Some(*a),
            (QueryAt::Key, GameAddr::Host { .. }) => None,
            (QueryAt::Other, _) => self.extra().and_then(|e| e.query_addr),
        }
    }

    /// Sets where the poller queries it.
    pub fn set_query_addr(&mut self, addr: Option<SocketAddr>) {
        let at = match (addr, &self.key.addr) {
            (None, _) => QueryAt::None,
            (Some(q), GameAddr::Ip(a)) if q == *a => QueryAt::Key,
            (Some(_), _) => QueryAt::Other,
        };
        self.query_at = at;
        if at == QueryAt::Other {
            self.extra_mut().query_addr = addr;
        } else if let Some(e) = &mut self.extra {
            e.query_addr = None;
            self.tidy();
        }
    }

    /// Where it came from, [`Origin::Direct`] first, then the upstreams by name; at most
    /// [`MAX_SOURCES`]. Empty for a record that only registered here (and whose direct
    /// source was last seen at its last heartbeat, as every heartbeat and proof moves both):
    /// that is read as direct, and takes no allocation.
    #[must_use]
    pub fn sources(&self) -> &[Source] {
        self.extra().map_or(&[], |e| &e.sources)
    }

    /// Sets the sources (an empty list, or a direct one alone seen at the last heartbeat,
    /// is kept as the empty list: direct).
    pub fn set_sources(&mut self, sources: impl Into<Box<[Source]>>) {
        let mut sources = sources.into();
        if matches!(&*sources, [s] if s.origin == Origin::Direct && s.last_seen == self.last_heartbeat)
        {
            sources = Box::default();
        }
        if sources.is_empty() && self.extra.is_none() {
            return;
        }
        self.extra_mut().sources = sources;
        self.tidy();
    }

    /// What a DDNet server registered at this address.
    #[must_use]
    pub fn ddnet(&self) -> Option<&Arc<DdnetData>> {
        self.extra().and_then(|e| e.ddnet.as_ref())
    }

    /// The DDNet data, to change in place.
    pub fn ddnet_mut(&mut self) -> Option<&mut Arc<DdnetData>> {
        self.extra.as_deref_mut().and_then(|e| e.ddnet.as_mut())
    }

    /// Sets what a DDNet server registered at this address.
    pub fn set_ddnet(&mut self, ddnet: Option<Arc<DdnetData>>) {
        if ddnet.is_none() && self.extra.is_none() {
            return;
        }
        self.extra_mut().ddnet = ddnet;
        self.tidy();
    }

    /// Polls failed in a row since the last success.
    #[must_use]
    pub fn poll_failures(&self) -> u32 {
        self.extra().map_or(0, |e| e.poll_failures)
    }

    /// Sets the polls failed in a row.
    pub fn set_poll_failures(&mut self, n: u32) {
        if n == 0 && self.extra.is_none() {
            return;
        }
        self.extra_mut().poll_failures = n;
        self.tidy();
    }

    /// Re-verification challenges sent since the last proof, without an answer.
    #[must_use]
    pub fn challenges_unanswered(&self) -> u8 {
        self.extra().map_or(0, |e| e.challenges_unanswered)
    }

    /// When the last re-verification challenge went out (the epoch when none did).
    #[must_use]
    pub fn last_challenge(&self) -> Timestamp {
        self.extra()
            .map_or(Timestamp::default(), |e| e.last_challenge)
    }

    /// Sets the re-verification progress: challenges unanswered, and when the last went out.
    pub fn set_challenges(&mut self, unanswered: u8, last: Timestamp) {
        if unanswered == 0 && last == Timestamp::default() && self.extra.is_none() {
            return;
        }
        let e = self.extra_mut();
        e.challenges_unanswered = unanswered;
        e.last_challenge = last;
        self.tidy();
    }

    /// Forgets the unanswered re-verification challenges (a proof came), keeping when the last
    /// went out.
    pub fn clear_challenges(&mut self) {
        if self.challenges_unanswered() != 0 {
            let last = self.last_challenge();
            self.set_challenges(0, last);
        }
    }

    /// Whether a face registered it here (or it predates sources): the registration's face
    /// rules decide its lifetime, and it is exported as this master's own.
    #[must_use]
    pub fn is_direct(&self) -> bool {
        let s = self.sources();
        s.is_empty() || s.iter().any(|s| s.origin == Origin::Direct)
    }

    /// When the upstream `name` last listed it, if it is one of its sources.
    #[must_use]
    pub fn seen_by(&self, name: &str) -> Option<Timestamp> {
        self.sources()
            .iter()
            .find(|s| s.origin.upstream() == Some(name))
            .map(|s| s.last_seen)
    }

    /// The last time any upstream listed it (`None`: no upstream source).
    #[must_use]
    pub fn last_learned(&self) -> Option<Timestamp> {
        self.sources()
            .iter()
            .filter(|s| s.origin != Origin::Direct)
            .map(|s| s.last_seen)
            .max()
    }

    /// The sources as they read: the kept ones, or a direct one seen at the last heartbeat.
    fn full_sources(&self) -> Vec<Source> {
        match self.sources() {
            [] => vec![Source {
                origin: Origin::Direct,
                last_seen: self.last_heartbeat,
            }],
            s => s.to_vec(),
        }
    }

    /// Keeps only the sources `keep` accepts (a direct-only record's direct source as
    /// [`Record::sources`] reads it); returns whether any is left. A record left without any
    /// reads as direct again: the caller removes it.
    pub fn retain_sources(&mut self, keep: impl FnMut(&Source) -> bool) -> bool {
        let mut sources = self.full_sources();
        sources.retain(keep);
        let left = !sources.is_empty();
        self.set_sources(sources);
        left
    }

    /// Adds `origin` or moves its time to `now` (never back); returns whether it was added.
    /// A record already at [`MAX_SOURCES`] keeps its sources. A direct-only record seen
    /// directly again changes nothing here (its direct source reads as its last heartbeat).
    pub fn see(&mut self, origin: &Origin, now: Timestamp) -> bool {
        if self.sources().is_empty() && *origin == Origin::Direct {
            return false;
        }
        let mut sources = self.full_sources();
        if let Some(s) = sources.iter_mut().find(|s| s.origin == *origin) {
            s.last_seen = s.last_seen.max(now);
            self.set_sources(sources);
            return false;
        }
        if sources.len() >= MAX_SOURCES {
            return false;
        }
        sources.push(Source {
            origin: origin.clone(),
            last_seen: now,
        });
        sources.sort_by(|a, b| a.origin.cmp(&b.origin));
        self.set_sources(sources);
        true
    }

    /// A record learned from `origin` only (not registered here).
    pub fn set_learned_from(&mut self, origin: Origin, now: Timestamp) {
        self.set_sources(vec![Source {
            origin,
            last_seen: now,
        }]);
    }

    /// Moves the direct source's time to `now` (never back), for a record with upstream
    /// sources too (a direct-only record's reads as its last heartbeat).
    pub fn see_direct(&mut self, now: Timestamp) {
        if self.sources().iter().any(|s| s.origin == Origin::Direct) {
            self.see(&Origin::Direct, now);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(addr: &str, query: Option<&str>) -> Registration {
        let a: SocketAddr = addr.parse().unwrap();
        Registration {
            key: ServerKey::new("q3", GameAddr::Ip(a)),
            face: Face::Quake3,
            game_port: Some(a.port()),
            query_addr: query.map(|q| q.parse().unwrap()),
            query_protocol: Some(Protocol::Quake3),
            source: SourceKey::of(a.ip()),
        }
    }

    #[test]
    fn a_source_other_than_the_keys_own_address_is_kept_aside() {
        let own = Record::new(1, reg("192.0.2.1:27960", None), Timestamp(5));
        assert_eq!(own.source(), SourceKey::of("192.0.2.1".parse().unwrap()));
        assert!(own.extra.is_none(), "the key's own source takes no room");

        let mut elsewhere = reg("192.0.2.1:27960", None);
        elsewhere.source = SourceKey::of("198.51.100.9".parse().unwrap());
        let mut r = Record::new(2, elsewhere, Timestamp(5));
        assert_eq!(r.source(), SourceKey::of("198.51.100.9".parse().unwrap()));
        assert!(r.extra.is_some());
        // Set back to the key's own: the extension goes again.
        r.set_source(SourceKey::of("192.0.2.1".parse().unwrap()));
        assert_eq!(r.source(), SourceKey::of("192.0.2.1".parse().unwrap()));
        assert!(r.extra.is_none());

        // A host name has no address of its own: any source but the unspecified one is kept.
        let mut host = reg("192.0.2.1:27960", None);
        host.key.addr = GameAddr::Host {
            host: "example.invalid".into(),
            port: 27960,
        };
        let h = Record::new(3, host, Timestamp(5));
        assert_eq!(h.source(), SourceKey::of("192.0.2.1".parse().unwrap()));
        assert!(h.extra.is_some());
    }

    #[test]
    fn a_server_queried_at_its_own_address_keeps_no_extension() {
        let r = Record::new(
            1,
            reg("192.0.2.1:27960", Some("192.0.2.1:27960")),
            Timestamp(5),
        );
        assert!(r.extra.is_none());
        assert_eq!(r.query_addr(), Some("192.0.2.1:27960".parse().unwrap()));
        assert!(r.sources().is_empty() && r.is_direct());
        let none = Record::new(2, reg("192.0.2.1:27960", None), Timestamp(5));
        assert!(none.extra.is_none());
        assert_eq!(none.query_addr(), None);
    }

    #[test]
    fn another_query_address_lives_in_the_extension_until_it_is_the_keys() {
        let mut r = Record::new(
            1,
            reg("192.0.2.1:25600", Some("192.0.2.1:25601")),
            Timestamp(5),
        );
        assert!(r.extra.is_some());
        assert_eq!(r.query_addr(), Some("192.0.2.1:25601".parse().unwrap()));
        r.set_query_addr(Some("192.0.2.1:25600".parse().unwrap()));
        assert!(r.extra.is_none(), "same as the key's: nothing extra");
        assert_eq!(r.query_addr(), Some("192.0.2.1:25600".parse().unwrap()));
        // A host-name key has no address of its own to be queried at.
        let mut host = Record::new(3, reg("192.0.2.1:25600", None), Timestamp(5));
        host.key.addr = GameAddr::Host {
            host: "example.invalid".into(),
            port: 25600,
        };
        host.set_query_addr(Some("192.0.2.9:1".parse().unwrap()));
        assert_eq!(host.query_addr(), Some("192.0.2.9:1".parse().unwrap()));
    }

    #[test]
    fn rare_fields_make_the_extension_and_give_it_back_at_their_defaults() {
        let mut r = Record::new(
            1,
            reg("192.0.2.1:27960", Some("192.0.2.1:27960")),
            Timestamp(5),
        );
        r.set_poll_failures(3);
        r.set_challenges(2, Timestamp(9));
        assert_eq!(
            (
                r.poll_failures(),
                r.challenges_unanswered(),
                r.last_challenge()
            ),
            (3, 2, Timestamp(9))
        );
        r.set_poll_failures(0);
        r.clear_challenges();
        assert_eq!(
            r.last_challenge(),
            Timestamp(9),
            "kept: when the last went out"
        );
        assert!(r.extra.is_some());
        r.set_challenges(0, Timestamp::default());
        assert!(r.extra.is_none());
        assert_eq!(
            r,
            Record::new(
                1,
                reg("192.0.2.1:27960", Some("192.0.2.1:27960")),
                Timestamp(5)
            )
        );
    }

    #[test]
    fn direct_only_sources_read_as_one_direct_source_and_take_no_room() {
        let mut r = Record::new(1, reg("192.0.2.1:27960", None), Timestamp(5));
        let up = Origin::Upstream(Arc::from("peer"));
        assert!(!r.see(&Origin::Direct, Timestamp(6)), "direct already");
        assert!(r.extra.is_none());
        assert!(r.see(&up, Timestamp(7)));
        assert_eq!(
            r.sources(),
            [
                Source {
                    origin: Origin::Direct,
                    last_seen: Timestamp(5)
                },
                Source {
                    origin: up.clone(),
                    last_seen: Timestamp(7)
                }
            ]
        );
        r.last_heartbeat = Timestamp(8);
        r.see_direct(Timestamp(8));
        assert_eq!(r.last_learned(), Some(Timestamp(7)));
        // The upstream drops it: direct alone again, at its last heartbeat, kept as nothing.
        assert!(r.retain_sources(|s| s.origin != up));
        assert!(r.sources().is_empty() && r.extra.is_none() && r.is_direct());
        // A learned record losing its last source has none left.
        let mut learned = Record::new(2, reg("192.0.2.2:27960", None), Timestamp(5));
        learned.set_learned_from(up.clone(), Timestamp(5));
        assert!(!learned.is_direct());
        assert!(!learned.retain_sources(|s| s.origin != up));
    }
}
