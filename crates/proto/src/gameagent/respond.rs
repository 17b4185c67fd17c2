//! The GameAgent query responder: what a stock Serious Engine 1.10 server answers on its query
//! port (game port + 1) in GameAgent mode (spec §3, §8.4).
//!
//! ```text
//! 01 c0 c1 c2 c3  ->  heartbeat "0;challenge;<c>;players;…" to the MASTER (never the requester)
//! 02              ->  "0;players;…;sessionname;<name>"                      one datagram
//! 03              ->  01 "players" 02 n 03 { "player_<i>" 02 … 03 }* 04      split at 2048 bytes
//! 04              ->  04 <decimal count>
//! anything else   ->  nothing (returns false)
//! ```
//!
//! Player names follow [`NameMarks`]: as typed by default, the way seed 001's example shows
//! them; wrapped in `^o…^r` with the stock marks under the `x86` and `arm` styles.
//!
//! Every byte comes from the codecs in [`super::packet`]; this module only maps a
//! [`ServerState`] onto their fields. Rate limits and the byte budget are the driver's
//! ([`crate::limit`]); registering with a master is [`super::register`]'s.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::packet::{
    CountReply, Heartbeat, HeartbeatFields, PlayerRecord, PlayersReply, ServerRequest,
    StatusFields, StatusReply,
};
use super::{MAX_PLAYERS_PREALLOC, NAME_MARK_CONTROL_BYTE, NAME_MARK_LINE_BREAK_BYTE};
use crate::respond::{Reply, Responder, ServerState};
use crate::text::encode_windows1252;

/// Version sent when [`ServerState::version`] is empty: the engine's `1.10`.
pub const DEFAULT_VERSION: &str = "1.10";

/// `gamename` / `product` sent when [`ServerState::game`] is empty: the game client's
/// `sam_strGameName` (spec §3.2).
pub const DEFAULT_GAME_NAME: &str = "serioussamse";

/// Least time between two heartbeats a `01` request may trigger (spec §9.1.2).
pub const HEARTBEAT_TRIGGER_INTERVAL: Duration = Duration::from_secs(1);

/// How player names become wire bytes.
///
/// The seed document's example sends a name as typed (`player_0` `02` `Angelo` `03`) and says
/// that an invalid name is sent as the single byte `11` or `12`; that is the default. The
/// two stock build variants of spec §3.3 are kept for emulating real servers byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameMarks {
    /// The seed's form, the default: the Windows-1252 name as it is, not wrapped. A name with
    /// a CR or LF is sent as `11`, one with another byte below 0x20 as `12`; bytes ≥ 0x80
    /// pass through.
    #[default]
    Plain,
    /// Stock x86 (signed `char`): the name wrapped as `^o` name `^r`, and any byte ≥ 0x80 in
    /// it sends the `12` mark, so `Jérôme` is sent as `12` (spec §8.4.1).
    X86,
    /// Stock builds with unsigned `char` (ARM Linux): wrapped like x86, but bytes ≥ 0x80 pass
    /// through; only CR/LF (`11`) and other bytes below 0x20 (`12`) are marked.
    UnsignedChar,
}

impl NameMarks {
    /// The `--style` name of each variant: `seed` (the default), `x86`, `arm`.
    #[must_use]
    pub const fn style_name(self) -> &'static str {
        match self {
            Self::Plain => "seed",
            Self::X86 => "x86",
            Self::UnsignedChar => "arm",
        }
    }

    /// The variant a `--style` name selects; `None` (no style given) is the default.
    #[must_use]
    pub fn from_style_name(style: Option<&str>) -> Option<Self> {
        match style {
            None => Some(Self::default()),
            Some(s) => [Self::Plain, Self::X86, Self::UnsignedChar]
                .into_iter()
                .find(|m| m.style_name() == s),
        }
    }
}

/// Who may make the responder send a heartbeat with request `01` (spec §3.1, §9.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatTrigger {
    /// Never: `01` is ignored (no master configured, or the registrar owns the master).
    Off,
    /// Only `01` datagrams whose source is this master, at most one per
    /// [`HEARTBEAT_TRIGGER_INTERVAL`] (the spec's recommendation).
    FromMaster(SocketAddr),
    /// Stock: `01` from anyone makes the server send a heartbeat to this master, at most one
    /// per [`HEARTBEAT_TRIGGER_INTERVAL`].
    FromAnyone(SocketAddr),
}

/// Settings of a [`GameAgentResponder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponderConfig {
    /// How names are marked.
    pub name_marks: NameMarks,
    /// What request `01` does.
    pub heartbeat_trigger: HeartbeatTrigger,
}

impl Default for ResponderConfig {
    /// The seed's plain names, `01` ignored.
    fn default() -> Self {
        Self {
            name_marks: NameMarks::Plain,
            heartbeat_trigger: HeartbeatTrigger::Off,
        }
    }
}

/// Answers GameAgent queries in the stock 1.10 wire format (spec §3, §8.4); player names
/// as [`NameMarks`] says (the seed's plain names by default, byte-exact stock with
/// [`NameMarks::X86`] or [`NameMarks::UnsignedChar`]).
///
/// Mapping from [`ServerState`]: `players` = the active players (bots and spectators are not
/// player buffers of a Serious Sam session, so they are neither counted nor listed), listed in
/// slots 0, 1, 2… in their order; `sessionname` = `name`, `level` = `map`, `gametype` =
/// `game_type`, `version` = `version` (or [`DEFAULT_VERSION`]), `gamename`/`product` = `game`
/// (or [`DEFAULT_GAME_NAME`]). Strings are encoded as Windows-1252 (`?` for what it cannot
/// carry); scores clamp to `i32`, pings to `i32` (stock pings are 0–1023, passed as given).
/// At most 16 players are listed (the stock slot count) while the header counts them all.
/// `password` and `rules` are not sent: no GameAgent request carries them (spec §3.7).
/// `ServerState` has no slot numbers, so listed slots never have gaps.
#[derive(Debug, Clone)]
pub struct GameAgentResponder {
    config: ResponderConfig,
    last_trigger: Option<Instant>,
}

impl GameAgentResponder {
    /// A responder with `config`.
    #[must_use]
    pub fn new(config: ResponderConfig) -> Self {
        Self {
            config,
            last_trigger: None,
        }
    }

    /// The status reply (request `02`) for `state`.
    #[must_use]
    pub fn status(state: &ServerState) -> StatusReply {
        StatusReply::stock(&StatusFields {
            players: active_count(state),
            max_players: state.max_players,
            level: encode_windows1252(&state.map),
            gametype: encode_windows1252(&state.game_type),
            version: encode_windows1252(or_default(&state.version, DEFAULT_VERSION)),
            gamename: encode_windows1252(or_default(&state.game, DEFAULT_GAME_NAME)),
            sessionname: encode_windows1252(&state.name),
        })
    }

    /// The heartbeat fields (spec §2.4) for `state`, echoing `challenge` (`0` for periodic
    /// heartbeats).
    #[must_use]
    pub fn heartbeat_fields(state: &ServerState, challenge: i32) -> HeartbeatFields {
        HeartbeatFields {
            challenge,
            players: active_count(state),
            max_players: state.max_players,
            level: encode_windows1252(&state.map),
            gametype: encode_windows1252(&state.game_type),
            version: encode_windows1252(or_default(&state.version, DEFAULT_VERSION)),
            product: encode_windows1252(or_default(&state.game, DEFAULT_GAME_NAME)),
        }
    }

    /// The heartbeat datagram (spec §2.4) for `state`, echoing `challenge`.
    #[must_use]
    pub fn heartbeat(state: &ServerState, challenge: i32) -> Vec<u8> {
        let mut out = Vec::new();
        Heartbeat::stock(&Self::heartbeat_fields(state, challenge)).encode(&mut out);
        out
    }

    /// The players reply (request `03`) for `state`.
    #[must_use]
    pub fn players(&self, state: &ServerState) -> PlayersReply {
        let records = state
            .active_players()
            .take(MAX_PLAYERS_PREALLOC)
            .zip(0u32..)
            .filter_map(|(p, slot)| {
                let raw = encode_windows1252(&p.name);
                let score = clamp_i32(p.score);
                let ping = i32::try_from(p.ping_ms).unwrap_or(i32::MAX);
                match self.config.name_marks {
                    NameMarks::X86 => Some(PlayerRecord::stock(slot, &raw, score, ping)),
                    NameMarks::UnsignedChar => {
                        PlayerRecord::new(slot, marked_wire_name(&raw, true), score, ping)
                    }
                    NameMarks::Plain => {
                        PlayerRecord::new(slot, marked_wire_name(&raw, false), score, ping)
                    }
                }
            })
            .collect();
        PlayersReply {
            count: active_count(state),
            records,
        }
    }
}

impl Default for GameAgentResponder {
    fn default() -> Self {
        Self::new(ResponderConfig::default())
    }
}

impl Responder for GameAgentResponder {
    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool {
        let Ok(request) = ServerRequest::decode(datagram) else {
            return false;
        };
        let reply = |bytes| Reply { to: from, bytes };
        match request {
            ServerRequest::Status => {
                let mut bytes = Vec::new();
                Self::status(state).encode(&mut bytes);
                out.push(reply(bytes));
            }
            ServerRequest::Players => {
                out.extend(
                    self.players(state)
                        .encode_datagrams()
                        .into_iter()
                        .map(reply),
                );
            }
            ServerRequest::Count => {
                let mut bytes = Vec::new();
                CountReply(active_count(state)).encode(&mut bytes);
                out.push(reply(bytes));
            }
            ServerRequest::Heartbeat(challenge) => {
                let master = match self.config.heartbeat_trigger {
                    HeartbeatTrigger::Off => return false,
                    HeartbeatTrigger::FromMaster(m) if m != from => return false,
                    HeartbeatTrigger::FromMaster(m) | HeartbeatTrigger::FromAnyone(m) => m,
                };
                if self
                    .last_trigger
                    .is_some_and(|t| now.saturating_duration_since(t) < HEARTBEAT_TRIGGER_INTERVAL)
                {
                    return false;
                }
                self.last_trigger = Some(now);
                out.push(Reply {
                    to: master,
                    bytes: Self::heartbeat(state, challenge.0),
                });
            }
            ServerRequest::Unknown(_) => return false,
        }
        true
    }
}

/// The stock header count: active player buffers.
fn active_count(state: &ServerState) -> u32 {
    u32::try_from(state.active_players().count()).unwrap_or(u32::MAX)
}

fn or_default<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.is_empty() { default } else { value }
}

fn clamp_i32(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(if n < 0 { i32::MIN } else { i32::MAX })
}

/// The wire name with marks only for bytes below 0x20: wrapped like stock when `wrap`
/// (unsigned-`char` builds, spec §3.3), as typed otherwise (the seed's form). Unlike
/// [`super::packet::stock_wire_name`], bytes ≥ 0x80 pass through.
fn marked_wire_name(name: &[u8], wrap: bool) -> Vec<u8> {
    if let Some(&b) = name.iter().find(|&&b| b < 0x20) {
        // The scan stops at the first offending byte (spec §3.3); `^o` and `^r` hold none.
        return vec![if b == b'\r' || b == b'\n' {
            NAME_MARK_LINE_BREAK_BYTE
        } else {
            NAME_MARK_CONTROL_BYTE
        }];
    }
    if !wrap {
        return name.to_vec();
    }
    let mut out = Vec::with_capacity(NAME_OPEN.len() + name.len() + NAME_CLOSE.len());
    out.extend_from_slice(NAME_OPEN);
    out.extend_from_slice(name);
    out.extend_from_slice(NAME_CLOSE);
    out
}

/// `^o`: the "decorations allowed here" code a stock server puts before a player name (§3.3).
const NAME_OPEN: &[u8] = b"^o";
/// `^r`: the "reset all" code a stock server puts after a player name (§3.3).
const NAME_CLOSE: &[u8] = b"^r";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::respond::PlayerState;

    fn t0() -> Instant {
        Instant::now()
    }

    fn from() -> SocketAddr {
        "127.0.0.1:50000".parse().unwrap()
    }

    fn master() -> SocketAddr {
        "127.0.0.1:9005".parse().unwrap()
    }

    fn player(name: &str, score: i64, ping: u32) -> PlayerState {
        PlayerState {
            name: name.into(),
            score,
            ping_ms: ping,
            ..PlayerState::default()
        }
    }

    fn x86() -> GameAgentResponder {
        GameAgentResponder::new(ResponderConfig {
            name_marks: NameMarks::X86,
            ..ResponderConfig::default()
        })
    }

    fn ask(r: &mut GameAgentResponder, req: &[u8], state: &ServerState) -> Option<Vec<Reply>> {
        let mut out = vec![];
        r.handle_datagram(t0(), from(), req, state, &mut out)
            .then_some(out)
    }

    fn hex(s: &str) -> Vec<u8> {
        hex::decode(s.replace([' ', '\n'], "")).unwrap()
    }

    /// The spec's status example (G15): 8 players, Yodeller, Fragmatch, Awesome Server.
    fn g15_state() -> ServerState {
        ServerState {
            name: "Awesome Server".into(),
            map: "Yodeller".into(),
            game_type: "Fragmatch".into(),
            version: "1.10".into(),
            game: "serioussamse".into(),
            max_players: 16,
            players: (0..8).map(|i| player(&format!("p{i}"), 0, 0)).collect(),
            ..ServerState::default()
        }
    }

    #[test]
    fn status_matches_spec_vector_g15() {
        let mut r = GameAgentResponder::default();
        let out = ask(&mut r, &[0x02], &g15_state()).unwrap();
        let want = hex(
            "30 3b 70 6c 61 79 65 72 73 3b 38 3b 6d 61 78 70 6c 61 79 65 72 73 3b 31 36 3b 6c 65 76 65 6c 3b 59 6f 64 65 6c 6c
             65 72 3b 67 61 6d 65 74 79 70 65 3b 46 72 61 67 6d 61 74 63 68 3b 76 65 72 73 69 6f 6e 3b 31 2e 31 30 3b 67 61 6d
             65 6e 61 6d 65 3b 73 65 72 69 6f 75 73 73 61 6d 73 65 3b 73 65 73 73 69 6f 6e 6e 61 6d 65 3b 41 77 65 73 6f 6d 65
             20 53 65 72 76 65 72",
        );
        assert_eq!(want.len(), 121);
        assert_eq!(
            out,
            vec![Reply {
                to: from(),
                bytes: want
            }]
        );
    }

    #[test]
    fn quirk_trailing_bytes_after_request_are_ignored() {
        let mut r = GameAgentResponder::default();
        let a = ask(&mut r, &[0x02], &g15_state()).unwrap();
        let b = ask(&mut r, b"\x02junk", &g15_state()).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            ask(&mut r, b"\x04xyz", &g15_state()).unwrap()[0].bytes,
            b"\x048"
        );
    }

    #[test]
    fn status_defaults_version_and_gamename_and_encodes_windows1252() {
        let state = ServerState {
            name: "Café ;x".into(),
            map: "Tal Adar".into(),
            ..ServerState::default()
        };
        let mut r = GameAgentResponder::default();
        let out = ask(&mut r, &[0x02], &state).unwrap();
        assert_eq!(
            out[0].bytes,
            b"0;players;0;maxplayers;16;level;Tal Adar;gametype;;version;1.10;gamename;serioussamse;sessionname;Caf\xe9 x"
                .to_vec()
        );
    }

    #[test]
    fn players_one_player_matches_spec_vector_g16() {
        let state = ServerState {
            players: vec![player("Sam", 3, 42)],
            ..ServerState::default()
        };
        let mut r = x86();
        let out = ask(&mut r, &[0x03], &state).unwrap();
        let want = hex("01 70 6c 61 79 65 72 73 02 31 03
             70 6c 61 79 65 72 5f 30 02 5e 6f 53 61 6d 5e 72 03
             66 72 61 67 73 5f 30 02 33 03
             70 69 6e 67 5f 30 02 34 32 03
             04");
        assert_eq!(want.len(), 49);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].bytes, want);
    }

    #[test]
    fn quirk_non_ascii_name_is_mark_12_on_x86() {
        let state = ServerState {
            players: vec![player("Jérôme", -2, 999)],
            ..ServerState::default()
        };
        let mut r = x86();
        let out = ask(&mut r, &[0x03], &state).unwrap();
        let want = hex("01 70 6c 61 79 65 72 73 02 31 03
             70 6c 61 79 65 72 5f 30 02 12 03
             66 72 61 67 73 5f 30 02 2d 32 03 70 69 6e 67 5f 30 02 39 39 39 03 04");
        assert_eq!(out[0].bytes, want);
    }

    #[test]
    fn default_sends_the_seed_player_example_byte_for_byte() {
        // Seed 001: one player, slot 0, "Angelo", 14 frags, ping 80, header "8" (the seed's
        // example prints the header of its 8-player server; here 8 players are connected and
        // the other seven sit in slots 1..7).
        let mut players = vec![player("Angelo", 14, 80)];
        players.extend((1..8).map(|i| player(&format!("p{i}"), 0, 0)));
        let state = ServerState {
            players,
            ..ServerState::default()
        };
        let mut r = GameAgentResponder::default();
        let out = ask(&mut r, &[0x03], &state).unwrap();
        assert_eq!(out.len(), 1);
        let want = b"\x01players\x028\x03player_0\x02Angelo\x03frags_0\x0214\x03ping_0\x0280\x03";
        assert!(out[0].bytes.starts_with(want), "{:?}", out[0].bytes);
        assert_eq!(out[0].bytes.last(), Some(&0x04));
    }

    #[test]
    fn default_passes_non_ascii_and_marks_control_bytes() {
        let state = ServerState {
            players: vec![
                player("Jérôme", 1, 5),
                player("a\nb", 0, 0),
                player("x\x07\ry", 0, 0),
                player("\r\x07", 0, 0),
            ],
            ..ServerState::default()
        };
        let reply = GameAgentResponder::default().players(&state);
        let names: Vec<&[u8]> = reply.records.iter().map(PlayerRecord::name).collect();
        assert_eq!(
            names,
            vec![&b"J\xe9r\xf4me"[..], &[0x11][..], &[0x12][..], &[0x11][..]]
        );
    }

    #[test]
    fn style_names_select_the_name_marks() {
        assert_eq!(NameMarks::from_style_name(None), Some(NameMarks::Plain));
        for m in [NameMarks::Plain, NameMarks::X86, NameMarks::UnsignedChar] {
            assert_eq!(NameMarks::from_style_name(Some(m.style_name())), Some(m));
        }
        assert_eq!(NameMarks::from_style_name(Some("ut2003")), None);
    }

    #[test]
    fn quirk_line_break_name_is_mark_11_and_unsigned_char_passes_latin1() {
        let state = ServerState {
            players: vec![
                player("a\nb", 0, 0),
                player("Jérôme", 1, 5),
                player("x\x07", 0, 0),
            ],
            ..ServerState::default()
        };
        let r = GameAgentResponder::new(ResponderConfig {
            name_marks: NameMarks::UnsignedChar,
            ..ResponderConfig::default()
        });
        let reply = r.players(&state);
        let names: Vec<&[u8]> = reply.records.iter().map(PlayerRecord::name).collect();
        assert_eq!(names, vec![&[0x11][..], b"^oJ\xe9r\xf4me^r", &[0x12][..]]);
        let slots: Vec<u32> = reply.records.iter().map(PlayerRecord::slot).collect();
        assert_eq!(slots, vec![0, 1, 2]);
    }

    #[test]
    fn bots_and_spectators_are_not_player_buffers() {
        let state = ServerState {
            players: vec![
                PlayerState {
                    bot: true,
                    ..player("bot", 0, 0)
                },
                player("Sam", 1, 2),
                PlayerState {
                    spectator: true,
                    ..player("spec", 0, 0)
                },
            ],
            ..ServerState::default()
        };
        let mut r = GameAgentResponder::default();
        assert_eq!(ask(&mut r, &[0x04], &state).unwrap()[0].bytes, b"\x041");
        let players = ask(&mut r, &[0x03], &state).unwrap();
        assert_eq!(
            players[0].bytes,
            b"\x01players\x021\x03player_0\x02Sam\x03frags_0\x021\x03ping_0\x022\x03\x04".to_vec()
        );
        let status = ask(&mut r, &[0x02], &state).unwrap();
        assert!(status[0].bytes.starts_with(b"0;players;1;"));
    }

    #[test]
    fn count_matches_spec_vector_g18() {
        let mut r = GameAgentResponder::default();
        assert_eq!(
            ask(&mut r, &[0x04], &g15_state()).unwrap()[0].bytes,
            vec![0x04, 0x38]
        );
    }

    #[test]
    fn players_split_matches_spec_vector_g19() {
        // 16 players, 200-byte names, one-digit frags and two-digit pings: the datagrams are
        // 1884 and 1891 bytes as the spec computes (G19).
        let state = ServerState {
            players: (0..16)
                .map(|i| player(&"n".repeat(200), i % 10, 10 + u32::try_from(i).unwrap()))
                .collect(),
            ..ServerState::default()
        };
        let mut r = x86();
        let out = ask(&mut r, &[0x03], &state).unwrap();
        let lens: Vec<usize> = out.iter().map(|r| r.bytes.len()).collect();
        assert_eq!(lens, vec![1884, 1891]);
        assert!(out[1].bytes.starts_with(b"player_8\x02"));
        assert_eq!(out[1].bytes.last(), Some(&0x04));
        assert!(out[0].bytes.starts_with(b"\x01players\x0216\x03"));
        assert_ne!(out[0].bytes.last(), Some(&0x04));
        assert!(out.iter().all(|d| d.bytes.len() <= 2049 && d.to == from()));
    }

    #[test]
    fn players_reply_with_no_players_is_header_and_trailer() {
        let mut r = GameAgentResponder::default();
        let out = ask(&mut r, &[0x03], &ServerState::default()).unwrap();
        assert_eq!(out[0].bytes, b"\x01players\x020\x03\x04".to_vec());
    }

    #[test]
    fn unknown_and_empty_requests_get_no_reply() {
        let mut r = GameAgentResponder::default();
        for req in [&b""[..], b"\x00", b"\x05", b"e", b"\\status\\", b"\x01\x00"] {
            let mut out = vec![];
            assert!(!r.handle_datagram(t0(), from(), req, &g15_state(), &mut out));
            assert!(out.is_empty(), "{req:?}");
        }
    }

    #[test]
    fn challenge_request_sends_heartbeat_to_master_not_requester() {
        let mut r = GameAgentResponder::new(ResponderConfig {
            heartbeat_trigger: HeartbeatTrigger::FromAnyone(master()),
            ..ResponderConfig::default()
        });
        let state = ServerState {
            map: "Yodeller".into(),
            game_type: "Cooperative".into(),
            max_players: 8,
            players: vec![player("Sam", 0, 0)],
            ..ServerState::default()
        };
        let mut out = vec![];
        assert!(r.handle_datagram(t0(), from(), &hex("01 78 56 34 12"), &state, &mut out));
        // G11: the 114-byte heartbeat answering challenge 305419896.
        let want = b"0;challenge;305419896;players;1;maxplayers;8;level;Yodeller;gametype;Cooperative;version;1.10;product;serioussamse";
        assert_eq!(want.len(), 114);
        assert_eq!(
            out,
            vec![Reply {
                to: master(),
                bytes: want.to_vec()
            }]
        );
    }

    #[test]
    fn quirk_challenge_ff_is_echoed_signed_g10() {
        let state = ServerState::default();
        let hb = GameAgentResponder::heartbeat(&state, i32::from_le_bytes([0xff; 4]));
        assert!(hb.starts_with(b"0;challenge;-1;players;0;"));
    }

    #[test]
    fn challenge_request_is_limited_to_master_and_one_per_second() {
        let state = ServerState::default();
        let mut r = GameAgentResponder::new(ResponderConfig {
            heartbeat_trigger: HeartbeatTrigger::FromMaster(master()),
            ..ResponderConfig::default()
        });
        let t = t0();
        let req = hex("01 01 00 00 00");
        let mut out = vec![];
        assert!(!r.handle_datagram(t, from(), &req, &state, &mut out));
        assert!(r.handle_datagram(t, master(), &req, &state, &mut out));
        assert!(!r.handle_datagram(
            t + Duration::from_millis(999),
            master(),
            &req,
            &state,
            &mut out
        ));
        assert!(r.handle_datagram(t + Duration::from_secs(1), master(), &req, &state, &mut out));
        assert_eq!(out.len(), 2);
        // Off (the default) ignores it.
        let mut off = GameAgentResponder::default();
        assert!(!off.handle_datagram(t, master(), &req, &state, &mut out));
        assert_eq!(out.len(), 2);
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use crate::respond::PlayerState;
    use proptest::prelude::*;

    proptest! {
        /// Any request and any names: no panic, replies only to the requester, players
        /// datagrams at most 2049 bytes.
        #[test]
        fn responder_never_panics_and_respects_split(
            req in proptest::collection::vec(any::<u8>(), 0..8),
            names in proptest::collection::vec(".{0,300}", 0..20),
            x86 in any::<bool>(),
        ) {
            let state = ServerState {
                players: names.iter().map(|n| PlayerState { name: n.clone(), ..PlayerState::default() }).collect(),
                ..ServerState::default()
            };
            let mut r = GameAgentResponder::new(ResponderConfig {
                name_marks: if x86 { NameMarks::X86 } else { NameMarks::UnsignedChar },
                heartbeat_trigger: HeartbeatTrigger::Off,
            });
            let from: SocketAddr = "127.0.0.1:5000".parse().unwrap();
            let mut out = vec![];
            let answered = r.handle_datagram(Instant::now(), from, &req, &state, &mut out);
            prop_assert_eq!(answered, !out.is_empty());
            for reply in &out {
                prop_assert_eq!(reply.to, from);
                prop_assert!(reply.bytes.len() <= 2049);
            }
        }
    }
}
