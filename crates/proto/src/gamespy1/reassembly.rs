//! Order-independent reassembly of one multi-datagram reply (spec §7).
//!
//! Datagrams are keyed by their packet number Y, whatever order they arrive in. The first X
//! seen is locked; other X (stale replies) and repeated Y are dropped. Datagrams without
//! `queryid` (Serious Sam continuations) are kept as untagged parts. The reply ends complete,
//! or partial at the datagram cap ([`MAX_REPLY_DATAGRAMS`]) or byte cap ([`MAX_REPLY_BYTES`]);
//! the deadline and idle timers belong to the caller ([`super::query::StatusQuery`]), which
//! calls [`Reassembler::finish`].
//!
//! Not here: source-address filtering (the query machine drops datagrams from other
//! addresses before they reach this type).

use std::collections::{BTreeMap, BTreeSet};

use super::packet::{
    KEY_FINAL, KEY_QUERYID, Pair, QueryId, ReplyDatagram, RequestKind, strip_trailing_nuls,
};
use super::{MAX_REPLY_BYTES, MAX_REPLY_DATAGRAMS, is_per_player_key};
use crate::wire::DecodeError;

/// Why a reply ended without being complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartialReason {
    /// The byte cap ([`MAX_REPLY_BYTES`]) was reached.
    ByteCap,
    /// The datagram cap ([`MAX_REPLY_DATAGRAMS`]) was reached.
    DatagramCap,
    /// The overall deadline passed.
    Deadline,
    /// Nothing was accepted for the idle time after the last accepted datagram.
    Idle,
    /// The caller stopped the query.
    Aborted,
}

impl PartialReason {
    /// A short lower-case description, for [`crate::model::Partial::reason`].
    #[must_use]
    pub const fn describe(self) -> &'static str {
        match self {
            Self::ByteCap => "reply byte limit reached",
            Self::DatagramCap => "reply datagram limit reached",
            Self::Deadline => "deadline passed before the final datagram",
            Self::Idle => "server went quiet before the final datagram",
            Self::Aborted => "aborted before the final datagram",
        }
    }
}

/// How a reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Every datagram up to the final one arrived.
    Complete,
    /// The reply was cut short.
    Partial(PartialReason),
}

/// What one [`Reassembler::push`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    /// The datagram was stored; the reply is not complete yet.
    Accepted,
    /// The datagram was stored, or the caps were hit: the reply is over.
    Finished(Outcome),
    /// Not GameSpy text (empty, zero-filled, no leading `\`, bad `queryid`); counted as
    /// malformed.
    Malformed(DecodeError),
    /// A duplicate or a datagram of another `queryid` X; ignored.
    Ignored,
    /// The reply was already over; nothing was done.
    AlreadyFinished,
}

/// The reassembly state of one reply.
#[derive(Debug, Clone)]
pub struct Reassembler {
    expects_head: bool,
    locked_x: Option<u32>,
    seen_y: BTreeSet<u32>,
    tagged: BTreeMap<u32, Vec<Pair>>,
    untagged: Vec<(Vec<u8>, Vec<Pair>)>,
    max_y: Option<u32>,
    final_untagged: bool,
    head_seen: bool,
    final_players_only: bool,
    datagrams: usize,
    bytes: usize,
    malformed: usize,
    accepted: usize,
    outcome: Option<Outcome>,
}

impl Reassembler {
    /// A reassembler for the reply to `request` (the kind decides whether a server-data head
    /// must be present, spec §7.2 step 7).
    #[must_use]
    pub fn new(request: &RequestKind) -> Self {
        Self {
            expects_head: matches!(
                request,
                RequestKind::Status | RequestKind::Info | RequestKind::Basic | RequestKind::Rules
            ),
            locked_x: None,
            seen_y: BTreeSet::new(),
            tagged: BTreeMap::new(),
            untagged: Vec::new(),
            max_y: None,
            final_untagged: false,
            head_seen: false,
            final_players_only: false,
            datagrams: 0,
            bytes: 0,
            malformed: 0,
            accepted: 0,
            outcome: None,
        }
    }

    /// Feed one datagram from the target (spec §7.2 steps 1–8).
    pub fn push(&mut self, datagram: &[u8]) -> Push {
        if self.outcome.is_some() {
            return Push::AlreadyFinished;
        }
        let bytes = self.bytes.saturating_add(datagram.len());
        if bytes > MAX_REPLY_BYTES {
            return self.end(Outcome::Partial(PartialReason::ByteCap));
        }
        self.bytes = bytes;
        self.datagrams += 1;
        let result = match self.store(datagram) {
            Ok(true) => {
                self.accepted += 1;
                if self.is_complete() {
                    return self.end(Outcome::Complete);
                }
                Push::Accepted
            }
            Ok(false) => Push::Ignored,
            Err(e) => {
                self.malformed += 1;
                Push::Malformed(e)
            }
        };
        if self.datagrams >= MAX_REPLY_DATAGRAMS {
            return self.end(Outcome::Partial(PartialReason::DatagramCap));
        }
        result
    }

    /// Steps 2–6: decode and store; `Ok(false)` for a dropped duplicate or stale X.
    fn store(&mut self, datagram: &[u8]) -> Result<bool, DecodeError> {
        let decoded = ReplyDatagram::decode(datagram)?;
        let ids = decoded.query_ids()?;
        let is_final = decoded.is_final();
        let data: Vec<Pair> = decoded
            .pairs
            .into_iter()
            .filter(|p| !p.key_is(KEY_QUERYID) && !p.key_is(KEY_FINAL))
            .collect();
        // A tail: nothing but player keys (a style C continuation). Which key comes first
        // decides nothing (spec §7.2 step 6).
        let players_only = !data.is_empty() && data.iter().all(|p| is_per_player_key(p.key()));
        // Any server key makes this datagram a head, wherever it sits: key order inside a
        // datagram decides nothing (spec §7.2 step 6).
        let is_head = data.iter().any(|p| !is_per_player_key(p.key()));
        if let Some(first) = ids.first() {
            match self.locked_x {
                None => self.locked_x = Some(first.x),
                Some(x) if x != first.x => return Ok(false),
                Some(_) => {}
            }
            if ids.iter().any(|id| self.seen_y.contains(&id.y)) {
                return Ok(false);
            }
            self.seen_y.extend(ids.iter().map(|id| id.y));
            let largest = ids.iter().map(|id: &QueryId| id.y).max().unwrap_or(first.y);
            if is_final {
                self.max_y = Some(largest);
                self.final_players_only = players_only;
            }
            self.tagged.insert(largest, data);
        } else {
            let body = strip_trailing_nuls(datagram);
            if self.untagged.iter().any(|(raw, _)| raw == body) {
                return Ok(false);
            }
            self.untagged.push((body.to_vec(), data));
            if is_final {
                self.final_untagged = true;
            }
        }
        if is_head {
            self.head_seen = true;
        }
        Ok(true)
    }

    /// Step 7.
    fn is_complete(&self) -> bool {
        if self.final_untagged {
            return true;
        }
        let Some(max) = self.max_y else {
            return false;
        };
        let all_seen = max == 0 || (1..=max).all(|y| self.seen_y.contains(&y));
        all_seen && !(self.expects_head && self.final_players_only && !self.head_seen)
    }

    fn end(&mut self, outcome: Outcome) -> Push {
        self.outcome = Some(outcome);
        Push::Finished(outcome)
    }

    /// End the reply now (deadline, idle timer, abort) unless it already ended, and return
    /// how it ended.
    pub fn finish(&mut self, reason: PartialReason) -> Outcome {
        *self.outcome.get_or_insert(Outcome::Partial(reason))
    }

    /// How the reply ended, once it has.
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome
    }

    /// The merged data pairs (spec §7.3): untagged parts in arrival order, then tagged parts
    /// by ascending Y. `queryid` and `final` are left out.
    #[must_use]
    pub fn pairs(&self) -> Vec<Pair> {
        self.merged().cloned().collect()
    }

    /// [`Self::pairs`] without copying them.
    pub fn merged(&self) -> impl Iterator<Item = &Pair> {
        self.untagged
            .iter()
            .map(|(_, p)| p)
            .chain(self.tagged.values())
            .flatten()
    }

    /// Datagrams processed (the one that hit the byte cap is not counted).
    #[must_use]
    pub fn datagrams(&self) -> usize {
        self.datagrams
    }

    /// Datagrams stored as parts of the reply.
    #[must_use]
    pub fn accepted(&self) -> usize {
        self.accepted
    }

    /// Datagrams that were not GameSpy text.
    #[must_use]
    pub fn malformed(&self) -> usize {
        self.malformed
    }

    /// Bytes processed.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gamespy1::map::to_server_info;
    use crate::gamespy1::reply::{PlayerRecord, ReplyStyle, Section, encode_reply};
    use proptest::prelude::*;

    fn clean_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        // Printable and high bytes, never a backslash: mapped, not filtered, so that long
        // values cost no rejected cases.
        let byte = (0x20u8..=0xff).prop_map(|b| if b == b'\\' { b'/' } else { b });
        prop::collection::vec(byte, 0..max)
    }

    fn head_strategy() -> impl Strategy<Value = Section> {
        let key = prop::sample::select(vec![
            "hostname",
            "mapname",
            "gametype",
            "gamever",
            "numplayers",
            "maxplayers",
            "timelimit",
            "AdminName",
            "Mutator",
        ]);
        prop::collection::vec((key, clean_bytes(300)), 1..8).prop_map(|pairs| {
            pairs
                .into_iter()
                .map(|(k, v)| Pair::new(k, v).unwrap())
                .collect()
        })
    }

    fn players_strategy() -> impl Strategy<Value = Vec<PlayerRecord>> {
        prop::collection::vec((clean_bytes(160), any::<i16>(), 0u32..1000), 0..20).prop_map(|ps| {
            ps.into_iter()
                .map(|(name, frags, ping)| PlayerRecord {
                    name,
                    frags: i64::from(frags),
                    ping,
                    team: Some(b"1".to_vec()),
                    extra: Vec::new(),
                })
                .collect()
        })
    }

    fn style_strategy() -> impl Strategy<Value = ReplyStyle> {
        prop_oneof![
            Just(ReplyStyle::Unreal227),
            Just(ReplyStyle::Packed),
            Just(ReplyStyle::SeriousSam)
        ]
    }

    proptest! {
        #[test]
        fn push_arbitrary_datagrams_never_panics(
            datagrams in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..80),
        ) {
            let mut r = Reassembler::new(&RequestKind::Status);
            for d in &datagrams {
                let _ = r.push(d);
            }
            let _ = r.finish(PartialReason::Aborted);
            let _ = to_server_info(&r.pairs());
        }

        #[test]
        fn push_backslash_heavy_datagrams_never_panics(
            datagrams in prop::collection::vec(
                prop::collection::vec(prop::sample::select(b"\\\\q.1final_0player_ue".to_vec()), 0..40),
                0..20,
            ),
        ) {
            let mut r = Reassembler::new(&RequestKind::Players);
            for d in &datagrams {
                let _ = r.push(d);
            }
            let _ = to_server_info(&r.pairs());
        }

        /// Whatever a stock-style responder sends arrives complete in any order, and maps to
        /// the same server as the in-order reply; with one exception the protocol leaves no
        /// way around: a style C (Serious Sam) continuation that arrives after the tagged last
        /// datagram while the head is already in. Then the reply is complete with what came
        /// first, merged as always (untagged parts in arrival order, then the tagged one).
        #[test]
        fn encoded_reply_reassembles_in_any_order(
            style in style_strategy(),
            head in head_strategy(),
            players in players_strategy(),
            x in 1u32..=100,
            order in any::<prop::sample::Index>(),
        ) {
            let mut sections = vec![head];
            sections.extend(players.iter().enumerate().map(|(i, p)| p.section(i, style)));
            let datagrams = encode_reply(style, x, &sections);
            prop_assert!(datagrams.len() <= MAX_REPLY_DATAGRAMS);

            let mut in_order = Reassembler::new(&RequestKind::Status);
            let pushes: Vec<Push> = datagrams.iter().map(|d| in_order.push(d)).collect();
            prop_assert_eq!(pushes.last(), Some(&Push::Finished(Outcome::Complete)));
            let expect: Vec<Pair> = sections.concat();
            prop_assert_eq!(&in_order.pairs(), &expect);

            // Rotate and reverse the arrival order.
            let mut shuffled = datagrams.clone();
            let n = shuffled.len();
            shuffled.rotate_left(order.index(n));
            if order.index(2) == 1 {
                shuffled.reverse();
            }
            let mut any_order = Reassembler::new(&RequestKind::Status);
            for d in &shuffled {
                let _ = any_order.push(d);
            }
            prop_assert_eq!(any_order.outcome(), Some(Outcome::Complete));
            let info = to_server_info(&any_order.pairs());
            let last = datagrams.last().expect("a reply has datagrams");
            let last_at = shuffled.iter().position(|d| d == last).expect("all were sent");
            let head_at = shuffled.iter().position(|d| d == &datagrams[0]).expect("all were sent");
            // The reply completes once the tagged last datagram and the head are both in.
            let done_at = last_at.max(head_at);
            if style == ReplyStyle::SeriousSam && done_at + 1 < n {
                // What came until then, merged: the untagged parts in arrival order, then the
                // tagged last datagram. Nothing after it is waited for.
                let data = |d: &[u8]| -> Vec<Pair> {
                    let decoded = ReplyDatagram::decode(d).expect("encoded datagrams decode");
                    decoded
                        .pairs
                        .into_iter()
                        .filter(|p| !p.key_is(KEY_QUERYID) && !p.key_is(KEY_FINAL))
                        .collect()
                };
                let mut early: Vec<Pair> = shuffled[..=done_at]
                    .iter()
                    .filter(|d| *d != last)
                    .flat_map(|d| data(d))
                    .collect();
                early.extend(data(last));
                prop_assert_eq!(&any_order.pairs(), &early);
                prop_assert!(info.players.len() < players.len());
            } else {
                prop_assert_eq!(info.players.len(), players.len());
                prop_assert_eq!(info, to_server_info(&expect));
            }
        }
    }
}
