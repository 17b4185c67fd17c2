//! DDNet's HTTP register (spec §3): the request headers as a typed struct, the server-info body
//! as serde types, and the JSON responses.
//!
//! No HTTP here: requests are read from and written to plain header lists, so the master's
//! HTTP layer (and the game-server side) can use any HTTP crate. `Host`, `User-Agent`,
//! `Content-Length` and `Content-Type` belong to that layer and are neither read nor written.
//! The UDP challenge datagram is [`super::packet::Challenge`].

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::packet::Token;
use super::{MAX_HEADER_VALUE, MAX_REGISTER_BODY, decode_text};
use crate::model::{Player, Protocol, RawValue, ServerInfo};
use crate::wire::DecodeError;

/// The scheme of a DDNet server address URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AddressScheme {
    /// `tw-0.5+udp`
    Tw05,
    /// `tw-0.6+udp` (the only one the DDNet 16.4 client uses)
    Tw06,
    /// `tw-0.7+udp`
    Tw07,
    /// `ddper-0.6+udp`
    Ddper06,
    /// Any other scheme, kept as written.
    Unknown(String),
}

impl AddressScheme {
    /// The scheme as written in URLs.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Self::Tw05 => SCHEME_TW05,
            Self::Tw06 => SCHEME_TW06,
            Self::Tw07 => SCHEME_TW07,
            Self::Ddper06 => SCHEME_DDPER06,
            Self::Unknown(s) => s,
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            SCHEME_TW05 => Self::Tw05,
            SCHEME_TW06 => Self::Tw06,
            SCHEME_TW07 => Self::Tw07,
            SCHEME_DDPER06 => Self::Ddper06,
            other => Self::Unknown(other.to_owned()),
        }
    }
}

/// A server address URL: `<scheme>://<host>:<port>`, IPv6 hosts in brackets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerAddress {
    /// The protocol scheme.
    pub scheme: AddressScheme,
    /// The host without brackets: an IP in `servers.json`, always
    /// [`Self::CONNECTING_HOST`] in a register request.
    pub host: String,
    /// The game port.
    pub port: u16,
}

impl ServerAddress {
    /// The host every register request uses; the master puts the peer's IP in its place.
    pub const CONNECTING_HOST: &'static str = "connecting-address.invalid";

    /// Parse `tw-0.6+udp://1.2.3.4:8303` or `tw-0.6+udp://[2001:db8::1]:8303`.
    pub fn parse(s: &str) -> Result<Self, DecodeError> {
        const CTX: &str = "server address";
        let (scheme, rest) = s.split_once("://").ok_or(DecodeError::Invalid(CTX))?;
        let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let (host, after) = bracketed.split_once(']').ok_or(DecodeError::Invalid(CTX))?;
            let port = after.strip_prefix(':').ok_or(DecodeError::Invalid(CTX))?;
            (host, port)
        } else {
            let (host, port) = rest.rsplit_once(':').ok_or(DecodeError::Invalid(CTX))?;
            if host.contains(':') {
                return Err(DecodeError::Invalid(CTX));
            }
            (host, port)
        };
        if scheme.is_empty() || host.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(DecodeError::Invalid(CTX));
        }
        let port = port
            .parse::<u16>()
            .map_err(|_| DecodeError::BadNumber(CTX))?;
        Ok(Self {
            scheme: AddressScheme::parse(scheme),
            host: host.to_owned(),
            port,
        })
    }

    /// The address with `ip` as host, as the master lists it: IPv4-mapped IPv6 becomes IPv4.
    #[must_use]
    pub fn with_ip(&self, ip: IpAddr) -> Self {
        let ip = ip.to_canonical();
        Self {
            scheme: self.scheme.clone(),
            host: ip.to_string(),
            port: self.port,
        }
    }

    /// The host and port as a socket address, when the host is an IP literal.
    #[must_use]
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        self.host
            .parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, self.port))
    }
}

impl fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(
                f,
                "{}://[{}]:{}",
                self.scheme.as_str(),
                self.host,
                self.port
            )
        } else {
            write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port)
        }
    }
}

/// `Challenge-Secret`: `<random UUID>:<stream name>`, copied by the master into the UDP
/// challenge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChallengeSecret(pub String);

impl ChallengeSecret {
    /// The part before the first colon (the server's random UUID).
    #[must_use]
    pub fn uuid(&self) -> &str {
        self.0.split_once(':').map_or(self.0.as_str(), |(u, _)| u)
    }

    /// The stream name after the colon (`tw0.6/ipv4`, …), if any.
    #[must_use]
    pub fn stream(&self) -> Option<&str> {
        self.0.split_once(':').map(|(_, s)| s)
    }
}

/// The `Action` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// No `Action` header: register or refresh.
    Register,
    /// `Action: delete`: unregister this address.
    Delete,
    /// Any other value (the reference master answers 400).
    Unknown(String),
}

/// The register headers of one POST (spec §3.1).
///
/// [`Self::from_headers`] enforces what the reference master enforces (400 otherwise):
/// `Address` and `Secret` always; for a registration also `Challenge-Secret` and
/// `Info-Serial`, and `Connless-Token` on `tw-0.7+udp` addresses. It does not check that the
/// host is [`ServerAddress::CONNECTING_HOST`]; the master decides that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterRequest {
    /// `Action` (absent = [`Action::Register`]).
    pub action: Action,
    /// `Address`.
    pub address: ServerAddress,
    /// `Secret`: one random UUID per server process.
    pub secret: String,
    /// `Connless-Token` (0.7 streams).
    pub connless_token: Option<Token>,
    /// `Challenge-Secret`.
    pub challenge_secret: Option<ChallengeSecret>,
    /// `Challenge-Token`: absent until the server has received a challenge.
    pub challenge_token: Option<String>,
    /// `Info-Serial`.
    pub info_serial: Option<i64>,
}

impl RegisterRequest {
    /// Read the request from its headers (names case-insensitive; the first of repeated
    /// headers wins; values longer than [`MAX_HEADER_VALUE`] are refused).
    pub fn from_headers(headers: &[(&str, &str)]) -> Result<Self, DecodeError> {
        let get = |name: &'static str| -> Result<Option<&str>, DecodeError> {
            match headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)) {
                Some((_, v)) if v.len() > MAX_HEADER_VALUE => Err(DecodeError::TooLarge(name)),
                Some((_, v)) => Ok(Some(v.trim())),
                None => Ok(None),
            }
        };
        let action = match get(HEADER_ACTION)? {
            None => Action::Register,
            Some(v) if v == ACTION_DELETE => Action::Delete,
            Some(v) => Action::Unknown(v.to_owned()),
        };
        let address = ServerAddress::parse(
            get(HEADER_ADDRESS)?.ok_or(DecodeError::Invalid("missing Address header"))?,
        )?;
        let secret = get(HEADER_SECRET)?
            .ok_or(DecodeError::Invalid("missing Secret header"))?
            .to_owned();
        let connless_token = get(HEADER_CONNLESS_TOKEN)?
            .map(Token::from_hex)
            .transpose()?;
        let challenge_secret = get(HEADER_CHALLENGE_SECRET)?.map(|s| ChallengeSecret(s.to_owned()));
        let challenge_token = get(HEADER_CHALLENGE_TOKEN)?.map(str::to_owned);
        let info_serial = get(HEADER_INFO_SERIAL)?
            .map(|s| s.parse::<i64>())
            .transpose()
            .map_err(|_| DecodeError::BadNumber("Info-Serial header"))?;
        if action == Action::Register {
            if challenge_secret.is_none() {
                return Err(DecodeError::Invalid("missing Challenge-Secret header"));
            }
            if info_serial.is_none() {
                return Err(DecodeError::Invalid("missing Info-Serial header"));
            }
            if address.scheme == AddressScheme::Tw07 && connless_token.is_none() {
                return Err(DecodeError::Invalid("missing Connless-Token header"));
            }
        }
        Ok(Self {
            action,
            address,
            secret,
            connless_token,
            challenge_secret,
            challenge_token,
            info_serial,
        })
    }

    /// The headers in the order DDNet 16.4 sends them (without the HTTP layer's own).
    #[must_use]
    pub fn to_headers(&self) -> Vec<(String, String)> {
        let mut h = Vec::new();
        let mut push = |k: &str, v: String| h.push((k.to_owned(), v));
        match &self.action {
            Action::Register => {}
            Action::Delete => push(HEADER_ACTION, ACTION_DELETE.to_owned()),
            Action::Unknown(v) => push(HEADER_ACTION, v.clone()),
        }
        push(HEADER_ADDRESS, self.address.to_string());
        push(HEADER_SECRET, self.secret.clone());
        if let Some(t) = self.connless_token {
            push(HEADER_CONNLESS_TOKEN, t.to_hex());
        }
        if let Some(s) = &self.challenge_secret {
            push(HEADER_CHALLENGE_SECRET, s.0.clone());
        }
        if let Some(t) = &self.challenge_token {
            push(HEADER_CHALLENGE_TOKEN, t.clone());
        }
        if let Some(n) = self.info_serial {
            push(HEADER_INFO_SERIAL, n.to_string());
        }
        h
    }
}

/// The server info a DDNet server registers (the request body), also the `info` of each
/// `servers.json` entry. Fields the schema does not name are kept in `extra`.
///
/// Field order is DDNet 16.4's, so [`Self::encode`] reproduces its body byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterInfo {
    /// Client slots (players and spectators).
    pub max_clients: i64,
    /// Player slots.
    pub max_players: i64,
    /// Whether a password is needed.
    pub passworded: bool,
    /// Game type.
    pub game_type: String,
    /// Server name.
    pub name: String,
    /// The current map.
    pub map: MapInfo,
    /// Version string (`"0.6.4, 16.4"`).
    pub version: String,
    /// Connected clients.
    pub clients: Vec<ClientInfo>,
    /// Fields newer servers add.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// `info.map`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapInfo {
    /// Map name.
    pub name: String,
    /// Lower-case hex SHA-256 of the map file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Map file size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// Fields newer servers add.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One entry of `info.clients`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Name.
    pub name: String,
    /// Clan.
    pub clan: String,
    /// ISO 3166-1 numeric country, -1 = none.
    pub country: i64,
    /// Score (DDNet: time in seconds, negative or -9999 = none).
    pub score: i64,
    /// False for spectators.
    pub is_player: bool,
    /// Fields newer servers add (`afk`, `team`, `skin`, …).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RegisterInfo {
    /// Parse a register body or a `servers.json` `info`; bodies over [`MAX_REGISTER_BODY`]
    /// are refused before parsing.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        if body.len() > MAX_REGISTER_BODY {
            return Err(DecodeError::TooLarge("register body"));
        }
        serde_json::from_slice(body).map_err(|_| DecodeError::Invalid("register info json"))
    }

    /// Append the compact JSON body (DDNet's field order, non-ASCII as raw UTF-8).
    pub fn encode(&self, out: &mut Vec<u8>) {
        // Serializing these types to a Vec cannot fail: every map key is a string.
        let _ = serde_json::to_writer(out, self);
    }

    /// Check the rules the DDNet 16.4 client applies before showing a server (spec §3.7):
    /// `max_clients >= max_players`, client and player counts not above their maxima, and
    /// `game_type`, `name`, `map.name` and `version` without control characters. A master
    /// may use it to refuse info that browsers would drop anyway.
    pub fn check_client_rules(&self) -> Result<(), DecodeError> {
        if self.max_clients < self.max_players || self.max_players < 0 {
            return Err(DecodeError::Invalid("info max_players"));
        }
        let clients = i64::try_from(self.clients.len()).unwrap_or(i64::MAX);
        let players = self.clients.iter().filter(|c| c.is_player).count();
        let players = i64::try_from(players).unwrap_or(i64::MAX);
        if clients > self.max_clients || players > self.max_players {
            return Err(DecodeError::TooLarge("info clients"));
        }
        for (field, ctx) in [
            (&self.game_type, "info game_type"),
            (&self.name, "info name"),
            (&self.map.name, "info map name"),
            (&self.version, "info version"),
        ] {
            if field.chars().any(char::is_control) {
                return Err(DecodeError::Invalid(ctx));
            }
        }
        Ok(())
    }

    /// The info as a protocol-neutral [`ServerInfo`]: `num_players` counts clients with
    /// `is_player`, `players` lists every client (spectators marked); `max_clients`,
    /// `num_clients`, `map_sha256` and `map_size` go to `raw`.
    #[must_use]
    pub fn to_server_info(&self) -> ServerInfo {
        let mut info = ServerInfo::new(Protocol::Teeworlds);
        info.name = decode_text(self.name.as_bytes());
        info.map = decode_text(self.map.name.as_bytes());
        info.game_type = decode_text(self.game_type.as_bytes());
        info.version = decode_text(self.version.as_bytes());
        info.password = Some(self.passworded);
        let players = self.clients.iter().filter(|c| c.is_player).count();
        info.num_players = u32::try_from(players).unwrap_or(u32::MAX);
        info.max_players = clamp_u32(self.max_players);
        info.players = self
            .clients
            .iter()
            .map(|c| Player {
                name: decode_text(c.name.as_bytes()),
                score: Some(c.score),
                clan: Some(decode_text(c.clan.as_bytes())),
                country: Some(i32::try_from(c.country).unwrap_or(-1)),
                spectator: Some(!c.is_player),
                ..Player::default()
            })
            .collect();
        info.raw
            .push(("max_clients".into(), RawValue::Int(self.max_clients)));
        let clients = i64::try_from(self.clients.len()).unwrap_or(i64::MAX);
        info.raw
            .push(("num_clients".into(), RawValue::Int(clients)));
        if let Some(sha) = &self.map.sha256 {
            info.raw.push((
                "map_sha256".into(),
                RawValue::Text(decode_text(sha.as_bytes())),
            ));
        }
        if let Some(size) = self.map.size {
            info.raw.push(("map_size".into(), RawValue::Int(size)));
        }
        info
    }
}

fn clamp_u32(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// The master's answer to a register POST (spec §3.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RegisterResponse {
    /// Registered or refreshed.
    Success,
    /// No valid `Challenge-Token` yet; a UDP challenge is on its way.
    NeedChallenge,
    /// No info for this `Secret` at this `Info-Serial`: send the body again.
    NeedInfo,
    /// Refused (HTTP 400).
    Error {
        /// Why, in the master's words.
        #[serde(default)]
        message: String,
    },
    /// A status this version does not know.
    #[serde(other)]
    Unknown,
}

impl RegisterResponse {
    /// Parse a response body.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        if body.len() > MAX_REGISTER_BODY {
            return Err(DecodeError::TooLarge("register response"));
        }
        serde_json::from_slice(body).map_err(|_| DecodeError::Invalid("register response json"))
    }

    /// Append the compact JSON body, e.g. `{"status":"success"}`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        // Cannot fail: a tagged enum with string fields.
        let _ = serde_json::to_writer(out, self);
    }

    /// The HTTP status the reference master sends with it (400 for errors, else 200).
    #[must_use]
    pub const fn http_status(&self) -> u16 {
        match self {
            Self::Error { .. } => 400,
            _ => 200,
        }
    }
}

const HEADER_ACTION: &str = "Action";
const HEADER_ADDRESS: &str = "Address";
const HEADER_SECRET: &str = "Secret";
const HEADER_CONNLESS_TOKEN: &str = "Connless-Token";
const HEADER_CHALLENGE_SECRET: &str = "Challenge-Secret";
const HEADER_CHALLENGE_TOKEN: &str = "Challenge-Token";
const HEADER_INFO_SERIAL: &str = "Info-Serial";
const ACTION_DELETE: &str = "delete";
const SCHEME_TW05: &str = "tw-0.5+udp";
const SCHEME_TW06: &str = "tw-0.6+udp";
const SCHEME_TW07: &str = "tw-0.7+udp";
const SCHEME_DDPER06: &str = "ddper-0.6+udp";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const REGISTER_07: &[(&str, &str)] = &[
        ("Host", "127.0.0.1:18080"),
        ("Address", "tw-0.7+udp://connecting-address.invalid:18304"),
        ("Secret", "4ae14cf1-eb35-4068-89eb-7967b754451e"),
        ("Connless-Token", "ff0e2331"),
        (
            "Challenge-Secret",
            "414cfc17-9b63-4e41-b33b-e4adb20b299c:tw0.7/ipv4",
        ),
        ("Challenge-Token", "vZsDOSXNu8+0PMuK7FQ0Gg=="),
        ("Info-Serial", "0"),
        ("Content-Length", "0"),
    ];

    fn request_07() -> RegisterRequest {
        RegisterRequest {
            action: Action::Register,
            address: ServerAddress {
                scheme: AddressScheme::Tw07,
                host: ServerAddress::CONNECTING_HOST.into(),
                port: 18304,
            },
            secret: "4ae14cf1-eb35-4068-89eb-7967b754451e".into(),
            connless_token: Some(Token([0xff, 0x0e, 0x23, 0x31])),
            challenge_secret: Some(ChallengeSecret(
                "414cfc17-9b63-4e41-b33b-e4adb20b299c:tw0.7/ipv4".into(),
            )),
            challenge_token: Some("vZsDOSXNu8+0PMuK7FQ0Gg==".into()),
            info_serial: Some(0),
        }
    }

    #[test]
    fn decode_register_request() {
        assert_eq!(RegisterRequest::from_headers(REGISTER_07), Ok(request_07()));
        let r = request_07();
        let cs = r.challenge_secret.as_ref().expect("set");
        assert_eq!(cs.uuid(), "414cfc17-9b63-4e41-b33b-e4adb20b299c");
        assert_eq!(cs.stream(), Some("tw0.7/ipv4"));
    }

    #[test]
    fn encode_register_request() {
        let want: Vec<(String, String)> = REGISTER_07
            .iter()
            .filter(|(k, _)| !matches!(*k, "Host" | "Content-Length"))
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(request_07().to_headers(), want);
    }

    #[test]
    fn decode_register_request_rejects_07_without_connless_token() {
        let h: Vec<(&str, &str)> = REGISTER_07
            .iter()
            .copied()
            .filter(|(k, _)| *k != "Connless-Token")
            .collect();
        assert_eq!(
            RegisterRequest::from_headers(&h),
            Err(DecodeError::Invalid("missing Connless-Token header"))
        );
    }

    #[test]
    fn decode_register_request_rejects_bad_values() {
        let mut h = REGISTER_07.to_vec();
        if let Some(e) = h.iter_mut().find(|(k, _)| *k == "Info-Serial") {
            e.1 = "x";
        }
        assert_eq!(
            RegisterRequest::from_headers(&h),
            Err(DecodeError::BadNumber("Info-Serial header"))
        );
        assert_eq!(
            RegisterRequest::from_headers(&[("Secret", "s")]),
            Err(DecodeError::Invalid("missing Address header"))
        );
    }

    #[test]
    fn decode_delete_request_case_insensitive() {
        let h = [
            ("action", "delete"),
            ("ADDRESS", "tw-0.6+udp://connecting-address.invalid:18304"),
            ("secret", "s"),
        ];
        let r = RegisterRequest::from_headers(&h).expect("valid");
        assert_eq!(r.action, Action::Delete);
        assert_eq!(
            r.to_headers(),
            vec![
                ("Action".to_owned(), "delete".to_owned()),
                (
                    "Address".to_owned(),
                    "tw-0.6+udp://connecting-address.invalid:18304".to_owned()
                ),
                ("Secret".to_owned(), "s".to_owned()),
            ]
        );
    }

    #[test]
    fn server_address_forms() {
        for s in [
            "tw-0.6+udp://192.0.2.10:8303",
            "tw-0.7+udp://[2001:db8::1]:8303",
            "ddper-0.6+udp://connecting-address.invalid:1",
            "foo://h:0",
        ] {
            let a = ServerAddress::parse(s).expect("valid");
            assert_eq!(a.to_string(), s);
        }
        let a = ServerAddress::parse("tw-0.7+udp://[2001:db8::1]:8303").expect("valid");
        assert_eq!(
            a.socket_addr(),
            Some("[2001:db8::1]:8303".parse().expect("a"))
        );
        let mapped: IpAddr = "::ffff:1.2.3.4".parse().expect("ip");
        assert_eq!(a.with_ip(mapped).to_string(), "tw-0.7+udp://1.2.3.4:8303");
        for bad in [
            "x",
            "tw://:1",
            "tw://h:",
            "tw://h:99999",
            "tw://a:b:1",
            "tw://[::1:1",
        ] {
            assert!(ServerAddress::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn decode_register_response() {
        assert_eq!(
            RegisterResponse::decode(b"{\"status\": \"need_challenge\"}\n"),
            Ok(RegisterResponse::NeedChallenge)
        );
        assert_eq!(
            RegisterResponse::decode(br#"{"status":"error","message":"no"}"#),
            Ok(RegisterResponse::Error {
                message: "no".into()
            })
        );
        assert_eq!(
            RegisterResponse::decode(br#"{"status":"later"}"#),
            Ok(RegisterResponse::Unknown)
        );
    }

    #[test]
    fn encode_register_response() {
        for (r, want) in [
            (RegisterResponse::Success, r#"{"status":"success"}"#),
            (
                RegisterResponse::NeedChallenge,
                r#"{"status":"need_challenge"}"#,
            ),
            (RegisterResponse::NeedInfo, r#"{"status":"need_info"}"#),
            (
                RegisterResponse::Error {
                    message: "could not find registered server".into(),
                },
                r#"{"status":"error","message":"could not find registered server"}"#,
            ),
        ] {
            let mut out = Vec::new();
            r.encode(&mut out);
            assert_eq!(String::from_utf8(out).expect("utf8"), want);
        }
    }

    #[test]
    fn decode_register_response_rejects_missing_status() {
        assert_eq!(
            RegisterResponse::decode(b"{}"),
            Err(DecodeError::Invalid("register response json"))
        );
    }

    #[test]
    fn decode_register_info_rejects_oversized_body() {
        let body = vec![b' '; MAX_REGISTER_BODY + 1];
        assert_eq!(
            RegisterInfo::decode(&body),
            Err(DecodeError::TooLarge("register body"))
        );
    }

    fn info_with_clients() -> RegisterInfo {
        let body = br#"{"max_clients":4,"max_players":2,"passworded":true,"game_type":"DM","name":"n","map":{"name":"dm1"},"version":"0.7.5","clients":[{"name":"a","clan":"c","country":276,"score":5,"is_player":true},{"name":"s","clan":"","country":-1,"score":0,"is_player":false,"afk":true}]}"#;
        RegisterInfo::decode(body).expect("valid")
    }

    #[test]
    fn register_info_to_server_info() {
        let info = info_with_clients();
        assert_eq!(
            info.clients.get(1).map(|c| c.extra.get("afk")),
            Some(Some(&serde_json::Value::Bool(true)))
        );
        let si = info.to_server_info();
        assert_eq!(si.num_players, 1);
        assert_eq!(si.max_players, 2);
        assert_eq!(si.password, Some(true));
        assert_eq!(si.players.len(), 2);
        let spec = si.players.get(1).expect("two");
        assert_eq!(spec.spectator, Some(true));
        assert_eq!(spec.country, Some(-1));
        assert_eq!(si.raw_field("num_clients"), Some(&RawValue::Int(2)));
        assert_eq!(si.raw_field("max_clients"), Some(&RawValue::Int(4)));
        assert_eq!(info.check_client_rules(), Ok(()));
    }

    #[test]
    fn register_info_client_rules() {
        let mut info = info_with_clients();
        info.max_players = 0;
        assert_eq!(
            info.check_client_rules(),
            Err(DecodeError::TooLarge("info clients"))
        );
        let mut info = info_with_clients();
        info.max_clients = 1;
        assert_eq!(
            info.check_client_rules(),
            Err(DecodeError::Invalid("info max_players"))
        );
        let mut info = info_with_clients();
        info.name.push('\n');
        assert_eq!(
            info.check_client_rules(),
            Err(DecodeError::Invalid("info name"))
        );
    }

    proptest! {
        #[test]
        fn register_parsers_never_panic(s in ".{0,200}", bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = ServerAddress::parse(&s);
            let _ = RegisterInfo::decode(&bytes);
            let _ = RegisterResponse::decode(&bytes);
            let _ = RegisterRequest::from_headers(&[("Address", &s), ("Secret", &s), ("Info-Serial", &s), ("Connless-Token", &s)]);
        }

        #[test]
        fn register_info_round_trip(name in ".{0,30}", n in any::<i64>(), p in any::<bool>(), clients in proptest::collection::vec((".{0,15}", any::<i64>(), any::<bool>()), 0..5)) {
            let info = RegisterInfo {
                max_clients: n, max_players: n / 2, passworded: p, game_type: name.clone(),
                name: name.clone(), map: MapInfo { name: name.clone(), sha256: None, size: Some(n), extra: Default::default() },
                version: "0.6.4, 16.4".into(),
                clients: clients.into_iter().map(|(c, score, is_player)| ClientInfo { name: c.clone(), clan: c, country: -1, score, is_player, extra: Default::default() }).collect(),
                extra: Default::default(),
            };
            let mut out = Vec::new();
            info.encode(&mut out);
            prop_assert_eq!(RegisterInfo::decode(&out), Ok(info));
        }
    }
}
