//! The game server's side: answering `getinfo` and `getstatus` as an ioquake3 or a DarkPlaces
//! server does (spec §2, §6).
//!
//! Both replies echo the request's challenge as the `challenge` key, which is also how a
//! master's verification (`getinfo <challenge>` after a heartbeat, §3.2) is answered: the
//! responder answers the master like any client, so [`super::register`] only heartbeats.
//!
//! | style | `getinfo` keys (in order) | `getstatus` keys | text |
//! |---|---|---|---|
//! | `ioquake3` | `challenge`, `gamename`, `protocol`, `hostname`, `mapname`, `clients`, `g_humanplayers`, `sv_maxclients`, `gametype`, `pure`, `g_needpass` | `challenge`, `sv_hostname`, `mapname`, `sv_maxclients`, `g_gametype`, `version`, `protocol`, `gamename`, `g_needpass`, rules | Windows-1252 |
//! | `darkplaces` | `gamename`, `modname`, `gameversion`, `sv_maxclients`, `clients`, `bots`, `mapname`, `hostname`, `protocol`, `qcstatus`, `challenge` | the same keys plus rules | UTF-8 |
//!
//! Every player in the state is listed in `getstatus`, bots with ping 0; `clients` counts
//! everyone (bots too), `g_humanplayers` and DarkPlaces' `bots` tell them apart.

use std::net::SocketAddr;
use std::time::Instant;

use super::packet::{Packet, PlayerLine};
use super::{InfoString, MAX_NAME_LEN, MAX_PLAYERS, Word};
use crate::respond::{PlayerState, Reply, Responder, ServerState};

/// The largest `statusResponse` the responder writes: the engines' message buffer. Player
/// lines that would not fit are left out, as the engines do.
pub const MAX_STATUS_REPLY: usize = 16_384;

/// How the emulated server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// ioquake3 (Quake III Arena 1.32 protocol 68, OpenArena): Windows-1252 text.
    #[default]
    Ioquake3,
    /// DarkPlaces (Xonotic, Nexuiz; protocol 3): UTF-8 text, `gamename`, `qcstatus`.
    DarkPlaces,
}

impl Style {
    /// `None` or `ioquake3` → ioquake3; `darkplaces` → DarkPlaces; anything else `None`.
    #[must_use]
    pub fn from_name(name: Option<&str>) -> Option<Self> {
        match name {
            None | Some("ioquake3") => Some(Self::Ioquake3),
            Some("darkplaces") => Some(Self::DarkPlaces),
            Some(_) => None,
        }
    }

    /// The heartbeat tag a server of this style sends (§3.1).
    #[must_use]
    pub fn heartbeat_tag(self) -> &'static str {
        match self {
            Self::Ioquake3 => "QuakeArena-1",
            Self::DarkPlaces => "DarkPlaces",
        }
    }

    /// The `gamename` sent when the state names no game.
    #[must_use]
    pub fn default_game(self) -> &'static str {
        match self {
            Self::Ioquake3 => "Quake3Arena",
            Self::DarkPlaces => "Xonotic",
        }
    }

    /// The protocol number sent.
    #[must_use]
    pub fn protocol(self) -> u32 {
        match self {
            Self::Ioquake3 => 68,
            Self::DarkPlaces => 3,
        }
    }

    fn encode(self, text: &str) -> Vec<u8> {
        match self {
            Self::Ioquake3 => crate::text::encode_windows1252(text),
            Self::DarkPlaces => text.as_bytes().to_vec(),
        }
    }
}

/// Answers `getinfo` and `getstatus` about a [`ServerState`]; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Quake3Responder {
    style: Style,
}

impl Quake3Responder {
    /// A responder of `style`.
    #[must_use]
    pub fn new(style: Style) -> Self {
        Self { style }
    }

    /// The `infoResponse` to `getinfo [challenge]`.
    #[must_use]
    pub fn info_response(&self, state: &ServerState, challenge: Option<&Word>) -> Packet {
        let mut b = Builder::new(self.style);
        let everyone = state.players.len();
        let bots = state.players.iter().filter(|p| p.bot).count();
        let game = game_name(self.style, state);
        match self.style {
            Style::Ioquake3 => {
                b.word("challenge", challenge);
                b.text("gamename", &game);
                b.num("protocol", i64::from(self.style.protocol()));
                b.text("hostname", &state.name);
                b.text("mapname", &state.map);
                b.num("clients", count(everyone));
                b.num("g_humanplayers", count(everyone - bots));
                b.num("sv_maxclients", i64::from(state.max_players));
                b.text("gametype", gametype(state));
                b.num("pure", 1);
                b.num("g_needpass", i64::from(state.password));
            }
            Style::DarkPlaces => {
                b.text("gamename", &game);
                b.text("modname", "data");
                b.text("gameversion", version(state));
                b.num("sv_maxclients", i64::from(state.max_players));
                b.num("clients", count(everyone));
                b.num("bots", count(bots));
                b.text("mapname", &state.map);
                b.text("hostname", &state.name);
                b.num("protocol", i64::from(self.style.protocol()));
                b.text("qcstatus", &qcstatus(state));
                b.word("challenge", challenge);
            }
        }
        Packet::InfoResponse { info: b.info }
    }

    /// The `statusResponse` to `getstatus [challenge]`.
    #[must_use]
    pub fn status_response(&self, state: &ServerState, challenge: Option<&Word>) -> Packet {
        let mut b = Builder::new(self.style);
        let game = game_name(self.style, state);
        match self.style {
            Style::Ioquake3 => {
                b.word("challenge", challenge);
                b.text("sv_hostname", &state.name);
                b.text("mapname", &state.map);
                b.num("sv_maxclients", i64::from(state.max_players));
                b.text("g_gametype", gametype(state));
                b.text("version", version(state));
                b.num("protocol", i64::from(self.style.protocol()));
                b.text("gamename", &game);
                b.num("g_needpass", i64::from(state.password));
            }
            Style::DarkPlaces => {
                b.text("gamename", &game);
                b.text("modname", "data");
                b.text("gameversion", version(state));
                b.num("sv_maxclients", i64::from(state.max_players));
                b.num("clients", count(state.players.len()));
                b.num(
                    "bots",
                    count(state.players.iter().filter(|p| p.bot).count()),
                );
                b.text("mapname", &state.map);
                b.text("hostname", &state.name);
                b.num("protocol", i64::from(self.style.protocol()));
                b.text("qcstatus", &qcstatus(state));
                b.word("challenge", challenge);
            }
        }
        for (k, v) in &state.rules {
            b.text(k, v);
        }
        // Header, command word, two line feeds, the info string: what is left is for players.
        let mut room = MAX_STATUS_REPLY.saturating_sub(20 + b.info.encoded_len());
        let mut players = Vec::new();
        for p in state.players.iter().take(MAX_PLAYERS) {
            let Some(line) = player_line(self.style, p) else {
                continue;
            };
            let len = line_len(&line);
            if len > room {
                break;
            }
            room -= len;
            players.push(line);
        }
        Packet::StatusResponse {
            info: b.info,
            players,
        }
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn game_name(style: Style, state: &ServerState) -> String {
    let g = state.game.trim();
    if g.is_empty() || g.bytes().any(|b| b.is_ascii_whitespace()) {
        style.default_game().to_owned()
    } else {
        g.to_owned()
    }
}

fn gametype(state: &ServerState) -> &str {
    if state.game_type.is_empty() {
        "0"
    } else {
        &state.game_type
    }
}

fn version(state: &ServerState) -> &str {
    &state.version
}

/// Xonotic's summary: `mode:version:P<bots-flag>:S<free slots>:F<flags>:M<mod>::score`
/// (spec §2.4), built from the state; the server's humans and slots in it.
fn qcstatus(state: &ServerState) -> String {
    let humans = state.players.iter().filter(|p| !p.bot).count();
    let free = usize::try_from(state.max_players)
        .unwrap_or(usize::MAX)
        .saturating_sub(state.players.len());
    let mode = if state.game_type.is_empty() {
        "dm"
    } else {
        &state.game_type
    };
    format!(
        "{mode}:{}:P{humans}:S{free}:F0:MXonotic::score!!",
        state.version
    )
}

fn player_line(style: Style, p: &PlayerState) -> Option<PlayerLine> {
    let mut name: Vec<u8> = style
        .encode(&p.name)
        .into_iter()
        .filter(|b| !matches!(b, b'"' | b'\n' | 0))
        .collect();
    name.truncate(MAX_NAME_LEN);
    let score = i32::try_from(p.score.clamp(i64::from(i32::MIN), i64::from(i32::MAX))).ok()?;
    let ping = if p.bot {
        0
    } else {
        i32::try_from(p.ping_ms).unwrap_or(i32::MAX)
    };
    // A name cut in the middle of a UTF-8 sequence is still a valid line: bytes are bytes.
    PlayerLine::new(score, ping, name).ok()
}

fn line_len(line: &PlayerLine) -> usize {
    let mut out = Vec::new();
    // The encoding of one line: decimal numbers, name, quotes, spaces and a line feed.
    out.extend_from_slice(line.score.to_string().as_bytes());
    out.extend_from_slice(line.ping.to_string().as_bytes());
    out.len() + line.name().len() + line.extra().len() + 5
}

/// Info-string building that drops what a value may not hold (`\`, line feed, NUL).
struct Builder {
    style: Style,
    info: InfoString,
}

impl Builder {
    fn new(style: Style) -> Self {
        Self {
            style,
            info: InfoString::new(),
        }
    }

    fn bytes(&mut self, key: &str, value: Vec<u8>) {
        let clean = |b: Vec<u8>| -> Vec<u8> {
            b.into_iter()
                .filter(|b| !matches!(b, b'\\' | b'\n' | 0))
                .collect()
        };
        let key = clean(self.style.encode(key));
        if key.is_empty() {
            return;
        }
        // Over the size limits the key is left out: a reply is still sent.
        let _ = self.info.push(key, clean(value));
    }

    fn text(&mut self, key: &str, value: &str) {
        let v = self.style.encode(value);
        self.bytes(key, v);
    }

    fn num(&mut self, key: &str, value: i64) {
        self.bytes(key, value.to_string().into_bytes());
    }

    fn word(&mut self, key: &str, value: Option<&Word>) {
        if let Some(w) = value {
            self.bytes(key, w.as_bytes().to_vec());
        }
    }
}

impl Responder for Quake3Responder {
    fn handle_datagram(
        &mut self,
        _now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool {
        let reply = match Packet::decode(datagram) {
            Ok(Packet::GetInfo { challenge }) => self.info_response(state, challenge.as_ref()),
            Ok(Packet::GetStatus { challenge }) => self.status_response(state, challenge.as_ref()),
            _ => return false,
        };
        let mut bytes = Vec::new();
        reply.encode(&mut bytes);
        out.push(Reply { to: from, bytes });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quake3::query::{Request, ServerQuery};
    use crate::query::{Event, QueryConfig, QueryMachine};

    fn state() -> ServerState {
        let player = |name: &str, score, ping, bot| PlayerState {
            name: name.to_owned(),
            score,
            ping_ms: ping,
            bot,
            ..PlayerState::default()
        };
        ServerState {
            name: "^1Jérôme's \\ server".to_owned(),
            map: "q3dm6".to_owned(),
            game_type: "4".to_owned(),
            version: "ioq3 1.36".to_owned(),
            game: String::new(),
            game_port: 27960,
            password: false,
            max_players: 8,
            players: vec![
                player("Ana \"the\" Ace", 12, 40, false),
                player("Sarge", -1, 70, true),
            ],
            rules: vec![("timelimit".to_owned(), "20".to_owned())],
        }
    }

    fn ask(style: Style, request: &[u8]) -> Vec<u8> {
        let mut r = Quake3Responder::new(style);
        let mut out = Vec::new();
        let from: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert!(r.handle_datagram(Instant::now(), from, request, &state(), &mut out));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].to, from);
        out.remove(0).bytes
    }

    #[test]
    fn quake3_ioquake3_info_answers_a_master_challenge() {
        let bytes = ask(Style::Ioquake3, b"\xff\xff\xff\xffgetinfo A1b2C3d4e");
        let Ok(Packet::InfoResponse { info }) = Packet::decode(&bytes) else {
            panic!("not an infoResponse")
        };
        assert_eq!(
            info.iter().next().unwrap(),
            (&b"challenge"[..], &b"A1b2C3d4e"[..])
        );
        assert_eq!(info.get(b"gamename"), Some(&b"Quake3Arena"[..]));
        assert_eq!(info.get(b"protocol"), Some(&b"68"[..]));
        assert_eq!(info.get(b"clients"), Some(&b"2"[..]));
        assert_eq!(info.get(b"g_humanplayers"), Some(&b"1"[..]));
        assert_eq!(info.get(b"sv_maxclients"), Some(&b"8"[..]));
        assert_eq!(info.get(b"gametype"), Some(&b"4"[..]));
        // Windows-1252, the backslash dropped.
        assert_eq!(
            info.get(b"hostname"),
            Some(&b"^1J\xe9r\xf4me's  server"[..])
        );
    }

    #[test]
    fn quake3_status_lists_bots_with_ping_zero_and_reads_back() {
        for style in [Style::Ioquake3, Style::DarkPlaces] {
            let t0 = Instant::now();
            let target: SocketAddr = "127.0.0.1:27960".parse().unwrap();
            let challenge = Word::new(&b"xyz"[..]).unwrap();
            let mut q =
                ServerQuery::new(target, Request::Status, challenge, QueryConfig::default());
            let mut req = Vec::new();
            let _ = q.poll_transmit(t0, &mut req);
            let reply = ask(style, &req);
            q.handle_datagram(t0, target, &reply);
            let Some(Event::Done(info)) = q.poll_event() else {
                panic!("{style:?}: no answer")
            };
            assert_eq!(info.name.plain, "Jérôme's  server", "{style:?}");
            assert_eq!(info.map.text, "q3dm6");
            assert_eq!((info.num_players, info.max_players), (2, 8));
            assert_eq!(info.players[0].name.text, "Ana the Ace");
            assert_eq!(info.players[0].ping_ms, Some(40));
            assert_eq!(info.players[1].name.text, "Sarge");
            assert_eq!(info.players[1].score, Some(-1));
            assert_eq!(info.players[1].ping_ms, Some(0));
            assert!(info.rules.iter().any(|r| r.key.text == "timelimit"));
            let game = crate::games::key_of_answer(&info);
            match style {
                Style::Ioquake3 => assert_eq!(game.as_deref(), Some("quake3arena")),
                Style::DarkPlaces => {
                    assert_eq!(game.as_deref(), Some("xonotic"));
                    assert_eq!(
                        info.raw_field("bots"),
                        Some(&crate::model::RawValue::Int(1))
                    );
                    assert_eq!(info.game_type.text, "4");
                }
            }
        }
    }

    #[test]
    fn quake3_responder_ignores_everything_else_and_caps_the_reply() {
        let mut r = Quake3Responder::default();
        let mut out = Vec::new();
        let from: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        for bad in [
            &b""[..],
            b"\xff\xff\xff\xffgetinfo a b",
            b"\xff\xff\xff\xffheartbeat DarkPlaces\n",
            b"\xff\xff\xff\xffinfoResponse\n\\a\\b",
            b"getstatus",
        ] {
            assert!(!r.handle_datagram(Instant::now(), from, bad, &state(), &mut out));
        }
        assert!(out.is_empty());
        let mut big = state();
        big.players = (0..400)
            .map(|i| PlayerState {
                name: format!("{i:0>120}"),
                ..PlayerState::default()
            })
            .collect();
        assert!(r.handle_datagram(
            Instant::now(),
            from,
            b"\xff\xff\xff\xffgetstatus",
            &big,
            &mut out
        ));
        assert!(
            out[0].bytes.len() <= MAX_STATUS_REPLY,
            "{}",
            out[0].bytes.len()
        );
        let Ok(Packet::StatusResponse { players, .. }) = Packet::decode(&out[0].bytes) else {
            panic!("not a statusResponse")
        };
        assert!(players.len() > 100 && players.len() < 400);
    }
}
