//! The pure part of learning: what an upstream listed, which of it waits for verification
//! (bounded), and what a verification answer makes of it. No I/O, time passed in.
//!
//! ```text
//!  pull ──> Vec<Listed> ──known keys──> Registry::upstream_pull (sources refreshed / dropped)
//!                      └──unknown──> Candidates::select (games, once per address, not failed
//!                                    lately, at most max) ──> queries ──> registration()
//!                                                                          └──> Registry::learn
//! ```

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use muster_proto::limit::SourceKey;
use muster_proto::model::RawValue;
use muster_proto::{Protocol, ServerInfo};

use muster_core::registry::{
    Face, GameAddr, MAX_GAME_LEN, Registration, ServerKey, Timestamp, UT2003_LIST_GAMES,
};
use muster_proto::gamespy_master::games as gamespy_games;

/// The game name of a Teeworlds record learned from any Teeworlds or DDNet upstream (the
/// Teeworlds UDP faces' own).
pub const TEEWORLDS_GAME: &str = "teeworlds";
/// The game of a GameAgent server whose answer names none (stock 1.10 servers' default).
pub const GAMEAGENT_FALLBACK_GAME: &str = "serioussam";

/// One server an upstream listed, in the registry's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The address the record is keyed by: for GameSpy the query address, for the others the
    /// game address.
    pub addr: SocketAddr,
    /// The game, when the list says it (GameSpy lists are per game, Muster's list names it,
    /// Teeworlds has one); `None`: taken from the server's answer.
    pub game: Option<String>,
    /// The face whose lists show it.
    pub face: Face,
    /// How it is queried.
    pub protocol: Protocol,
    /// Where it is queried.
    pub query_addr: SocketAddr,
    /// The game port, when the list says it.
    pub game_port: Option<u16>,
    /// Whether the upstream itself learned it from another master (only Muster upstreams
    /// say; other lists count as the upstream's own).
    pub relayed: bool,
}

impl Listed {
    /// The registry key, when the game is known before asking the server.
    #[must_use]
    pub fn key(&self) -> Option<ServerKey> {
        self.game
            .as_deref()
            .map(|g| ServerKey::new(g, GameAddr::Ip(self.addr)))
    }
}

/// What [`Candidates::select`] chose from one pull's unknown servers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// To query now.
    pub verify: Vec<Listed>,
    /// Left out because [`Candidates`]' cap was reached (a later pull offers them again).
    pub over_cap: usize,
    /// Left out because they did not answer lately.
    pub cooling: usize,
    /// Left out because their game is not wanted.
    pub unwanted: usize,
}

/// Addresses that did not answer remembered per upstream: this many times its
/// `max_unverified`, and at least [`MIN_REMEMBERED`].
pub const REMEMBERED_PER_CANDIDATE: usize = 8;
/// See [`REMEMBERED_PER_CANDIDATE`].
pub const MIN_REMEMBERED: usize = 1024;

/// The unverified servers of one upstream: at most `max` are queried per pull, each pull
/// starting where the last one stopped (so a list longer than `max` is worked through over
/// several pulls, whatever its order), and one that did not answer is not asked again for
/// `retry_after` (a bounded number of such addresses are remembered, the oldest making
/// room). Nothing here is listed.
#[derive(Debug)]
pub struct Candidates {
    max: usize,
    retry_after: Duration,
    games: HashSet<String>,
    failed: HashMap<SocketAddr, Timestamp>,
    remembered: usize,
    next: usize,
}

impl Candidates {
    /// Candidates capped at `max`, failures cooling for `retry_after`, of `games` only (empty:
    /// every game).
    #[must_use]
    pub fn new(max: usize, retry_after: Duration, games: &[String]) -> Self {
        let max = max.max(1);
        Self {
            max,
            retry_after,
            games: games.iter().map(|g| g.to_ascii_lowercase()).collect(),
            failed: HashMap::new(),
            remembered: max
                .saturating_mul(REMEMBERED_PER_CANDIDATE)
                .max(MIN_REMEMBERED),
            next: 0,
        }
    }

    /// Whether servers of `game` are learned.
    #[must_use]
    pub fn wants(&self, game: &str) -> bool {
        self.games.is_empty() || self.games.contains(&game.to_ascii_lowercase())
    }

    /// Which of `unknown` (listed, not in the registry) to query at `now`: each query address
    /// once, wanted games only, none that failed within `retry_after`, at most `max`, taken in
    /// list order from where the previous selection stopped.
    pub fn select(&mut self, unknown: Vec<Listed>, now: Timestamp) -> Selection {
        let retry = self.retry_after;
        self.failed.retain(|_, t| t.plus(retry) > now);
        let mut out = Selection::default();
        let mut seen = HashSet::new();
        let mut eligible = Vec::new();
        for l in unknown {
            if !seen.insert(l.query_addr) {
                continue;
            }
            if l.game.as_deref().is_some_and(|g| !self.wants(g)) {
                out.unwanted += 1;
                continue;
            }
            if self.failed.contains_key(&l.query_addr) {
                out.cooling += 1;
                continue;
            }
            eligible.push(l);
        }
        if eligible.len() > self.max {
            let start = self.next % eligible.len();
            eligible.rotate_left(start);
            out.over_cap = eligible.len() - self.max;
            eligible.truncate(self.max);
            self.next = start + self.max;
        } else {
            self.next = 0;
        }
        out.verify = eligible;
        out
    }

    /// The server at `query_addr` did not answer (or answered as something else) at `now`.
    pub fn failed(&mut self, query_addr: SocketAddr, now: Timestamp) {
        if self.failed.len() >= self.remembered && !self.failed.contains_key(&query_addr) {
            let oldest = self.failed.iter().min_by_key(|(_, t)| **t).map(|(a, _)| *a);
            if let Some(a) = oldest {
                self.failed.remove(&a);
            }
        }
        self.failed.insert(query_addr, now);
    }

    /// Addresses cooling now.
    #[must_use]
    pub fn cooling(&self) -> usize {
        self.failed.len()
    }
}

/// Why an answer does not make a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The answer names a game the list did not, or one this master does not serve.
    WrongGame,
    /// The game is not wanted from this upstream.
    Unwanted,
}

/// The `gamename` a server's answer carries (a GameSpy rule, or GameAgent's raw field).
#[must_use]
pub fn answered_game(info: &ServerInfo) -> Option<String> {
    info.rules
        .iter()
        .find(|r| r.key.plain.eq_ignore_ascii_case("gamename"))
        .map(|r| r.value.plain.trim().to_owned())
        .or_else(|| {
            info.raw.iter().find_map(|(k, v)| match v {
                RawValue::Text(t) if k == "gamename" => Some(t.plain.trim().to_owned()),
                _ => None,
            })
        })
        .filter(|g| !g.is_empty())
}

/// The game folder an A2S answer names (`valve`, `cstrike`).
fn answered_folder(info: &ServerInfo) -> Option<String> {
    info.raw
        .iter()
        .find_map(|(k, v)| match v {
            RawValue::Text(t) if k == "folder" => Some(t.plain.trim().to_owned()),
            _ => None,
        })
        .filter(|g| !g.is_empty())
}

fn usable(game: &str) -> bool {
    !game.is_empty() && game.len() <= MAX_GAME_LEN && game.bytes().all(|b| b.is_ascii_graphic())
}

/// The registration a verified server gets: its game from the list, or from its answer
/// (checked against the list: a GameSpy answer must name a game of the same group, a UT2003
/// list's server one of the UT2003 gamenames), only games the candidates want.
pub fn registration(
    l: &Listed,
    info: &ServerInfo,
    candidates: &Candidates,
) -> Result<Registration, Refusal> {
    let answered = answered_game(info);
    let game = match (l.face, l.game.as_deref()) {
        (Face::GameSpy, listed) => {
            let game = match (listed, answered.as_deref()) {
                (Some(g), _) => gamespy_games::game(g.as_bytes()).ok_or(Refusal::WrongGame)?,
                (None, Some(a)) => {
                    let g = gamespy_games::game(a.as_bytes()).ok_or(Refusal::WrongGame)?;
                    // Only a UT2003 text list leaves the game to the answer.
                    if !UT2003_LIST_GAMES.contains(&g.name) {
                        return Err(Refusal::WrongGame);
                    }
                    g
                }
                (None, None) => return Err(Refusal::WrongGame),
            };
            if answered
                .as_deref()
                .is_some_and(|a| !gamespy_games::matches_group(game, a))
            {
                return Err(Refusal::WrongGame);
            }
            game.name.to_owned()
        }
        (Face::GameAgent, listed) => match listed {
            Some(g) => g.to_ascii_lowercase(),
            None => answered
                .map(|a| a.to_ascii_lowercase())
                .filter(|a| usable(a))
                .unwrap_or_else(|| GAMEAGENT_FALLBACK_GAME.to_owned()),
        },
        // A Valve master lists addresses: the game is the folder the server's A2S answer
        // names, which must be the one the list was asked for.
        (Face::Valve, listed) => {
            let folder = answered_folder(info).ok_or(Refusal::WrongGame)?;
            if listed.is_some_and(|g| !g.eq_ignore_ascii_case(&folder)) {
                return Err(Refusal::WrongGame);
            }
            folder.to_ascii_lowercase()
        }
        (_, Some(g)) => g.to_ascii_lowercase(),
        (_, None) => TEEWORLDS_GAME.to_owned(),
    };
    if !usable(&game) {
        return Err(Refusal::WrongGame);
    }
    if !candidates.wants(&game) {
        return Err(Refusal::Unwanted);
    }
    Ok(Registration {
        key: ServerKey::new(&game, GameAddr::Ip(l.addr)),
        face: l.face,
        game_port: l.game_port,
        query_addr: Some(l.query_addr),
        query_protocol: Some(l.protocol),
        source: SourceKey::of(l.addr.ip()),
    })
}

/// Whether `ip` can be a game server's address at all (not unspecified, not multicast or
/// broadcast): a list naming such an address is not asked.
#[must_use]
pub fn plausible(addr: SocketAddr) -> bool {
    let ip = addr.ip();
    let bad = ip.is_unspecified()
        || ip.is_multicast()
        || matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    !bad && addr.port() != 0
}

/// Whether `ip` is not a globally reachable unicast address: an address of the IANA IPv4 and
/// IPv6 special-purpose address registries that is not marked globally reachable (this
/// network, loopback, private, shared carrier NAT, link-local, IETF protocol assignments,
/// documentation, benchmarking, reserved, unique-local, discard, local-use NAT64, …), the
/// deprecated site-local IPv6 block, or multicast and broadcast. An IPv6 address that carries
/// an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is
/// judged by that IPv4 address. Only a master on such a network itself may list these: a
/// public upstream cannot make this master query its own network.
#[must_use]
pub fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_not_global(u32::from(v4)),
        IpAddr::V6(v6) => v6_not_global(u128::from(v6)),
    }
}

/// Whether `ip` is inside `net/prefix`.
const fn within(ip: u128, net: u128, prefix: u32, bits: u32) -> bool {
    let shift = bits - prefix;
    if shift >= 128 {
        return true;
    }
    (ip >> shift) == (net >> shift)
}

/// The IPv4 blocks that are not globally reachable (IANA IPv4 special-purpose registry, plus
/// multicast and the limited broadcast), as (network, prefix).
const V4_NOT_GLOBAL: [(u32, u32); 16] = [
    (0x0000_0000, 8),  // 0.0.0.0/8 this network
    (0x0a00_0000, 8),  // 10.0.0.0/8 private
    (0x6440_0000, 10), // 100.64.0.0/10 shared address space (carrier NAT)
    (0x7f00_0000, 8),  // 127.0.0.0/8 loopback
    (0xa9fe_0000, 16), // 169.254.0.0/16 link-local
    (0xac10_0000, 12), // 172.16.0.0/12 private
    (0xc000_0000, 24), // 192.0.0.0/24 IETF protocol assignments (but see V4_GLOBAL)
    (0xc000_0200, 24), // 192.0.2.0/24 documentation (TEST-NET-1)
    (0xc058_6300, 24), // 192.88.99.0/24 6to4 relay anycast (deprecated)
    (0xc0a8_0000, 16), // 192.168.0.0/16 private
    (0xc612_0000, 15), // 198.18.0.0/15 benchmarking
    (0xc633_6400, 24), // 198.51.100.0/24 documentation (TEST-NET-2)
    (0xcb00_7100, 24), // 203.0.113.0/24 documentation (TEST-NET-3)
    (0xe000_0000, 4),  // 224.0.0.0/4 multicast
    (0xf000_0000, 4),  // 240.0.0.0/4 reserved
    (0xffff_ffff, 32), // 255.255.255.255/32 limited broadcast
];

/// Single addresses inside a not-global IPv4 block that the registry marks globally reachable.
const V4_GLOBAL: [u32; 2] = [
    0xc000_0009, // 192.0.0.9 Port Control Protocol anycast
    0xc000_000a, // 192.0.0.10 TURN anycast
];

fn v4_not_global(ip: u32) -> bool {
    if V4_GLOBAL.contains(&ip) {
        return false;
    }
    V4_NOT_GLOBAL
        .iter()
        .any(|&(net, prefix)| within(u128::from(ip), u128::from(net), prefix, 32))
}

/// The IPv6 blocks that are not globally reachable (IANA IPv6 special-purpose registry, the
/// deprecated site-local block, multicast), as (network, prefix). The blocks that embed an
/// IPv4 address are handled before these.
const V6_NOT_GLOBAL: [(u128, u32); 13] = [
    (0, 128),                          // :: unspecified
    (1, 128),                          // ::1 loopback
    (0x0064_ff9b_0001 << 80, 48),      // 64:ff9b:1::/48 local-use NAT64
    (0x0100 << 112, 64),               // 100::/64 discard-only
    (0x0100_0000_0000_0001 << 64, 64), // 100:0:0:1::/64 dummy prefix
    (0x2001 << 112, 23),               // 2001::/23 IETF protocol assignments (but see V6_GLOBAL)
    (0x2001_0db8 << 96, 32),           // 2001:db8::/32 documentation
    (0x3fff << 112, 20),               // 3fff::/20 documentation
    (0x5f00 << 112, 16),               // 5f00::/16 segment routing SIDs
    (0xfc00 << 112, 7),                // fc00::/7 unique-local
    (0xfe80 << 112, 10),               // fe80::/10 link-local
    (0xfec0 << 112, 10),               // fec0::/10 site-local (deprecated)
    (0xff00 << 112, 8),                // ff00::/8 multicast
];

/// Blocks inside 2001::/23 that the registry marks globally reachable, as (network, prefix).
const V6_GLOBAL: [(u128, u32); 6] = [
    ((0x2001_0001 << 96) | 1, 128), // 2001:1::1 Port Control Protocol anycast
    ((0x2001_0001 << 96) | 2, 128), // 2001:1::2 TURN anycast
    (0x2001_0003 << 96, 32),        // 2001:3::/32 AMT
    (0x2001_0004_0112 << 80, 48),   // 2001:4:112::/48 AS112-v6
    (0x2001_0020 << 96, 28),        // 2001:20::/28 ORCHIDv2
    (0x2001_0030 << 96, 28),        // 2001:30::/28 drone remote ID
];

/// The IPv4 address an IPv6 address carries, when its block is one that reaches that IPv4
/// address: IPv4-mapped `::ffff:0:0/96`, IPv4-compatible `::/96` (deprecated, but some
/// stacks still route it), NAT64 `64:ff9b::/96` and 6to4 `2002::/16`.
fn embedded_v4(ip: u128) -> Option<u32> {
    let low = (ip & 0xffff_ffff) as u32;
    if within(ip, 0xffff << 32, 96, 128) || within(ip, 0x0064_ff9b << 96, 96, 128) {
        return Some(low);
    }
    // `::` and `::1` are IPv6's own; any other `::a.b.c.d` is IPv4-compatible.
    if within(ip, 0, 96, 128) && ip > 1 {
        return Some(low);
    }
    if within(ip, 0x2002 << 112, 16, 128) {
        return Some(((ip >> 80) & 0xffff_ffff) as u32);
    }
    None
}

fn v6_not_global(ip: u128) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return v4_not_global(v4);
    }
    if V6_GLOBAL
        .iter()
        .any(|&(net, prefix)| within(ip, net, prefix, 128))
    {
        return false;
    }
    V6_NOT_GLOBAL
        .iter()
        .any(|&(net, prefix)| within(ip, net, prefix, 128))
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_proto::model::{Rule, Text};

    const T0: Timestamp = Timestamp::from_secs(1_700_000_000);

    fn listed(addr: &str, game: Option<&str>, face: Face) -> Listed {
        let a: SocketAddr = addr.parse().unwrap();
        Listed {
            addr: a,
            game: game.map(str::to_owned),
            face,
            protocol: Protocol::GameSpy1,
            query_addr: a,
            game_port: None,
            relayed: false,
        }
    }

    #[test]
    fn a_valve_listed_server_takes_the_folder_its_a2s_answer_names() {
        let any = Candidates::new(8, Duration::from_secs(60), &[]);
        let mut l = listed("192.0.2.1:27015", None, Face::Valve);
        l.protocol = Protocol::A2s;
        let mut info = ServerInfo::new(Protocol::A2s);
        assert_eq!(
            registration(&l, &info, &any).unwrap_err(),
            Refusal::WrongGame,
            "no folder, no game"
        );
        info.raw.push((
            "folder".into(),
            RawValue::Text(Text::from_utf8_str("CStrike")),
        ));
        let r = registration(&l, &info, &any).unwrap();
        assert_eq!((r.key.game.as_str(), r.face), ("cstrike", Face::Valve));
        // Asked for `valve`, answered `cstrike`: refused.
        l.game = Some("valve".into());
        assert_eq!(
            registration(&l, &info, &any).unwrap_err(),
            Refusal::WrongGame
        );
        l.game = Some("cstrike".into());
        assert!(registration(&l, &info, &any).is_ok());
        let only_hl = Candidates::new(8, Duration::from_secs(60), &["valve".to_owned()]);
        l.game = None;
        assert_eq!(
            registration(&l, &info, &only_hl).unwrap_err(),
            Refusal::Unwanted
        );
    }

    fn answer(gamename: Option<&str>) -> ServerInfo {
        let mut info = ServerInfo::new(Protocol::GameSpy1);
        if let Some(g) = gamename {
            info.rules.push(Rule {
                key: Text::from_utf8_str("gamename"),
                value: Text::from_utf8_str(g),
            });
        }
        info
    }

    fn ports(s: &Selection) -> Vec<u8> {
        s.verify
            .iter()
            .map(|l| match l.addr.ip() {
                IpAddr::V4(v4) => v4.octets()[3],
                IpAddr::V6(_) => 0,
            })
            .collect()
    }

    #[test]
    fn selection_is_bounded_once_per_address_and_cools_failures() {
        let mut c = Candidates::new(2, Duration::from_secs(60), &["ut".to_owned()]);
        let all = vec![
            listed("192.0.2.1:7778", Some("ut"), Face::GameSpy),
            listed("192.0.2.1:7778", Some("ut"), Face::GameSpy),
            listed("192.0.2.2:7778", Some("unreal"), Face::GameSpy),
            listed("192.0.2.3:7778", Some("UT"), Face::GameSpy),
            listed("192.0.2.4:7778", Some("ut"), Face::GameSpy),
        ];
        let s = c.select(all.clone(), T0);
        assert_eq!(ports(&s), [1, 3]);
        assert_eq!((s.over_cap, s.cooling, s.unwanted), (1, 0, 1));
        // The next selection starts where this one stopped.
        let s = c.select(all.clone(), T0);
        assert_eq!(ports(&s), [4, 1]);
        c.failed("192.0.2.1:7778".parse().unwrap(), T0);
        let s = c.select(all.clone(), T0.plus(Duration::from_secs(59)));
        assert_eq!((ports(&s), s.cooling, s.over_cap), (vec![3, 4], 1, 0));
        let s = c.select(all, T0.plus(Duration::from_secs(60)));
        assert_eq!((s.verify.len(), s.cooling, s.over_cap), (2, 0, 1));
        for i in 0..2000u16 {
            c.failed(SocketAddr::from(([192, 0, 2, 9], i + 1)), T0);
        }
        assert_eq!(
            c.cooling(),
            MIN_REMEMBERED,
            "remembered failures are bounded too"
        );
    }

    #[test]
    fn a_long_list_is_worked_through_whatever_its_order() {
        let mut c = Candidates::new(3, Duration::from_secs(600), &[]);
        let all: Vec<Listed> = (1..=10)
            .map(|i| listed(&format!("192.0.2.{i}:7778"), Some("ut"), Face::GameSpy))
            .collect();
        let mut asked = HashSet::new();
        for round in 0..4 {
            let s = c.select(all.clone(), T0.plus(Duration::from_secs(round)));
            for l in &s.verify {
                asked.insert(l.addr);
                if l.addr.ip().to_string() != "192.0.2.10" {
                    c.failed(l.addr, T0);
                }
            }
        }
        assert_eq!(asked.len(), 10, "the last one got its turn");
    }

    #[test]
    fn games_come_from_the_list_or_a_checked_answer() {
        let any = Candidates::new(10, Duration::ZERO, &[]);
        let l = listed("192.0.2.1:7778", Some("ut"), Face::GameSpy);
        let r = registration(&l, &answer(Some("ut")), &any).unwrap();
        assert_eq!(r.key.game, "ut");
        assert_eq!(r.query_protocol, Some(Protocol::GameSpy1));
        assert_eq!(
            registration(&l, &answer(None), &any).unwrap().key.game,
            "ut"
        );
        assert_eq!(
            registration(&l, &answer(Some("ut2004")), &any),
            Err(Refusal::WrongGame),
            "a listed game must be what the server says it is"
        );
        let sam = listed("192.0.2.1:25601", Some("serioussamse"), Face::GameSpy);
        assert!(registration(&sam, &answer(Some("serioussam")), &any).is_ok());
        let unknown = listed("192.0.2.1:7778", Some("quake3"), Face::GameSpy);
        assert_eq!(
            registration(&unknown, &answer(None), &any),
            Err(Refusal::WrongGame)
        );
        // A UT2003 text list names no game: the answer's, one of the four.
        let text = listed("192.0.2.1:7787", None, Face::GameSpy);
        assert_eq!(
            registration(&text, &answer(Some("ut2004")), &any)
                .unwrap()
                .key
                .game,
            "ut2004"
        );
        assert_eq!(
            registration(&text, &answer(Some("ut")), &any),
            Err(Refusal::WrongGame)
        );
        assert_eq!(
            registration(&text, &answer(None), &any),
            Err(Refusal::WrongGame)
        );
        let only_ut = Candidates::new(10, Duration::ZERO, &["ut".to_owned()]);
        assert_eq!(
            registration(&text, &answer(Some("ut2004")), &only_ut),
            Err(Refusal::Unwanted)
        );
        let mut tw = listed("192.0.2.1:8303", None, Face::Teeworlds06);
        tw.protocol = Protocol::Teeworlds;
        assert_eq!(
            registration(&tw, &ServerInfo::new(Protocol::Teeworlds), &any)
                .unwrap()
                .key
                .game,
            TEEWORLDS_GAME
        );
        let mut ga = listed("192.0.2.1:25600", None, Face::GameAgent);
        ga.protocol = Protocol::GameAgent;
        let mut info = ServerInfo::new(Protocol::GameAgent);
        assert_eq!(
            registration(&ga, &info, &any).unwrap().key.game,
            GAMEAGENT_FALLBACK_GAME
        );
        info.raw.push((
            "gamename".to_owned(),
            RawValue::Text(Text::from_utf8_str("SeriousSamSE")),
        ));
        assert_eq!(
            registration(&ga, &info, &any).unwrap().key.game,
            "serioussamse"
        );
    }

    #[test]
    fn local_addresses_are_every_special_purpose_block_and_what_embeds_one() {
        for ip in [
            "127.0.0.1",
            "127.1.2.3",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "192.0.0.1",
            "192.0.0.170",
            "192.0.2.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "192.88.99.1",
            "224.0.0.1",
            "239.1.2.3",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fd00::5",
            "fc00::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "feff::1",
            "ff02::1",
            "100::1",
            "100:0:0:1::1",
            "2001::1",
            "2001:2::1",
            "2001:10::1",
            "2001:db8::1",
            "3fff::1",
            "5f00::1",
            "64:ff9b:1::1",
            // IPv6 forms that reach a local IPv4 address.
            "::ffff:192.168.0.1",
            "::ffff:127.0.0.1",
            "::10.1.1.1",
            "::127.0.0.1",
            "64:ff9b::10.1.1.1",
            "64:ff9b::192.168.1.7",
            "2002:0a01:0101::1",
            "2002:7f00:0001::",
            "2002:c0a8:0107:1::5",
        ] {
            assert!(is_local(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "192.0.0.9",
            "192.0.0.10",
            "192.0.1.1",
            "192.0.3.1",
            "192.167.255.255",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2a00:1450::1",
            "2001:4860::8888",
            "2001:1::1",
            "2001:3::1",
            "2001:4:112::1",
            "2001:20::1",
            "2001:200::1",
            "fbff::1",
            "::ffff:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:0808:0808::1",
        ] {
            assert!(!is_local(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn implausible_addresses() {
        assert!(plausible("192.0.2.1:1".parse().unwrap()));
        assert!(!plausible("0.0.0.0:7778".parse().unwrap()));
        assert!(!plausible("255.255.255.255:7778".parse().unwrap()));
        assert!(!plausible("224.0.0.1:7778".parse().unwrap()));
        assert!(!plausible("192.0.2.1:0".parse().unwrap()));
    }
}
