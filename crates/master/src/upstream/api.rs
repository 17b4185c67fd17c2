//! Pulling another Muster's list: `GET <base>/api/v1/servers`, every page, the first with
//! `If-None-Match` (an unchanged list costs one `304`).
//!
//! The first page's `ETag` covers the whole list: its body carries `last_event_id`, which
//! moves with every change of any record. Pages are read in the stable order (first
//! registration), so a list that changes while it is paged can only shift records across a
//! page boundary; such a pull (the pages' `last_event_id` differ) is marked incomplete and
//! takes nothing away. A `429` is waited out (`Retry-After`, bounded).
//!
//! Whatever the upstream answers, a pull holds at most [`MAX_LISTED`] records: a page with
//! more than [`PER_PAGE`] is refused while it is parsed, a claimed total over the limit at the
//! first page, and no more pages are read than that total needs (plus one), within
//! [`MAX_PULL_BYTES`]. Redirects are refused.
//!
//! Each record says where it came from (`sources`); the caller learns only the ones that
//! registered there unless told otherwise.

use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;

use super::bounded::at_most;
use super::download::{self as http, Pins};

/// Records per page asked for (the API's maximum); a page with more is refused.
pub const PER_PAGE: usize = 500;
/// Most servers one pull may list (every kind): a pull listing more is refused whole.
pub const MAX_LISTED: usize = 65_536;
/// Most pages read in one pull: enough for [`MAX_LISTED`] records and a list that grows
/// while it is paged.
pub const MAX_PAGES: usize = MAX_LISTED.div_ceil(PER_PAGE) + 1;
/// Most `429` answers waited out in one pull.
const MAX_RETRIES: u32 = 30;
/// Longest wait for one `429`.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);
/// Largest page body accepted, bytes.
pub const MAX_PAGE_BYTES: usize = 16 << 20;
/// Most bytes of page bodies read in one pull.
pub const MAX_PULL_BYTES: usize = 64 << 20;

/// Why the pull failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The request failed (connection, timeout, TLS).
    #[error("request failed")]
    Request(#[source] reqwest::Error),
    /// The answer's status was not 200 (or 304 for the first page).
    #[error("http status {0}")]
    Status(u16),
    /// The answer was a redirect, which is not followed.
    #[error("http status {0}: redirects are not followed (configure the final URL)")]
    Redirect(u16),
    /// The body is not the API's list (or a page holds more than [`PER_PAGE`] records).
    #[error("not a server list of at most {PER_PAGE} records a page")]
    Json(#[source] serde_json::Error),
    /// A limit of one pull was reached: the page body, the pull's bytes, the pages, or a
    /// claimed total over [`MAX_LISTED`].
    #[error("list too large: {0}")]
    TooLarge(&'static str),
}

/// One source of a record, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ApiSource {
    /// `direct` or `upstream`.
    pub origin: String,
    /// The upstream's name, for `upstream`.
    #[serde(default)]
    pub upstream: Option<String>,
}

/// One record of `/api/v1/servers`, the fields learning needs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ApiServer {
    /// Where players connect.
    pub address: String,
    /// Whether `address` is the game address.
    #[serde(default)]
    pub address_is_game: bool,
    /// The address it is registered under.
    pub registered_address: String,
    /// Where it is queried.
    pub query_address: Option<String>,
    /// The game.
    pub game: String,
    /// The face that registered it.
    pub protocol: String,
    /// The query protocol.
    pub query_protocol: Option<String>,
    /// Where it came from (absent from older Musters: direct).
    #[serde(default)]
    pub sources: Vec<ApiSource>,
}

impl ApiServer {
    /// Whether it registered with that master itself (older Musters show no sources: all
    /// their records did).
    #[must_use]
    pub fn is_direct(&self) -> bool {
        self.sources.is_empty() || self.sources.iter().any(|s| s.origin == "direct")
    }
}

#[derive(Debug, Deserialize)]
struct Page {
    #[serde(default)]
    last_event_id: u64,
    total: u64,
    #[serde(deserialize_with = "at_most::<_, _, PER_PAGE>")]
    servers: Vec<ApiServer>,
}

/// What one pull got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPull {
    /// `304`: nothing changed since the last complete pull.
    Unchanged,
    /// The list; `complete` is false when it changed while it was paged.
    Servers {
        /// Every record read.
        servers: Vec<ApiServer>,
        /// Whether the pages all showed the same version of the list.
        complete: bool,
        /// The addresses the pages came from (empty when one of them is not known).
        peers: Vec<IpAddr>,
    },
}

/// A client of one Muster's API, remembering the last complete list's `ETag`.
#[derive(Debug)]
pub struct ApiClient {
    client: reqwest::Client,
    base: String,
    etag: Option<String>,
}

impl ApiClient {
    /// A client of the Muster at `base` (`http://host:8080`), each request within `timeout`,
    /// `pins` resolved as given.
    pub fn new(base: &str, timeout: Duration, pins: &Pins) -> Result<Self, ApiError> {
        Ok(Self {
            client: http::client(timeout, pins).map_err(ApiError::Request)?,
            base: base.trim_end_matches('/').to_owned(),
            etag: None,
        })
    }

    /// Page `n`, or `None` for `304`; `read` counts the bytes of the pull so far.
    async fn page(
        &self,
        n: usize,
        etag: Option<&str>,
        read: &mut usize,
    ) -> Result<Option<Fetched>, ApiError> {
        let url = format!(
            "{}/api/v1/servers?sort=order&per_page={PER_PAGE}&page={n}",
            self.base
        );
        let mut retries = 0;
        loop {
            let mut req = self.client.get(&url);
            if let Some(tag) = etag {
                req = req.header(reqwest::header::IF_NONE_MATCH, tag);
            }
            let res = req.send().await.map_err(ApiError::Request)?;
            let peer = res.remote_addr().map(|a| a.ip());
            let status = res.status().as_u16();
            if status == 304 {
                return Ok(None);
            }
            if status == 429 && retries < MAX_RETRIES {
                retries += 1;
                let wait = res
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map_or(Duration::from_secs(1), Duration::from_secs)
                    .min(MAX_RETRY_AFTER);
                tokio::time::sleep(wait).await;
                continue;
            }
            if http::is_redirect(status) {
                return Err(ApiError::Redirect(status));
            }
            if status != 200 {
                return Err(ApiError::Status(status));
            }
            let tag = res
                .headers()
                .get(reqwest::header::ETAG)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let max = MAX_PAGE_BYTES.min(MAX_PULL_BYTES.saturating_sub(*read));
            let body = http::body(res, max).await.map_err(|e| match e {
                http::HttpError::Request(e) => ApiError::Request(e),
                _ if max < MAX_PAGE_BYTES => ApiError::TooLarge("bytes of one pull"),
                _ => ApiError::TooLarge("bytes of one page"),
            })?;
            *read += body.len();
            let page: Page = serde_json::from_slice(&body).map_err(ApiError::Json)?;
            drop(body);
            if page.total > MAX_LISTED as u64 {
                return Err(ApiError::TooLarge("claimed total"));
            }
            return Ok(Some(Fetched { page, tag, peer }));
        }
    }

    /// The next pull reads every page, whatever the `ETag` says.
    pub fn forget_etag(&mut self) {
        self.etag = None;
    }

    /// Reads every page (or learns that nothing changed): at most [`MAX_LISTED`] records in
    /// at most the pages the first page's total needs (and one more for a list that grew),
    /// [`MAX_PULL_BYTES`] in all.
    pub async fn pull(&mut self) -> Result<ApiPull, ApiError> {
        let mut read = 0;
        let Some(first) = self.page(1, self.etag.as_deref(), &mut read).await? else {
            return Ok(ApiPull::Unchanged);
        };
        let version = first.page.last_event_id;
        let total = first.page.total;
        // Bounded by MAX_LISTED above.
        let total_n = usize::try_from(total).unwrap_or(MAX_LISTED);
        let pages = total_n.div_ceil(PER_PAGE).clamp(1, MAX_PAGES - 1) + 1;
        let mut complete = true;
        let mut peers = Vec::new();
        let mut peer_unknown = first.peer.is_none();
        peers.extend(first.peer);
        let tag = first.tag;
        let mut servers = first.page.servers;
        let mut n = 1;
        while servers.len() < total_n {
            n += 1;
            if n > pages {
                // More pages than the total needs: what was read is kept, nothing taken away.
                complete = false;
                break;
            }
            let Some(next) = self.page(n, None, &mut read).await? else {
                break;
            };
            match next.peer {
                Some(p) if !peers.contains(&p) => peers.push(p),
                Some(_) => {}
                None => peer_unknown = true,
            }
            if next.page.last_event_id != version || next.page.total != total {
                complete = false;
            }
            if next.page.servers.is_empty() {
                break;
            }
            if servers.len() + next.page.servers.len() > MAX_LISTED {
                return Err(ApiError::TooLarge("records of one pull"));
            }
            servers.extend(next.page.servers);
        }
        if peer_unknown {
            // Where a page came from is not known: the list counts as from nowhere local.
            peers.clear();
        }
        // Only a list read whole and unchanged may be answered with `304` next time.
        self.etag = if complete { tag } else { None };
        Ok(ApiPull::Servers {
            servers,
            complete,
            peers,
        })
    }
}

/// One page as fetched.
struct Fetched {
    page: Page,
    tag: Option<String>,
    peer: Option<IpAddr>,
}
