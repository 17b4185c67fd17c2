//! Steam's Web API server list (`IGameServersService/GetServerList`): the HTTPS stand-in for
//! the Valve master query, asked with a Steam Web API key and the same filter language
//! (`docs/protocols/valve.md`, "Steam's Web API"). One GET; the reply is JSON,
//! `{"response":{"servers":[…]}}`, read up to [`MAX_BODY`] bytes.
//!
//! The key travels in the query string, so nothing here ever shows a URL: errors name the
//! API base (which holds no key) and the cause, never the request.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where Steam's Web API answers (`--steam-api` changes it, e.g. for a local test server).
pub(crate) const DEFAULT_BASE: &str = "https://api.steampowered.com";

/// The method's path under the base.
pub(crate) const PATH: &str = "/IGameServersService/GetServerList/v1/";

/// The most bytes a reply may have. A server entry is a few hundred bytes of JSON, so this
/// holds far more servers than any `--limit` the API honours.
pub(crate) const MAX_BODY: usize = 16 << 20;

/// `--limit` when not given: the API's own default is 100, too few for a whole game's list.
pub(crate) const DEFAULT_LIMIT: u32 = 10_000;

/// Most entries taken from one reply, whatever `--limit` says (the body cap bounds it too).
pub(crate) const MAX_ENTRIES: usize = 100_000;

/// What to ask the Web API.
#[derive(Clone)]
pub(crate) struct WebAsk {
    /// The API base, e.g. [`DEFAULT_BASE`] (no trailing slash needed).
    pub base: String,
    /// The Web API key (never shown).
    pub key: String,
    /// The filter string, in the master query's language.
    pub filter: String,
    /// At most this many servers.
    pub limit: u32,
}

impl std::fmt::Debug for WebAsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebAsk")
            .field("base", &self.base)
            .field("key", &"<redacted>")
            .field("filter", &self.filter)
            .field("limit", &self.limit)
            .finish()
    }
}

/// Why the Web API gave no list. The texts name the cause and never the key.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WebError {
    /// `--steam-api` is not an http(s) URL.
    #[error("--steam-api {0:?} is not an http(s) URL")]
    BadBase(String),
    /// 401/403: the key was refused.
    #[error("Steam's Web API refused the key (HTTP {0}): check --steam-key / MUSTER_STEAM_KEY")]
    Forbidden(u16),
    /// 429: asked too often.
    #[error(
        "Steam's Web API is rate limiting this key (HTTP 429 Too Many Requests): wait and ask again"
    )]
    RateLimited,
    /// 5xx: the API's own trouble.
    #[error("Steam's Web API failed on its side (HTTP {0}): try again later")]
    ServerError(u16),
    /// Any other non-success status (3xx included: redirects are not followed, they would carry
    /// the key elsewhere).
    #[error("Steam's Web API answered HTTP {0}")]
    Status(u16),
    /// The body exceeded [`MAX_BODY`].
    #[error("Steam's Web API reply exceeds {MAX_BODY} bytes")]
    TooLarge,
    /// The body is not the documented JSON.
    #[error("Steam's Web API reply is not the expected JSON ({0})")]
    BadJson(String),
    /// No answer in time.
    #[error("Steam's Web API did not answer within {0:?}")]
    Timeout(Duration),
    /// No connection.
    #[error("cannot connect to Steam's Web API at {0}")]
    Connect(String),
    /// The request failed otherwise (the text is the client's, without the URL).
    #[error("the request to Steam's Web API failed: {0}")]
    Request(String),
}

/// One server as the API describes it (every field optional: the API leaves out what it
/// does not know).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WebServer {
    /// `ip:queryport`.
    pub addr: Option<String>,
    pub gameport: Option<u16>,
    /// 64-bit, sent as a string (or a number by some servers).
    pub steamid: Option<SteamId>,
    pub name: Option<String>,
    pub appid: Option<u32>,
    pub gamedir: Option<String>,
    pub version: Option<String>,
    pub product: Option<String>,
    pub region: Option<i32>,
    pub players: Option<u32>,
    pub max_players: Option<u32>,
    pub bots: Option<u32>,
    pub map: Option<String>,
    pub secure: Option<bool>,
    pub dedicated: Option<bool>,
    pub os: Option<String>,
    pub gametype: Option<String>,
}

/// A Steam ID as text, whichever JSON type carried it.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum SteamId {
    Text(String),
    Number(u64),
}

impl SteamId {
    fn text(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            Self::Number(n) => n.to_string(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct Reply {
    response: Response,
}

#[derive(Debug, Default, Deserialize)]
struct Response {
    /// Missing when nothing matched.
    #[serde(default)]
    servers: Vec<WebServer>,
}

/// What the Web API says of a server besides its addresses, name, map and players: shown in
/// the JSON output of `muster list`.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct SteamFacts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steamid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub appid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gamedir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bots: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedicated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// The server's tags (`sv_tags`), comma-separated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gametype: Option<String>,
}

/// One listed server: the game address (the query address's IP with `gameport`), the query
/// address, and the rest.
#[derive(Debug, Clone)]
pub(crate) struct WebEntry {
    pub game: SocketAddr,
    pub query: SocketAddr,
    pub name: Option<String>,
    pub map: Option<String>,
    pub players: Option<u32>,
    pub max_players: Option<u32>,
    pub facts: SteamFacts,
}

impl WebEntry {
    /// `None` when `addr` is missing or not `ip:port`.
    fn of(s: WebServer) -> Option<Self> {
        let query: SocketAddr = s.addr.as_deref()?.parse().ok()?;
        let ip: IpAddr = query.ip();
        let game = SocketAddr::new(ip, s.gameport.filter(|&p| p != 0).unwrap_or(query.port()));
        Some(Self {
            game,
            query,
            name: s.name,
            map: s.map,
            players: s.players,
            max_players: s.max_players,
            facts: SteamFacts {
                steamid: s.steamid.as_ref().map(SteamId::text),
                appid: s.appid,
                gamedir: s.gamedir,
                version: s.version,
                product: s.product,
                region: s.region,
                bots: s.bots,
                secure: s.secure,
                dedicated: s.dedicated,
                os: s.os,
                gametype: s.gametype,
            },
        })
    }
}

/// The request URL (holds the key: never shown).
fn url(ask: &WebAsk) -> Result<reqwest::Url, WebError> {
    let base = ask.base.trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(WebError::BadBase(ask.base.clone()));
    }
    let limit = ask.limit.to_string();
    reqwest::Url::parse_with_params(
        &format!("{base}{PATH}"),
        [
            ("key", ask.key.as_str()),
            ("filter", ask.filter.as_str()),
            ("limit", limit.as_str()),
        ],
    )
    .map_err(|_| WebError::BadBase(ask.base.clone()))
}

/// The reply's servers; entries without a usable `addr` are skipped and counted.
pub(crate) fn decode(body: &[u8]) -> Result<(Vec<WebEntry>, usize), WebError> {
    let reply: Reply =
        serde_json::from_slice(body).map_err(|e| WebError::BadJson(e.to_string()))?;
    let mut skipped = 0;
    let mut out = Vec::new();
    for s in reply.response.servers.into_iter().take(MAX_ENTRIES) {
        match WebEntry::of(s) {
            Some(e) => out.push(e),
            None => skipped += 1,
        }
    }
    Ok((out, skipped))
}

fn status_error(code: u16) -> WebError {
    match code {
        401 | 403 => WebError::Forbidden(code),
        429 => WebError::RateLimited,
        500..=599 => WebError::ServerError(code),
        _ => WebError::Status(code),
    }
}

/// Asks the Web API once, within `timeout`.
pub(crate) async fn list(ask: &WebAsk, timeout: Duration) -> Result<Vec<WebEntry>, WebError> {
    let url = url(ask)?;
    let base = ask.base.trim_end_matches('/').to_owned();
    let transport = |e: reqwest::Error| {
        if e.is_timeout() {
            WebError::Timeout(timeout)
        } else if e.is_connect() {
            WebError::Connect(base.clone())
        } else {
            WebError::Request(e.without_url().to_string())
        }
    };
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("muster/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| WebError::Request(e.without_url().to_string()))?;
    let mut response = client.get(url).send().await.map_err(transport)?;
    let status = response.status();
    if !status.is_success() {
        return Err(status_error(status.as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_BODY as u64)
    {
        return Err(WebError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if body.len().saturating_add(chunk.len()) > MAX_BODY {
            return Err(WebError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    let (entries, skipped) = decode(&body)?;
    if skipped > 0 {
        tracing::warn!(
            "Steam's Web API listed {skipped} server(s) without a usable address; skipped"
        );
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(base: &str) -> WebAsk {
        WebAsk {
            base: base.into(),
            key: "SECRETKEY".into(),
            filter: "\\appid\\240\\map\\de_dust2".into(),
            limit: 50,
        }
    }

    #[test]
    fn the_url_carries_key_filter_and_limit_encoded() {
        let u = url(&ask("http://127.0.0.1:9/")).unwrap();
        assert_eq!(u.path(), PATH);
        let q: Vec<(String, String)> = u.query_pairs().into_owned().collect();
        assert_eq!(
            q,
            [
                ("key".into(), "SECRETKEY".into()),
                ("filter".into(), "\\appid\\240\\map\\de_dust2".into()),
                ("limit".into(), "50".into()),
            ]
        );
        assert!(matches!(url(&ask("ftp://x")), Err(WebError::BadBase(_))));
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        assert!(!format!("{:?}", ask("http://x")).contains("SECRETKEY"));
    }

    #[test]
    fn replies_decode_with_game_and_query_addresses() {
        let body = br#"{"response":{"servers":[
            {"addr":"192.0.2.7:27016","gameport":27015,"steamid":"90000000000000001",
             "name":"Dust","appid":240,"players":3,"max_players":16,"bots":1,"map":"de_dust2",
             "secure":true,"dedicated":true,"os":"l","gametype":"a,b"},
            {"addr":"not an address"},
            {"addr":"192.0.2.8:27015","steamid":90000000000000002}
        ]}}"#;
        let (e, skipped) = decode(body).unwrap();
        assert_eq!(skipped, 1);
        assert_eq!(e[0].game, "192.0.2.7:27015".parse().unwrap());
        assert_eq!(e[0].query, "192.0.2.7:27016".parse().unwrap());
        assert_eq!(e[0].facts.steamid.as_deref(), Some("90000000000000001"));
        assert_eq!(e[0].facts.bots, Some(1));
        assert_eq!(e[1].game, e[1].query, "no gameport: the query port");
        assert_eq!(e[1].facts.steamid.as_deref(), Some("90000000000000002"));
        assert!(decode(br#"{"response":{}}"#).unwrap().0.is_empty());
        assert!(matches!(
            decode(b"{\"servers\":"),
            Err(WebError::BadJson(_))
        ));
    }

    #[test]
    fn statuses_name_their_cause() {
        assert!(matches!(status_error(403), WebError::Forbidden(403)));
        assert!(matches!(status_error(429), WebError::RateLimited));
        assert!(matches!(status_error(503), WebError::ServerError(503)));
        assert!(matches!(status_error(302), WebError::Status(302)));
    }
}
