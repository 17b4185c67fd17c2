//! One pull of one upstream, per kind, with the list clients Muster already has: what it
//! lists, in the registry's terms ([`Listed`]).
//!
//! | kind | how | keyed by | game |
//! |---|---|---|---|
//! | `gamespy` | `\sync\` ([`super::sync`]), or `muster_query::list_one` per game | query address | the list's |
//! | `gameagent` | `list_one` (UDP) | game address | the answer's |
//! | `teeworlds06`, `teeworlds07` | `list_one` (UDP, 0.6 and 0.7 asked) | game address | `teeworlds` |
//! | `ddnet` | `servers.json` over HTTP, every `tw-0.6`/`tw-0.7` address | game address | `teeworlds` |
//! | `ut2003-text` | `list_one` (HTTP) | query address | the answer's (one of the four) |
//! | `muster` | `/api/v1/servers` ([`super::api`]) | as registered there | the list's |
//!
//! Every pull is bounded whatever the upstream sends: [`MAX_LISTED`] servers, the kind's byte
//! limit (a sync reply's, [`super::download::MAX_DOCUMENT_BYTES`], the API's per page and per
//! pull), and the fetcher's timeout for all of it. Each pull says which addresses it actually
//! talked to ([`Pulled::List::peers`]): only a list that came from local addresses alone may
//! name local servers ([`may_list_local`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use muster_proto::Protocol;
use muster_proto::gamespy_master::{Key, SyncGames};
use muster_proto::quake3::Word;
use muster_proto::quake3::query::ListRequest;
use muster_proto::teeworlds_master::{AddressScheme, ServerAddress};
use muster_proto::ut2003_list::ListFile;
use muster_query::lists::{MasterSource, list_one};
use muster_query::{Failure, Options};
use serde::Deserialize;

use super::api::{ApiClient, ApiError, ApiPull};
use super::bounded::at_most;
use super::download::{self as http, HttpError, MAX_DOCUMENT_BYTES, Pins};
use super::learn::{Listed, TEEWORLDS_GAME};
use super::settings::{GameSpyMode, UpstreamConfig, UpstreamKind};
use super::sync::{self, SyncError};
use muster_core::registry::{Face, GameAddr, protocol_from_name};
use muster_proto::gamespy_master::games as gamespy_games;

/// The whole of one pull (a sync, every page, every game's list) must finish within this.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(60);
pub use super::api::MAX_LISTED;
/// Most addresses of one `servers.json` entry (a server has one per protocol it speaks).
pub const MAX_ADDRESSES_PER_SERVER: usize = 16;

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// The upstream's host name did not resolve.
    #[error("cannot resolve {0}")]
    Resolve(String),
    /// A list client failed.
    #[error("list failed")]
    List(#[source] Failure),
    /// The GameSpy sync failed.
    #[error("sync failed")]
    Sync(#[source] SyncError),
    /// The Muster API pull failed.
    #[error("api pull failed")]
    Api(#[source] ApiError),
    /// The HTTP document could not be fetched.
    #[error("http fetch failed")]
    Http(#[source] HttpError),
    /// The upstream listed more than a pull may hold.
    #[error("list too large: more than {0} servers")]
    TooLarge(usize),
    /// The whole pull took longer than the fetcher's timeout.
    #[error("pull took longer than {0:?}")]
    Timeout(Duration),
    /// The document is not what the kind expects.
    #[error("bad document")]
    Decode(#[source] muster_proto::DecodeError),
    /// The JSON document is not what the kind expects (or holds more than a limit allows).
    #[error("bad document")]
    Json(#[source] serde_json::Error),
    /// A configured game is not usable for this kind of upstream.
    #[error("cannot use the configured game {0:?}")]
    Config(String),
    /// Every game's list of a GameSpy master failed.
    #[error("every game's list failed (the last failure follows)")]
    AllGames(#[source] Failure),
}

/// What one pull got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pulled {
    /// The upstream said its list did not change since the last pull.
    Unchanged,
    /// Its list; `complete` is false when part of it may be missing (a game's list failed,
    /// the pages of a changing list), so nothing is taken away on its account.
    List {
        /// The servers.
        listed: Vec<Listed>,
        /// Whether this is all of it.
        complete: bool,
        /// The addresses this pull actually talked to (empty when not known).
        peers: Vec<IpAddr>,
    },
}

/// Pulls one upstream; keeps what a kind needs between pulls (the API's `ETag`).
#[derive(Debug)]
pub struct Fetcher {
    config: UpstreamConfig,
    msid: Arc<str>,
    api: Option<ApiClient>,
    http: Option<reqwest::Client>,
    timeout: Duration,
    pins: Pins,
}

async fn resolve(address: &str, pins: &Pins) -> Result<SocketAddr, PullError> {
    if let Some((host, port)) = super::settings::host_port(address) {
        if let Some((_, a)) = pins.iter().find(|(h, _)| h == host) {
            return Ok(SocketAddr::new(a.ip(), port));
        }
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(address)
        .await
        .map_err(|_| PullError::Resolve(address.to_owned()))?
        .collect();
    // IPv4 first: GameSpy lists and most masters are IPv4.
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| PullError::Resolve(address.to_owned()))
}

/// Whether a list that came from `peers` (the addresses a pull actually talked to) may name
/// local servers ([`super::learn::is_local`]): only when every one of them is local itself. A
/// pull that does not know where it came from may not. Deciding on the connected addresses,
/// not on a separate name lookup, is what keeps a host name that resolves differently from
/// one lookup to the next (DNS rebinding) from passing as local.
#[must_use]
pub fn may_list_local(peers: &[IpAddr]) -> bool {
    !peers.is_empty() && peers.iter().all(|ip| super::learn::is_local(*ip))
}

/// The gamenames of a GameSpy upstream: the configured ones the game table knows, else every
/// game of the table.
#[must_use]
pub fn gamespy_games(config: &UpstreamConfig) -> Vec<&'static str> {
    if config.games.is_empty() {
        return gamespy_games::GAMES
            .iter()
            .filter(|g| gamespy_games::game(g.name.as_bytes()).is_some())
            .map(|g| g.name)
            .collect();
    }
    config
        .games
        .iter()
        .filter_map(|g| gamespy_games::game(g.as_bytes()))
        .map(|g| g.name)
        .collect()
}

impl Fetcher {
    /// A fetcher for `config`; `msid` is this master's id for `\sync\` (its self-sync guard).
    pub fn new(config: UpstreamConfig, msid: Arc<str>) -> Result<Self, PullError> {
        let mut f = Self {
            config,
            msid,
            api: None,
            http: None,
            timeout: PULL_TIMEOUT,
            pins: Pins::new(),
        };
        f.clients()?;
        Ok(f)
    }

    fn clients(&mut self) -> Result<(), PullError> {
        match self.config.kind {
            UpstreamKind::Muster => {
                self.api = Some(
                    ApiClient::new(&self.config.address, self.timeout, &self.pins)
                        .map_err(PullError::Api)?,
                );
            }
            UpstreamKind::Ddnet | UpstreamKind::Ut2003Text => {
                self.http = Some(
                    http::client(self.timeout, &self.pins)
                        .map_err(|e| PullError::Http(HttpError::Request(e)))?,
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// Sets the time one pull may take (tests shorten it).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        let _ = self.clients();
        self
    }

    /// Connects to `addr` whenever the upstream's address names `host` (as `curl --resolve`):
    /// tests, and split-horizon setups.
    pub fn pin(&mut self, host: &str, addr: SocketAddr) -> Result<(), PullError> {
        self.pins.push((host.to_owned(), addr));
        self.clients()
    }

    /// The next fetch reads the whole list (an upstream that can answer "unchanged" will
    /// not): what was learned from it changed here, or part of it still waits.
    pub fn forget_etag(&mut self) {
        if let Some(api) = &mut self.api {
            api.forget_etag();
        }
    }

    fn options(&self) -> Options {
        Options {
            deadline: Some(self.timeout),
            ..Options::default()
        }
    }

    /// One pull, within the fetcher's timeout, of at most [`MAX_LISTED`] servers.
    pub async fn fetch(&mut self) -> Result<Pulled, PullError> {
        let timeout = self.timeout;
        let pulled = tokio::time::timeout(timeout, self.fetch_unbounded())
            .await
            .map_err(|_| PullError::Timeout(timeout))??;
        match &pulled {
            Pulled::List { listed, .. } if listed.len() > MAX_LISTED => {
                Err(PullError::TooLarge(MAX_LISTED))
            }
            _ => Ok(pulled),
        }
    }

    async fn fetch_unbounded(&mut self) -> Result<Pulled, PullError> {
        let c = &self.config;
        let (listed, peer) = match c.kind {
            UpstreamKind::Gamespy => return self.gamespy().await,
            UpstreamKind::Muster => return self.muster().await,
            UpstreamKind::GameAgent => {
                let addr = resolve(&c.address, &self.pins).await?;
                let listed = list_one(&MasterSource::GameAgent(addr), &self.options())
                    .await
                    .map_err(PullError::List)?
                    .into_iter()
                    // Only the management server lists host names; these lists carry addresses.
                    .filter_map(|e| {
                        let a = e.address.ip()?;
                        Some(Listed {
                            addr: a,
                            game: None,
                            face: Face::GameAgent,
                            protocol: Protocol::GameAgent,
                            query_addr: e.query_address.unwrap_or_else(|| {
                                SocketAddr::new(a.ip(), a.port().saturating_add(1))
                            }),
                            game_port: Some(a.port()),
                            relayed: false,
                        })
                    })
                    .collect();
                (listed, Some(addr.ip()))
            }
            UpstreamKind::Teeworlds06 | UpstreamKind::Teeworlds07 => {
                let addr = resolve(&c.address, &self.pins).await?;
                let face = if c.kind == UpstreamKind::Teeworlds06 {
                    Face::Teeworlds06
                } else {
                    Face::Teeworlds07
                };
                let listed = list_one(&MasterSource::Teeworlds(addr), &self.options())
                    .await
                    .map_err(PullError::List)?
                    .into_iter()
                    .filter_map(|e| Some(teeworlds(e.address.ip()?, face)))
                    .collect();
                (listed, Some(addr.ip()))
            }
            UpstreamKind::Quake3 => {
                let addr = resolve(&c.address, &self.pins).await?;
                let mut listed = Vec::new();
                for request in quake3_requests(&c.games)? {
                    let game = request.game.as_ref().map(|g| g.as_str().to_owned());
                    let source = MasterSource::Quake3(addr, request);
                    for e in list_one(&source, &self.options())
                        .await
                        .map_err(PullError::List)?
                    {
                        if let Some(a) = e.address.ip() {
                            listed.push(Listed {
                                addr: a,
                                game: game.clone(),
                                face: Face::Quake3,
                                protocol: Protocol::Quake3,
                                query_addr: a,
                                game_port: Some(a.port()),
                                relayed: false,
                            });
                        }
                    }
                }
                (listed, Some(addr.ip()))
            }
            UpstreamKind::Valve => {
                let addr = resolve(&c.address, &self.pins).await?;
                let mut listed = Vec::new();
                for (game, ask) in valve_asks(&c.games, addr.is_ipv6())? {
                    let source = MasterSource::Valve(addr, ask);
                    for e in list_one(&source, &self.options())
                        .await
                        .map_err(PullError::List)?
                    {
                        if let Some(a) = e.address.ip() {
                            listed.push(Listed {
                                addr: a,
                                game: game.clone(),
                                face: Face::Valve,
                                protocol: Protocol::A2s,
                                query_addr: a,
                                game_port: Some(a.port()),
                                relayed: false,
                            });
                        }
                    }
                }
                (listed, Some(addr.ip()))
            }
            UpstreamKind::Ddnet => {
                let (body, peer) = self.document().await?;
                (ddnet(&body)?, peer)
            }
            UpstreamKind::Ut2003Text => {
                let (body, peer) = self.document().await?;
                let file = ListFile::decode(&body).map_err(PullError::Decode)?;
                drop(body);
                if file.entries.len() > MAX_LISTED {
                    return Err(PullError::TooLarge(MAX_LISTED));
                }
                let listed = file
                    .to_server_list()
                    .servers
                    .into_iter()
                    .filter_map(|e| {
                        let q = e.query_address?;
                        Some(Listed {
                            addr: q,
                            game: None,
                            face: Face::GameSpy,
                            protocol: Protocol::GameSpy1,
                            query_addr: q,
                            game_port: Some(e.address.port()),
                            relayed: false,
                        })
                    })
                    .collect();
                (listed, peer)
            }
        };
        Ok(Pulled::List {
            listed,
            complete: true,
            peers: peer.into_iter().collect(),
        })
    }

    /// The document at the upstream's URL and the address it came from.
    async fn document(&self) -> Result<(Vec<u8>, Option<IpAddr>), PullError> {
        let Some(client) = &self.http else {
            return Err(PullError::Resolve(self.config.address.clone()));
        };
        http::get(client, &self.config.address, MAX_DOCUMENT_BYTES)
            .await
            .map_err(PullError::Http)
    }

    async fn gamespy(&mut self) -> Result<Pulled, PullError> {
        let c = &self.config;
        let addr = resolve(&c.address, &self.pins).await?;
        let peers = vec![addr.ip()];
        let games = gamespy_games(c);
        if c.mode != GameSpyMode::List {
            let asked = if c.games.is_empty() {
                SyncGames::All
            } else {
                SyncGames::Games(games.iter().filter_map(|g| Key::new(*g).ok()).collect())
            };
            match sync::pull(addr, &asked, &self.msid, self.timeout).await {
                Ok(reply) => {
                    let n: usize = reply.games.iter().map(|(_, a)| a.len()).sum();
                    if n > MAX_LISTED {
                        return Err(PullError::TooLarge(MAX_LISTED));
                    }
                    let mut listed = Vec::new();
                    for (game, addrs) in reply.games {
                        let Some(g) = gamespy_games::game(game.as_bytes()) else {
                            continue;
                        };
                        if !games.contains(&g.name) {
                            continue;
                        }
                        listed.extend(
                            addrs
                                .into_iter()
                                .map(|a| gamespy(SocketAddr::V4(a), g.name)),
                        );
                    }
                    return Ok(Pulled::List {
                        listed,
                        complete: true,
                        peers,
                    });
                }
                Err(SyncError::NotSupported(why)) if c.mode == GameSpyMode::Auto => {
                    tracing::debug!(upstream = %c.display_name(), why, "no sync; asking game by game");
                }
                Err(e) => return Err(PullError::Sync(e)),
            }
        }
        let mut listed = Vec::new();
        let mut complete = true;
        let mut last_error = None;
        let mut any = false;
        for game in games {
            let Ok(key) = Key::new(game) else { continue };
            match list_one(&MasterSource::Gamespy(addr, key), &self.options()).await {
                Ok(entries) => {
                    any = true;
                    if listed.len().saturating_add(entries.len()) > MAX_LISTED {
                        return Err(PullError::TooLarge(MAX_LISTED));
                    }
                    listed.extend(
                        entries
                            .into_iter()
                            .filter_map(|e| Some(gamespy(e.address.ip()?, game))),
                    );
                }
                Err(e) => {
                    complete = false;
                    last_error = Some(e);
                }
            }
        }
        match (any, last_error) {
            (false, Some(e)) => Err(PullError::AllGames(e)),
            _ => Ok(Pulled::List {
                listed,
                complete,
                peers,
            }),
        }
    }

    async fn muster(&mut self) -> Result<Pulled, PullError> {
        let Some(api) = &mut self.api else {
            return Ok(Pulled::Unchanged);
        };
        let (servers, complete, peers) = match api.pull().await.map_err(PullError::Api)? {
            ApiPull::Unchanged => return Ok(Pulled::Unchanged),
            ApiPull::Servers {
                servers,
                complete,
                peers,
            } => (servers, complete, peers),
        };
        let mut listed = Vec::with_capacity(servers.len());
        for s in servers {
            // Management records cannot be queried: shown there, never learned here.
            let Some(face) = Face::from_name(&s.protocol).filter(|f| *f != Face::Mgmt) else {
                continue;
            };
            let Some(protocol) = s.query_protocol.as_deref().and_then(protocol_from_name) else {
                continue;
            };
            let Some(GameAddr::Ip(addr)) = GameAddr::parse(&s.registered_address) else {
                continue;
            };
            let Some(query_addr) = s.query_address.as_deref().and_then(|q| q.parse().ok()) else {
                continue;
            };
            let game_port = if s.address_is_game {
                GameAddr::parse(&s.address).map(|a| a.port())
            } else {
                None
            };
            // A DDNet registration is learned as what its address speaks (the register is
            // DDNet's own proof, which this master cannot repeat).
            let face = if face == Face::DdnetHttp {
                Face::Teeworlds06
            } else {
                face
            };
            listed.push(Listed {
                addr,
                game: Some(s.game.clone()),
                face,
                protocol,
                query_addr,
                game_port,
                relayed: !s.is_direct(),
            });
        }
        Ok(Pulled::List {
            listed,
            complete,
            peers,
        })
    }
}

/// The parts of DDNet's `servers.json` a pull needs: each server's addresses. Everything else
/// (the servers' `info`, clients, …) is skipped while parsing, not held.
#[derive(Deserialize)]
struct DdnetDoc {
    #[serde(deserialize_with = "at_most::<_, _, MAX_LISTED>")]
    servers: Vec<DdnetServer>,
}

#[derive(Deserialize)]
struct DdnetServer {
    #[serde(deserialize_with = "at_most::<_, _, MAX_ADDRESSES_PER_SERVER>")]
    addresses: Vec<String>,
}

/// Every `tw-0.6`/`tw-0.7` IP address of a `servers.json` body, at most [`MAX_LISTED`].
fn ddnet(body: &[u8]) -> Result<Vec<Listed>, PullError> {
    let doc: DdnetDoc = serde_json::from_slice(body).map_err(PullError::Json)?;
    let mut out = Vec::new();
    for entry in &doc.servers {
        for a in entry
            .addresses
            .iter()
            .filter_map(|a| ServerAddress::parse(a).ok())
        {
            let face = match a.scheme {
                AddressScheme::Tw06 => Face::Teeworlds06,
                AddressScheme::Tw07 => Face::Teeworlds07,
                _ => continue,
            };
            if let Some(addr) = a.socket_addr() {
                if out.len() >= MAX_LISTED {
                    return Err(PullError::TooLarge(MAX_LISTED));
                }
                out.push(teeworlds(addr, face));
            }
        }
    }
    Ok(out)
}

/// The list requests of a Quake III upstream's `games`: `GAME` (at Quake III's protocol 68) or
/// `GAME:PROTOCOL` each, as `getserversExt`; none: Quake III Arena's `getservers 68`.
fn quake3_requests(games: &[String]) -> Result<Vec<ListRequest>, PullError> {
    use muster_proto::quake3::query::DEFAULT_PROTOCOL;
    if games.is_empty() {
        return Ok(vec![ListRequest::everything(None, DEFAULT_PROTOCOL)]);
    }
    games
        .iter()
        .map(|g| {
            let (name, protocol) = match g.rsplit_once(':') {
                Some((n, p)) => (n, p.parse().map_err(|_| PullError::Config(g.clone()))?),
                None => (g.as_str(), DEFAULT_PROTOCOL),
            };
            let word = Word::new(name).map_err(|_| PullError::Config(g.clone()))?;
            Ok(ListRequest::everything(Some(word), protocol))
        })
        .collect()
}

/// The list asks of a Valve upstream's `games`: `\gamedir\GAME` each, none: every server;
/// each names Xash3D's client version, without which xash3d-master lists only its "update"
/// server.
fn valve_asks(
    games: &[String],
    ipv6: bool,
) -> Result<Vec<(Option<String>, muster_proto::valve_master::query::ListAsk)>, PullError> {
    use muster_proto::valve_master::query::ListAsk;
    let ask = |filter: String| ListAsk {
        ipv6,
        ..ListAsk::new(filter.as_bytes())
    };
    if games.is_empty() {
        return Ok(vec![(None, ask("\\clver\\0.21".to_owned()))]);
    }
    games
        .iter()
        .map(|g| {
            if g.is_empty() || !g.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') {
                return Err(PullError::Config(g.clone()));
            }
            Ok((Some(g.clone()), ask(format!("\\gamedir\\{g}\\clver\\0.21"))))
        })
        .collect()
}

fn teeworlds(addr: SocketAddr, face: Face) -> Listed {
    Listed {
        addr,
        game: Some(TEEWORLDS_GAME.to_owned()),
        face,
        protocol: Protocol::Teeworlds,
        query_addr: addr,
        game_port: Some(addr.port()),
        relayed: false,
    }
}

fn gamespy(addr: SocketAddr, game: &str) -> Listed {
    Listed {
        addr,
        game: Some(game.to_owned()),
        face: Face::GameSpy,
        protocol: Protocol::GameSpy1,
        query_addr: addr,
        game_port: None,
        relayed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_list_from_local_addresses_alone_may_name_local_servers() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(may_list_local(&[ip("127.0.0.1")]));
        assert!(may_list_local(&[ip("10.0.0.7"), ip("::1")]));
        // Whatever a name lookup said before: what was connected to decides.
        assert!(!may_list_local(&[ip("8.8.8.8")]));
        assert!(!may_list_local(&[ip("127.0.0.1"), ip("8.8.8.8")]));
        assert!(!may_list_local(&[]), "not known where it came from");
    }

    #[test]
    fn a_servers_json_is_read_for_its_addresses_within_limits() {
        let doc = br#"{"servers":[
            {"addresses":["tw-0.6+udp://192.0.2.1:8303","tw-0.7+udp://192.0.2.1:8303","tw-0.6+udp://[2001:db8::1]:8303","junk"],
             "info":{"name":"x","clients":[{"name":"a"}]}},
            {"addresses":["tw-0.6+udp://192.0.2.2:8304"],"location":"eu","info":{}}]}"#;
        let listed = ddnet(doc).unwrap();
        let got: Vec<(String, Face)> = listed
            .iter()
            .map(|l| (l.addr.to_string(), l.face))
            .collect();
        assert_eq!(
            got,
            [
                ("192.0.2.1:8303".to_owned(), Face::Teeworlds06),
                ("192.0.2.1:8303".to_owned(), Face::Teeworlds07),
                ("[2001:db8::1]:8303".to_owned(), Face::Teeworlds06),
                ("192.0.2.2:8304".to_owned(), Face::Teeworlds06),
            ]
        );
        let many: Vec<String> = (0..=MAX_ADDRESSES_PER_SERVER)
            .map(|i| format!("\"tw-0.6+udp://192.0.2.1:{}\"", i + 1))
            .collect();
        let doc = format!(r#"{{"servers":[{{"addresses":[{}]}}]}}"#, many.join(","));
        assert!(matches!(ddnet(doc.as_bytes()), Err(PullError::Json(_))));
        let servers = vec![r#"{"addresses":[]}"#; MAX_LISTED + 1].join(",");
        let doc = format!(r#"{{"servers":[{servers}]}}"#);
        match ddnet(doc.as_bytes()) {
            Err(PullError::Json(e)) => assert!(e.to_string().contains("more than 65536"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gamespy_games_are_the_table_or_the_configured_known_ones() {
        let mut c = UpstreamConfig::new(UpstreamKind::Gamespy, "h:1");
        let all = gamespy_games(&c);
        assert!(
            all.contains(&"ut") && all.contains(&"serioussamse") && all.contains(&"333networks")
        );
        c.games = vec!["UT".into(), "quake3".into()];
        assert_eq!(gamespy_games(&c), ["ut"]);
    }
}
