//! Listing for the HTTP API over a [`Snapshot`]: filters, sort orders and pages, computed off
//! every lock.
//!
//! Sort keys are case-folded once per snapshot and column (not on every comparison), and a
//! column's order is kept in the snapshot's cache, so paging through a sorted list costs the
//! page, not a sort. A filtered query's matching positions are cached per snapshot too (up to
//! the cache's bound), so a client paging through a filtered list pays the scan once.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::registry::{PollInfo, Record};
use crate::views::Snapshot;

/// Most records one [`ListQuery`] page returns.
pub const MAX_PER_PAGE: usize = 500;
/// Records per page when the query does not say.
pub const DEFAULT_PER_PAGE: usize = 100;

/// Column to sort a listing by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SortKey {
    /// First registration (the stable list order).
    #[default]
    Order,
    /// Server name (case-insensitive).
    Name,
    /// Map (case-insensitive).
    Map,
    /// Game name.
    Game,
    /// Game type.
    GameType,
    /// Players on the server.
    Players,
    /// Player slots.
    MaxPlayers,
    /// Address.
    Address,
    /// Face / protocol.
    Protocol,
    /// Last valid heartbeat.
    LastSeen,
}

impl SortKey {
    /// Parses a column name as the HTTP API spells it.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "order" | "first_verified" | "first_seen" => Self::Order,
            "name" => Self::Name,
            "map" => Self::Map,
            "game" => Self::Game,
            "game_type" | "gametype" => Self::GameType,
            "players" | "num_players" => Self::Players,
            "max_players" => Self::MaxPlayers,
            "address" => Self::Address,
            "protocol" | "face" => Self::Protocol,
            "last_seen" | "last_heartbeat" => Self::LastSeen,
            _ => return None,
        })
    }

    const fn name(self) -> &'static str {
        match self {
            Self::Order => "order",
            Self::Name => "name",
            Self::Map => "map",
            Self::Game => "game",
            Self::GameType => "game_type",
            Self::Players => "players",
            Self::MaxPlayers => "max_players",
            Self::Address => "address",
            Self::Protocol => "protocol",
            Self::LastSeen => "last_seen",
        }
    }
}

/// Filters, order and page of a listing. `Default` lists everything in stable order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListQuery {
    /// Only this game (compared ASCII case-insensitively).
    pub game: Option<String>,
    /// Only records whose face name, face family or query protocol name is this.
    pub protocol: Option<String>,
    /// Only servers with at least one player.
    pub non_empty: bool,
    /// Only servers with a free slot (or unknown slots).
    pub not_full: bool,
    /// Only servers whose password flag is this (unknown never matches).
    pub password: Option<bool>,
    /// Only management servers whose lobby is open (`true`) or closed (`false`).
    pub lobby: Option<bool>,
    /// Case-insensitive substring of the server name or a player name.
    pub text: Option<String>,
    /// Sort column.
    pub sort: SortKey,
    /// Descending instead of ascending.
    pub descending: bool,
    /// Page, from 1 (0 is taken as 1).
    pub page: usize,
    /// Records per page, capped at [`MAX_PER_PAGE`]; 0 means [`DEFAULT_PER_PAGE`].
    pub per_page: usize,
}

/// One page of a listing.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Records matching the filters, over all pages.
    pub total: usize,
    /// The page actually returned (from 1).
    pub page: usize,
    /// The page size actually used.
    pub per_page: usize,
    /// The records of this page.
    pub records: Vec<Arc<Record>>,
}

fn text_of(r: &Record, f: fn(&PollInfo) -> &str) -> String {
    r.info.as_deref().map(f).unwrap_or_default().to_lowercase()
}

impl ListQuery {
    fn has_filter(&self) -> bool {
        self.game.is_some()
            || self.protocol.is_some()
            || self.non_empty
            || self.not_full
            || self.password.is_some()
            || self.lobby.is_some()
            || self.text.is_some()
    }

    fn matches(&self, r: &Record, text_lower: Option<&str>) -> bool {
        if self
            .game
            .as_ref()
            .is_some_and(|g| !g.eq_ignore_ascii_case(&r.key.game))
        {
            return false;
        }
        if let Some(p) = &self.protocol {
            let p = p.as_str();
            let by_query = r.query_protocol.is_some_and(|q| q.name() == p);
            if r.face.name() != p && r.face.family() != p && !by_query {
                return false;
            }
        }
        if self.non_empty && r.players() == 0 {
            return false;
        }
        if self.not_full && r.max_players() != 0 && r.players() >= r.max_players() {
            return false;
        }
        if self
            .password
            .is_some_and(|want| r.info.as_ref().and_then(|i| i.password) != Some(want))
        {
            return false;
        }
        if let Some(want) = self.lobby {
            let open = r
                .info
                .as_deref()
                .filter(|_| r.face == crate::registry::Face::Mgmt)
                .and_then(|i| i.rule("isLobbyOpen"));
            if open != Some(if want { "true" } else { "false" }) {
                return false;
            }
        }
        if let Some(t) = text_lower {
            let Some(info) = &r.info else { return false };
            let hit = info.name.to_lowercase().contains(t)
                || info
                    .players
                    .iter()
                    .any(|p| p.name.to_lowercase().contains(t));
            if !hit {
                return false;
            }
        }
        true
    }

    /// The page size after defaults and the cap.
    #[must_use]
    pub fn page_size(&self) -> usize {
        match self.per_page {
            0 => DEFAULT_PER_PAGE,
            n => n.min(MAX_PER_PAGE),
        }
    }

    /// The cache key of the filters (not sort, not page).
    fn filter_key(&self) -> String {
        format!(
            "{:?}|{:?}|{}|{}|{:?}|{:?}|{:?}",
            self.game,
            self.protocol,
            self.non_empty,
            self.not_full,
            self.password,
            self.lobby,
            self.text
        )
    }
}

/// Positions in `view.listed()` in ascending order of `key` (ties in list order), computed
/// once per snapshot and column.
fn order(view: &Snapshot, key: SortKey) -> Arc<Vec<u32>> {
    view.cached(("api_sort", key.name().into()), |s| {
        let listed = s.listed();
        let mut idx: Vec<u32> = (0..u32::try_from(listed.len()).unwrap_or(u32::MAX)).collect();
        let rec = |i: u32| listed.get(i as usize);
        match key {
            SortKey::Order => {}
            SortKey::Name | SortKey::Map | SortKey::GameType => {
                let f: fn(&PollInfo) -> &str = match key {
                    SortKey::Name => |i| &i.name,
                    SortKey::Map => |i| &i.map,
                    _ => |i| &i.game_type,
                };
                let folded: Vec<String> = listed.iter().map(|r| text_of(r, f)).collect();
                idx.sort_by(|a, b| folded.get(*a as usize).cmp(&folded.get(*b as usize)));
            }
            SortKey::Game => idx.sort_by(|a, b| {
                rec(*a)
                    .map(|r| &r.key.game)
                    .cmp(&rec(*b).map(|r| &r.key.game))
            }),
            SortKey::Players => idx.sort_by_key(|i| rec(*i).map(|r| r.players())),
            SortKey::MaxPlayers => idx.sort_by_key(|i| rec(*i).map(|r| r.max_players())),
            SortKey::Address => idx.sort_by(|a, b| {
                rec(*a)
                    .map(|r| &r.key.addr)
                    .cmp(&rec(*b).map(|r| &r.key.addr))
            }),
            SortKey::Protocol => idx.sort_by_key(|i| rec(*i).map(|r| r.face.name())),
            SortKey::LastSeen => idx.sort_by_key(|i| rec(*i).map(|r| r.last_heartbeat)),
        }
        idx
    })
}

/// Positions (in `view.listed()` order) of the records matching `q`'s filters.
fn matching(view: &Snapshot, q: &ListQuery) -> Arc<Vec<bool>> {
    view.cached(("api_filter", q.filter_key().into()), |s| {
        let text = q
            .text
            .as_deref()
            .map(str::to_lowercase)
            .filter(|t| !t.is_empty());
        s.listed()
            .iter()
            .map(|r| q.matches(r, text.as_deref()))
            .collect()
    })
}

/// One page of `view` for `q`.
#[must_use]
pub fn list(view: &Snapshot, q: &ListQuery) -> ListPage {
    let per_page = q.page_size();
    let page = q.page.max(1);
    let skip = per_page.saturating_mul(page - 1);
    let listed = view.listed();
    let order = order(view, q.sort);
    let positions: Box<dyn Iterator<Item = &u32>> = if q.descending {
        Box::new(order.iter().rev())
    } else {
        Box::new(order.iter())
    };
    let (total, records) = if q.has_filter() {
        let hits = matching(view, q);
        let total = hits.iter().filter(|h| **h).count();
        let records = positions
            .filter(|i| hits.get(**i as usize).copied().unwrap_or(false))
            .skip(skip)
            .take(per_page)
            .filter_map(|i| listed.get(*i as usize).cloned())
            .collect();
        (total, records)
    } else {
        let records = positions
            .skip(skip)
            .take(per_page)
            .filter_map(|i| listed.get(*i as usize).cloned())
            .collect();
        (listed.len(), records)
    };
    ListPage {
        total,
        page,
        per_page,
        records,
    }
}

/// Orders two records as `q` sorts (for tests comparing with a plain sort).
#[must_use]
pub fn compare(q: &ListQuery, a: &Record, b: &Record) -> Ordering {
    let primary = match q.sort {
        SortKey::Order => Ordering::Equal,
        SortKey::Name => text_of(a, |i| &i.name).cmp(&text_of(b, |i| &i.name)),
        SortKey::Map => text_of(a, |i| &i.map).cmp(&text_of(b, |i| &i.map)),
        SortKey::GameType => text_of(a, |i| &i.game_type).cmp(&text_of(b, |i| &i.game_type)),
        SortKey::Game => a.key.game.cmp(&b.key.game),
        SortKey::Players => a.players().cmp(&b.players()),
        SortKey::MaxPlayers => a.max_players().cmp(&b.max_players()),
        SortKey::Address => a.key.addr.cmp(&b.key.addr),
        SortKey::Protocol => a.face.name().cmp(b.face.name()),
        SortKey::LastSeen => a.last_heartbeat.cmp(&b.last_heartbeat),
    };
    let ord = primary.then_with(|| a.order_key().cmp(&b.order_key()));
    if q.descending { ord.reverse() } else { ord }
}
