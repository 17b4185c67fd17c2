//! What a `/probe` request asks, read from its query string. Every mistake is a
//! [`ParamError`] whose text the route answers with status 400.

use muster_proto::gamespy_master::packet::Key;
use muster_query::{Document, MasterSource, QueryProtocol, ResolveError, Target, resolve_input};

/// Longest query string read; a longer one is refused before it is parsed.
pub const MAX_QUERY_LEN: usize = 2048;

/// The parameters `/probe` takes.
pub const PARAMS: [&str; 7] = [
    "target",
    "protocol",
    "given_port_only",
    "master",
    "game",
    "protocol_version",
    "filter",
];

/// Every query protocol a probe may name, by the name the CLI and the results use.
const PROTOCOLS: [QueryProtocol; 7] = [
    QueryProtocol::GameAgent,
    QueryProtocol::Gamespy1,
    QueryProtocol::Unreal2,
    QueryProtocol::Teeworlds,
    QueryProtocol::Quake3,
    QueryProtocol::A2s,
    QueryProtocol::Auto,
];

/// A bad `/probe` request, said in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamError(pub String);

fn bad(s: impl Into<String>) -> ParamError {
    ParamError(s.into())
}

/// The master protocols `?master=KIND:ADDRESS` names (as `muster list --protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasterKind {
    /// Serious Sam GameAgent master, UDP (default port 9005).
    Gameagent,
    /// GameSpy master's TCP list (default port 28900); needs `game`.
    Gamespy,
    /// Teeworlds UDP master, 0.6 and 0.7 at once (default port 8300).
    Teeworlds,
    /// DDNet's `servers.json`, an http(s) URL.
    Ddnet,
    /// The UT2003 text list, an http(s) URL.
    Ut2003Text,
    /// The management server's list, TCP (default port 51963).
    Mgmt,
    /// Quake III / DarkPlaces master (dpmaster), UDP (default port 27950).
    Quake3,
    /// Valve master query (Half-Life / Xash3D masters), UDP (default port 27010).
    Valve,
}

impl MasterKind {
    const ALL: [Self; 8] = [
        Self::Gameagent,
        Self::Gamespy,
        Self::Teeworlds,
        Self::Ddnet,
        Self::Ut2003Text,
        Self::Mgmt,
        Self::Quake3,
        Self::Valve,
    ];

    /// The name in `?master=`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Gameagent => "gameagent",
            Self::Gamespy => "gamespy",
            Self::Teeworlds => "teeworlds",
            Self::Ddnet => "ddnet",
            Self::Ut2003Text => "ut2003-text",
            Self::Mgmt => "mgmt",
            Self::Quake3 => "quake3",
            Self::Valve => "valve",
        }
    }

    fn default_port(self) -> Option<u16> {
        match self {
            Self::Gameagent => Some(9005),
            Self::Gamespy => Some(28900),
            Self::Teeworlds => Some(8300),
            Self::Mgmt => Some(muster_proto::mgmt::PORT),
            Self::Quake3 => Some(muster_proto::quake3::MASTER_PORT),
            Self::Valve => Some(muster_proto::valve_master::MASTER_PORT),
            Self::Ddnet | Self::Ut2003Text => None,
        }
    }

    /// How the listed servers are asked (`None`: the management server's list carries their
    /// state, and they are not asked).
    #[must_use]
    pub fn query_protocol(self) -> Option<QueryProtocol> {
        match self {
            Self::Gameagent => Some(QueryProtocol::GameAgent),
            Self::Gamespy => Some(QueryProtocol::Gamespy1),
            Self::Teeworlds | Self::Ddnet => Some(QueryProtocol::Teeworlds),
            Self::Ut2003Text => Some(QueryProtocol::Unreal2),
            Self::Quake3 => Some(QueryProtocol::Quake3),
            Self::Valve => Some(QueryProtocol::A2s),
            Self::Mgmt => None,
        }
    }
}

/// A master to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterProbe {
    /// Its protocol.
    pub kind: MasterKind,
    /// What the library asks.
    pub source: MasterSource,
}

/// What one `/probe` request asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeRequest {
    /// One game server.
    Server(Target),
    /// A master's list and every server on it (up to [`super::MAX_MASTER_SERIES`]).
    Master(MasterProbe),
}

fn parse_protocol(name: &str) -> Result<QueryProtocol, ParamError> {
    PROTOCOLS
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            let names: Vec<&str> = PROTOCOLS.iter().map(|p| p.name()).collect();
            bad(format!(
                "unknown protocol {name:?} (one of {})",
                names.join(", ")
            ))
        })
}

fn parse_bool(key: &str, v: &str) -> Result<bool, ParamError> {
    match v {
        "" | "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(bad(format!("{key}={v:?}: expected true or false"))),
    }
}

async fn resolve(
    key: &str,
    input: &str,
    default_port: Option<u16>,
) -> Result<std::net::SocketAddr, ParamError> {
    resolve_input(input, default_port).await.map_err(|e| {
        let why = match e {
            ResolveError::Address(e) => e.to_string(),
            ResolveError::NoAddress => "host name has no address".to_owned(),
            _ => "cannot resolve host name".to_owned(),
        };
        bad(format!("{key}={input:?}: {why}"))
    })
}

/// The request a `/probe` query string (`None`: none) asks: `target` (with `protocol`,
/// default `auto`, and `given_port_only`), or `master` (with `game`, `protocol_version` for
/// quake3 masters, `filter` for valve masters). Host names are resolved here.
///
/// # Errors
///
/// [`ParamError`] for a missing, repeated, unknown or malformed parameter, both `target` and
/// `master`, or an address that does not resolve.
pub async fn parse_query(query: Option<&str>) -> Result<ProbeRequest, ParamError> {
    let query = query.unwrap_or("");
    if query.len() > MAX_QUERY_LEN {
        return Err(bad(format!(
            "query string longer than {MAX_QUERY_LEN} bytes"
        )));
    }
    let mut got: Vec<(String, String)> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if !PARAMS.contains(&k.as_ref()) {
            return Err(bad(format!(
                "unknown parameter {k:?} (known: {})",
                PARAMS.join(", ")
            )));
        }
        if got.iter().any(|(g, _)| *g == k) {
            return Err(bad(format!("parameter {k:?} given twice")));
        }
        got.push((k.into_owned(), v.into_owned()));
    }
    let get = |k: &str| got.iter().find(|(g, _)| g == k).map(|(_, v)| v.as_str());
    match (get("target"), get("master")) {
        (Some(_), Some(_)) => Err(bad("give target or master, not both")),
        (None, None) => Err(bad(
            "missing parameter: target=HOST:PORT (with protocol=P) or master=KIND:ADDRESS",
        )),
        (Some(target), None) => {
            for k in ["game", "protocol_version", "filter"] {
                if get(k).is_some() {
                    return Err(bad(format!("{k} goes with master, not with target")));
                }
            }
            let protocol = parse_protocol(get("protocol").unwrap_or("auto"))?;
            let given = get("given_port_only")
                .map(|v| parse_bool("given_port_only", v))
                .transpose()?
                .unwrap_or(false);
            let address = resolve("target", target, protocol.default_game_port()).await?;
            let t = Target::new(address, protocol);
            Ok(ProbeRequest::Server(if given {
                t.given_port_only()
            } else {
                t
            }))
        }
        (None, Some(master)) => {
            for k in ["protocol", "given_port_only"] {
                if get(k).is_some() {
                    return Err(bad(format!("{k} goes with target, not with master")));
                }
            }
            master_probe(master, get("game"), get("protocol_version"), get("filter"))
                .await
                .map(ProbeRequest::Master)
        }
    }
}

async fn master_probe(
    master: &str,
    game: Option<&str>,
    protocol_version: Option<&str>,
    filter: Option<&str>,
) -> Result<MasterProbe, ParamError> {
    let (name, source) = master
        .split_once(':')
        .ok_or_else(|| bad(format!("master={master:?}: expected KIND:ADDRESS")))?;
    let kind = MasterKind::ALL
        .into_iter()
        .find(|k| k.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            let names: Vec<&str> = MasterKind::ALL.iter().map(|k| k.name()).collect();
            bad(format!(
                "master={master:?}: unknown kind {name:?} (one of {})",
                names.join(", ")
            ))
        })?;
    if protocol_version.is_some() && kind != MasterKind::Quake3 {
        return Err(bad("protocol_version goes with quake3 masters only"));
    }
    if filter.is_some() && kind != MasterKind::Valve {
        return Err(bad("filter goes with valve masters only"));
    }
    let addr = || resolve("master", source, kind.default_port());
    let source = match kind {
        MasterKind::Gameagent => MasterSource::GameAgent(addr().await?),
        MasterKind::Teeworlds => MasterSource::Teeworlds(addr().await?),
        MasterKind::Mgmt => MasterSource::Mgmt(addr().await?),
        MasterKind::Gamespy => {
            let game =
                game.ok_or_else(|| bad("game=NAME is needed for gamespy masters (e.g. ut2)"))?;
            let key = Key::new(game.as_bytes().to_vec())
                .map_err(|_| bad(format!("bad game {game:?}")))?;
            MasterSource::Gamespy(addr().await?, key)
        }
        MasterKind::Quake3 => {
            let game = game
                .map(|g| {
                    muster_proto::quake3::Word::new(g.as_bytes().to_vec())
                        .map_err(|_| bad(format!("bad game {g:?} (one word of printable ASCII)")))
                })
                .transpose()?;
            let version = protocol_version
                .map(|v| {
                    v.parse::<i32>()
                        .map_err(|_| bad(format!("protocol_version={v:?}: not a number")))
                })
                .transpose()?
                .unwrap_or(muster_proto::quake3::query::DEFAULT_PROTOCOL);
            let request = muster_proto::quake3::query::ListRequest::everything(game, version);
            MasterSource::Quake3(addr().await?, request)
        }
        MasterKind::Valve => {
            let mut f = String::new();
            if let Some(g) = game {
                f.push_str("\\gamedir\\");
                f.push_str(g);
            }
            f.push_str(filter.unwrap_or(""));
            if !f.contains("\\clver\\") {
                f.push_str("\\clver\\0.21");
            }
            muster_proto::valve_master::Filter::parse(f.as_bytes())
                .map_err(|e| bad(format!("bad valve filter {f:?}: {e}")))?;
            let addr = addr().await?;
            let mut ask = muster_proto::valve_master::query::ListAsk::new(f.as_bytes());
            ask.ipv6 = addr.is_ipv6();
            MasterSource::Valve(addr, ask)
        }
        // Only URLs: a scrape never reads the exporter's own files.
        MasterKind::Ddnet | MasterKind::Ut2003Text => {
            if !(source.starts_with("http://") || source.starts_with("https://")) {
                return Err(bad(format!(
                    "master={master:?}: {} lists are read from an http(s) URL",
                    kind.name()
                )));
            }
            let doc = Document::Url(source.to_owned());
            if kind == MasterKind::Ddnet {
                MasterSource::Ddnet(doc)
            } else {
                MasterSource::Ut2003Text(doc)
            }
        }
    };
    if game.is_some()
        && !matches!(
            kind,
            MasterKind::Gamespy | MasterKind::Quake3 | MasterKind::Valve
        )
    {
        return Err(bad(format!(
            "game goes with gamespy, quake3 and valve masters, not {}",
            kind.name()
        )));
    }
    Ok(MasterProbe { kind, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn err(q: &str) -> String {
        parse_query(Some(q)).await.expect_err(q).0
    }

    #[tokio::test]
    async fn a_target_with_its_protocol_and_the_protocols_default_port() {
        let r = parse_query(Some("target=127.0.0.1&protocol=teeworlds"))
            .await
            .unwrap();
        assert_eq!(
            r,
            ProbeRequest::Server(Target::new(
                "127.0.0.1:8303".parse().unwrap(),
                QueryProtocol::Teeworlds
            ))
        );
        let r = parse_query(Some(
            "target=%5B%3A%3A1%5D:7778&protocol=GameSpy1&given_port_only=1",
        ))
        .await
        .unwrap();
        let ProbeRequest::Server(t) = r else {
            panic!("{r:?}")
        };
        assert!(t.given_port_only);
        assert_eq!(t.address, "[::1]:7778".parse().unwrap());
        assert_eq!(t.protocol, QueryProtocol::Gamespy1);
        let ProbeRequest::Server(t) = parse_query(Some("target=127.0.0.1:1")).await.unwrap() else {
            panic!()
        };
        assert_eq!(t.protocol, QueryProtocol::Auto);
    }

    #[tokio::test]
    async fn masters_of_each_kind() {
        let r = parse_query(Some("master=gameagent:127.0.0.1"))
            .await
            .unwrap();
        let ProbeRequest::Master(m) = r else { panic!() };
        assert_eq!(
            m.source,
            MasterSource::GameAgent("127.0.0.1:9005".parse().unwrap())
        );
        let r = parse_query(Some(
            "master=quake3:127.0.0.1:1&game=Xonotic&protocol_version=3",
        ))
        .await
        .unwrap();
        let ProbeRequest::Master(m) = r else { panic!() };
        assert_eq!(m.kind, MasterKind::Quake3);
        let r = parse_query(Some(
            "master=ddnet:http://127.0.0.1:8080/ddnet/15/servers.json",
        ))
        .await
        .unwrap();
        let ProbeRequest::Master(m) = r else { panic!() };
        assert_eq!(m.kind.query_protocol(), Some(QueryProtocol::Teeworlds));
        let r = parse_query(Some("master=valve:127.0.0.1&filter=%5Cmap%5Ccrossfire"))
            .await
            .unwrap();
        let ProbeRequest::Master(m) = r else { panic!() };
        let MasterSource::Valve(_, ask) = m.source else {
            panic!()
        };
        assert_eq!(
            ask,
            muster_proto::valve_master::query::ListAsk::new(b"\\map\\crossfire\\clver\\0.21")
        );
    }

    #[tokio::test]
    async fn bad_requests_say_what_is_wrong() {
        assert!(err("").await.contains("missing parameter"));
        assert!(
            err("target=127.0.0.1:1&master=gameagent:127.0.0.1")
                .await
                .contains("not both")
        );
        assert!(
            err("target=127.0.0.1:1&protocol=doom")
                .await
                .contains("unknown protocol \"doom\"")
        );
        assert!(
            err("target=127.0.0.1:1&x=1")
                .await
                .contains("unknown parameter \"x\"")
        );
        assert!(
            err("target=127.0.0.1:1&target=127.0.0.1:2")
                .await
                .contains("twice")
        );
        assert!(
            err("target=127.0.0.1&protocol=gamespy1")
                .await
                .contains("target=")
        );
        assert!(err("target=[::1&protocol=a2s").await.contains("target="));
        assert!(
            err("target=127.0.0.1:1&game=ut2")
                .await
                .contains("goes with master")
        );
        assert!(
            err("target=127.0.0.1:1&given_port_only=maybe")
                .await
                .contains("true or false")
        );
        assert!(err("master=127.0.0.1").await.contains("KIND:ADDRESS"));
        assert!(
            err("master=doom:127.0.0.1:1")
                .await
                .contains("unknown kind")
        );
        assert!(err("master=gamespy:127.0.0.1").await.contains("game=NAME"));
        assert!(
            err("master=ddnet:/etc/passwd")
                .await
                .contains("http(s) URL")
        );
        assert!(
            err("master=gameagent:127.0.0.1&game=x")
                .await
                .contains("game goes with")
        );
        assert!(
            err("master=gameagent:127.0.0.1&protocol=a2s")
                .await
                .contains("goes with target")
        );
        assert!(
            err("master=quake3:127.0.0.1&protocol_version=x")
                .await
                .contains("not a number")
        );
        assert!(
            err("master=teeworlds:127.0.0.1&filter=x")
                .await
                .contains("valve masters only")
        );
        let long = format!("target={}", "a".repeat(MAX_QUERY_LEN));
        assert!(err(&long).await.contains("longer than"));
    }
}
