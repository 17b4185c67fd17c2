//! HTTP for the upstreams that are fetched by URL (`ddnet`, `ut2003-text`, `muster`): one
//! client shape for all of them, bounded bodies, no redirects, and the address each answer
//! actually came from.
//!
//! A redirect is refused, not followed: the configured URL is where the list is, and a `3xx`
//! pointing elsewhere (another host, a loopback admin page) would make this master send
//! requests the operator never configured, again on every retry.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Largest document accepted from a `ddnet` or `ut2003-text` upstream, bytes (DDNet's whole
/// `servers.json` is a few MiB).
pub const MAX_DOCUMENT_BYTES: usize = 16 << 20;

/// Why a GET gave no body.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The request failed (connection, timeout, TLS).
    #[error("request failed")]
    Request(#[source] reqwest::Error),
    /// The answer was a redirect, which is not followed.
    #[error("http status {0}: redirects are not followed (configure the final URL)")]
    Redirect(u16),
    /// The answer's status was not 200.
    #[error("http status {0}")]
    Status(u16),
    /// The body was larger than the limit.
    #[error("body larger than {0} bytes")]
    TooLarge(usize),
}

/// Host names pinned to an address, as `curl --resolve` does: tests, and split-horizon setups
/// where the system resolver gives the wrong answer.
pub type Pins = Vec<(String, SocketAddr)>;

/// The client every URL upstream uses: each request within `timeout`, redirects refused,
/// `pins` resolved as given.
pub fn client(timeout: Duration, pins: &Pins) -> Result<reqwest::Client, reqwest::Error> {
    let mut b = reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!("muster/", env!("CARGO_PKG_VERSION"), " upstream"))
        .redirect(reqwest::redirect::Policy::none())
        // Requests of one pull reuse a connection; between pulls none is left open for the
        // upstream's header deadline to close.
        .pool_idle_timeout(Duration::from_secs(1));
    for (host, addr) in pins {
        b = b.resolve(host, *addr);
    }
    b.build()
}

/// Whether `status` is a redirect (`304 Not Modified` is not one).
#[must_use]
pub fn is_redirect(status: u16) -> bool {
    (300..400).contains(&status) && status != 304
}

/// The body of `res`, at most `max` bytes (a declared length over it is refused before
/// reading).
pub async fn body(mut res: reqwest::Response, max: usize) -> Result<Vec<u8>, HttpError> {
    if res
        .content_length()
        .is_some_and(|n| n > u64::try_from(max).unwrap_or(u64::MAX))
    {
        return Err(HttpError::TooLarge(max));
    }
    let mut out = Vec::new();
    while let Some(chunk) = res.chunk().await.map_err(HttpError::Request)? {
        if out.len().saturating_add(chunk.len()) > max {
            return Err(HttpError::TooLarge(max));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// GET `url` with `client`: the body (at most `max` bytes) and the address it came from.
pub async fn get(
    client: &reqwest::Client,
    url: &str,
    max: usize,
) -> Result<(Vec<u8>, Option<IpAddr>), HttpError> {
    let res = client.get(url).send().await.map_err(HttpError::Request)?;
    let peer = res.remote_addr().map(|a| a.ip());
    let status = res.status().as_u16();
    if is_redirect(status) {
        return Err(HttpError::Redirect(status));
    }
    if status != 200 {
        return Err(HttpError::Status(status));
    }
    Ok((body(res, max).await?, peer))
}
