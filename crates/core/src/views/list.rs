//! Listing for the HTTP API over a [`Snapshot`]: filters, sort orders and pages, computed off
//! every lock.
//!
//! Sort orders come from the snapshot ([`Snapshot::order`]): the publisher keeps the orders
//! readers ask for up to date from one snapshot to the next, so paging through a sorted list
//! costs the page, not a sort, even while the list changes. A filtered query's matching positions are cached per snapshot too (up to
//! the cache's bound), so a client paging through a filtered list pays the scan once.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::registry::Record;
use crate::views::Snapshot;

/// Most records one [`ListQuery`] page returns.
pub const MAX_PER_PAGE: usize = 500;
/// Records per page when the query does not say.
pub const DEFAULT_PER_PAGE: usize = 100;

pub use crate::views::orders::SortKey;

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
    /// Only servers whose location is this continent (`eu`) or country (`eu:de`); see
    /// [`crate::locations::in_region`].
    pub region: Option<String>,
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

impl ListQuery {
    fn has_filter(&self) -> bool {
        self.game.is_some()
            || self.protocol.is_some()
            || self.non_empty
            || self.not_full
            || self.password.is_some()
            || self.lobby.is_some()
            || self.region.is_some()
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
        if let Some(want) = &self.region {
            let here = crate::locations::of_addr(&r.key.addr);
            if !here.is_some_and(|l| crate::locations::in_region(&l, want)) {
                return false;
            }
        }
        if let Some(t) = text_lower {
            let Some(info) = &r.info else { return false };
            let hit = info.name().to_lowercase().contains(t)
                || info.players().names().any(|n| n.to_lowercase().contains(t));
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
            "{:?}|{:?}|{}|{}|{:?}|{:?}|{:?}|{:?}",
            self.game,
            self.protocol,
            self.non_empty,
            self.not_full,
            self.password,
            self.lobby,
            self.region,
            self.text
        )
    }
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
    let n = listed.len();
    // The list order itself needs no index.
    let order = (q.sort != SortKey::Order).then(|| view.order(q.sort));
    // Where the record at `rank` of the requested order is in `listed`.
    let position = |rank: usize| -> Option<usize> {
        let r = if q.descending {
            n.checked_sub(rank + 1)?
        } else {
            rank
        };
        match &order {
            Some(o) => o.get(r).map(|p| *p as usize),
            None => Some(r),
        }
    };
    let (total, records) = if q.has_filter() {
        let hits = matching(view, q);
        let total = hits.iter().filter(|h| **h).count();
        let records = (0..n)
            .filter_map(position)
            .filter(|p| hits.get(*p).copied().unwrap_or(false))
            .skip(skip)
            .take(per_page)
            .filter_map(|p| listed.get(p).cloned())
            .collect();
        (total, records)
    } else {
        let records = (skip..skip.saturating_add(per_page).min(n))
            .filter_map(|rank| listed.get(position(rank)?).cloned())
            .collect();
        (n, records)
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
    let ord = crate::views::orders::compare_by(q.sort, a, b)
        .then_with(|| a.order_key().cmp(&b.order_key()));
    if q.descending { ord.reverse() } else { ord }
}
