//! The browser's state as a pure machine: what the masters listed, what each server answered,
//! and what the player chose to see. The engine feeds it results, the terminal reads
//! [`Model::view`]; no I/O and no clock (times come in as unix milliseconds).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;

use muster_proto::model::ServerInfo;
use serde::{Deserialize, Serialize};

/// A server: its game address and the protocol it is queried with.
pub(crate) type Key = (SocketAddr, &'static str);

/// Failed queries in a row after which a server is shown as down.
pub(crate) const DOWN_AFTER: u32 = 2;

/// Longest player list kept per server (a reply's own limits are higher; a browser row needs
/// no more).
const MAX_PLAYERS_KEPT: usize = 256;

/// What one answer says, in plain text (colour codes removed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub name: String,
    pub map: String,
    pub game: Option<String>,
    pub num_players: u32,
    pub max_players: u32,
    pub password: Option<bool>,
    pub players: Vec<PlayerLine>,
    pub rules: Vec<(String, String)>,
    /// The round trip measured from this machine, µs (shown by [`ping_text`]).
    pub ping_us: Option<u32>,
    /// Where a player connects, when the answer says another port than the listed one
    /// (GameSpy lists give query ports; the answer's `hostport` the game port).
    pub game_address: Option<SocketAddr>,
}

/// One player of an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PlayerLine {
    pub name: String,
    pub score: Option<i64>,
    pub ping_ms: Option<u32>,
}

impl Summary {
    /// The plain view of `info`; `rtt` is the measured round trip when the answer has none.
    pub(crate) fn of(info: &ServerInfo, rtt: Option<std::time::Duration>) -> Self {
        let ping = info.ping.or(rtt);
        Self {
            name: info.name.plain.clone(),
            map: info.map.plain.clone(),
            game: muster_proto::games::key_of_answer(info),
            num_players: info.num_players,
            max_players: info.max_players,
            password: info.password,
            players: info
                .players
                .iter()
                .take(MAX_PLAYERS_KEPT)
                .map(|p| PlayerLine {
                    name: p.name.plain.clone(),
                    score: p.score,
                    ping_ms: p.ping_ms,
                })
                .collect(),
            rules: info
                .rules
                .iter()
                .map(|r| (r.key.plain.clone(), r.value.plain.clone()))
                .collect(),
            ping_us: ping.map(|d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX)),
            game_address: None,
        }
    }
}

pub(crate) use crate::ping::{ping_ms, ping_text};

/// One server in the browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub key: Key,
    /// The game key the master's list or the answer gives.
    pub game: Option<String>,
    /// The name the master's list gives, until the server answers.
    pub listed_name: Option<String>,
    /// The last answer.
    pub info: Option<Summary>,
    /// Failed queries since the last answer.
    pub misses: u32,
    /// When it last answered (unix ms).
    pub last_seen_ms: Option<u64>,
    /// The friends its last answer lists.
    pub friends: Vec<String>,
    /// Players and slots the master's list gives, until the server answers.
    pub listed_players: Option<(u32, u32)>,
    /// Where the server is, as its master listed it (DDNet: `eu:de`).
    pub location: Option<String>,
}

/// What a master's list says of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listing {
    pub key: Key,
    /// The game key, where the list or the ask tells.
    pub game: Option<String>,
    pub name: Option<String>,
    pub num_players: Option<u32>,
    pub max_players: Option<u32>,
    /// Where the server is, when the list says it (DDNet: `eu:de`).
    pub location: Option<String>,
}

impl Listing {
    /// A listing that says nothing but the address.
    pub(crate) fn bare(key: Key) -> Self {
        Self {
            key,
            game: None,
            name: None,
            num_players: None,
            max_players: None,
            location: None,
        }
    }
}

impl Row {
    /// The location as the table shows it: the country code where the list gives one, else
    /// the continent, in capitals (`eu:de` → `DE`, `eu` → `EU`).
    pub(crate) fn country(&self) -> Option<String> {
        let l = self.location.as_deref()?;
        let shown = l.rsplit(':').next().unwrap_or(l);
        (!shown.is_empty()).then(|| shown.to_ascii_uppercase())
    }

    fn new(key: Key) -> Self {
        Self {
            key,
            game: None,
            listed_name: None,
            info: None,
            misses: 0,
            last_seen_ms: None,
            friends: Vec::new(),
            listed_players: None,
            location: None,
        }
    }

    /// Players and slots: the last answer's, else the list's.
    pub(crate) fn counts(&self) -> Option<(u32, u32)> {
        self.info
            .as_ref()
            .map(|i| (i.num_players, i.max_players))
            .or(self.listed_players)
    }

    /// The name to show.
    pub(crate) fn name(&self) -> String {
        self.info
            .as_ref()
            .map(|i| i.name.clone())
            .or_else(|| self.listed_name.clone())
            .unwrap_or_default()
    }

    /// Down: it answered no query for [`DOWN_AFTER`] rounds.
    pub(crate) fn down(&self) -> bool {
        self.misses >= DOWN_AFTER
    }

    fn players(&self) -> u32 {
        self.counts().map_or(0, |(n, _)| n)
    }

    fn full(&self) -> bool {
        self.counts().is_some_and(|(n, max)| max > 0 && n >= max)
    }

    /// Where a player connects: the answer's game address, else the listed one.
    pub(crate) fn join_address(&self) -> SocketAddr {
        self.info
            .as_ref()
            .and_then(|i| i.game_address)
            .unwrap_or(self.key.0)
    }

    /// The address as the profile and the favourites name it.
    pub(crate) fn id(&self) -> String {
        id(&self.key)
    }
}

/// The profile's name for a server.
pub(crate) fn id(key: &Key) -> String {
    format!("{} {}", key.1, key.0)
}

/// The order rows are shown in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Sort {
    /// Most players first.
    #[default]
    Players,
    /// Lowest ping first (no ping last).
    Ping,
    /// By name.
    Name,
    /// By game, then players.
    Game,
    /// By map.
    Map,
}

impl Sort {
    /// The next order for `s`.
    pub(crate) fn next(self) -> Self {
        match self {
            Self::Players => Self::Ping,
            Self::Ping => Self::Name,
            Self::Name => Self::Game,
            Self::Game => Self::Map,
            Self::Map => Self::Players,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Players => "players",
            Self::Ping => "ping",
            Self::Name => "name",
            Self::Game => "game",
            Self::Map => "map",
        }
    }
}

/// What the player chose to see; kept in the profile as the last filters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Filters {
    /// Text looked for in names, maps and player names (case-insensitive).
    pub search: String,
    pub sort: Sort,
    pub reverse: bool,
    pub favourites_only: bool,
    pub hide_empty: bool,
    pub hide_full: bool,
    /// The game keys shown (empty: every game).
    pub games: BTreeSet<String>,
}

/// A master's last list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MasterState {
    Asking,
    Listed(usize),
    Failed(String),
}

/// The browser's state.
#[derive(Debug, Default)]
pub(crate) struct Model {
    rows: HashMap<Key, Row>,
    pub filters: Filters,
    favourites: BTreeSet<String>,
    /// Friends, lower-cased for matching, with their names as given.
    friends: BTreeMap<String, String>,
    masters: BTreeMap<String, MasterState>,
    generation: u64,
}

impl Model {
    pub(crate) fn new(filters: Filters, favourites: BTreeSet<String>, friends: &[String]) -> Self {
        let mut m = Self {
            filters,
            favourites,
            ..Self::default()
        };
        for f in friends {
            m.add_friend(f);
        }
        m
    }

    /// Bumped on every change the screen shows: the terminal redraws only when it moved.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    fn changed(&mut self) {
        self.generation += 1;
    }

    /// A master is being asked for its list.
    pub(crate) fn master_asking(&mut self, label: &str) {
        self.masters
            .entry(label.to_owned())
            .or_insert(MasterState::Asking);
        self.changed();
    }

    /// A master's answer: its list's size or why there is none.
    pub(crate) fn master_done(&mut self, label: &str, result: Result<usize, String>) {
        let state = match result {
            Ok(n) => MasterState::Listed(n),
            Err(e) => MasterState::Failed(e),
        };
        self.masters.insert(label.to_owned(), state);
        self.changed();
    }

    pub(crate) fn masters(&self) -> impl Iterator<Item = (&String, &MasterState)> {
        self.masters.iter()
    }

    /// A server a master listed (or `--servers` named): added if new; what the list says
    /// of it is shown until the server answers.
    pub(crate) fn listed(&mut self, l: Listing) {
        let row = self.rows.entry(l.key).or_insert_with(|| Row::new(l.key));
        if row.game.is_none() {
            row.game = l.game;
        }
        if l.name.is_some() {
            row.listed_name = l.name;
        }
        if l.num_players.is_some() {
            row.listed_players = l.num_players.map(|n| (n, l.max_players.unwrap_or(0)));
        }
        if l.location.is_some() {
            row.location = l.location;
        }
        self.changed();
    }

    /// A server answered at `now_ms`.
    pub(crate) fn answered(&mut self, key: Key, summary: Summary, now_ms: u64) {
        let friends: Vec<String> = summary
            .players
            .iter()
            .filter_map(|p| self.friends.get(&p.name.to_lowercase()).cloned())
            .collect();
        let row = self.rows.entry(key).or_insert_with(|| Row::new(key));
        if summary.game.is_some() {
            row.game.clone_from(&summary.game);
        }
        row.info = Some(summary);
        row.misses = 0;
        row.last_seen_ms = Some(now_ms);
        row.friends = friends;
        self.changed();
    }

    /// A query of a server failed.
    pub(crate) fn failed(&mut self, key: Key) {
        if let Some(row) = self.rows.get_mut(&key) {
            row.misses = row.misses.saturating_add(1);
            if row.misses >= DOWN_AFTER {
                // A down server lists nobody: a friend there is no longer seen there.
                row.friends.clear();
            }
            self.changed();
        }
    }

    pub(crate) fn row(&self, key: &Key) -> Option<&Row> {
        self.rows.get(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// `needle`: the search text, trimmed and lower-cased once per view.
    fn shown(&self, row: &Row, needle: &str) -> bool {
        let f = &self.filters;
        if f.favourites_only && !self.favourites.contains(&row.id()) {
            return false;
        }
        if f.hide_empty && row.players() == 0 {
            return false;
        }
        if f.hide_full && row.full() {
            return false;
        }
        if !f.games.is_empty() && !row.game.as_ref().is_some_and(|k| f.games.contains(k)) {
            return false;
        }
        if needle.is_empty() {
            return true;
        }
        if row.name().to_lowercase().contains(needle) {
            return true;
        }
        row.info.as_ref().is_some_and(|i| {
            i.map.to_lowercase().contains(needle)
                || i.players
                    .iter()
                    .any(|p| p.name.to_lowercase().contains(needle))
        })
    }

    /// The rows shown, in the chosen order (ties by address, so the order is stable).
    pub(crate) fn view(&self) -> Vec<&Row> {
        let needle = self.filters.search.trim().to_lowercase();
        let mut rows: Vec<&Row> = self
            .rows
            .values()
            .filter(|r| self.shown(r, &needle))
            .collect();
        let reverse = self.filters.reverse;
        let order = |o: std::cmp::Ordering| if reverse { o.reverse() } else { o };
        // Text orders compare keys made once per row, not once per comparison.
        match self.filters.sort {
            Sort::Players => rows.sort_by(|a, b| {
                order(b.players().cmp(&a.players())).then_with(|| a.key.cmp(&b.key))
            }),
            Sort::Ping => {
                let p = |r: &Row| r.info.as_ref().and_then(|i| i.ping_us).unwrap_or(u32::MAX);
                rows.sort_by(|a, b| order(p(a).cmp(&p(b))).then_with(|| a.key.cmp(&b.key)));
            }
            Sort::Game => rows.sort_by(|a, b| {
                order(
                    a.game
                        .cmp(&b.game)
                        .then_with(|| b.players().cmp(&a.players())),
                )
                .then_with(|| a.key.cmp(&b.key))
            }),
            Sort::Name | Sort::Map => {
                let by_map = self.filters.sort == Sort::Map;
                let mut keyed: Vec<(String, &Row)> = rows
                    .into_iter()
                    .map(|r| {
                        let text = if by_map {
                            r.info
                                .as_ref()
                                .map(|i| i.map.to_lowercase())
                                .unwrap_or_default()
                        } else {
                            r.name().to_lowercase()
                        };
                        (text, r)
                    })
                    .collect();
                keyed.sort_by(|(ta, a), (tb, b)| order(ta.cmp(tb)).then_with(|| a.key.cmp(&b.key)));
                rows = keyed.into_iter().map(|(_, r)| r).collect();
            }
        }
        rows
    }

    pub(crate) fn set_search(&mut self, text: &str) {
        text.clone_into(&mut self.filters.search);
        self.changed();
    }

    pub(crate) fn cycle_sort(&mut self) {
        self.filters.sort = self.filters.sort.next();
        self.changed();
    }

    pub(crate) fn reverse(&mut self) {
        self.filters.reverse = !self.filters.reverse;
        self.changed();
    }

    pub(crate) fn toggle_favourites_only(&mut self) {
        self.filters.favourites_only = !self.filters.favourites_only;
        self.changed();
    }

    pub(crate) fn toggle_hide_empty(&mut self) {
        self.filters.hide_empty = !self.filters.hide_empty;
        self.changed();
    }

    pub(crate) fn toggle_hide_full(&mut self) {
        self.filters.hide_full = !self.filters.hide_full;
        self.changed();
    }

    /// The games the rows belong to, sorted.
    pub(crate) fn games(&self) -> Vec<String> {
        let set: BTreeSet<String> = self.rows.values().filter_map(|r| r.game.clone()).collect();
        set.into_iter().collect()
    }

    /// Shows `game` too, or no longer (when no game is chosen, every game is shown).
    pub(crate) fn toggle_game(&mut self, game: &str) {
        if !self.filters.games.remove(game) {
            self.filters.games.insert(game.to_owned());
        }
        self.changed();
    }

    /// Every game shown again.
    pub(crate) fn all_games(&mut self) {
        self.filters.games.clear();
        self.changed();
    }

    pub(crate) fn is_favourite(&self, key: &Key) -> bool {
        self.favourites.contains(&id(key))
    }

    /// Toggles `key` as a favourite; true when it now is one.
    pub(crate) fn toggle_favourite(&mut self, key: &Key) -> bool {
        let id = id(key);
        let now = if self.favourites.remove(&id) {
            false
        } else {
            self.favourites.insert(id);
            true
        };
        self.changed();
        now
    }

    pub(crate) fn favourites(&self) -> &BTreeSet<String> {
        &self.favourites
    }

    /// Adds a friend (matched case-insensitively against plain player names).
    pub(crate) fn add_friend(&mut self, name: &str) {
        let name = name.trim();
        if name.is_empty() {
            return;
        }
        self.friends
            .entry(name.to_lowercase())
            .or_insert_with(|| name.to_owned());
        // Rows already listing the friend show them from now on.
        for row in self.rows.values_mut() {
            if let Some(info) = &row.info
                && info
                    .players
                    .iter()
                    .any(|p| p.name.eq_ignore_ascii_case(name))
                && !row.friends.iter().any(|f| f.eq_ignore_ascii_case(name))
            {
                row.friends.push(name.to_owned());
            }
        }
        self.changed();
    }

    /// Where each friend plays: (friend, server name, key), by friend.
    pub(crate) fn friends_online(&self) -> Vec<(String, String, Key)> {
        let mut out: Vec<(String, String, Key)> = self
            .rows
            .values()
            .flat_map(|r| r.friends.iter().map(move |f| (f.clone(), r.name(), r.key)))
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use muster_proto::model::{Player, Protocol, Text};

    use super::*;

    fn key(port: u16) -> Key {
        (SocketAddr::from(([127, 0, 0, 1], port)), "teeworlds")
    }

    fn summary(name: &str, players: &[&str], max: u32, ping: u32) -> Summary {
        Summary {
            name: name.into(),
            map: format!("{name}-map"),
            game: Some("ddnet".into()),
            num_players: u32::try_from(players.len()).unwrap(),
            max_players: max,
            players: players
                .iter()
                .map(|p| PlayerLine {
                    name: (*p).into(),
                    ..PlayerLine::default()
                })
                .collect(),
            ping_us: Some(ping * 1000),
            ..Summary::default()
        }
    }

    fn names(m: &Model) -> Vec<String> {
        m.view().iter().map(|r| r.name()).collect()
    }

    fn three() -> Model {
        let mut m = Model::default();
        m.answered(key(1), summary("Alpha", &["ann"], 8, 30), 10);
        m.answered(key(2), summary("Bravo", &[], 8, 10), 10);
        m.answered(key(3), summary("Charlie", &["bob", "cid"], 2, 20), 10);
        m
    }

    #[test]
    fn summary_takes_plain_text_and_the_game_key() {
        let mut info = ServerInfo::new(Protocol::Teeworlds);
        info.name = Text {
            plain: "Clean".into(),
            ..Text::from_utf8_str("^1Clean")
        };
        info.players.push(Player {
            name: Text::from_utf8_str("ann"),
            ..Player::default()
        });
        let s = Summary::of(&info, Some(std::time::Duration::from_micros(42_480)));
        assert_eq!(s.name, "Clean");
        assert_eq!(s.game.as_deref(), Some("teeworlds"));
        assert_eq!(s.ping_us, Some(42_480));
        assert_eq!(s.players[0].name, "ann");
    }

    #[test]
    fn sort_by_ping_tells_tenths_apart() {
        let mut m = Model::default();
        let mut near = summary("Near", &[], 8, 0);
        near.ping_us = Some(1_200);
        let mut nearer = summary("Nearer", &[], 8, 0);
        nearer.ping_us = Some(800);
        m.answered(key(1), near, 10);
        m.answered(key(2), nearer, 10);
        m.cycle_sort();
        assert_eq!(m.filters.sort, Sort::Ping);
        assert_eq!(names(&m), ["Nearer", "Near"]);
    }

    #[test]
    fn sort_cycles_and_reverses() {
        let mut m = three();
        assert_eq!(m.filters.sort, Sort::Players);
        assert_eq!(names(&m), ["Charlie", "Alpha", "Bravo"]);
        m.cycle_sort();
        assert_eq!(m.filters.sort, Sort::Ping);
        assert_eq!(names(&m), ["Bravo", "Charlie", "Alpha"]);
        m.reverse();
        assert_eq!(names(&m), ["Alpha", "Charlie", "Bravo"]);
        m.reverse();
        m.cycle_sort();
        assert_eq!(names(&m), ["Alpha", "Bravo", "Charlie"]);
        for _ in 0..3 {
            m.cycle_sort();
        }
        assert_eq!(m.filters.sort, Sort::Players);
    }

    #[test]
    fn search_looks_at_names_maps_and_players() {
        let mut m = three();
        m.set_search("BOB");
        assert_eq!(names(&m), ["Charlie"]);
        m.set_search("bravo-map");
        assert_eq!(names(&m), ["Bravo"]);
        m.set_search("alp");
        assert_eq!(names(&m), ["Alpha"]);
        m.set_search("");
        assert_eq!(m.view().len(), 3);
    }

    #[test]
    fn empty_full_and_favourites_hide() {
        let mut m = three();
        m.toggle_hide_empty();
        assert_eq!(names(&m), ["Charlie", "Alpha"]);
        m.toggle_hide_full();
        assert_eq!(names(&m), ["Alpha"]);
        m.toggle_hide_empty();
        m.toggle_hide_full();
        assert!(m.toggle_favourite(&key(2)));
        m.toggle_favourites_only();
        assert_eq!(names(&m), ["Bravo"]);
        assert!(m.favourites().contains("teeworlds 127.0.0.1:2"));
        assert!(!m.toggle_favourite(&key(2)));
        assert!(m.view().is_empty());
    }

    #[test]
    fn games_are_chosen_from_what_is_listed() {
        let mut m = three();
        m.listed(Listing {
            game: Some("ut".into()),
            name: Some("Listed".into()),
            ..Listing::bare(key(4))
        });
        m.listed(Listing {
            game: Some("tf".into()),
            name: Some("Other".into()),
            ..Listing::bare(key(5))
        });
        assert_eq!(m.games(), ["ddnet", "tf", "ut"]);
        m.toggle_game("ut");
        assert_eq!(names(&m), ["Listed"]);
        m.toggle_game("tf");
        assert_eq!(m.view().len(), 2);
        m.toggle_game("ut");
        assert_eq!(names(&m), ["Other"]);
        m.all_games();
        assert_eq!(m.view().len(), 5);
    }

    #[test]
    fn a_server_is_down_after_misses_and_up_when_it_answers() {
        let mut m = three();
        m.failed(key(1));
        assert!(!m.row(&key(1)).unwrap().down());
        m.failed(key(1));
        assert!(m.row(&key(1)).unwrap().down());
        // A down server stays in the list, marked.
        assert_eq!(m.view().len(), 3);
        m.answered(key(1), summary("Alpha", &[], 8, 5), 20);
        let row = m.row(&key(1)).unwrap();
        assert!(!row.down());
        assert_eq!(row.last_seen_ms, Some(20));
        // A failure for a server never listed adds nothing.
        m.failed(key(9));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn friends_are_found_where_they_play_and_follow_them() {
        let mut m = Model::new(Filters::default(), BTreeSet::new(), &["Bob".into()]);
        m.answered(key(1), summary("Alpha", &["ann"], 8, 5), 1);
        assert!(m.friends_online().is_empty());
        m.answered(key(2), summary("Bravo", &["bob"], 8, 5), 1);
        assert_eq!(m.friends_online(), [("Bob".into(), "Bravo".into(), key(2))]);
        // Bob moves to Alpha.
        m.answered(key(2), summary("Bravo", &[], 8, 5), 2);
        m.answered(key(1), summary("Alpha", &["ann", "BOB"], 8, 5), 2);
        assert_eq!(m.friends_online(), [("Bob".into(), "Alpha".into(), key(1))]);
        // A friend added later is found on servers already answered.
        m.add_friend("ann");
        assert_eq!(m.friends_online().len(), 2);
    }

    #[test]
    fn the_country_is_the_list_s_country_code_else_its_continent() {
        let mut m = Model::default();
        m.listed(Listing {
            location: Some("eu:de".into()),
            ..Listing::bare(key(1))
        });
        m.listed(Listing {
            location: Some("na".into()),
            ..Listing::bare(key(2))
        });
        m.listed(Listing::bare(key(3)));
        assert_eq!(m.row(&key(1)).unwrap().country().as_deref(), Some("DE"));
        assert_eq!(m.row(&key(2)).unwrap().country().as_deref(), Some("NA"));
        assert_eq!(m.row(&key(3)).unwrap().country(), None);
        // A later list without a location keeps the one known.
        m.listed(Listing::bare(key(1)));
        assert_eq!(m.row(&key(1)).unwrap().country().as_deref(), Some("DE"));
    }

    #[test]
    fn the_list_s_counts_stand_until_the_server_answers() {
        let mut m = Model::default();
        m.listed(Listing {
            num_players: Some(3),
            max_players: Some(3),
            ..Listing::bare(key(1))
        });
        m.listed(Listing::bare(key(2)));
        assert_eq!(m.row(&key(1)).unwrap().counts(), Some((3, 3)));
        m.toggle_hide_full();
        assert_eq!(m.view().len(), 1);
        m.toggle_hide_full();
        m.toggle_hide_empty();
        assert_eq!(m.view().len(), 1);
        m.answered(key(1), summary("One", &[], 3, 5), 1);
        assert_eq!(m.row(&key(1)).unwrap().counts(), Some((0, 3)));
        assert!(m.view().is_empty());
    }

    #[test]
    fn generation_moves_only_on_change() {
        let mut m = three();
        let g = m.generation();
        let _ = m.view();
        assert_eq!(m.generation(), g);
        m.cycle_sort();
        assert!(m.generation() > g);
    }

    #[test]
    fn masters_report_their_state() {
        let mut m = Model::default();
        m.master_asking("a");
        m.master_done("b", Err("timeout".into()));
        m.master_done("a", Ok(3));
        let states: Vec<_> = m.masters().map(|(_, s)| s.clone()).collect();
        assert_eq!(
            states,
            [
                MasterState::Listed(3),
                MasterState::Failed("timeout".into())
            ]
        );
    }
}
