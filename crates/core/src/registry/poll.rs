//! What a poll said about a server: players, rules and the summary the lists show, packed
//! small.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use muster_proto::ServerInfo;

use super::game_name::{LastShared, TextSet};
use super::key::ShortText;

/// Most players kept from one poll.
pub const MAX_POLL_PLAYERS: usize = 256;
/// Most rules kept from one poll.
pub const MAX_POLL_RULES: usize = 256;
/// Longest text kept for a name, map, game type, player name, rule key or value (in chars).
pub const MAX_POLL_TEXT: usize = 256;

/// One player from a poll, in 32 bytes: the name, then the numbers in one 8-byte word with a
/// sentinel for "the protocol did not say" — the score in an `i32` (`i32::MIN` is none), the
/// ping in a `u16` (`u16::MAX` is none), and a `u16` holding the team in 12 bits (two's
/// complement, −2048 is none) with the spectator and bot flags in 2 bits each (none, false,
/// true). So a value at a sentinel or beyond its width is clamped: a score to
/// `i32::MIN + 1..=i32::MAX`, a ping to at most 65,534 ms and a team to −2047..=2047 (no game
/// sends teams beyond that). A full server's player list takes two thirds of what the plain
/// `Option` fields took.
#[derive(Clone, PartialEq, Eq)]
pub struct PollPlayer {
    /// Name, plain text.
    pub name: ShortText,
    /// Score; [`Self::NO_SCORE`] when the protocol reports none.
    score: i32,
    /// Ping in milliseconds; [`Self::NO_PING`] when the protocol reports none.
    ping: u16,
    /// Team in the low 12 bits ([`Self::NO_TEAM`] when none), then the spectator and the bot
    /// flag in 2 bits each (see [`Self::flag_bits`]).
    bits: u16,
}

const _: () = assert!(size_of::<PollPlayer>() == 32);

impl Default for PollPlayer {
    fn default() -> Self {
        Self::new(ShortText::default())
    }
}

impl fmt::Debug for PollPlayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollPlayer")
            .field("name", &self.name)
            .field("score", &self.score())
            .field("ping_ms", &self.ping_ms())
            .field("team", &self.team())
            .field("spectator", &self.spectator())
            .field("bot", &self.bot())
            .finish()
    }
}

impl PollPlayer {
    /// The kept score meaning "none".
    const NO_SCORE: i32 = i32::MIN;
    /// The kept ping meaning "none".
    const NO_PING: u16 = u16::MAX;
    /// The 12 team bits of [`Self::bits`].
    const TEAM_MASK: u16 = 0x0fff;
    /// The team bits meaning "none" (−2048 in 12-bit two's complement).
    const NO_TEAM: u16 = 0x0800;
    /// Lowest team kept.
    const MIN_TEAM: i16 = -2047;
    /// Highest team kept.
    const MAX_TEAM: i16 = 2047;
    /// Where the spectator flag's 2 bits start in [`Self::bits`].
    const SPECTATOR_SHIFT: u32 = 12;
    /// Where the bot flag's 2 bits start in [`Self::bits`].
    const BOT_SHIFT: u32 = 14;

    /// A player called `name` of whom nothing else is known.
    #[must_use]
    pub fn new(name: impl Into<ShortText>) -> Self {
        Self {
            name: name.into(),
            score: Self::NO_SCORE,
            ping: Self::NO_PING,
            bits: Self::NO_TEAM,
        }
    }

    /// `v` as a kept score (clamped to `i32::MIN + 1..=i32::MAX`; `i32::MIN` means none).
    #[must_use]
    pub fn score_of(v: i64) -> i32 {
        i32::try_from(v.max(i64::from(Self::NO_SCORE) + 1)).unwrap_or(i32::MAX)
    }

    /// `v` as a kept ping (at most 65,534 ms; 65,535 means none).
    #[must_use]
    pub fn ping_of(v: u32) -> u16 {
        u16::try_from(v.min(u32::from(Self::NO_PING) - 1)).unwrap_or(Self::NO_PING - 1)
    }

    /// `v` as a kept team number (clamped to −2047..=2047).
    #[must_use]
    pub fn team_of(v: i32) -> i16 {
        let clamped = v.clamp(i32::from(Self::MIN_TEAM), i32::from(Self::MAX_TEAM));
        i16::try_from(clamped).unwrap_or(if v < 0 {
            Self::MIN_TEAM
        } else {
            Self::MAX_TEAM
        })
    }

    /// Score, when the protocol reports one.
    #[must_use]
    pub fn score(&self) -> Option<i32> {
        (self.score != Self::NO_SCORE).then_some(self.score)
    }

    /// Ping in milliseconds, when the protocol reports one.
    #[must_use]
    pub fn ping_ms(&self) -> Option<u16> {
        (self.ping != Self::NO_PING).then_some(self.ping)
    }

    /// Team number, when the protocol reports one.
    #[must_use]
    pub fn team(&self) -> Option<i16> {
        let raw = self.bits & Self::TEAM_MASK;
        // Sign-extends the 12 bits: shifted to the top of an `i16`, then back arithmetically.
        (raw != Self::NO_TEAM).then(|| i16::from_ne_bytes((raw << 4).to_ne_bytes()) >> 4)
    }

    /// Whether the player only watches, when the protocol tells.
    #[must_use]
    pub fn spectator(&self) -> Option<bool> {
        Self::flag_of(self.bits >> Self::SPECTATOR_SHIFT)
    }

    /// Whether the player is a bot, when the protocol tells (Teeworlds 0.7's player flags,
    /// `teeworlds.md` §8.4).
    #[must_use]
    pub fn bot(&self) -> Option<bool> {
        Self::flag_of(self.bits >> Self::BOT_SHIFT)
    }

    /// Sets the score (clamped, see [`Self::score_of`]).
    pub fn set_score(&mut self, score: Option<i32>) {
        self.score = score.map_or(Self::NO_SCORE, |s| Self::score_of(i64::from(s)));
    }

    /// Sets the ping (clamped, see [`Self::ping_of`]).
    pub fn set_ping_ms(&mut self, ping_ms: Option<u16>) {
        self.ping = ping_ms.map_or(Self::NO_PING, |p| Self::ping_of(u32::from(p)));
    }

    /// Sets the team (clamped, see [`Self::team_of`]).
    pub fn set_team(&mut self, team: Option<i16>) {
        let raw = team.map_or(Self::NO_TEAM, |t| {
            u16::from_ne_bytes(Self::team_of(i32::from(t)).to_ne_bytes()) & Self::TEAM_MASK
        });
        self.bits = (self.bits & !Self::TEAM_MASK) | raw;
    }

    /// Sets whether the player only watches.
    pub fn set_spectator(&mut self, spectator: Option<bool>) {
        self.set_flag(Self::SPECTATOR_SHIFT, spectator);
    }

    /// Sets whether the player is a bot.
    pub fn set_bot(&mut self, bot: Option<bool>) {
        self.set_flag(Self::BOT_SHIFT, bot);
    }

    /// This player with `score` (clamped, see [`Self::score_of`]).
    #[must_use]
    pub fn with_score(mut self, score: Option<i32>) -> Self {
        self.set_score(score);
        self
    }

    /// This player with `ping_ms` (clamped, see [`Self::ping_of`]).
    #[must_use]
    pub fn with_ping_ms(mut self, ping_ms: Option<u16>) -> Self {
        self.set_ping_ms(ping_ms);
        self
    }

    /// This player with `team` (clamped, see [`Self::team_of`]).
    #[must_use]
    pub fn with_team(mut self, team: Option<i16>) -> Self {
        self.set_team(team);
        self
    }

    /// This player with `spectator`.
    #[must_use]
    pub fn with_spectator(mut self, spectator: Option<bool>) -> Self {
        self.set_spectator(spectator);
        self
    }

    /// This player with `bot`.
    #[must_use]
    pub fn with_bot(mut self, bot: Option<bool>) -> Self {
        self.set_bot(bot);
        self
    }

    /// The 2 bits of a flag: 0 none, 1 false, 2 true.
    const fn flag_bits(v: Option<bool>) -> u16 {
        match v {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        }
    }

    /// The flag in the low 2 bits of `bits` (3 is never written; read as none).
    const fn flag_of(bits: u16) -> Option<bool> {
        match bits & 0b11 {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        }
    }

    /// Writes a flag's 2 bits at `shift`.
    fn set_flag(&mut self, shift: u32, v: Option<bool>) {
        self.bits = (self.bits & !(0b11 << shift)) | (Self::flag_bits(v) << shift);
    }
}

/// A poll's players, packed in one allocation of their own size: per player the score
/// (`i32`), ping and team/flag bits (`u16` each) as [`PollPlayer`] keeps them, little-endian,
/// then the name's length in bytes (one byte below 128, else two: the low 7 bits with the top
/// bit set, then the rest) and the name. At most [`MAX_POLL_PLAYERS`] players with names
/// clipped to [`MAX_POLL_TEXT`] chars. Five DDNet players with 10-byte names take 95 bytes
/// so, where a vector of [`PollPlayer`]s took 160 and the vector itself 8 more in every poll
/// info; a 64-player server takes about 1.2 KB where it took 2 KB.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct PollPlayers(Box<[u8]>);

/// Bytes of a packed player before its name's length.
const PACKED_PLAYER_HEAD: usize = 8;

impl PollPlayers {
    /// The first [`MAX_POLL_PLAYERS`] of `players`, names clipped to [`MAX_POLL_TEXT`] chars.
    pub fn new(players: impl IntoIterator<Item = PollPlayer>) -> Self {
        let mut packed = Vec::new();
        for p in players.into_iter().take(MAX_POLL_PLAYERS) {
            let name = p.name.get(..clip_end(&p.name)).unwrap_or_default();
            packed.extend_from_slice(&p.score.to_le_bytes());
            packed.extend_from_slice(&p.ping.to_le_bytes());
            packed.extend_from_slice(&p.bits.to_le_bytes());
            // A clipped name is at most 4 × MAX_POLL_TEXT = 1,024 bytes: 14 bits.
            let len = name.len();
            match u8::try_from(len) {
                Ok(b) if b < 0x80 => packed.push(b),
                _ => {
                    packed.push(u8::try_from(len & 0x7f).unwrap_or(0) | 0x80);
                    packed.push(u8::try_from(len >> 7).unwrap_or(u8::MAX));
                }
            }
            packed.extend_from_slice(name.as_bytes());
        }
        Self(packed.into_boxed_slice())
    }

    /// A view of them.
    #[must_use]
    pub fn view(&self) -> PlayersView<'_> {
        PlayersView(&self.0)
    }

    /// The players, in their order.
    pub fn iter(&self) -> impl Iterator<Item = PollPlayer> + '_ {
        self.view().iter()
    }

    /// The players' names, in their order (no copy).
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.view().names()
    }

    /// The player at `index`.
    #[must_use]
    pub fn get(&self, index: usize) -> Option<PollPlayer> {
        self.view().get(index)
    }

    /// How many players.
    #[must_use]
    pub fn len(&self) -> usize {
        self.view().len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes the packed players take.
    #[cfg(test)]
    pub(crate) fn packed_len(&self) -> usize {
        self.0.len()
    }
}

/// Players as [`PollPlayers`] or a [`PollInfo`] keeps them, borrowed.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PlayersView<'a>(&'a [u8]);

impl<'a> PlayersView<'a> {
    /// The players, in their order.
    pub fn iter(self) -> impl Iterator<Item = PollPlayer> + 'a {
        self.packed().map(|(name, score, ping, bits)| PollPlayer {
            name: ShortText::from(name),
            score,
            ping,
            bits,
        })
    }

    /// The players' names, in their order (no copy).
    pub fn names(self) -> impl Iterator<Item = &'a str> + 'a {
        self.packed().map(|(name, ..)| name)
    }

    /// The player at `index`.
    #[must_use]
    pub fn get(self, index: usize) -> Option<PollPlayer> {
        self.iter().nth(index)
    }

    /// How many players.
    #[must_use]
    pub fn len(self) -> usize {
        self.packed().count()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0.is_empty()
    }

    /// Owned.
    #[must_use]
    pub fn to_players(self) -> PollPlayers {
        PollPlayers(self.0.into())
    }

    /// Each player's name, score, ping and bits, read from the packed bytes (which
    /// [`PollPlayers::new`] wrote, so the walk ends only at their end).
    fn packed(self) -> impl Iterator<Item = (&'a str, i32, u16, u16)> + 'a {
        let mut rest: &[u8] = self.0;
        std::iter::from_fn(move || {
            let (head, after) = rest.split_first_chunk::<PACKED_PLAYER_HEAD>()?;
            let [s0, s1, s2, s3, p0, p1, b0, b1] = *head;
            let (&l0, after) = after.split_first()?;
            let (len, after) = if l0 < 0x80 {
                (usize::from(l0), after)
            } else {
                let (&l1, after) = after.split_first()?;
                (usize::from(l0 & 0x7f) | usize::from(l1) << 7, after)
            };
            let name = after.get(..len)?;
            rest = after.get(len..)?;
            Some((
                std::str::from_utf8(name).ok()?,
                i32::from_le_bytes([s0, s1, s2, s3]),
                u16::from_le_bytes([p0, p1]),
                u16::from_le_bytes([b0, b1]),
            ))
        })
    }
}

impl FromIterator<PollPlayer> for PollPlayers {
    fn from_iter<I: IntoIterator<Item = PollPlayer>>(players: I) -> Self {
        Self::new(players)
    }
}

impl From<Vec<PollPlayer>> for PollPlayers {
    fn from(players: Vec<PollPlayer>) -> Self {
        Self::new(players)
    }
}

impl fmt::Debug for PollPlayers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view().fmt(f)
    }
}

impl fmt::Debug for PlayersView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// What the last successful poll (or a face that carries state, such as the management
/// server's stats update) said about a server, as plain data, to build a [`PollInfo`] from
/// (`PollInfo::from(PollFields { .. })`) or to change one ([`PollInfo::to_fields`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PollFields {
    /// Server name, plain text.
    pub name: ShortText,
    /// Map.
    pub map: ShortText,
    /// Game type / mode.
    pub game_type: ShortText,
    /// Players on the server.
    pub num_players: u32,
    /// Player slots.
    pub max_players: u32,
    /// Whether a password is needed, when known.
    pub password: Option<bool>,
    /// Players.
    pub players: PollPlayers,
    /// Rules as (key, value), plain text.
    pub rules: Rules,
    /// The game port, when the reply said it (GameSpy `hostport`).
    pub game_port: Option<u16>,
}

/// What the last successful poll (or a face that carries state, such as the management
/// server's stats update) said about a server, as the registry keeps it: every record that
/// was polled or carries a heartbeat's state holds one.
///
/// Two allocations hold its texts and players:
///
/// - its own: the server's name, then its players as [`PollPlayers`] packs them;
/// - a shared one: `map NUL game_type NUL` followed by the rules as [`Rules`] packs them, kept
///   once for every info that says the same (in a process-wide set like the game names'):
///   the servers of one game mostly share their maps, game types and rules.
///
/// Each text is clipped to [`MAX_POLL_TEXT`] chars with any NUL inside it dropped (none of the
/// protocols can carry one). With its `Arc` counts an info fills one 56-byte allocator size
/// class, and a Quake III server's name a 24-byte one: 80 bytes, where one allocation for
/// all its texts and one for its players took 128 and more.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct PollInfo {
    /// The name's bytes (`..name_len`), then the packed players.
    own: Box<[u8]>,
    /// `map NUL game_type NUL rules`, shared; `None` when all of them are empty.
    rest: Option<SharedText>,
    /// Players on the server.
    pub num_players: u32,
    /// Player slots.
    pub max_players: u32,
    /// The game port, when the reply said it (GameSpy `hostport`).
    pub game_port: Option<u16>,
    /// Whether a password is needed, when known.
    pub password: Option<bool>,
    /// Where the name ends in `own` (a clipped name takes at most 1,024 bytes).
    name_len: u16,
}

// An info and its `Arc` counts fill one 56-byte allocator size class.
const _: () = assert!(size_of::<PollInfo>() <= 40);

/// A poll info's shared texts (see [`PollInfo`]).
#[derive(Clone)]
struct SharedText(Arc<Box<str>>);

std::thread_local! {
    static LAST_SHARED: LastShared = const { RefCell::new(None) };
}

/// The shared texts in use.
static SHARED_TEXTS: TextSet = TextSet::new(&LAST_SHARED);

impl SharedText {
    /// The shared copy of `text`.
    fn new(text: &str) -> Self {
        Self(SHARED_TEXTS.share(text))
    }

    /// The text.
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl PartialEq for SharedText {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.as_str() == other.as_str()
    }
}

impl Eq for SharedText {}

impl From<PollFields> for PollInfo {
    fn from(f: PollFields) -> Self {
        let name = clipped(&f.name);
        let mut own = Vec::with_capacity(name.len() + f.players.0.len());
        own.extend_from_slice(name.as_bytes());
        own.extend_from_slice(&f.players.0);
        let rest = if f.map.is_empty() && f.game_type.is_empty() && f.rules.is_empty() {
            None
        } else {
            let mut packed =
                String::with_capacity(f.map.len() + f.game_type.len() + 2 + f.rules.0.len());
            push_packed(&mut packed, &f.map);
            push_packed(&mut packed, &f.game_type);
            packed.push_str(&f.rules.0);
            Some(SharedText::new(&packed))
        };
        Self {
            own: own.into_boxed_slice(),
            rest,
            num_players: f.num_players,
            max_players: f.max_players,
            game_port: f.game_port,
            password: f.password,
            name_len: u16::try_from(name.len()).unwrap_or(u16::MAX),
        }
    }
}

impl fmt::Debug for PollInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [name, map, game_type] = self.texts();
        f.debug_struct("PollInfo")
            .field("name", &name)
            .field("map", &map)
            .field("game_type", &game_type)
            .field("num_players", &self.num_players)
            .field("max_players", &self.max_players)
            .field("password", &self.password)
            .field("players", &self.players())
            .field("rules", &self.rules())
            .field("game_port", &self.game_port)
            .finish()
    }
}

/// Whether `p` is a bot, when its protocol says: Teeworlds 0.7 sends `player_flags` (bit 1 is
/// "bot", `teeworlds.md` §8.4), which the codec keeps in `raw` with a `bot` entry when set.
fn bot_flag(p: &muster_proto::model::Player) -> Option<bool> {
    let flagged = p.raw.iter().any(|(k, _)| k == "player_flags");
    flagged.then(|| {
        p.raw
            .iter()
            .any(|(k, v)| k == "bot" && *v == muster_proto::model::RawValue::Bool(true))
    })
}

/// A server's rules: (key, value) pairs of plain text in their order, at most
/// [`MAX_POLL_RULES`] pairs of texts clipped to [`MAX_POLL_TEXT`] chars, packed in one
/// allocation of their own size as `key NUL value NUL …` (a NUL inside a text is dropped).
/// A GameAgent heartbeat's two rules take 34 bytes so (heaptrack), where a vector of pairs took
/// 96 and the vector itself 24 more in every poll info.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Rules(Box<str>);

/// Rule keys many servers of one kind send (the Quake III face keeps the first three for
/// every server, GameAgent heartbeats the next two): packed as [`KEY_MARK`] and one letter
/// (`A` for the first) instead of their text, so a Quake III server's rules take 24 bytes
/// less (its info's texts one allocator size class less).
const KNOWN_KEYS: [&str; 6] = [
    "protocol", "gametype", "gamename", "version", "product", "hostport",
];

/// Starts a packed key that is not its own text: a [`KNOWN_KEYS`] letter follows, or, for a
/// key whose own text starts with this character, the key itself.
const KEY_MARK: char = '\u{1}';

/// Appends the key `k` to packed rules (see [`KNOWN_KEYS`]).
fn push_key(packed: &mut String, k: &str) {
    if let Some(i) = KNOWN_KEYS.iter().position(|known| *known == k) {
        packed.push(KEY_MARK);
        packed.push(char::from(b'A' + u8::try_from(i).unwrap_or(0)));
        packed.push('\0');
        return;
    }
    if k.starts_with(KEY_MARK) {
        packed.push(KEY_MARK);
    }
    push_packed(packed, k);
}

/// A packed key as its text (see [`push_key`]).
fn unpack_key(k: &str) -> &str {
    let Some(rest) = k.strip_prefix(KEY_MARK) else {
        return k;
    };
    if rest.starts_with(KEY_MARK) {
        return rest;
    }
    rest.bytes()
        .next()
        .and_then(|b| KNOWN_KEYS.get(usize::from(b.wrapping_sub(b'A'))))
        .map_or(rest, |known| known)
}

impl Rules {
    /// The rules `pairs`, clipped to the limits.
    pub fn new<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut packed = String::new();
        for (k, v) in pairs.into_iter().take(MAX_POLL_RULES) {
            push_key(&mut packed, k.as_ref());
            push_packed(&mut packed, v.as_ref());
        }
        Self(packed.into_boxed_str())
    }

    /// A view of them.
    #[must_use]
    pub fn view(&self) -> RulesView<'_> {
        RulesView(&self.0)
    }

    /// The pairs, in their order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.view().iter()
    }

    /// How many pairs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.view().len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of the first rule `key` (ASCII case-insensitive), if there is one.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.view().get(key)
    }

    /// Bytes the packed rules take.
    #[cfg(test)]
    pub(crate) fn packed_len(&self) -> usize {
        self.0.len()
    }
}

/// The first [`MAX_POLL_TEXT`] chars of `text` without any NUL: the text itself when it has
/// no more bytes than the limit has chars and nothing to drop (char by char, packing was a
/// fifth of the Quake III face's info building).
fn clipped(text: &str) -> Cow<'_, str> {
    if text.len() <= MAX_POLL_TEXT && !text.contains('\0') {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(
            text.chars()
                .filter(|&c| c != '\0')
                .take(MAX_POLL_TEXT)
                .collect(),
        )
    }
}

/// Appends `text` to a packed string (a [`PollInfo`]'s shared texts, [`Rules`]) as
/// [`clipped`] keeps it, then a NUL to end it.
fn push_packed(packed: &mut String, text: &str) {
    packed.push_str(&clipped(text));
    packed.push('\0');
}

/// Rules as a [`Rules`] or a [`PollInfo`] keeps them, borrowed: `key NUL value NUL …`, a key
/// of the common ones (`protocol`, `gametype`, `gamename`, …) as its two-byte code.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RulesView<'a>(&'a str);

impl<'a> RulesView<'a> {
    /// The pairs, in their order.
    pub fn iter(self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let mut texts = self.0.split('\0');
        std::iter::from_fn(move || Some((unpack_key(texts.next()?), texts.next()?)))
    }

    /// How many pairs.
    #[must_use]
    pub fn len(self) -> usize {
        self.0.bytes().filter(|&b| b == 0).count() / 2
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0.is_empty()
    }

    /// The value of the first rule `key` (ASCII case-insensitive), if there is one.
    #[must_use]
    pub fn get(self, key: &str) -> Option<&'a str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    }

    /// Owned.
    #[must_use]
    pub fn to_rules(self) -> Rules {
        Rules(self.0.into())
    }
}

impl fmt::Debug for RulesView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Rules {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        Self::new(pairs)
    }
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Where the first [`MAX_POLL_TEXT`] chars of `s` end.
fn clip_end(s: &str) -> usize {
    s.char_indices()
        .nth(MAX_POLL_TEXT)
        .map_or(s.len(), |(i, _)| i)
}

/// `s` clipped to [`MAX_POLL_TEXT`] chars, as kept text.
#[must_use]
pub fn short(s: &str) -> ShortText {
    ShortText::from(s.get(..clip_end(s)).unwrap_or(s))
}

impl PollInfo {
    /// The plain-text view of a query result. Text is clipped to [`MAX_POLL_TEXT`] chars,
    /// players and rules to [`MAX_POLL_PLAYERS`] / [`MAX_POLL_RULES`]; the game port is read
    /// from a `hostport` rule when there is one.
    #[must_use]
    pub fn from_server_info(info: &ServerInfo) -> Self {
        let rules: Rules = info
            .rules
            .iter()
            .map(|r| (&r.key.plain, &r.value.plain))
            .collect();
        let game_port = rules.get("hostport").and_then(|v| v.trim().parse().ok());
        Self::from(PollFields {
            name: short(&info.name.plain),
            map: short(&info.map.plain),
            game_type: short(&info.game_type.plain),
            num_players: info.num_players,
            max_players: info.max_players,
            password: info.password,
            players: info
                .players
                .iter()
                .take(MAX_POLL_PLAYERS)
                .map(|p| {
                    PollPlayer::new(short(&p.name.plain))
                        .with_score(p.score.map(PollPlayer::score_of))
                        .with_ping_ms(p.ping_ms.map(PollPlayer::ping_of))
                        .with_team(p.team.map(PollPlayer::team_of))
                        .with_spectator(p.spectator)
                        .with_bot(bot_flag(p))
                })
                .collect(),
            rules,
            game_port,
        })
    }

    /// The shared texts in their three parts: map, game type, and the rules (each empty when
    /// there are none).
    fn parts(&self) -> std::str::SplitN<'_, char> {
        self.rest
            .as_ref()
            .map_or("", SharedText::as_str)
            .splitn(3, '\0')
    }

    /// Name, map and game type (for a caller that wants more than one).
    #[must_use]
    pub fn texts(&self) -> [&str; 3] {
        let mut parts = self.parts();
        [
            self.name(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        ]
    }

    /// Server name, plain text.
    #[must_use]
    pub fn name(&self) -> &str {
        let name = self
            .own
            .get(..usize::from(self.name_len))
            .unwrap_or_default();
        std::str::from_utf8(name).unwrap_or_default()
    }

    /// Map.
    #[must_use]
    pub fn map(&self) -> &str {
        self.parts().next().unwrap_or_default()
    }

    /// Game type / mode.
    #[must_use]
    pub fn game_type(&self) -> &str {
        self.parts().nth(1).unwrap_or_default()
    }

    /// Whether `self` and `other` hold one shared copy of their map, game type and rules.
    #[cfg(test)]
    pub(crate) fn shares_texts_with(&self, other: &Self) -> bool {
        match (&self.rest, &other.rest) {
            (Some(a), Some(b)) => Arc::ptr_eq(&a.0, &b.0),
            _ => false,
        }
    }

    /// How many distinct shared texts the process holds.
    #[cfg(test)]
    pub(crate) fn shared_texts_held() -> usize {
        SHARED_TEXTS.len()
    }

    /// Players.
    #[must_use]
    pub fn players(&self) -> PlayersView<'_> {
        PlayersView(
            self.own
                .get(usize::from(self.name_len)..)
                .unwrap_or_default(),
        )
    }

    /// Rules as (key, value), plain text.
    #[must_use]
    pub fn rules(&self) -> RulesView<'_> {
        RulesView(self.parts().nth(2).unwrap_or_default())
    }

    /// The value of the rule `key` (ASCII case-insensitive), if there is one.
    #[must_use]
    pub fn rule(&self, key: &str) -> Option<&str> {
        self.rules().get(key)
    }

    /// Its fields, to change and build again.
    #[must_use]
    pub fn to_fields(&self) -> PollFields {
        let [name, map, game_type] = self.texts();
        PollFields {
            name: name.into(),
            map: map.into(),
            game_type: game_type.into(),
            num_players: self.num_players,
            max_players: self.max_players,
            password: self.password,
            players: self.players().to_players(),
            rules: self.rules().to_rules(),
            game_port: self.game_port,
        }
    }
}
