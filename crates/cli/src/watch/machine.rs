//! The event machine of `muster watch`: what one server said before, what it says now, and
//! the events that lie between. Pure: the time and every poll's outcome are passed in, and
//! nothing here touches a socket, a clock or the output.
//!
//! Rules (they are the command's documentation too, see `--help`):
//! - The first answer of a server, or its first answer after `server_down`, is `server_up`.
//!   The players then present give no `player_joined`, but each friend among them gives
//!   `friend_online`; `server_full` is never sent for a first answer.
//! - A failed poll of a server that was up is `server_down`, followed by `friend_offline` for
//!   the friends that were on it (so every `friend_online` has its `friend_offline`). The
//!   server's players, name and map are forgotten: its next answer is a first answer again.
//! - Players are matched across polls by their plain name (colour codes removed), counted as a
//!   multiset: two players of one name are two. What is left over on both sides is paired by
//!   player id where the protocol has one (a rename, which gives no event); the rest left or
//!   joined.
//! - An answer whose player list is incomplete (a partial answer) says nothing about players:
//!   the previous list stays, and no player or friend event comes from it.
//! - Friends are matched case-insensitively on the plain name: exactly, or, for a friend given
//!   as `~TEXT`, any player whose name contains TEXT (`~nameless` matches `nameless tee`).
//! - Filters: each answer comes with whether it passes `--filter`; a server's events are
//!   emitted when it passed before the change or passes after it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

/// Every kind of event `muster watch` reports, in the order `--help` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EventKind {
    ServerUp,
    ServerDown,
    PlayerJoined,
    PlayerLeft,
    MapChanged,
    NameChanged,
    ServerFull,
    SlotFree,
    FriendOnline,
    FriendOffline,
}

impl EventKind {
    /// Every kind.
    #[cfg(test)]
    pub(crate) const ALL: [Self; 10] = [
        Self::ServerUp,
        Self::ServerDown,
        Self::PlayerJoined,
        Self::PlayerLeft,
        Self::MapChanged,
        Self::NameChanged,
        Self::ServerFull,
        Self::SlotFree,
        Self::FriendOnline,
        Self::FriendOffline,
    ];

    /// The name printed in `event` and passed in `MUSTER_EVENT`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::ServerUp => "server_up",
            Self::ServerDown => "server_down",
            Self::PlayerJoined => "player_joined",
            Self::PlayerLeft => "player_left",
            Self::MapChanged => "map_changed",
            Self::NameChanged => "name_changed",
            Self::ServerFull => "server_full",
            Self::SlotFree => "slot_free",
            Self::FriendOnline => "friend_online",
            Self::FriendOffline => "friend_offline",
        }
    }
}

/// One event, with what was known about the server when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    pub kind: EventKind,
    /// The server's address as the user or the master gave it.
    pub address: Arc<str>,
    pub time: SystemTime,
    /// The server's name (after the change, for `name_changed`).
    pub name: Option<String>,
    /// The map (after the change, for `map_changed`).
    pub map: Option<String>,
    /// Players the server counts.
    pub players: Option<u32>,
    /// Player slots, when the server says.
    pub max_players: Option<u32>,
    /// The player of a player or friend event, as the server names them (plain).
    pub player: Option<String>,
    /// The map or name before a `map_changed` or `name_changed`.
    pub previous: Option<String>,
    /// Why a `server_down` server is down.
    pub error: Option<String>,
}

/// Which server: the address as given and the protocol it is asked with (one address may be
/// watched with two protocols).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ServerKey {
    pub address: Arc<str>,
    pub protocol: &'static str,
}

/// A listed player.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SeenPlayer {
    /// The plain name (colour codes and decorations removed).
    pub name: String,
    /// An id the protocol keeps for the player while connected, if it has one.
    pub id: Option<i64>,
}

/// What one answer says, reduced to what events are made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub name: String,
    pub map: String,
    pub num_players: u32,
    pub max_players: Option<u32>,
    /// `None` when the list is incomplete (a partial answer).
    pub players: Option<Vec<SeenPlayer>>,
}

impl Snapshot {
    fn full(&self) -> bool {
        self.max_players
            .is_some_and(|max| max > 0 && self.num_players >= max)
    }
}

/// The outcome of one poll of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Poll {
    /// It answered; `selected` says whether the answer passes the filters.
    Answered { snapshot: Snapshot, selected: bool },
    /// It did not answer after the retries, or refused.
    Failed { error: String },
    /// Nothing was learnt (the request was never sent): no change.
    Unknown,
}

/// What is known of a server that is up.
#[derive(Debug, Clone)]
struct Known {
    snapshot: Snapshot,
    /// The last complete player list (`None` until one came).
    players: Option<Vec<SeenPlayer>>,
    /// Friends on the server: index into [`Watcher::friends`] and the name as seen.
    friends: Vec<(usize, String)>,
}

#[derive(Debug, Default)]
struct Server {
    known: Option<Known>,
    /// Whether the last answer passed the filters.
    selected: bool,
}

/// How one `--friend` is matched against a plain player name, both lower-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Friend {
    /// The whole name.
    Exact(String),
    /// Part of the name (`--friend ~TEXT`).
    Contains(String),
}

impl Friend {
    /// `~TEXT` is a substring match, anything else the exact name; `None` for an empty one.
    fn parse(spec: &str) -> Option<Self> {
        let lower = spec.trim().to_lowercase();
        match lower.strip_prefix('~') {
            Some(part) if !part.is_empty() => Some(Self::Contains(part.to_owned())),
            Some(_) => None,
            None if lower.is_empty() => None,
            None => Some(Self::Exact(lower)),
        }
    }

    /// Whether `lower` (a lower-cased plain player name) is this friend.
    fn matches(&self, lower: &str) -> bool {
        match self {
            Self::Exact(name) => lower == name,
            Self::Contains(part) => lower.contains(part.as_str()),
        }
    }
}

/// The state of every watched server.
#[derive(Debug)]
pub(crate) struct Watcher {
    /// The friends, each once.
    friends: Vec<Friend>,
    servers: HashMap<ServerKey, Server>,
}

impl Watcher {
    /// A watcher looking out for `friends` (matched case-insensitively; `~TEXT` matches a
    /// name containing TEXT).
    pub(crate) fn new<S: AsRef<str>>(friends: &[S]) -> Self {
        let mut parsed: Vec<Friend> = Vec::new();
        for f in friends.iter().filter_map(|f| Friend::parse(f.as_ref())) {
            if !parsed.contains(&f) {
                parsed.push(f);
            }
        }
        Self {
            friends: parsed,
            servers: HashMap::new(),
        }
    }

    /// Take one poll's outcome for `key` at `now`; the events it makes, in order.
    pub(crate) fn observe(&mut self, now: SystemTime, key: &ServerKey, poll: Poll) -> Vec<Event> {
        let (snapshot, selected) = match poll {
            Poll::Unknown => return Vec::new(),
            Poll::Failed { error } => return self.down(now, key, error),
            Poll::Answered { snapshot, selected } => (snapshot, selected),
        };
        let friends = snapshot
            .players
            .as_deref()
            .map(|players| self.friends_among(players));
        let server = self.servers.entry(key.clone()).or_default();
        let emit = server.selected || selected;
        server.selected = selected;
        let mut out = Emitter::new(now, &key.address, &snapshot);
        let events;
        match server.known.take() {
            None => {
                out.push(EventKind::ServerUp);
                for (_, name) in friends.iter().flatten() {
                    out.player(EventKind::FriendOnline, name);
                }
                events = out.events;
                server.known = Some(Known {
                    players: snapshot.players.clone(),
                    friends: friends.unwrap_or_default(),
                    snapshot,
                });
            }
            Some(prev) => {
                let before = &prev.snapshot;
                if before.name != snapshot.name {
                    out.changed(EventKind::NameChanged, &before.name);
                }
                if before.map != snapshot.map {
                    out.changed(EventKind::MapChanged, &before.map);
                }
                if let (Some(was), Some(now)) = (&prev.players, &snapshot.players) {
                    let (left, joined) = diff_players(was, now);
                    for p in left {
                        out.player(EventKind::PlayerLeft, &p.name);
                    }
                    for p in joined {
                        out.player(EventKind::PlayerJoined, &p.name);
                    }
                }
                let friends = match friends {
                    Some(now) => {
                        for (i, name) in &prev.friends {
                            if !now.iter().any(|(j, _)| j == i) {
                                out.player(EventKind::FriendOffline, name);
                            }
                        }
                        for (i, name) in &now {
                            if !prev.friends.iter().any(|(j, _)| j == i) {
                                out.player(EventKind::FriendOnline, name);
                            }
                        }
                        now
                    }
                    None => prev.friends,
                };
                match (before.full(), snapshot.full()) {
                    (false, true) => out.push(EventKind::ServerFull),
                    (true, false) => out.push(EventKind::SlotFree),
                    _ => {}
                }
                events = out.events;
                server.known = Some(Known {
                    players: snapshot.players.clone().or(prev.players),
                    friends,
                    snapshot,
                });
            }
        }
        if emit { events } else { Vec::new() }
    }

    /// `key` is no longer watched (its master stopped listing it): its friends go offline, and
    /// everything known about it is forgotten.
    pub(crate) fn forget(&mut self, now: SystemTime, key: &ServerKey) -> Vec<Event> {
        let Some(server) = self.servers.remove(key) else {
            return Vec::new();
        };
        let Some(known) = server.known else {
            return Vec::new();
        };
        let mut out = Emitter::new(now, &key.address, &known.snapshot);
        for (_, name) in &known.friends {
            out.player(EventKind::FriendOffline, name);
        }
        if server.selected {
            out.events
        } else {
            Vec::new()
        }
    }

    fn down(&mut self, now: SystemTime, key: &ServerKey, error: String) -> Vec<Event> {
        let Some(server) = self.servers.get_mut(key) else {
            return Vec::new();
        };
        let Some(known) = server.known.take() else {
            return Vec::new();
        };
        let mut out = Emitter::new(now, &key.address, &known.snapshot);
        out.push(EventKind::ServerDown);
        if let Some(e) = out.events.last_mut() {
            e.error = Some(error);
        }
        for (_, name) in &known.friends {
            out.player(EventKind::FriendOffline, name);
        }
        if server.selected {
            out.events
        } else {
            Vec::new()
        }
    }

    /// The friends among `players`, each once, with the name of the first player matching.
    fn friends_among(&self, players: &[SeenPlayer]) -> Vec<(usize, String)> {
        let mut found = Vec::new();
        if self.friends.is_empty() {
            return found;
        }
        for p in players {
            let lower = p.name.to_lowercase();
            for (i, f) in self.friends.iter().enumerate() {
                if f.matches(&lower) && !found.iter().any(|(j, _)| *j == i) {
                    found.push((i, p.name.clone()));
                }
            }
        }
        found
    }
}

/// Builds the events of one observation, each with the server's context.
struct Emitter<'a> {
    now: SystemTime,
    address: &'a Arc<str>,
    snapshot: &'a Snapshot,
    events: Vec<Event>,
}

impl<'a> Emitter<'a> {
    fn new(now: SystemTime, address: &'a Arc<str>, snapshot: &'a Snapshot) -> Self {
        Self {
            now,
            address,
            snapshot,
            events: Vec::new(),
        }
    }

    fn push(&mut self, kind: EventKind) {
        self.events.push(Event {
            kind,
            address: self.address.clone(),
            time: self.now,
            name: Some(self.snapshot.name.clone()),
            map: Some(self.snapshot.map.clone()),
            players: Some(self.snapshot.num_players),
            max_players: self.snapshot.max_players,
            player: None,
            previous: None,
            error: None,
        });
    }

    fn player(&mut self, kind: EventKind, name: &str) {
        self.push(kind);
        if let Some(e) = self.events.last_mut() {
            e.player = Some(name.to_owned());
        }
    }

    fn changed(&mut self, kind: EventKind, previous: &str) {
        self.push(kind);
        if let Some(e) = self.events.last_mut() {
            e.previous = Some(previous.to_owned());
        }
    }
}

/// Who left and who joined between two complete player lists: matched by name as multisets
/// (equal ids first within a name), then the leftovers by an id unique on both sides (a
/// rename). Both lists in their own order.
fn diff_players<'a>(
    before: &'a [SeenPlayer],
    after: &'a [SeenPlayer],
) -> (Vec<&'a SeenPlayer>, Vec<&'a SeenPlayer>) {
    let mut gone = vec![true; before.len()];
    let mut new = vec![true; after.len()];
    let mut by_name: HashMap<&str, (Vec<usize>, Vec<usize>)> = HashMap::new();
    for (i, p) in before.iter().enumerate() {
        by_name.entry(&p.name).or_default().0.push(i);
    }
    for (i, p) in after.iter().enumerate() {
        by_name.entry(&p.name).or_default().1.push(i);
    }
    for (was, is) in by_name.values() {
        let mut open: Vec<usize> = is.clone();
        let mut unmatched: Vec<usize> = Vec::new();
        for &b in was {
            let id = before.get(b).and_then(|p| p.id);
            let same_id = id.and_then(|id| {
                open.iter()
                    .position(|&a| after.get(a).and_then(|p| p.id) == Some(id))
            });
            match same_id {
                Some(k) => {
                    let a = open.remove(k);
                    gone[b] = false;
                    new[a] = false;
                }
                None => unmatched.push(b),
            }
        }
        for (b, a) in unmatched.into_iter().zip(open) {
            gone[b] = false;
            new[a] = false;
        }
    }
    // Renames: an id left over once on each side.
    let left_ids = ids_once(before, &gone);
    let joined_ids = ids_once(after, &new);
    for (id, b) in &left_ids {
        if let Some(a) = joined_ids.get(id) {
            gone[*b] = false;
            new[*a] = false;
        }
    }
    let pick = |players: &'a [SeenPlayer], keep: &[bool]| {
        players
            .iter()
            .zip(keep)
            .filter(|(_, k)| **k)
            .map(|(p, _)| p)
            .collect::<Vec<_>>()
    };
    (pick(before, &gone), pick(after, &new))
}

/// The ids that occur exactly once in `players` (an id two players share identifies
/// neither), for the players marked in `open`, with their index.
fn ids_once(players: &[SeenPlayer], open: &[bool]) -> HashMap<i64, usize> {
    let mut count: HashMap<i64, (usize, usize)> = HashMap::new();
    for (i, p) in players.iter().enumerate() {
        if let Some(id) = p.id {
            count.entry(id).or_insert((0, i)).0 += 1;
        }
    }
    count
        .into_iter()
        .filter(|(_, (n, i))| *n == 1 && open.get(*i).copied().unwrap_or(false))
        .map(|(id, (_, i))| (id, i))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The virtual clock: `t(s)` is `s` seconds after the epoch.
    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    fn key(a: &str) -> ServerKey {
        ServerKey {
            address: a.into(),
            protocol: "gameagent",
        }
    }

    fn players(names: &[&str]) -> Vec<SeenPlayer> {
        names
            .iter()
            .map(|n| SeenPlayer {
                name: (*n).to_owned(),
                id: None,
            })
            .collect()
    }

    fn with_ids(list: &[(&str, i64)]) -> Vec<SeenPlayer> {
        list.iter()
            .map(|(n, id)| SeenPlayer {
                name: (*n).to_owned(),
                id: Some(*id),
            })
            .collect()
    }

    fn snap(map: &str, max: u32, list: Vec<SeenPlayer>) -> Snapshot {
        Snapshot {
            name: "Server".into(),
            map: map.into(),
            num_players: u32::try_from(list.len()).unwrap(),
            max_players: Some(max),
            players: Some(list),
        }
    }

    fn answer(s: Snapshot) -> Poll {
        Poll::Answered {
            snapshot: s,
            selected: true,
        }
    }

    /// Events as `kind` or `kind:detail` (player, or previous→current for changes).
    fn short(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match (e.kind, &e.player, &e.previous) {
                (_, Some(p), _) => format!("{}:{p}", e.kind.name()),
                (EventKind::MapChanged, _, Some(was)) => {
                    format!("map_changed:{was}>{}", e.map.as_deref().unwrap_or(""))
                }
                (EventKind::NameChanged, _, Some(was)) => {
                    format!("name_changed:{was}>{}", e.name.as_deref().unwrap_or(""))
                }
                _ => e.kind.name().to_owned(),
            })
            .collect()
    }

    /// Feed `polls` one second apart to a fresh watcher of `friends`; the events of each poll.
    fn check(friends: &[&str], polls: Vec<Poll>) -> Vec<Vec<String>> {
        let mut w = Watcher::new(friends);
        let k = key("srv:1");
        polls
            .into_iter()
            .enumerate()
            .map(|(i, p)| short(&w.observe(t(i as u64), &k, p)))
            .collect()
    }

    #[test]
    fn first_answer_is_server_up_with_friends_but_no_joins_and_no_full() {
        let got = check(
            &["BOB"],
            vec![answer(snap("dm1", 2, players(&["Carl", "bob"])))],
        );
        assert_eq!(got, [vec!["server_up", "friend_online:bob"]]);
    }

    #[test]
    fn a_friend_given_as_tilde_text_matches_names_containing_it() {
        let got = check(
            &["~NAMELESS", "~", "carl"],
            vec![
                answer(snap("dm1", 2, players(&["nameless tee", "Carl"]))),
                answer(snap("dm1", 1, players(&["Carl"]))),
            ],
        );
        assert_eq!(
            got,
            [
                vec![
                    "server_up",
                    "friend_online:nameless tee",
                    "friend_online:Carl"
                ],
                vec!["player_left:nameless tee", "friend_offline:nameless tee"],
            ]
        );
        // Without the tilde the name must be whole.
        let got = check(
            &["nameless"],
            vec![answer(snap("dm1", 1, players(&["nameless tee"])))],
        );
        assert_eq!(got, [vec!["server_up"]]);
        // One player can be two friends; each comes online once.
        let got = check(
            &["~name", "~tee", "~name"],
            vec![answer(snap("dm1", 1, players(&["nameless tee"])))],
        );
        assert_eq!(
            got,
            [vec![
                "server_up",
                "friend_online:nameless tee",
                "friend_online:nameless tee"
            ]]
        );
    }

    #[test]
    fn joins_and_leaves_count_duplicate_names() {
        let got = check(
            &[],
            vec![
                answer(snap("dm1", 8, players(&["Ann", "Ann", "Ben"]))),
                answer(snap("dm1", 8, players(&["Ann", "Ben", "Ben", "Ben"]))),
                answer(snap("dm1", 8, players(&["Ann", "Ben", "Ben", "Ben"]))),
                answer(snap("dm1", 8, players(&[]))),
            ],
        );
        assert_eq!(
            got,
            [
                vec!["server_up"],
                vec!["player_left:Ann", "player_joined:Ben", "player_joined:Ben"],
                vec![],
                vec![
                    "player_left:Ann",
                    "player_left:Ben",
                    "player_left:Ben",
                    "player_left:Ben"
                ],
            ]
        );
    }

    #[test]
    fn a_rename_is_no_event_when_the_protocol_gives_ids() {
        let got = check(
            &[],
            vec![
                answer(snap("dm1", 8, with_ids(&[("Ann", 1), ("Ben", 2)]))),
                answer(snap("dm1", 8, with_ids(&[("Anna", 1), ("Ben", 2)]))),
            ],
        );
        assert_eq!(got, [vec!["server_up"], vec![]]);
        // Without ids a rename is all anyone can see as a leave and a join.
        let got = check(
            &[],
            vec![
                answer(snap("dm1", 8, players(&["Ann", "Ben"]))),
                answer(snap("dm1", 8, players(&["Anna", "Ben"]))),
            ],
        );
        assert_eq!(
            got,
            [
                vec!["server_up"],
                vec!["player_left:Ann", "player_joined:Anna"]
            ]
        );
    }

    #[test]
    fn ids_shuffled_at_a_map_change_give_no_player_events() {
        // UE2 numbers players again on a new level: names decide first.
        let got = check(
            &[],
            vec![
                answer(snap("dm1", 8, with_ids(&[("Ann", 1), ("Ben", 2)]))),
                answer(snap("dm2", 8, with_ids(&[("Ben", 1), ("Ann", 2)]))),
            ],
        );
        assert_eq!(got, [vec!["server_up"], vec!["map_changed:dm1>dm2"]]);
    }

    #[test]
    fn a_reused_id_with_a_new_name_and_a_newcomer_of_the_old_name() {
        // Ann (1) renamed to Zed and a new Ann (3) came: names decide first, so the new Ann
        // is taken for the old one and Zed joined. One join either way, nobody left.
        let got = check(
            &[],
            vec![
                answer(snap("dm1", 8, with_ids(&[("Ann", 1)]))),
                answer(snap("dm1", 8, with_ids(&[("Zed", 1), ("Ann", 3)]))),
            ],
        );
        assert_eq!(got, [vec!["server_up"], vec!["player_joined:Zed"]]);
    }

    #[test]
    fn duplicate_ids_are_no_ids() {
        let got = check(
            &[],
            vec![
                answer(snap("dm1", 8, with_ids(&[("Ann", 0), ("Ben", 0)]))),
                answer(snap("dm1", 8, with_ids(&[("Cy", 0), ("Ben", 0)]))),
            ],
        );
        assert_eq!(
            got,
            [
                vec!["server_up"],
                vec!["player_left:Ann", "player_joined:Cy"]
            ]
        );
    }

    #[test]
    fn map_and_name_changes_carry_the_previous_value() {
        let mut renamed = snap("dm2", 8, players(&[]));
        renamed.name = "Other".into();
        let got = check(
            &[],
            vec![
                answer(snap("dm1", 8, players(&[]))),
                answer(snap("dm2", 8, players(&[]))),
                answer(renamed),
            ],
        );
        assert_eq!(
            got,
            [
                vec!["server_up"],
                vec!["map_changed:dm1>dm2"],
                vec!["name_changed:Server>Other"]
            ]
        );
    }

    #[test]
    fn full_and_slot_free_only_on_a_change() {
        let got = check(
            &[],
            vec![
                answer(snap("dm1", 2, players(&["a", "b"]))),
                answer(snap("dm1", 2, players(&["a"]))),
                answer(snap("dm1", 2, players(&["a"]))),
                answer(snap("dm1", 2, players(&["a", "c"]))),
                answer(snap("dm1", 2, players(&["a", "c"]))),
            ],
        );
        assert_eq!(
            got,
            [
                vec!["server_up"],
                vec!["player_left:b", "slot_free"],
                vec![],
                vec!["player_joined:c", "server_full"],
                vec![],
            ]
        );
    }

    #[test]
    fn unknown_slots_are_never_full() {
        let mut s = snap("dm1", 0, players(&["a"]));
        s.max_players = None;
        let mut zero = snap("dm1", 0, players(&["a"]));
        zero.max_players = Some(0);
        let got = check(
            &[],
            vec![answer(snap("dm1", 4, vec![])), answer(s), answer(zero)],
        );
        assert_eq!(
            got,
            [
                vec!["server_up"],
                vec!["player_joined:a"],
                Vec::<&str>::new()
            ]
        );
    }

    #[test]
    fn down_then_up_again_is_a_fresh_first_answer() {
        let got = check(
            &["ann"],
            vec![
                answer(snap("dm1", 2, players(&["Ann", "Ben"]))),
                Poll::Failed {
                    error: "timeout".into(),
                },
                Poll::Failed {
                    error: "timeout".into(),
                },
                answer(snap("dm2", 2, players(&["Ann", "Cy"]))),
            ],
        );
        assert_eq!(
            got,
            [
                vec!["server_up", "friend_online:Ann"],
                vec!["server_down", "friend_offline:Ann"],
                vec![],
                vec!["server_up", "friend_online:Ann"],
            ]
        );
    }

    #[test]
    fn server_down_says_why_and_what_was_known() {
        let mut w = Watcher::new::<&str>(&[]);
        let k = key("host:7777");
        w.observe(t(0), &k, answer(snap("dm1", 4, players(&["a"]))));
        let e = w.observe(
            t(30),
            &k,
            Poll::Failed {
                error: "timeout".into(),
            },
        );
        assert_eq!(
            e,
            [Event {
                kind: EventKind::ServerDown,
                address: "host:7777".into(),
                time: t(30),
                name: Some("Server".into()),
                map: Some("dm1".into()),
                players: Some(1),
                max_players: Some(4),
                player: None,
                previous: None,
                error: Some("timeout".into()),
            }]
        );
    }

    #[test]
    fn a_server_that_never_answered_gives_nothing() {
        let got = check(
            &[],
            vec![
                Poll::Failed {
                    error: "timeout".into(),
                },
                Poll::Unknown,
            ],
        );
        assert_eq!(got, [Vec::<String>::new(), vec![]]);
    }

    #[test]
    fn an_unsent_poll_changes_nothing() {
        let got = check(
            &[],
            vec![
                answer(snap("dm1", 4, players(&["a"]))),
                Poll::Unknown,
                answer(snap("dm1", 4, players(&["a"]))),
            ],
        );
        assert_eq!(got, [vec!["server_up"], vec![], vec![]]);
    }

    #[test]
    fn partial_answers_say_nothing_about_players() {
        let partial = |map: &str| Snapshot {
            players: None,
            ..snap(map, 8, vec![])
        };
        let got = check(
            &["ben"],
            vec![
                // No complete list yet: the first complete one is the baseline.
                answer(partial("dm1")),
                answer(snap("dm1", 8, players(&["Ann", "Ben"]))),
                answer(partial("dm2")),
                answer(snap("dm2", 8, players(&["Ann", "Cy"]))),
            ],
        );
        assert_eq!(
            got,
            [
                vec!["server_up"],
                vec!["friend_online:Ben"],
                vec!["map_changed:dm1>dm2"],
                vec!["player_left:Ben", "player_joined:Cy", "friend_offline:Ben"],
            ]
        );
    }

    #[test]
    fn friends_are_case_insensitive_exact_and_counted_once() {
        let got = check(
            &["Sam", "sam", "Ågot"],
            vec![
                answer(snap("dm1", 8, players(&["SAM", "Samuel", "sam"]))),
                // One of the two Sams left: still online.
                answer(snap("dm1", 8, players(&["Samuel", "sam", "ågot"]))),
                answer(snap("dm1", 8, players(&["Samuel"]))),
            ],
        );
        assert_eq!(
            got,
            [
                vec!["server_up", "friend_online:SAM"],
                vec![
                    "player_left:SAM",
                    "player_joined:ågot",
                    "friend_online:ågot"
                ],
                vec![
                    "player_left:sam",
                    "player_left:ågot",
                    "friend_offline:sam",
                    "friend_offline:ågot"
                ],
            ]
        );
    }

    #[test]
    fn a_friend_moving_between_servers_goes_offline_on_one_and_online_on_the_other() {
        let mut w = Watcher::new(&["ann"]);
        let (a, b) = (key("a:1"), key("b:1"));
        w.observe(t(0), &a, answer(snap("dm1", 8, players(&["Ann"]))));
        w.observe(t(0), &b, answer(snap("dm1", 8, players(&[]))));
        let off = w.observe(t(30), &a, answer(snap("dm1", 8, players(&[]))));
        let on = w.observe(t(30), &b, answer(snap("dm1", 8, players(&["Ann"]))));
        assert_eq!(short(&off), ["player_left:Ann", "friend_offline:Ann"]);
        assert_eq!(short(&on), ["player_joined:Ann", "friend_online:Ann"]);
        assert_eq!(&*on[1].address, "b:1");
        assert_eq!(on[1].time, t(30));
    }

    #[test]
    fn filters_let_through_changes_that_touch_a_selected_answer() {
        let poll = |n: &[&str], selected| Poll::Answered {
            snapshot: snap("dm1", 8, players(n)),
            selected,
        };
        let got = check(
            &[],
            vec![
                poll(&[], false),
                // Selected now (say players>0): the join shows.
                poll(&["a"], true),
                // Not selected any more, but it was: the leave shows.
                poll(&[], false),
                // Neither before nor after.
                poll(&["b"], false),
                poll(&[], false),
                Poll::Failed {
                    error: "timeout".into(),
                },
            ],
        );
        assert_eq!(
            got,
            [
                vec![],
                vec!["player_joined:a"],
                vec!["player_left:a"],
                vec![],
                vec![],
                vec![],
            ]
        );
    }

    #[test]
    fn forgetting_a_server_takes_its_friends_offline() {
        let mut w = Watcher::new(&["ann"]);
        let k = key("a:1");
        w.observe(t(0), &k, answer(snap("dm1", 8, players(&["Ann", "Ben"]))));
        assert_eq!(short(&w.forget(t(30), &k)), ["friend_offline:Ann"]);
        assert!(w.forget(t(31), &k).is_empty());
        // Listed again later: a first answer.
        let again = w.observe(t(60), &k, answer(snap("dm1", 8, players(&["Ann"]))));
        assert_eq!(short(&again), ["server_up", "friend_online:Ann"]);
    }

    #[test]
    fn the_same_address_with_two_protocols_is_two_servers() {
        let mut w = Watcher::new::<&str>(&[]);
        let a = key("a:1");
        let b = ServerKey {
            protocol: "unreal2",
            ..a.clone()
        };
        assert_eq!(
            short(&w.observe(t(0), &a, answer(snap("x", 8, vec![])))),
            ["server_up"]
        );
        assert_eq!(
            short(&w.observe(t(0), &b, answer(snap("y", 8, vec![])))),
            ["server_up"]
        );
    }
}
