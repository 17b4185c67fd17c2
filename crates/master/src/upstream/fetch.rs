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

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_proto::Protocol;
use muster_proto::gamespy_master::{Key, SyncGames};
use muster_proto::teeworlds_master::{AddressScheme, ServersJson};
use muster_query::lists::{Document, MasterSource, http_get, list_one};
use muster_query::{Failure, Options};

use super::api::{ApiClient, ApiError, ApiPull};
use super::config::{GameSpyMode, UpstreamConfig, UpstreamKind};
use super::learn::{Listed, TEEWORLDS_GAME};
use super::sync::{self, SyncError};
use crate::faces::gamespy::verify as gamespy_games;
use crate::registry::{Face, GameAddr, protocol_from_name};

/// The whole of one pull (a sync, every page, every game's list) must finish within this.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(60);

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
    /// The document is not what the kind expects.
    #[error("bad document")]
    Decode(#[source] muster_proto::DecodeError),
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
    },
}

/// Pulls one upstream; keeps what a kind needs between pulls (the API's `ETag`).
#[derive(Debug)]
pub struct Fetcher {
    config: UpstreamConfig,
    msid: Arc<str>,
    api: Option<ApiClient>,
    timeout: Duration,
}

async fn resolve(address: &str) -> Result<SocketAddr, PullError> {
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

/// Whether the upstream of `config` is on a local network itself (every address its host
/// resolves to is [`super::learn::is_local`]): only then are local addresses it lists learned.
/// A host that does not resolve is not.
pub async fn is_local_upstream(config: &UpstreamConfig) -> bool {
    let host_port = if config.kind.takes_url() {
        let Ok(url) = url::Url::parse(&config.address) else {
            return false;
        };
        let Some(host) = url.host_str() else {
            return false;
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        (host, url.port_or_known_default().unwrap_or(80))
    } else {
        match super::config::host_port(&config.address) {
            Some((h, p)) => (h.to_owned(), p),
            None => return false,
        }
    };
    match tokio::net::lookup_host((host_port.0.as_str(), host_port.1)).await {
        Ok(addrs) => {
            let ips: Vec<_> = addrs.map(|a| a.ip()).collect();
            !ips.is_empty() && ips.into_iter().all(super::learn::is_local)
        }
        Err(_) => false,
    }
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
        let api = match config.kind {
            UpstreamKind::Muster => {
                Some(ApiClient::new(&config.address, PULL_TIMEOUT).map_err(PullError::Api)?)
            }
            _ => None,
        };
        Ok(Self {
            config,
            msid,
            api,
            timeout: PULL_TIMEOUT,
        })
    }

    /// Sets the time one pull may take (tests shorten it).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
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

    /// One pull.
    pub async fn fetch(&mut self) -> Result<Pulled, PullError> {
        let c = &self.config;
        let listed = match c.kind {
            UpstreamKind::Gamespy => return self.gamespy().await,
            UpstreamKind::Muster => return self.muster().await,
            UpstreamKind::GameAgent => {
                let addr = resolve(&c.address).await?;
                list_one(&MasterSource::GameAgent(addr), &self.options())
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
                    .collect()
            }
            UpstreamKind::Teeworlds06 | UpstreamKind::Teeworlds07 => {
                let addr = resolve(&c.address).await?;
                let face = if c.kind == UpstreamKind::Teeworlds06 {
                    Face::Teeworlds06
                } else {
                    Face::Teeworlds07
                };
                list_one(&MasterSource::Teeworlds(addr), &self.options())
                    .await
                    .map_err(PullError::List)?
                    .into_iter()
                    .filter_map(|e| Some(teeworlds(e.address.ip()?, face)))
                    .collect()
            }
            UpstreamKind::Ddnet => {
                let body = http_get(&c.address, self.timeout)
                    .await
                    .map_err(PullError::List)?;
                let doc = ServersJson::decode(&body).map_err(PullError::Decode)?;
                let mut out = Vec::new();
                for entry in &doc.servers {
                    for a in entry.parsed_addresses() {
                        let face = match a.scheme {
                            AddressScheme::Tw06 => Face::Teeworlds06,
                            AddressScheme::Tw07 => Face::Teeworlds07,
                            _ => continue,
                        };
                        if let Some(addr) = a.socket_addr() {
                            out.push(teeworlds(addr, face));
                        }
                    }
                }
                out
            }
            UpstreamKind::Ut2003Text => {
                let source = MasterSource::Ut2003Text(Document::parse(&c.address));
                list_one(&source, &self.options())
                    .await
                    .map_err(PullError::List)?
                    .into_iter()
                    .filter_map(|e| {
                        let q = e.query_address?;
                        Some(Listed {
                            addr: q,
                            game: None,
                            face: Face::GameSpy,
                            protocol: Protocol::GameSpy1,
                            query_addr: q,
                            game_port: Some(e.address.ip()?.port()),
                            relayed: false,
                        })
                    })
                    .collect()
            }
        };
        Ok(Pulled::List {
            listed,
            complete: true,
        })
    }

    async fn gamespy(&mut self) -> Result<Pulled, PullError> {
        let c = &self.config;
        let addr = resolve(&c.address).await?;
        let games = gamespy_games(c);
        if c.mode != GameSpyMode::List {
            let asked = if c.games.is_empty() {
                SyncGames::All
            } else {
                SyncGames::Games(games.iter().filter_map(|g| Key::new(*g).ok()).collect())
            };
            match sync::pull(addr, &asked, &self.msid, self.timeout).await {
                Ok(reply) => {
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
            _ => Ok(Pulled::List { listed, complete }),
        }
    }

    async fn muster(&mut self) -> Result<Pulled, PullError> {
        let Some(api) = &mut self.api else {
            return Ok(Pulled::Unchanged);
        };
        let (servers, complete) = match api.pull().await.map_err(PullError::Api)? {
            ApiPull::Unchanged => return Ok(Pulled::Unchanged),
            ApiPull::Servers { servers, complete } => (servers, complete),
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
        Ok(Pulled::List { listed, complete })
    }
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

    #[tokio::test]
    async fn only_a_local_upstream_may_list_local_addresses() {
        let local = [
            (UpstreamKind::Gamespy, "127.0.0.1:28900"),
            (UpstreamKind::Muster, "http://127.1.0.1:8080"),
            (
                UpstreamKind::Ddnet,
                "http://[::1]:8080/ddnet/15/servers.json",
            ),
            (UpstreamKind::Teeworlds06, "10.0.0.7:8300"),
        ];
        for (kind, address) in local {
            assert!(
                is_local_upstream(&UpstreamConfig::new(kind, address)).await,
                "{address}"
            );
        }
        let public = [
            (UpstreamKind::Gamespy, "192.0.2.1:28900"),
            (UpstreamKind::Muster, "https://198.51.100.7"),
        ];
        for (kind, address) in public {
            assert!(
                !is_local_upstream(&UpstreamConfig::new(kind, address)).await,
                "{address}"
            );
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
