//! Pulling another Muster's list: `GET <base>/api/v1/servers`, every page, the first with
//! `If-None-Match` (an unchanged list costs one `304`).
//!
//! The first page's `ETag` covers the whole list: its body carries `last_event_id`, which
//! moves with every change of any record. Pages are read in the stable order (first
//! registration), so a list that changes while it is paged can only shift records across a
//! page boundary; such a pull (the pages' `last_event_id` differ) is marked incomplete and
//! takes nothing away. A `429` is waited out (`Retry-After`, bounded).
//!
//! Each record says where it came from (`sources`); the caller learns only the ones that
//! registered there unless told otherwise.

use std::time::Duration;

use serde::Deserialize;

/// Records per page asked for (the API's maximum).
pub const PER_PAGE: usize = 500;
/// Most pages read in one pull (a million records).
pub const MAX_PAGES: usize = 2000;
/// Most `429` answers waited out in one pull.
const MAX_RETRIES: u32 = 30;
/// Longest wait for one `429`.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);
/// Largest page body accepted, bytes.
const MAX_PAGE_BYTES: usize = 16 << 20;

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
    /// The body is not the API's list.
    #[error("not a server list")]
    Json(#[source] serde_json::Error),
    /// A page was larger than the limit, or there were too many.
    #[error("list too large")]
    TooLarge,
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
    total: usize,
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
    /// A client of the Muster at `base` (`http://host:8080`), each request within `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Result<Self, ApiError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("muster/", env!("CARGO_PKG_VERSION"), " upstream"))
            // Pages of one pull reuse a connection; between pulls none is left open for the
            // upstream's header deadline to close.
            .pool_idle_timeout(Duration::from_secs(1))
            .build()
            .map_err(ApiError::Request)?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_owned(),
            etag: None,
        })
    }

    async fn page(
        &self,
        n: usize,
        etag: Option<&str>,
    ) -> Result<Option<(Page, Option<String>)>, ApiError> {
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
            let mut res = req.send().await.map_err(ApiError::Request)?;
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
            if status != 200 {
                return Err(ApiError::Status(status));
            }
            let tag = res
                .headers()
                .get(reqwest::header::ETAG)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let mut body = Vec::new();
            while let Some(chunk) = res.chunk().await.map_err(ApiError::Request)? {
                if body.len() + chunk.len() > MAX_PAGE_BYTES {
                    return Err(ApiError::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            let page: Page = serde_json::from_slice(&body).map_err(ApiError::Json)?;
            return Ok(Some((page, tag)));
        }
    }

    /// The next pull reads every page, whatever the `ETag` says.
    pub fn forget_etag(&mut self) {
        self.etag = None;
    }

    /// Reads every page (or learns that nothing changed).
    pub async fn pull(&mut self) -> Result<ApiPull, ApiError> {
        let Some((first, tag)) = self.page(1, self.etag.as_deref()).await? else {
            return Ok(ApiPull::Unchanged);
        };
        let version = first.last_event_id;
        let total = first.total;
        let mut complete = true;
        let mut servers = first.servers;
        let mut n = 1;
        while servers.len() < total {
            n += 1;
            if n > MAX_PAGES {
                return Err(ApiError::TooLarge);
            }
            let Some((page, _)) = self.page(n, None).await? else {
                break;
            };
            if page.last_event_id != version || page.total != total {
                complete = false;
            }
            if page.servers.is_empty() {
                break;
            }
            servers.extend(page.servers);
        }
        // Only a list read whole and unchanged may be answered with `304` next time.
        self.etag = if complete { tag } else { None };
        Ok(ApiPull::Servers { servers, complete })
    }
}
