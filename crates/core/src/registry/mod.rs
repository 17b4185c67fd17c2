//! The one registry behind every master face: a plain struct, no I/O, no clock.
//!
//! The registry owns everything the daemon knows about a server: the record, its verification
//! state, its lifetime, the per-source caps, what a DDNet server registered, the re-verification
//! progress. Faces own nothing but the bounded proof exchanges still in flight (a challenge
//! sent, no answer yet); lists are derived from the registry ([`crate::views`]), never kept
//! beside it.
//!
//! Every change goes through a method here, and each one that changes a record is written to
//! two logs: the *view log* ([`Registry::take_changes`]), which the publisher turns into the
//! next [`crate::views::Snapshot`], and the *dirty set* ([`Registry::take_dirty`]), which the
//! persister writes to the store. Nothing else mutates a record.
//!
//! # Time
//! Time is an argument of type [`Timestamp`]: unix time in **milliseconds**, passed in by the
//! caller (the daemon reads the wall clock once per operation; tests pass literals). Wall-clock
//! time rather than `Instant` because records are persisted and must still expire correctly
//! after a restart. A clock that steps backwards only delays expiry; it never panics.
//!
//! # Keys and addresses
//! A record is keyed by [`ServerKey`]: the game name (ASCII lower-cased), the address the face
//! registered it under, and an `instance` number. The address is the game address for
//! GameAgent (A, P − 1), Teeworlds and DDNet; for GameSpy it is the heartbeat address (source
//! IP, heartbeat query port), because a heartbeat does not carry the game port — that is learned
//! by polling and kept in [`Record::game_port`]. `instance` is 0 except for the management
//! face, which passes its connection id, because two connections may register the same
//! address and both are listed (`management-server.md` §7.2).
//!
//! # States
//! A record exists only once a face proved the server owns its address (a challenge answered,
//! a TCP handshake): there is no pending state here, so a forged source can never take a slot.
//! `Verified` records are listed; `Delisted` ones failed a re-verification or too many polls and
//! are kept (heartbeats keep them alive) but not listed until a face verifies them again.
//!
//! # Expiry
//! A record expires its lifetime after the later of its last valid heartbeat and its last
//! successful poll. The lifetime is [`RegistryConfig::game_lifetimes`] for the game if set,
//! else the face's entry of [`RegistryConfig::face_lifetimes`]; a face without an entry (the
//! management server by default) never expires by time: its records leave when their
//! connection closes.
//!
//! # Sources
//! A record knows where it came from ([`Record::sources`]): [`Origin::Direct`] when a face
//! proved it here, and [`Origin::Upstream`] for each configured upstream master that listed
//! it, each with the time it last did. A learned record enters only through
//! [`Registry::learn`], after the upstream module queried the server successfully itself, so
//! an upstream that lies adds load, never records. A direct record lives by its face's
//! lifetime; a learned one lives while an upstream lists it
//! ([`RegistryConfig::learned_lifetime`] after the last pull that did), leaves when every
//! upstream dropped it ([`Registry::upstream_pull`]), and is removed, not kept de-listed, when
//! its polls fail (no face would prove it again).
//!
//! # What this does not do
//! No challenges, no token buckets, no persistence: faces own proof exchanges,
//! `muster_proto::limit` owns rate limits, [`crate::store`] owns persistence. The per-source
//! cap here counts records, not requests.

mod ddnet;
mod game_name;
pub mod infos;
mod key;
mod poll;
mod record;
mod table;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use muster_proto::limit::SourceKey;

pub use ddnet::{
    DDNET_STREAM_SCHEMES, DdnetData, DdnetSecret, DdnetStream, MAX_DDNET_INFO, MAX_DDNET_STREAMS,
};
pub use infos::{DdnetInfo, InfoFile, InfoStats};
pub use key::{
    Face, GameAddr, GameName, MAX_GAME_LEN, MAX_HOST_LEN, ServerKey, ShortText, Timestamp,
    addr_text, protocol_from_name,
};
pub use poll::{
    MAX_POLL_PLAYERS, MAX_POLL_RULES, MAX_POLL_TEXT, PlayersView, PollFields, PollInfo, PollPlayer,
    PollPlayers, Rules, RulesView, short,
};
pub use record::{MAX_SOURCES, Origin, Record, Registration, Source, Verification};

/// Default cap on records per source (IPv4 address / IPv6 /64): a hosting box runs hundreds
/// of servers on one address (DDNet hosts, game-hosting companies), so the cap is sized for
/// one of 1024; the total cap and the faces' per-source buckets bound the rest.
pub const DEFAULT_MAX_PER_SOURCE: usize = 1024;
/// Default cap on records in total (a memory bound, far above any real master's load).
pub const DEFAULT_MAX_RECORDS: usize = 1_000_000;

/// Why a registration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// The source already has [`RegistryConfig::max_per_source`] records.
    SourceCap,
    /// The registry holds [`RegistryConfig::max_records`] records.
    RecordCap,
    /// The game name is empty, longer than [`MAX_GAME_LEN`] or not printable ASCII.
    BadGame,
    /// A host name address is empty or longer than [`MAX_HOST_LEN`], or the port is 0.
    BadAddress,
    /// A DDNet server already has [`MAX_DDNET_STREAMS`] addresses.
    StreamCap,
}

impl Reject {
    /// The stable name used in metrics.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::SourceCap => "source_cap",
            Self::RecordCap => "record_cap",
            Self::BadGame => "bad_game",
            Self::BadAddress => "bad_address",
            Self::StreamCap => "stream_cap",
        }
    }
}

/// Result of [`Registry::register`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A new record, listed.
    Added,
    /// A listed record was refreshed (the proof counts as a heartbeat).
    Refreshed,
    /// A de-listed record was proven again and is listed again.
    Relisted,
    /// Refused; nothing changed.
    Rejected(Reject),
}

impl Outcome {
    /// Whether the record is listed now.
    #[must_use]
    pub const fn is_listed(self) -> bool {
        !matches!(self, Self::Rejected(_))
    }
}

/// Result of [`Registry::heartbeat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// A listed record: its last heartbeat is now.
    Refreshed,
    /// A de-listed record: kept alive, still not listed (only a proof lists it again).
    NotListed,
    /// No such record.
    Unknown,
}

/// Result of [`Registry::verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyOutcome {
    /// De-listed before, listed now.
    Verified,
    /// Already listed; the proof is refreshed.
    AlreadyVerified,
    /// No such record.
    Unknown,
}

/// Result of [`Registry::delist`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelistOutcome {
    /// Was listed, is not any more.
    Delisted,
    /// Was not listed.
    NotListed,
    /// No such record.
    Unknown,
}

/// Result of [`Registry::update_poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollOutcome {
    /// Stored; the failure count is 0 again.
    Updated,
    /// Counted; the number of failures in a row.
    Failed(u32),
    /// No such record.
    Unknown,
}

/// What a DDNet register POST asks of the registry ([`Registry::ddnet_register`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DdnetRegister {
    /// The listed address (peer IP, `Address` port).
    pub addr: std::net::SocketAddr,
    /// The server's `Secret`.
    pub secret: DdnetSecret,
    /// `Info-Serial` (0 when absent).
    pub serial: i64,
    /// The info object as registered (compact JSON), when the POST had a body.
    pub info: Option<bytes::Bytes>,
    /// The registry's plain view of that info, when it has DDNet's schema.
    pub poll_info: Option<PollInfo>,
    /// The stream URL as listed (`tw-0.6+udp://1.2.3.4:8303`).
    pub url: Arc<str>,
}

/// Result of [`Registry::ddnet_register`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdnetOutcome {
    /// Listed: new, or something a list or the store's copy of its info shows changed.
    Success,
    /// Listed already with this info, secret and stream: only its times moved, which no
    /// list shows (the store gets them with its next periodic flush).
    Refreshed,
    /// No info at this serial or newer is known for the secret: the server must send it.
    NeedInfo,
    /// Refused; nothing changed.
    Rejected(Reject),
}

/// What [`Registry::upstream_pull`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PullApplied {
    /// Records the upstream listed that were known here already (its source refreshed or
    /// added).
    pub seen: usize,
    /// Records whose source this upstream was and which it no longer lists (the source is
    /// gone).
    pub dropped: usize,
    /// Of those, records removed because no source was left.
    pub removed: usize,
}

/// How many parts [`Registry::prune_part`] splits the records into.
pub const PRUNE_PARTS: usize = table::PARTS;

/// Limits and lifetimes of the registry.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryConfig {
    /// Records per source.
    pub max_per_source: usize,
    /// Records in total.
    pub max_records: usize,
    /// Lifetime after the last valid heartbeat or successful poll, per face. A face without
    /// an entry never expires by time.
    pub face_lifetimes: HashMap<Face, Duration>,
    /// Per-game overrides of a face's lifetime: face → lower-case game name → lifetime. Per
    /// face because one game may heartbeat at different rates through different faces (a
    /// Serious Sam server: 150 s GameSpy heartbeats, GameAgent's own 300 s expiry).
    pub game_lifetimes: HashMap<Face, HashMap<String, Duration>>,
    /// How long an upstream's word keeps a learned record (or that source of a direct one)
    /// after its last pull listed it.
    pub learned_lifetime: Duration,
    /// Where the registry keeps the DDNet infos it holds: an unnamed file in this directory
    /// ([`infos`]); `None`: in memory as they came.
    pub info_dir: Option<std::path::PathBuf>,
}

/// Default of [`RegistryConfig::learned_lifetime`]: 1800 s, as the 333networks masters keep
/// servers imported by sync (`gamespy-master.md` §14).
pub const DEFAULT_LEARNED_LIFETIME: Duration = Duration::from_secs(1800);

impl Default for RegistryConfig {
    /// The spec defaults: GameAgent 300 s (`gameagent.md` §8.3.7), GameSpy 300 s (Unreal family,
    /// `gamespy-master.md` §14; Serious Sam gamenames heartbeating by GameSpy 570 s), Teeworlds
    /// UDP 90 s, DDNet HTTP 30 s (`teeworlds-master.md` §5.3), Quake III 15 min (dpmaster's), Valve
    /// 5 min (xash3d-master's),
    /// management: connection-bound.
    fn default() -> Self {
        let face_lifetimes = HashMap::from([
            (Face::GameAgent, Duration::from_secs(300)),
            (Face::GameSpy, Duration::from_secs(300)),
            (Face::Teeworlds07, Duration::from_secs(90)),
            (Face::Teeworlds06, Duration::from_secs(90)),
            (Face::DdnetHttp, Duration::from_secs(30)),
            (Face::Quake3, Duration::from_secs(900)),
            (Face::Valve, Duration::from_secs(300)),
        ]);
        let sam = SERIOUS_SAM_GAMES
            .into_iter()
            .map(|g| (g.to_owned(), Duration::from_secs(570)))
            .collect();
        let game_lifetimes = HashMap::from([(Face::GameSpy, sam)]);
        Self {
            max_per_source: DEFAULT_MAX_PER_SOURCE,
            max_records: DEFAULT_MAX_RECORDS,
            face_lifetimes,
            game_lifetimes,
            learned_lifetime: DEFAULT_LEARNED_LIFETIME,
            info_dir: None,
        }
    }
}

impl RegistryConfig {
    /// The lifetime of records of `face` and `game`, or `None` when they never expire by time.
    #[must_use]
    pub fn lifetime(&self, face: Face, game: &str) -> Option<Duration> {
        self.game_lifetimes
            .get(&face)
            .and_then(|m| m.get(game))
            .or_else(|| self.face_lifetimes.get(&face))
            .copied()
    }
}

/// The games of the Serious Sam family (GameAgent lists only these).
pub const SERIOUS_SAM_GAMES: [&str; 3] = ["serioussam", "serioussamse", "serioussamsed"];
/// The GameSpy gamenames the UT2003 text list publishes (`ut2003-list.md` §6).
pub const UT2003_LIST_GAMES: [&str; 4] = ["ut2", "ut2d", "ut2004", "ut2004d"];
/// The games the Teeworlds faces list.
pub const TEEWORLDS_GAMES: [&str; 2] = ["teeworlds", "ddnet"];

/// One entry of the view log: a record's new version, or its removal.
#[derive(Debug, Clone)]
pub struct Change {
    /// [`Record::id`] of the record.
    pub id: u64,
    /// Its place in the list order ([`Record::order_key`]; never changes for an id).
    pub order: (Timestamp, u64),
    /// The record as it is now; `None` when it was removed.
    pub record: Option<Arc<Record>>,
    /// Whether list membership, order or a listed field may have changed (false for a plain
    /// refresh of heartbeat or proof times, which no list shows but `last_seen`).
    pub structural: bool,
}

/// The registry. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    config: RegistryConfig,
    records: table::RecordTable,
    per_source: HashMap<SourceKey, u32>,
    next_id: u64,
    changes: Vec<Change>,
    /// The id of the record whose view-log entry [`Registry::record_to_change`] emptied, until
    /// the log that must follow fills it again (checked in debug builds).
    released: Option<u64>,
    dirty: HashSet<ServerKey>,
    structural_dirty: bool,
    version: u64,
    /// Where the DDNet infos go (see [`RegistryConfig::info_dir`]).
    infos: Option<Arc<InfoFile>>,
}

fn game_ok(game: &str) -> bool {
    !game.is_empty() && game.len() <= MAX_GAME_LEN && game.bytes().all(|b| b.is_ascii_graphic())
}

impl Registry {
    /// An empty registry.
    #[must_use]
    pub fn new(config: RegistryConfig) -> Self {
        Self {
            infos: config.info_dir.as_deref().map(|d| InfoFile::new(Some(d))),
            config,
            ..Self::default()
        }
    }

    /// The file the DDNet infos are kept in, if they are not kept in memory.
    #[must_use]
    pub fn info_file(&self) -> Option<&Arc<InfoFile>> {
        self.infos.as_ref()
    }

    /// `info`, kept where the registry keeps its DDNet infos.
    fn own_info(&self, info: &DdnetInfo) -> DdnetInfo {
        match &self.infos {
            Some(f) => f.keep(info),
            None => info.clone(),
        }
    }

    /// `rec` with its DDNet info kept where the registry keeps them (it came from the store
    /// or another instance): the info of the record it replaces when that has the same serial
    /// and bytes (another instance's refresh sends the info again), else a new one.
    fn own_ddnet(&self, rec: &mut Record) {
        let local = self
            .records
            .get(&rec.key)
            .and_then(|old| old.ddnet())
            .zip(rec.ddnet())
            .filter(|(old, d)| old.serial == d.serial && old.info == d.info)
            .map(|(old, _)| old.info.clone());
        let Some(d) = rec.ddnet_mut() else { return };
        let info = local.unwrap_or_else(|| self.own_info(&d.info));
        if !info.same_as(&d.info) {
            Arc::make_mut(d).info = info;
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    /// Records in total.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are no records.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// How many changes were ever made (every logged change bumps it).
    #[must_use]
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Records of one source.
    #[must_use]
    pub fn count_of_source(&self, source: SourceKey) -> usize {
        self.per_source.get(&source).map_or(0, |n| *n as usize)
    }

    /// The records registered under the address `addr` (any game, any instance, listed or
    /// not), from the registry's own index: no pass over every record.
    pub fn at_addr<'a>(&'a self, addr: &'a GameAddr) -> impl Iterator<Item = &'a Arc<Record>> + 'a {
        self.records.at_addr(addr)
    }

    /// The record under `key`.
    #[must_use]
    pub fn get(&self, key: &ServerKey) -> Option<&Record> {
        self.records.get(key).map(AsRef::as_ref)
    }

    /// Every record, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Record> {
        self.records.values().map(AsRef::as_ref)
    }

    /// Every record as shared, in no particular order (for the publisher's first build).
    pub fn iter_shared(&self) -> impl Iterator<Item = &Arc<Record>> {
        self.records.values()
    }

    /// The view log since the last call: what the publisher applies to its mirror.
    pub fn take_changes(&mut self) -> Vec<Change> {
        debug_assert!(
            self.released.is_none(),
            "an emptied view-log entry was not filled"
        );
        std::mem::take(&mut self.changes)
    }

    /// Keys changed since the last call: what the persister writes (a key whose record is gone
    /// is a deletion).
    pub fn take_dirty(&mut self) -> HashSet<ServerKey> {
        self.structural_dirty = false;
        std::mem::take(&mut self.dirty)
    }

    /// Whether a key waiting for the persister changed structurally (a registration, a
    /// removal, a new state), so it should be written soon rather than with the next batch.
    #[must_use]
    pub fn has_structural_dirty(&self) -> bool {
        self.structural_dirty
    }

    /// The record under `key`, shared.
    #[must_use]
    pub fn get_shared(&self, key: &ServerKey) -> Option<&Arc<Record>> {
        self.records.get(key)
    }

    /// Marks keys changed again (a write of them failed and must be retried).
    pub fn mark_dirty(&mut self, keys: impl IntoIterator<Item = ServerKey>) {
        self.dirty.extend(keys);
        self.structural_dirty = true;
    }

    /// Keys waiting for the persister.
    #[must_use]
    pub fn dirty_len(&self) -> usize {
        self.dirty.len()
    }

    fn log(&mut self, key: &ServerKey, structural: bool) {
        self.structural_dirty |= structural;
        self.log_view(key, structural);
        self.dirty.insert(key.clone());
    }

    /// The view-log half of [`Registry::log`]: the publisher sees the change, the persister
    /// does not.
    fn log_view(&mut self, key: &ServerKey, structural: bool) {
        self.version = self.version.wrapping_add(1);
        // Unique here when it changes: whoever changed the record just made it so. One lookup
        // sets the deadline and gives the record (three took a tenth of a registration's
        // registry time, a key hash and a record read each).
        let config = &self.config;
        if let Some(rec) = self
            .records
            .set_deadline_of(key, |r| deadline_with(config, r))
        {
            match self.changes.last_mut() {
                // The entry `record_to_change` emptied for this change.
                Some(last) if last.id == rec.id && last.record.is_none() => {
                    last.record = Some(Arc::clone(rec));
                    last.structural |= structural;
                    self.released = None;
                }
                _ => self.changes.push(Change {
                    id: rec.id,
                    order: rec.order_key(),
                    record: Some(Arc::clone(rec)),
                    structural,
                }),
            }
        }
    }

    /// The record under `key`, to change; a [`Registry::log`] of it must follow. When the view
    /// log's last entry holds this record (changed twice in a row: a registration and then
    /// its info, its DDNet data or a poll), the entry lets go of it first, so that the record
    /// is changed in place instead of copied (a second 256-byte record per registration, kept
    /// until the publisher drained the log); the log that follows fills the entry again, as
    /// one change: the publisher reads two changes of one record in a row as the last one.
    fn record_to_change(&mut self, key: &ServerKey) -> Option<&mut Record> {
        debug_assert!(
            self.released.is_none(),
            "an emptied view-log entry was not filled"
        );
        let rec = self.records.get_mut(key)?;
        if let Some(last) = self.changes.last_mut() {
            if last.record.as_ref().is_some_and(|r| r.key == *key) {
                last.record = None;
                self.released = Some(last.id);
            }
        }
        Some(Arc::make_mut(rec))
    }

    fn log_removal(&mut self, rec: &Record) {
        self.structural_dirty = true;
        self.log_removal_view(rec);
        self.dirty.insert(rec.key.clone());
    }

    fn log_removal_view(&mut self, rec: &Record) {
        self.version = self.version.wrapping_add(1);
        self.changes.push(Change {
            id: rec.id,
            order: rec.order_key(),
            record: None,
            structural: true,
        });
    }

    fn key_ok(reg: &Registration) -> Result<(), Reject> {
        if !game_ok(&reg.key.game) {
            return Err(Reject::BadGame);
        }
        let bad_host = matches!(&reg.key.addr, GameAddr::Host { host, .. } if host.is_empty() || host.len() > MAX_HOST_LEN);
        if bad_host || reg.key.addr.port() == 0 {
            return Err(Reject::BadAddress);
        }
        Ok(())
    }

    /// Why a new record for `reg` may not be added, if it may not: its key, then the caps.
    fn refuses_new(&self, reg: &Registration) -> Result<(), Reject> {
        Self::key_ok(reg)?;
        if self.count_of_source(reg.source) >= self.config.max_per_source {
            return Err(Reject::SourceCap);
        }
        if self.records.len() >= self.config.max_records {
            return Err(Reject::RecordCap);
        }
        Ok(())
    }

    /// A new listed record for `reg` (with `info`, when given), unless [`Self::refuses_new`].
    fn insert_new(&mut self, reg: Registration, now: Timestamp, info: Option<PollInfo>) -> Outcome {
        if let Err(r) = self.refuses_new(&reg) {
            return Outcome::Rejected(r);
        }
        *self.per_source.entry(reg.source).or_insert(0) += 1;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut rec = Record::new(id, reg, now);
        rec.info = info.map(Arc::new);
        let key = rec.key.clone();
        self.put(rec);
        self.log(&key, true);
        Outcome::Added
    }

    /// A registration with proof of ownership (an answered challenge, `fw!!`, `\validate\`, a
    /// DDNet challenge token, a management registration over TCP). Unknown key: a new listed
    /// record, subject to the caps (`Added`). Known key: face, game port, query address and
    /// protocol are taken from `reg` (the source stays the first one), the proof and heartbeat
    /// times are now, re-verification starts over; a de-listed record is listed again
    /// (`Relisted`), a listed one refreshed (`Refreshed`).
    pub fn register(&mut self, reg: Registration, now: Timestamp) -> Outcome {
        self.register_changed(reg, now).0
    }

    /// [`Registry::register`] for a face where one address is one server: the face's records
    /// at the same address under another key (another game) are removed first.
    pub fn register_replacing(&mut self, reg: Registration, now: Timestamp) -> Outcome {
        self.remove_other_games(&reg);
        self.register(reg, now)
    }

    /// [`Registry::register_replacing`], then [`Registry::registration_info`] with `info` when
    /// the server is listed. A new record is put with its info: one lookup of the key where
    /// the two calls made five, for the registration a face's burst is made of.
    pub fn register_replacing_with_info(
        &mut self,
        reg: Registration,
        now: Timestamp,
        info: PollInfo,
    ) -> Outcome {
        self.remove_other_games(&reg);
        if self.records.get(&reg.key).is_none() {
            return self.insert_new(reg, now, Some(info));
        }
        let key = reg.key.clone();
        let out = self.register(reg, now);
        if out.is_listed() {
            self.registration_info(&key, info);
        }
        out
    }

    /// Removes the records of `reg`'s face at its address under another key (another game).
    fn remove_other_games(&mut self, reg: &Registration) {
        let stale: Vec<ServerKey> = self
            .at_addr(&reg.key.addr)
            .filter(|r| r.face == reg.face && r.key != reg.key)
            .map(|r| r.key.clone())
            .collect();
        for k in stale {
            self.remove(&k);
        }
    }

    /// [`Registry::register`], and whether it changed anything beyond the record's times
    /// (always for an added or relisted record).
    fn register_changed(&mut self, reg: Registration, now: Timestamp) -> (Outcome, bool) {
        let key = reg.key.clone();
        let Some(rec) = self.records.get_mut(&key) else {
            return (self.insert_new(reg, now, None), true);
        };
        let rec = Arc::make_mut(rec);
        let structural = rec.face != reg.face
            || (reg.game_port.is_some() && rec.game_port != reg.game_port)
            || rec.query_addr() != reg.query_addr
            || rec.query_protocol != reg.query_protocol
            || rec.state != Verification::Verified;
        rec.face = reg.face;
        if reg.game_port.is_some() {
            rec.game_port = reg.game_port;
        }
        rec.set_query_addr(reg.query_addr);
        rec.query_protocol = reg.query_protocol;
        rec.last_heartbeat = rec.last_heartbeat.max(now);
        rec.last_proof = rec.last_proof.max(now);
        rec.clear_challenges();
        // A learned record proven by its face becomes this master's own.
        let became_direct = !rec.is_direct();
        rec.see(&Origin::Direct, now);
        let out = if rec.state == Verification::Verified {
            Outcome::Refreshed
        } else {
            rec.state = Verification::Verified;
            Outcome::Relisted
        };
        let changed = structural || became_direct;
        self.log(&key, changed);
        (out, changed || out != Outcome::Refreshed)
    }

    /// A server an upstream listed answered this master's own query: a new listed record with
    /// the source `upstream` (subject to the caps, `Added`), or the source added to the
    /// record under the key, whose face and addresses stay as they are (`Refreshed`; a
    /// de-listed record stays de-listed: only its face proves it again). The caller stores
    /// the query's answer with [`Registry::update_poll`].
    pub fn learn(&mut self, reg: Registration, upstream: &Arc<str>, now: Timestamp) -> Outcome {
        let key = reg.key.clone();
        let origin = Origin::Upstream(Arc::clone(upstream));
        if let Some(rec) = self.records.get_mut(&key) {
            let added = Arc::make_mut(rec).see(&origin, now);
            self.log(&key, added);
            return Outcome::Refreshed;
        }
        if let Err(r) = Self::key_ok(&reg) {
            return Outcome::Rejected(r);
        }
        if self.count_of_source(reg.source) >= self.config.max_per_source {
            return Outcome::Rejected(Reject::SourceCap);
        }
        if self.records.len() >= self.config.max_records {
            return Outcome::Rejected(Reject::RecordCap);
        }
        *self.per_source.entry(reg.source).or_insert(0) += 1;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut rec = Record::new(id, reg, now);
        rec.set_learned_from(origin, now);
        self.put(rec);
        self.log(&key, true);
        Outcome::Added
    }

    /// One successful pull of the upstream `name` listed the known records `listed` (keys of
    /// records this registry has; others are ignored): each gets (or refreshes) the source
    /// `name` at `now`. When the pull was `complete`, every other record whose source `name`
    /// was loses it, and is removed when no source is left (an incomplete pull takes nothing
    /// away). Walks every record once.
    pub fn upstream_pull(
        &mut self,
        name: &Arc<str>,
        listed: &HashSet<ServerKey>,
        now: Timestamp,
        complete: bool,
    ) -> PullApplied {
        let origin = Origin::Upstream(Arc::clone(name));
        let mut out = PullApplied::default();
        let mut touched: Vec<(ServerKey, bool)> = Vec::new();
        let mut gone: Vec<ServerKey> = Vec::new();
        for key in listed {
            if let Some(rec) = self.records.get_mut(key) {
                let added = Arc::make_mut(rec).see(&origin, now);
                touched.push((key.clone(), added));
                out.seen += 1;
            }
        }
        let stale: Vec<ServerKey> = self
            .records
            .values()
            .filter(|r| complete && r.seen_by(name).is_some() && !listed.contains(&r.key))
            .map(|r| r.key.clone())
            .collect();
        for key in stale {
            out.dropped += 1;
            let Some(rec) = self.records.get_mut(&key) else {
                continue;
            };
            let rec = Arc::make_mut(rec);
            if !rec.retain_sources(|s| s.origin != origin) {
                gone.push(key);
            } else {
                touched.push((key, true));
            }
        }
        for (key, structural) in touched {
            self.log(&key, structural);
        }
        for key in gone {
            out.removed += 1;
            self.remove(&key);
        }
        out
    }

    /// The upstream `name` answered that its list did not change (an HTTP 304): every record
    /// it is a source of is seen again at `now`. Returns how many.
    pub fn upstream_unchanged(&mut self, name: &str, now: Timestamp) -> usize {
        let keys: Vec<ServerKey> = self
            .records
            .values()
            .filter(|r| r.seen_by(name).is_some())
            .map(|r| r.key.clone())
            .collect();
        let origin = Origin::Upstream(Arc::from(name));
        for key in &keys {
            if let Some(rec) = self.records.get_mut(key) {
                Arc::make_mut(rec).see(&origin, now);
            }
            self.log(key, false);
        }
        keys.len()
    }

    /// A keep-alive (GameAgent `0` with echo 0, GameSpy heartbeat from a known source, a
    /// Teeworlds heartbeat). A listed or de-listed record lives on; nothing is created: an
    /// unknown server must prove itself through its face first.
    pub fn heartbeat(&mut self, key: &ServerKey, now: Timestamp) -> HeartbeatOutcome {
        let Some(rec) = self.records.get_mut(key) else {
            return HeartbeatOutcome::Unknown;
        };
        let rec = Arc::make_mut(rec);
        rec.last_heartbeat = rec.last_heartbeat.max(now);
        rec.see_direct(now);
        let out = if rec.state == Verification::Verified {
            HeartbeatOutcome::Refreshed
        } else {
            HeartbeatOutcome::NotListed
        };
        self.log(key, false);
        out
    }

    /// A re-verification of a known record succeeded: it is listed (again), its proof and
    /// heartbeat times are now and unanswered challenges are forgotten.
    pub fn verify(&mut self, key: &ServerKey, now: Timestamp) -> VerifyOutcome {
        let Some(rec) = self.records.get_mut(key) else {
            return VerifyOutcome::Unknown;
        };
        let rec = Arc::make_mut(rec);
        rec.last_heartbeat = rec.last_heartbeat.max(now);
        rec.last_proof = rec.last_proof.max(now);
        rec.clear_challenges();
        let out = if rec.state == Verification::Verified {
            VerifyOutcome::AlreadyVerified
        } else {
            rec.state = Verification::Verified;
            VerifyOutcome::Verified
        };
        self.log(key, out == VerifyOutcome::Verified);
        out
    }

    /// A re-verification challenge went out to a listed record without an answer yet; returns
    /// how many are unanswered now (`None`: no such record).
    pub fn challenge_sent(&mut self, key: &ServerKey, now: Timestamp) -> Option<u8> {
        let rec = Arc::make_mut(self.records.get_mut(key)?);
        let n = rec.challenges_unanswered().saturating_add(1);
        rec.set_challenges(n, now);
        self.log(key, false);
        Some(n)
    }

    /// A re-verification failed (or polls did): stop listing the record until it is verified
    /// again. A learned record that no face registered is removed instead: nothing would
    /// prove it again, and its upstreams may offer it anew.
    pub fn delist(&mut self, key: &ServerKey) -> DelistOutcome {
        let Some(rec) = self.records.get_mut(key) else {
            return DelistOutcome::Unknown;
        };
        if rec.state != Verification::Verified {
            return DelistOutcome::NotListed;
        }
        if !rec.is_direct() {
            self.remove(key);
            return DelistOutcome::Delisted;
        }
        Arc::make_mut(rec).state = Verification::Delisted;
        self.log(key, true);
        DelistOutcome::Delisted
    }

    /// Removes a record (DDNet delete, management unregister or connection close, a face
    /// replacing it). Returns it.
    pub fn remove(&mut self, key: &ServerKey) -> Option<Arc<Record>> {
        let rec = self.take_out(key)?;
        self.log_removal(&rec);
        Some(rec)
    }

    /// Takes `key`'s record out with its per-source and DDNet bookkeeping; logs nothing.
    fn take_out(&mut self, key: &ServerKey) -> Option<Arc<Record>> {
        let rec = self.records.remove(key)?;
        let source = rec.source();
        if let Some(n) = self.per_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
        if let Some(d) = rec.ddnet() {
            self.records.unlink_secret(&d.secret, key);
        }
        Some(rec)
    }

    /// A record another instance wrote to the shared store: inserted, or put in place of the
    /// local one (keeping its id and the local re-verification progress). Logged for the
    /// view, so lists, snapshots and events show it, but **not** marked dirty: it came from
    /// the store and must not be written back. Ignored while the local record has a change
    /// waiting for the persister (that write is newer and will reach the others). Caps are not
    /// applied: the other instance accepted it. Returns whether anything changed.
    pub fn apply_remote(&mut self, mut rec: Record) -> bool {
        if self.dirty.contains(&rec.key) {
            return false;
        }
        self.own_ddnet(&mut rec);
        let mut old = self.records.get(&rec.key).cloned();
        // A record's place in the list order never changes for its id: another first-seen
        // time (another instance saw it first) is a removal and a new record for the views.
        if let Some(o) = old.take_if(|o| o.first_seen != rec.first_seen) {
            self.log_removal_view(&o);
        }
        let structural = match &old {
            Some(o) => {
                rec.id = o.id;
                rec.set_challenges(o.challenges_unanswered(), o.last_challenge());
                if **o == rec {
                    return false;
                }
                o.face != rec.face
                    || o.game_port != rec.game_port
                    || o.query_addr() != rec.query_addr()
                    || o.query_protocol != rec.query_protocol
                    || o.state != rec.state
                    || o.info != rec.info
                    || o.ddnet()
                        .map(|d| (&d.secret, d.serial, &d.info, d.streams.len()))
                        != rec
                            .ddnet()
                            .map(|d| (&d.secret, d.serial, &d.info, d.streams.len()))
            }
            None => {
                rec.id = self.next_id;
                self.next_id = self.next_id.wrapping_add(1);
                true
            }
        };
        let key = rec.key.clone();
        self.take_out(&key);
        *self.per_source.entry(rec.source()).or_insert(0) += 1;
        if let Some(d) = rec.ddnet() {
            self.records.link_secret(&d.secret, &key);
        }
        self.put(rec);
        self.log_view(&key, structural);
        true
    }

    /// A record another instance removed from the shared store: removed here too, logged for
    /// the view, not marked dirty (see [`Registry::apply_remote`]; ignored likewise while the
    /// local record has a change waiting). Returns whether it was here.
    pub fn remove_remote(&mut self, key: &ServerKey) -> bool {
        if self.dirty.contains(key) {
            return false;
        }
        match self.take_out(key) {
            Some(rec) => {
                self.log_removal_view(&rec);
                true
            }
            None => false,
        }
    }

    /// The result of a poll. Success stores `info` (clipped to the named limits), takes the game
    /// port from it when it has one, resets the failure count and keeps the record alive;
    /// `None` counts a failure. De-listing after failures is the poller's decision.
    pub fn update_poll(
        &mut self,
        key: &ServerKey,
        info: Option<PollInfo>,
        now: Timestamp,
    ) -> PollOutcome {
        let Some(rec) = self.record_to_change(key) else {
            return PollOutcome::Unknown;
        };
        let (out, structural) = match info {
            Some(info) => {
                let mut structural = rec.info.as_deref() != Some(&info);
                if info.game_port.is_some() && rec.game_port != info.game_port {
                    rec.game_port = info.game_port;
                    structural = true;
                }
                if structural {
                    rec.info = Some(Arc::new(info));
                }
                rec.set_poll_failures(0);
                rec.set_last_poll_ok(Some(now));
                (PollOutcome::Updated, structural)
            }
            None => {
                let n = rec.poll_failures().saturating_add(1);
                rec.set_poll_failures(n);
                (PollOutcome::Failed(n), false)
            }
        };
        self.log(key, structural);
        out
    }

    /// What a registration message itself said about the server (GameAgent heartbeat:
    /// players, slots, level, game type, version, product; a management stats update), shown
    /// until the poller has something: stored when the record was never polled successfully,
    /// ignored after (the poll is authoritative). Unlike [`Registry::update_poll`] it neither
    /// counts as a poll nor keeps the record alive. Returns whether it was stored.
    pub fn registration_info(&mut self, key: &ServerKey, info: PollInfo) -> bool {
        self.store_info(key, info, true)
    }

    /// The info of the management face's record: always stored (the connection is the only
    /// source of it; management records are not polled).
    pub fn set_info(&mut self, key: &ServerKey, info: PollInfo) -> bool {
        self.store_info(key, info, false)
    }

    /// Stores `info` as the record's info when it differs (and, with `only_unpolled`, when the
    /// record was never polled); whether it did.
    fn store_info(&mut self, key: &ServerKey, info: PollInfo, only_unpolled: bool) -> bool {
        let Some(rec) = self.records.get(key) else {
            return false;
        };
        if only_unpolled && rec.last_poll_ok().is_some() {
            return false;
        }
        if rec.info.as_deref() == Some(&info) {
            return false;
        }
        let Some(rec) = self.record_to_change(key) else {
            return false;
        };
        rec.info = Some(Arc::new(info));
        self.log(key, true);
        true
    }

    /// The serial and info the DDNet server `secret` registered last, if any.
    #[must_use]
    pub fn ddnet_info(&self, secret: &DdnetSecret) -> Option<(i64, &DdnetInfo)> {
        // A newer info is given to every address of the secret; records restored or taken from
        // another instance may still differ, and the newest serial wins.
        let d = self
            .records
            .with_secret(secret)
            .filter_map(|r| r.ddnet().map(AsRef::as_ref))
            .max_by_key(|d| d.serial)?;
        Some((d.serial, &d.info))
    }

    /// One DDNet register POST with a valid challenge token (`teeworlds-master.md` §3.6): the
    /// server `secret` is kept with the info of the highest serial seen, shared by all its
    /// addresses; the stream `url` at `addr` is refreshed or added; the record at `addr` is
    /// listed. A POST without a body succeeds when info at `serial` or newer is known
    /// (the second stream of a server, quirk 7), else asks for it (`NeedInfo`). Only a higher
    /// serial replaces the info: a body at the known serial or an older one is ignored, as
    /// DDNet's master ignores it.
    pub fn ddnet_register(
        &mut self,
        r: DdnetRegister,
        reg: Registration,
        now: Timestamp,
    ) -> DdnetOutcome {
        let known = self.ddnet_info(&r.secret).map(|(s, i)| (s, i.clone()));
        let (serial, info, fresh) = match (&r.info, known) {
            (Some(new), Some((have, _))) if r.serial > have => (r.serial, new.clone().into(), true),
            (Some(new), None) => (r.serial, new.clone().into(), true),
            (_, Some((have, info))) if have >= r.serial => (have, info, false),
            (Some(_), Some((have, info))) => (have, info, false),
            (None, _) => return DdnetOutcome::NeedInfo,
        };
        let streams_of_secret: usize = self
            .records
            .with_secret(&r.secret)
            .filter_map(|rec| rec.ddnet())
            .map(|d| d.streams.len())
            .sum();
        let key = reg.key.clone();
        let has_stream = self
            .records
            .get(&key)
            .and_then(|rec| rec.ddnet())
            .is_some_and(|d| {
                d.secret == r.secret && d.streams.iter().any(|s| s.is(&r.url, &key.addr))
            });
        if !has_stream && streams_of_secret >= MAX_DDNET_STREAMS {
            return DdnetOutcome::Rejected(Reject::StreamCap);
        }
        let old_secret = self
            .records
            .get(&key)
            .and_then(|rec| rec.ddnet())
            .map(|d| d.secret.clone())
            .filter(|s| *s != r.secret);
        let (registered, changed_record) = self.register_changed(reg, now);
        if let Outcome::Rejected(why) = registered {
            return DdnetOutcome::Rejected(why);
        }
        if let Some(old) = old_secret {
            // The address moved to another server: forget its streams under the old one.
            self.records.unlink_secret(&old, &key);
        }
        // Accepted: a new info goes into the info file now (not before: a refused POST would
        // leave its bytes there dead).
        let info = if fresh { self.own_info(&info) } else { info };
        let Some(rec) = self.record_to_change(&key) else {
            return DdnetOutcome::NeedInfo;
        };
        let same_secret = rec.ddnet().is_some_and(|d| d.secret == r.secret);
        let mut streams = match rec.ddnet() {
            Some(d) if same_secret => d.streams.to_vec(),
            _ => Vec::new(),
        };
        let new_stream = match streams.iter_mut().find(|s| s.is(&r.url, &key.addr)) {
            Some(s) => {
                s.last = s.last.max(now);
                false
            }
            None => {
                // One more, not the doubling: nearly every server has one stream.
                streams.reserve_exact(1);
                streams.push(DdnetStream::new(&r.url, &key.addr, now));
                streams.sort_by_cached_key(|s| s.url(&key.addr).into_owned());
                true
            }
        };
        let changed_info = rec
            .ddnet()
            .is_none_or(|d| d.serial != serial || !d.info.same_as(&info));
        rec.set_ddnet(Some(Arc::new(DdnetData {
            secret: r.secret.clone(),
            serial,
            info: info.clone(),
            streams: streams.into_boxed_slice(),
        })));
        let mut changed_poll_info = false;
        if let Some(p) = r.poll_info.filter(|_| fresh) {
            if rec.info.as_deref() != Some(&p) {
                rec.info = Some(Arc::new(p));
                changed_poll_info = true;
            }
        }
        self.records.link_secret(&r.secret, &key);
        // A refresh that only moves a stream's time changes nothing a list shows.
        let structural = !same_secret || new_stream || changed_info || changed_poll_info;
        self.log(&key, structural);
        if fresh && changed_info {
            // The other addresses of the server show the newer info too.
            let siblings: Vec<ServerKey> = self
                .records
                .with_secret(&r.secret)
                .filter(|rec| rec.key != key)
                .map(|rec| rec.key.clone())
                .collect();
            for k in siblings {
                if let Some(rec) = self.records.get_mut(&k) {
                    let rec = Arc::make_mut(rec);
                    if let Some(d) = rec.ddnet() {
                        let mut d = (**d).clone();
                        d.serial = serial;
                        d.info = info.clone();
                        rec.set_ddnet(Some(Arc::new(d)));
                    }
                    self.log(&k, true);
                }
            }
        }
        if structural || changed_record {
            DdnetOutcome::Success
        } else {
            DdnetOutcome::Refreshed
        }
    }

    /// A DDNet `Action: delete` for the stream `url` of the server `secret`: the stream goes,
    /// and the record with it when it was its last stream. Returns whether the server still
    /// has streams at that address, or `None` when there was no such stream.
    pub fn ddnet_delete(&mut self, secret: &str, url: &str) -> Option<bool> {
        let secret = DdnetSecret::from(secret);
        let keys: Vec<ServerKey> = self
            .records
            .with_secret(&secret)
            .map(|rec| rec.key.clone())
            .collect();
        for key in keys {
            let Some(rec) = self.records.get_mut(&key) else {
                continue;
            };
            let Some(d) = rec.ddnet() else { continue };
            if !d.streams.iter().any(|s| s.is(url, &key.addr)) {
                continue;
            }
            let mut d = (**d).clone();
            d.streams = d
                .streams
                .iter()
                .filter(|s| !s.is(url, &key.addr))
                .cloned()
                .collect();
            if d.streams.is_empty() {
                self.remove(&key);
                return Some(false);
            }
            Arc::make_mut(rec).set_ddnet(Some(Arc::new(d)));
            self.log(&key, true);
            return Some(true);
        }
        None
    }

    /// When `rec` expires, or `None` when it never does by time.
    #[must_use]
    ///
    /// A direct record expires by its face's lifetime after the later of its last heartbeat
    /// and its last successful poll, or later while an upstream still lists it; a learned
    /// one [`RegistryConfig::learned_lifetime`] after the last pull that listed it.
    pub fn expires_at(&self, rec: &Record) -> Option<Timestamp> {
        expiry_with(&self.config, rec)
    }

    /// When the oldest upstream source of `rec` goes stale, if it has one.
    fn oldest_learned_stale(&self, rec: &Record) -> Option<Timestamp> {
        learned_stale_with(&self.config, rec)
    }

    /// When the registry must look at `rec` next: see [`deadline_with`].
    fn deadline_of(&self, rec: &Record) -> Timestamp {
        deadline_with(&self.config, rec)
    }

    /// Removes every record that expired at or before `now`, and the DDNet streams not
    /// refreshed within their lifetime; returns the removed keys (sorted). Only records whose
    /// deadline (kept in the table beside each record) passed are looked at: a pass over
    /// 100,000s of records compares one time each.
    pub fn prune_before(&mut self, now: Timestamp) -> Vec<ServerKey> {
        let mut dead = Vec::new();
        for part in 0..PRUNE_PARTS {
            dead.extend(self.prune_part(part, now));
        }
        dead.sort();
        dead
    }

    /// [`Registry::prune_before`] for one of the [`PRUNE_PARTS`] parts the records are split
    /// into (by key hash; a part past them has no records). Pruning part by part, with the
    /// lock let go in between, holds it for a part's scan at a time: what
    /// [`crate::MasterHandle::prune`] does. Returns the removed keys (sorted).
    pub fn prune_part(&mut self, part: usize, now: Timestamp) -> Vec<ServerKey> {
        let due: Vec<&Arc<Record>> = self.records.due_in(part, now).collect();
        let mut dead: Vec<ServerKey> = due
            .iter()
            .filter(|r| self.expires_at(r).is_some_and(|t| t <= now))
            .map(|r| r.key.clone())
            .collect();
        let maybe_stale: Vec<ServerKey> = due
            .iter()
            .filter(|r| r.ddnet().is_some())
            .map(|r| r.key.clone())
            .collect();
        let stale_sources: Vec<ServerKey> = due
            .iter()
            .filter(|r| self.oldest_learned_stale(r).is_some_and(|t| t <= now))
            .map(|r| r.key.clone())
            .collect();
        dead.sort();
        for k in &dead {
            self.remove(k);
        }
        let life = self.config.learned_lifetime;
        for k in stale_sources {
            if let Some(rec) = self.records.get_mut(&k) {
                Arc::make_mut(rec)
                    .retain_sources(|s| s.origin == Origin::Direct || s.last_seen.plus(life) > now);
                self.log(&k, true);
            }
        }
        if let Some(life) = self.config.face_lifetimes.get(&Face::DdnetHttp).copied() {
            let stale: Vec<ServerKey> = maybe_stale
                .iter()
                .filter_map(|k| self.records.get(k))
                .filter(|r| {
                    r.ddnet()
                        .is_some_and(|d| d.streams.iter().any(|s| s.last.plus(life) <= now))
                })
                .map(|r| r.key.clone())
                .collect();
            for k in stale {
                if let Some(rec) = self.records.get_mut(&k) {
                    let rec = Arc::make_mut(rec);
                    if let Some(d) = rec.ddnet() {
                        let mut d = (**d).clone();
                        d.streams = d
                            .streams
                            .iter()
                            .filter(|s| s.last.plus(life) > now)
                            .cloned()
                            .collect();
                        rec.set_ddnet(Some(Arc::new(d)));
                    }
                    self.log(&k, true);
                }
            }
        }
        dead
    }

    /// Puts back a record loaded from storage (as it was, state and times included; a new id in
    /// load order). Replaces a record with the same key. Caps are not applied: what was
    /// accepted stays accepted. Nothing is logged: the store already has it.
    pub fn restore(&mut self, mut rec: Record) {
        self.own_ddnet(&mut rec);
        if let Some(old) = self.records.remove(&rec.key) {
            if let Some(n) = self.per_source.get_mut(&old.source()) {
                *n = n.saturating_sub(1);
            }
        }
        rec.id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        *self.per_source.entry(rec.source()).or_insert(0) += 1;
        if let Some(d) = rec.ddnet() {
            self.records.link_secret(&d.secret, &rec.key);
        }
        self.put(rec);
    }

    /// Puts `rec` in the table with its deadline.
    fn put(&mut self, rec: Record) {
        let deadline = self.deadline_of(&rec);
        self.records.insert(Arc::new(rec), deadline);
    }
}

/// [`Registry::expires_at`] under `config`.
fn expiry_with(config: &RegistryConfig, rec: &Record) -> Option<Timestamp> {
    let learned = rec.last_learned().map(|t| t.plus(config.learned_lifetime));
    if !rec.is_direct() {
        return learned;
    }
    let life = config.lifetime(rec.face, &rec.key.game)?;
    let base = rec
        .last_poll_ok()
        .map_or(rec.last_heartbeat, |p| p.max(rec.last_heartbeat));
    let direct = base.plus(life);
    Some(learned.map_or(direct, |l| l.max(direct)))
}

/// When the oldest upstream source of `rec` goes stale under `config`, if it has one.
fn learned_stale_with(config: &RegistryConfig, rec: &Record) -> Option<Timestamp> {
    rec.sources()
        .iter()
        .filter(|s| s.origin != Origin::Direct)
        .map(|s| s.last_seen.plus(config.learned_lifetime))
        .min()
}

/// When the registry must look at `rec` next under `config`: its expiry, its oldest DDNet
/// stream's or its oldest upstream source's going stale ([`Timestamp::NEVER`] when none
/// comes).
fn deadline_with(config: &RegistryConfig, rec: &Record) -> Timestamp {
    let expiry = expiry_with(config, rec);
    let stale = config
        .face_lifetimes
        .get(&Face::DdnetHttp)
        .copied()
        .and_then(|life| {
            let d = rec.ddnet()?;
            d.streams.iter().map(|s| s.last.plus(life)).min()
        });
    [expiry, stale, learned_stale_with(config, rec)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(Timestamp::NEVER)
}

#[cfg(test)]
mod tests;
