//! The responder side: turn server fields, rules and players into reply datagrams, byte for byte
//! as each stock style sends them (spec §5, §9, §10).
//!
//! A reply is a list of [`Section`]s (basic, info, rules, one per player) packed by a
//! [`ReplyStyle`]:
//!
//! | style | packing | trailer |
//! |---|---|---|
//! | [`ReplyStyle::Unreal227`] (A) | one section per datagram, Y from 1 | `\final\\queryid\X.Y` |
//! | [`ReplyStyle::Packed`] (B) | flush before passing 1000 bytes | `\queryid\X.Y\final\` |
//! | [`ReplyStyle::Ut2003Demo`] (B) | as B; names keep `\`, pings a leading space | `\queryid\X.Y\final\` |
//! | [`ReplyStyle::SeriousSam`] (C) | one text, split before 2048 bytes, continuations untagged | `\final\\queryid\X.1` |
//!
//! Not here: which keys a given game sends (the responder's game profiles), request rate
//! limits, and `\validate\` computation.

use super::packet::{KEY_FINAL, KEY_QUERYID, Pair, QueryId, Request, RequestKind};
use super::{
    BACKSLASH, MAX_REQUEST_ITEMS, QUERY_ID_WRAP, STYLE_B_PACKET_LIMIT, STYLE_C_PACKET_LIMIT,
};
use crate::wire::put_decimal;

/// One section of a reply: the pairs that stock servers never split across datagrams.
pub type Section = Vec<Pair>;

/// How a reply is packed into datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyStyle {
    /// Style A, Unreal 227: one section per datagram; `\final\` before `\queryid\`.
    Unreal227,
    /// Style B, UT99 v451/v469, UT2003, UT2004: sections packed up to 1000 bytes;
    /// `\queryid\` before `\final\`.
    Packed,
    /// Style B as the UT2003 demo (1077) sent it in seed 002's real reply: packed like
    /// [`Self::Packed`], but player names keep their `\` (`Kee\/n`) and pings have a leading
    /// space (`\ping_4\ 117`).
    Ut2003Demo,
    /// Style C, Serious Sam legacy mode: one text split before 2048 bytes; only the last
    /// datagram carries `\final\\queryid\<id>.1`; fixed ids (see [`serious_sam_query_id`]).
    SeriousSam,
}

/// The fixed `queryid` X a Serious Sam server uses for each request (spec §9.3), or `None`
/// for requests it does not answer.
#[must_use]
pub fn serious_sam_query_id(kind: &RequestKind) -> Option<u32> {
    match kind {
        RequestKind::Status => Some(333),
        RequestKind::Info => Some(8),
        RequestKind::Basic => Some(1),
        RequestKind::Players => Some(6),
        _ => None,
    }
}

/// The per-socket `queryid` counter of Unreal-family servers: 1, 2, …, 100, 1, …; advanced
/// once for every request datagram received, from anyone (spec §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryIdCounter {
    last: u32,
}

impl Default for QueryIdCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl QueryIdCounter {
    /// A counter whose first [`Self::next_id`] is 1.
    #[must_use]
    pub const fn new() -> Self {
        Self { last: 0 }
    }

    /// The X for the next request datagram.
    pub fn next_id(&mut self) -> u32 {
        self.last = if self.last >= QUERY_ID_WRAP {
            1
        } else {
            self.last + 1
        };
        self.last
    }
}

/// One player record of a reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlayerRecord {
    /// Raw name bytes (`\` and control bytes are removed when sent). Style C wraps it in
    /// `^o…^r` itself.
    pub name: Vec<u8>,
    /// Frags or score.
    pub frags: i64,
    /// Ping in milliseconds.
    pub ping: u32,
    /// Team value (`0`, `1`, `255` for none in UT99, or a team name); omitted when `None`
    /// and always omitted in style C, which sends no team.
    pub team: Option<Vec<u8>>,
    /// Further per-player fields in the order to send, as `(field, value)` without the
    /// `_<index>` suffix: `mesh`, `skin`, `face`, `ngsecret` …
    pub extra: Vec<(String, Vec<u8>)>,
}

impl PlayerRecord {
    /// The section for this player at slot `index`, as `style` writes it:
    /// `\player_N\name\frags_N\n\ping_N\ms[\team_N\t][\<extra>_N\v…]`. Style A writes the
    /// ping with a leading space (`\ping_0\ 50`), style C wraps the name in `^o…^r` and sends
    /// no team; [`ReplyStyle::Ut2003Demo`] writes the ping as style A and keeps `\` in the
    /// name (control bytes are still removed). An extra field that is not a valid key is
    /// skipped.
    #[must_use]
    pub fn section(&self, index: usize, style: ReplyStyle) -> Section {
        let mut out = Vec::with_capacity(4 + self.extra.len());
        let key = |field: &str| format!("{field}_{index}");
        let name = if style == ReplyStyle::SeriousSam {
            [&b"^o"[..], &self.name, b"^r"].concat()
        } else {
            self.name.clone()
        };
        let number = |n: i64, lead_space: bool| {
            let mut v = Vec::new();
            if lead_space {
                v.push(b' ');
            }
            put_decimal(&mut v, n);
            v
        };
        let frags = number(self.frags, false);
        let lead_space = matches!(style, ReplyStyle::Unreal227 | ReplyStyle::Ut2003Demo);
        let ping = number(i64::from(self.ping), lead_space);
        if style == ReplyStyle::Ut2003Demo {
            let kept: Vec<u8> = name.iter().copied().filter(|&b| b >= 0x20).collect();
            out.push(Pair::raw(key("player").as_bytes(), &kept));
        } else {
            out.extend(Pair::new(key("player"), name).ok());
        }
        let fields = [("frags", frags), ("ping", ping)];
        out.extend(
            fields
                .into_iter()
                .filter_map(|(f, v)| Pair::new(key(f), v).ok()),
        );
        if style != ReplyStyle::SeriousSam
            && let Some(team) = &self.team
        {
            out.extend(Pair::new(key("team"), team).ok());
        }
        for (field, value) in &self.extra {
            out.extend(Pair::new(key(field), value).ok());
        }
        out
    }
}

/// What a responder knows about its server, grouped the way requests ask for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyContent {
    /// `\basic\` pairs: `gamename`, `gamever`, `minnetver`, `location` …
    pub basic: Vec<Pair>,
    /// `\info\` pairs: `hostname`, `hostport`, `mapname`, `gametype`, `numplayers` …
    pub info: Vec<Pair>,
    /// `\rules\` pairs: game rules, `AdminName`, `AdminEMail`, repeated `Mutator` …
    pub rules: Vec<Pair>,
    /// The head of a `\status\` reply when it is not basic + info + rules (Serious Sam sends
    /// its own 22 keys, §9.2); `None` for the Unreal families.
    pub status_head: Option<Vec<Pair>>,
    /// The players, in slot order (the slot is the index in this list).
    pub players: Vec<PlayerRecord>,
}

impl ReplyContent {
    /// The sections answering one request item, or `None` when this type does not answer it:
    /// `\echo\` (never answered, spec §13), `\secure\` (the responder adds `\validate\`
    /// itself, e.g. as a one-pair section), `\teams\`, property requests and unknown types;
    /// style C also leaves `\rules\` unanswered.
    #[must_use]
    pub fn sections(&self, kind: &RequestKind, style: ReplyStyle) -> Option<Vec<Section>> {
        let players = || {
            self.players
                .iter()
                .enumerate()
                .map(|(i, p)| p.section(i, style))
        };
        let one = |s: &Vec<Pair>| vec![s.clone()];
        match kind {
            RequestKind::Basic => Some(one(&self.basic)),
            RequestKind::Info => Some(one(&self.info)),
            RequestKind::Rules if style != ReplyStyle::SeriousSam => Some(one(&self.rules)),
            RequestKind::Players => Some(players().collect()),
            RequestKind::Status => {
                let mut out = match (&self.status_head, style) {
                    (Some(head), _) => vec![head.clone()],
                    (None, ReplyStyle::SeriousSam) => {
                        vec![[&self.basic[..], &self.info, &self.rules].concat()]
                    }
                    (None, _) => vec![self.basic.clone(), self.info.clone(), self.rules.clone()],
                };
                out.extend(players());
                Some(out)
            }
            _ => None,
        }
    }
}

impl ReplyContent {
    /// Every datagram answering one request datagram, in send order; empty for no reply.
    ///
    /// Styles A and B advance `counter` once per datagram (as stock servers do for anything
    /// they receive), parse it with the §3.1 grammar, answer at most [`MAX_REQUEST_ITEMS`]
    /// items and pack the sections of all answered items into one reply whose last datagram
    /// is final. Style C ignores `counter`: it answers only the first of `\status\`,
    /// `\info\`, `\basic\`, `\players\` found in the datagram, with that request's fixed
    /// id. Datagrams over [`super::MAX_REQUEST_LEN`] bytes get no reply.
    #[must_use]
    pub fn answer(
        &self,
        datagram: &[u8],
        style: ReplyStyle,
        counter: &mut QueryIdCounter,
    ) -> Vec<Vec<u8>> {
        self.answer_with(datagram, style, counter, |_| None)
    }

    /// [`Self::answer`], with `secure` answering `\secure\<challenge>` items of styles A and B:
    /// it gets the item's value (empty when there is none) and returns the section to send
    /// in that item's place (normally the one pair `\validate\V`), or `None` to leave the
    /// item unanswered. Style C never consults it (stock Serious Sam ignores `\secure\`).
    #[must_use]
    pub fn answer_with(
        &self,
        datagram: &[u8],
        style: ReplyStyle,
        counter: &mut QueryIdCounter,
        secure: impl Fn(&[u8]) -> Option<Section>,
    ) -> Vec<Vec<u8>> {
        if datagram.len() > super::MAX_REQUEST_LEN {
            return Vec::new();
        }
        if style == ReplyStyle::SeriousSam {
            let Some(kind) = Request::serious_sam_kind(datagram) else {
                return Vec::new();
            };
            let (Some(x), Some(sections)) =
                (serious_sam_query_id(&kind), self.sections(&kind, style))
            else {
                return Vec::new();
            };
            return encode_reply(style, x, &sections);
        }
        let x = counter.next_id();
        let Ok(request) = Request::decode(datagram) else {
            return Vec::new();
        };
        let mut answered = false;
        let mut sections = Vec::new();
        for item in request.items().iter().take(MAX_REQUEST_ITEMS) {
            if *item.kind() == RequestKind::Secure {
                if let Some(s) = secure(item.value().unwrap_or_default()) {
                    answered = true;
                    sections.push(s);
                }
            } else if let Some(s) = self.sections(item.kind(), style) {
                answered = true;
                sections.extend(s);
            }
        }
        if answered {
            encode_reply(style, x, &sections)
        } else {
            Vec::new()
        }
    }
}

/// Pack `sections` into the datagrams of one final reply with id `x`, in send order.
///
/// * Style A: one datagram per section, `…\queryid\X.Y` with Y from 1, the last one
///   `…\final\\queryid\X.Y`; no sections gives `\final\\queryid\X.0`.
/// * Style B: sections are appended to a buffer; when buffer + section would exceed
///   [`STYLE_B_PACKET_LIMIT`], the buffer (even an empty one) is sent with `\queryid\X.Y`;
///   the last datagram ends `\queryid\X.Y\final\`. A larger section is still sent whole.
/// * Style C: one text; before appending a section to a non-empty text that would take it
///   past [`STYLE_C_PACKET_LIMIT`], the text is sent without any id; the last datagram ends
///   `\final\\queryid\X.1`.
///
/// For a request of several items pass the sections of all items in order: stock A and B
/// servers continue Y across the items of one request and mark only the last datagram final.
/// Known difference: an Unreal 227 server answering `\basic\\players\` on an empty server
/// sends the basic datagram unmarked and then `\final\\queryid\X.1` (a repeated Y); this
/// function marks the basic datagram final instead.
#[must_use]
pub fn encode_reply(style: ReplyStyle, x: u32, sections: &[Section]) -> Vec<Vec<u8>> {
    let mut datagrams = Vec::new();
    match style {
        ReplyStyle::Unreal227 => {
            let Some((last, init)) = sections.split_last() else {
                let mut d = Vec::new();
                put_final(&mut d);
                put_query_id(&mut d, QueryId { x, y: 0 });
                return vec![d];
            };
            let mut y = 0u32;
            for section in init {
                y = y.saturating_add(1);
                let mut d = encode_section(section);
                put_query_id(&mut d, QueryId { x, y });
                datagrams.push(d);
            }
            let mut d = encode_section(last);
            put_final(&mut d);
            put_query_id(
                &mut d,
                QueryId {
                    x,
                    y: y.saturating_add(1),
                },
            );
            datagrams.push(d);
        }
        ReplyStyle::Packed | ReplyStyle::Ut2003Demo => {
            let mut buf = Vec::new();
            let mut y = 0u32;
            for section in sections {
                let bytes = encode_section(section);
                if buf.len() + bytes.len() > STYLE_B_PACKET_LIMIT {
                    y = y.saturating_add(1);
                    put_query_id(&mut buf, QueryId { x, y });
                    datagrams.push(std::mem::take(&mut buf));
                }
                buf.extend_from_slice(&bytes);
            }
            put_query_id(
                &mut buf,
                QueryId {
                    x,
                    y: y.saturating_add(1),
                },
            );
            put_final(&mut buf);
            datagrams.push(buf);
        }
        ReplyStyle::SeriousSam => {
            let mut buf = Vec::new();
            for section in sections {
                let bytes = encode_section(section);
                if !buf.is_empty() && buf.len() + bytes.len() > STYLE_C_PACKET_LIMIT {
                    datagrams.push(std::mem::take(&mut buf));
                }
                buf.extend_from_slice(&bytes);
            }
            put_final(&mut buf);
            put_query_id(&mut buf, QueryId { x, y: 1 });
            datagrams.push(buf);
        }
    }
    datagrams
}

fn encode_section(section: &[Pair]) -> Vec<u8> {
    let mut out = Vec::with_capacity(section.iter().map(Pair::encoded_len).sum());
    for pair in section {
        pair.encode(&mut out);
    }
    out
}

fn put_final(out: &mut Vec<u8>) {
    out.push(BACKSLASH);
    out.extend_from_slice(KEY_FINAL);
    out.push(BACKSLASH);
}

fn put_query_id(out: &mut Vec<u8>, id: QueryId) {
    out.push(BACKSLASH);
    out.extend_from_slice(KEY_QUERYID);
    out.push(BACKSLASH);
    id.encode(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<Pair> {
        list.iter()
            .map(|(k, v)| Pair::new(*k, v).unwrap())
            .collect()
    }

    fn demo_content() -> ReplyContent {
        ReplyContent {
            basic: pairs(&[("gamename", "ut")]),
            info: pairs(&[("hostname", "H")]),
            rules: pairs(&[("timelimit", "20")]),
            status_head: None,
            players: vec![PlayerRecord {
                name: b"Bob".to_vec(),
                frags: 1,
                ping: 9,
                team: None,
                extra: Vec::new(),
            }],
        }
    }

    #[test]
    fn answer_combined_request_style_b() {
        let mut counter = QueryIdCounter::new();
        let out = demo_content().answer(b"\\basic\\\\info\\", ReplyStyle::Packed, &mut counter);
        assert_eq!(
            out,
            [b"\\gamename\\ut\\hostname\\H\\queryid\\1.1\\final\\".to_vec()]
        );
        // Echo alone gets no reply, but still advances X.
        assert!(
            demo_content()
                .answer(b"\\echo\\x", ReplyStyle::Packed, &mut counter)
                .is_empty()
        );
        let out = demo_content().answer(b"\\players\\", ReplyStyle::Unreal227, &mut counter);
        assert_eq!(
            out,
            [b"\\player_0\\Bob\\frags_0\\1\\ping_0\\ 9\\final\\\\queryid\\3.1".to_vec()]
        );
    }

    #[test]
    fn answer_serious_sam_searches_and_uses_fixed_ids() {
        let mut counter = QueryIdCounter::new();
        let c = demo_content();
        let out = c.answer(b"\\basic\\\\info\\", ReplyStyle::SeriousSam, &mut counter);
        assert_eq!(out, [b"\\hostname\\H\\final\\\\queryid\\8.1".to_vec()]);
        assert!(
            c.answer(b"\\rules\\", ReplyStyle::SeriousSam, &mut counter)
                .is_empty()
        );
        assert_eq!(counter.next_id(), 1, "style C never touches the counter");
    }

    #[test]
    fn query_id_counter_wraps_at_100() {
        let mut c = QueryIdCounter::new();
        assert_eq!(c.next_id(), 1);
        for _ in 0..98 {
            let _ = c.next_id();
        }
        assert_eq!(c.next_id(), 100);
        assert_eq!(c.next_id(), 1);
    }

    #[test]
    fn encode_style_a_empty_players() {
        assert_eq!(
            encode_reply(ReplyStyle::Unreal227, 12, &[]),
            [b"\\final\\\\queryid\\12.0".to_vec()]
        );
    }

    #[test]
    fn encode_style_b_empty_players() {
        assert_eq!(
            encode_reply(ReplyStyle::Packed, 41, &[]),
            [b"\\queryid\\41.1\\final\\".to_vec()]
        );
    }

    #[test]
    fn encode_style_c_empty_players() {
        assert_eq!(
            encode_reply(ReplyStyle::SeriousSam, 6, &[]),
            [b"\\final\\\\queryid\\6.1".to_vec()]
        );
    }

    #[test]
    fn encode_style_a_one_datagram_per_section() {
        let s = [pairs(&[("a", "1")]), pairs(&[("b", "2")])];
        assert_eq!(
            encode_reply(ReplyStyle::Unreal227, 7, &s),
            [
                b"\\a\\1\\queryid\\7.1".to_vec(),
                b"\\b\\2\\final\\\\queryid\\7.2".to_vec()
            ]
        );
    }

    #[test]
    fn encode_style_b_flushes_before_1000() {
        // 500 + 500 fits exactly; the third section goes to datagram 2.
        let big = |k: &str| pairs(&[(k, &"v".repeat(500 - 3))]);
        let s = [big("a"), big("b"), big("c")];
        let d = encode_reply(ReplyStyle::Packed, 3, &s);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].len(), 1000 + b"\\queryid\\3.1".len());
        assert!(d[0].ends_with(b"\\queryid\\3.1"));
        assert!(d[1].starts_with(b"\\c\\"));
        assert!(d[1].ends_with(b"\\queryid\\3.2\\final\\"));
    }

    #[test]
    fn encode_style_b_oversized_first_section_sends_lone_queryid() {
        let s = [pairs(&[("big", &"v".repeat(1200))])];
        let d = encode_reply(ReplyStyle::Packed, 9, &s);
        assert_eq!(d[0], b"\\queryid\\9.1");
        assert_eq!(d[1].len(), 1205 + b"\\queryid\\9.2\\final\\".len());
    }

    #[test]
    fn encode_player_sections_per_style() {
        let p = PlayerRecord {
            name: b"Bob".to_vec(),
            frags: 3,
            ping: 50,
            team: Some(b"255".to_vec()),
            extra: vec![("skin".into(), b"S".to_vec())],
        };
        let enc = |style| {
            let mut out = Vec::new();
            for pair in p.section(0, style) {
                pair.encode(&mut out);
            }
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            enc(ReplyStyle::Unreal227),
            "\\player_0\\Bob\\frags_0\\3\\ping_0\\ 50\\team_0\\255\\skin_0\\S"
        );
        assert_eq!(
            enc(ReplyStyle::Packed),
            "\\player_0\\Bob\\frags_0\\3\\ping_0\\50\\team_0\\255\\skin_0\\S"
        );
        assert_eq!(
            enc(ReplyStyle::SeriousSam),
            "\\player_0\\^oBob^r\\frags_0\\3\\ping_0\\50\\skin_0\\S"
        );
    }
}
