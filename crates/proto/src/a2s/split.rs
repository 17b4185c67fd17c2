//! Reassembly of split (multi-datagram) A2S replies, sans-IO (spec §7).
//!
//! Every part starts with `fe ff ff ff` and a 32-bit id shared by the parts of one reply.
//! Two part headers exist and nothing on the wire names which one a server uses:
//!
//! ```text
//! Source:  id:u32 total:u8 number:u8 [size:u16]  payload      (size absent on old engines)
//!          part 0 of a bzip2 reply (top bit of id set): decompressed_size:u32 crc32:u32 then data
//! GoldSrc: id:u32 (number << 4 | total):u8        payload
//! ```
//!
//! The layout is detected from part 0, whose payload is the start of the reply and so begins
//! with `ff ff ff ff` (or, compressed, with a size, a CRC and the bzip2 magic `BZh`): each
//! layout puts that marker at a different offset, and none can be mistaken for another. Parts
//! that come before part 0 are kept raw until it arrives. Parts may arrive in any order and
//! twice; the first copy of each number wins.
//!
//! Limits: a total of 0 or above [`MAX_SPLIT_PARTS`] is refused, at most [`MAX_IN_FLIGHT`]
//! replies are reassembled at once, a reply (and a bzip2 reply once inflated) never exceeds
//! [`MAX_MESSAGE`] bytes: decompression stops at the declared size, so a bzip2 bomb costs
//! nothing. The caller's clock is an argument: [`Reassembler::expire`] reports replies whose
//! parts did not all come within `max_age` of their first part.

use std::collections::VecDeque;
use std::io::Read as _;
use std::time::{Duration, Instant};

use super::{MAX_IN_FLIGHT, MAX_MESSAGE, MAX_SPLIT_PARTS, SIMPLE_HEADER, SPLIT_HEADER};
use crate::wire::{DecodeError, Reader};

/// The id bit that marks a bzip2-compressed Source reply.
pub const COMPRESSED_BIT: u32 = 0x8000_0000;

/// The magic every bzip2 stream starts with.
pub const BZIP2_MAGIC: &[u8] = b"BZh";

/// Most header bytes one part adds to its payload (Source with size field: 2 + 2 bytes, and
/// the compression header of part 0); used to bound what a reply may buffer.
const MAX_PART_OVERHEAD: usize = 16;

/// How many completed ids are remembered, so that a late duplicate part of a finished reply
/// does not start a reassembly that can never complete.
pub const RECENT_IDS: usize = 16;

/// The part header layout of a split reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Source: total and number bytes, then (all engines since the Orange Box) the split size.
    Source {
        /// Whether the 16-bit split size follows the number byte.
        size_field: bool,
    },
    /// GoldSrc: number and total packed in one byte.
    GoldSrc,
}

/// A reply whose parts did not all arrive in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// The split id.
    pub id: u32,
    /// Distinct parts received.
    pub received: usize,
    /// Parts announced, when part 0 came (it tells the layout).
    pub total: Option<usize>,
}

#[derive(Debug)]
struct Pending {
    id: u32,
    first_seen: Instant,
    bodies: Vec<Vec<u8>>,
    bytes: usize,
    layout: Option<Layout>,
}

/// One parsed part header.
struct Part<'a> {
    total: usize,
    number: usize,
    size: Option<u16>,
    payload: &'a [u8],
}

/// What one more part did to its reply.
enum Step {
    Wait,
    Done(Vec<u8>),
    /// This part was bad and dropped; the reply goes on.
    Discarded(DecodeError),
    /// The reply is beyond repair and dropped.
    Drop(DecodeError),
}

/// Collects split parts and hands back whole replies (starting with `ff ff ff ff`).
#[derive(Debug)]
pub struct Reassembler {
    max_age: Duration,
    pending: Vec<Pending>,
    recent: VecDeque<u32>,
}

impl Reassembler {
    /// A reassembler that gives a reply `max_age` from its first part to complete.
    #[must_use]
    pub fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            pending: Vec::new(),
            recent: VecDeque::new(),
        }
    }

    /// True when `datagram` is a split part (starts with `fe ff ff ff`).
    #[must_use]
    pub fn is_split(datagram: &[u8]) -> bool {
        datagram.starts_with(&SPLIT_HEADER)
    }

    /// Replies being reassembled.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Take one split part. Returns the whole reply once its last part came, `None` while parts
    /// are missing (or for a duplicate), an error for a part or reply that is refused.
    pub fn push(&mut self, now: Instant, datagram: &[u8]) -> Result<Option<Vec<u8>>, DecodeError> {
        let mut r = Reader::new(datagram);
        if r.array::<4>("split header")? != SPLIT_HEADER {
            return Err(DecodeError::BadMagic("split header"));
        }
        let id = r.u32_le("split id")?;
        let body = r.rest();
        if body.is_empty() {
            return Err(DecodeError::Truncated("split part header"));
        }
        if self.recent.contains(&id) {
            return Ok(None);
        }
        let index = match self.pending.iter().position(|p| p.id == id) {
            Some(i) => i,
            None => {
                if self.pending.len() >= MAX_IN_FLIGHT {
                    return Err(DecodeError::TooLarge("split replies in flight"));
                }
                self.pending.push(Pending {
                    id,
                    first_seen: now,
                    bodies: Vec::new(),
                    bytes: 0,
                    layout: None,
                });
                self.pending.len() - 1
            }
        };
        let Some(pending) = self.pending.get_mut(index) else {
            return Ok(None);
        };
        if pending.bodies.iter().any(|b| b == body) {
            return Ok(None);
        }
        if pending.bodies.len() >= MAX_SPLIT_PARTS {
            return Err(DecodeError::TooLarge("split parts"));
        }
        if pending.bytes.saturating_add(body.len())
            > MAX_MESSAGE + MAX_SPLIT_PARTS * MAX_PART_OVERHEAD
        {
            return Err(DecodeError::TooLarge("split reply"));
        }
        pending.bytes += body.len();
        pending.bodies.push(body.to_vec());
        match pending.step() {
            Step::Wait => Ok(None),
            Step::Discarded(e) => Err(e),
            Step::Done(reply) => {
                self.finish(index, id);
                Ok(Some(reply))
            }
            Step::Drop(e) => {
                self.finish(index, id);
                Err(e)
            }
        }
    }

    fn finish(&mut self, index: usize, id: u32) {
        if index < self.pending.len() {
            self.pending.swap_remove(index);
        }
        if self.recent.len() >= RECENT_IDS {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
    }

    /// When the oldest reply in flight expires, if any.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.pending
            .iter()
            .filter_map(|p| p.first_seen.checked_add(self.max_age))
            .min()
    }

    /// Drop and report every reply whose first part came `max_age` or longer before `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<Expired> {
        let max_age = self.max_age;
        let mut out = Vec::new();
        self.pending.retain(|p| {
            let late = p
                .first_seen
                .checked_add(max_age)
                .is_none_or(|deadline| now >= deadline);
            if late {
                out.push(Expired {
                    id: p.id,
                    received: p.bodies.len(),
                    total: p.total(),
                });
            }
            !late
        });
        out
    }
}

impl Pending {
    fn compressed(&self) -> bool {
        self.id & COMPRESSED_BIT != 0
    }

    fn total(&self) -> Option<usize> {
        let layout = self.layout?;
        self.bodies
            .iter()
            .filter_map(|b| parse(layout, b).ok())
            .find(|p| p.number == 0)
            .map(|p| p.total)
    }

    fn step(&mut self) -> Step {
        if self.layout.is_none() {
            let compressed = self.compressed();
            self.layout = self.bodies.iter().find_map(|b| detect(b, compressed));
        }
        let Some(layout) = self.layout else {
            return Step::Wait;
        };
        // Part 0 is the one detection recognised; it sets the total and the split size.
        let Some(first) = self
            .bodies
            .iter()
            .find(|b| detect(b, self.compressed()) == Some(layout))
            .and_then(|b| parse(layout, b).ok())
        else {
            return Step::Wait;
        };
        let (total, size) = (first.total, first.size);
        if total == 0 {
            return Step::Drop(DecodeError::Invalid("split total 0"));
        }
        if total > MAX_SPLIT_PARTS {
            return Step::Drop(DecodeError::TooLarge("split total"));
        }
        let mut error = None;
        let mut keep = Vec::with_capacity(self.bodies.len());
        let mut slots: Vec<Option<&[u8]>> = vec![None; total];
        for (i, body) in self.bodies.iter().enumerate() {
            let checked = parse(layout, body).and_then(|p| {
                if p.total != total {
                    Err(DecodeError::Invalid("split totals disagree"))
                } else if p.number >= total {
                    Err(DecodeError::Invalid("split number"))
                } else if p.size != size {
                    Err(DecodeError::Invalid("split sizes disagree"))
                } else if p.size.is_some_and(|s| p.payload.len() > usize::from(s)) {
                    Err(DecodeError::Invalid("split part larger than its size"))
                } else {
                    Ok(p)
                }
            });
            match checked {
                Ok(p) => {
                    keep.push(i);
                    if let Some(slot) = slots.get_mut(p.number) {
                        slot.get_or_insert(p.payload);
                    }
                }
                Err(e) => error = Some(e),
            }
        }
        let complete: Option<Vec<&[u8]>> = slots.into_iter().collect();
        if let Some(parts) = complete {
            let len: usize = parts.iter().map(|p| p.len()).sum();
            if len > MAX_MESSAGE {
                return Step::Drop(DecodeError::TooLarge("split reply"));
            }
            let joined = parts.concat();
            let compressed = self.compressed() && matches!(layout, Layout::Source { .. });
            return match finish_reply(joined, compressed) {
                Ok(reply) => Step::Done(reply),
                Err(e) => Step::Drop(e),
            };
        }
        match error {
            Some(e) => {
                let mut i = 0;
                self.bodies.retain(|_| {
                    let k = keep.contains(&i);
                    i += 1;
                    k
                });
                self.bytes = self.bodies.iter().map(Vec::len).sum();
                Step::Discarded(e)
            }
            None => Step::Wait,
        }
    }
}

/// Recognise part 0 of a reply and so its layout (see the module docs).
fn detect(body: &[u8], compressed: bool) -> Option<Layout> {
    let at = |from: usize, what: &[u8]| body.get(from..from + what.len()) == Some(what);
    // GoldSrc: number 0 in the high nibble, then the reply's own header.
    if body.first().is_some_and(|b| b >> 4 == 0) && at(1, &SIMPLE_HEADER) {
        return Some(Layout::GoldSrc);
    }
    if body.get(1) != Some(&0) {
        return None;
    }
    // Source, number 0. Without the size field the reply header starts at offset 2; a size
    // field of ffff would put ff bytes there too, but then byte 6 is ff as well, where a
    // reply has its type byte.
    if at(2, &SIMPLE_HEADER) && body.get(6) != Some(&0xFF) {
        return Some(Layout::Source { size_field: false });
    }
    if at(4, &SIMPLE_HEADER) {
        return Some(Layout::Source { size_field: true });
    }
    if compressed {
        // Decompressed size and CRC (8 bytes) precede the bzip2 stream.
        if at(10, BZIP2_MAGIC) {
            return Some(Layout::Source { size_field: false });
        }
        if at(12, BZIP2_MAGIC) {
            return Some(Layout::Source { size_field: true });
        }
    }
    None
}

fn parse(layout: Layout, body: &[u8]) -> Result<Part<'_>, DecodeError> {
    let mut r = Reader::new(body);
    let (total, number, size) = match layout {
        Layout::GoldSrc => {
            let b = r.u8("GoldSrc split number")?;
            (usize::from(b & 0x0F), usize::from(b >> 4), None)
        }
        Layout::Source { size_field } => {
            let total = usize::from(r.u8("split total")?);
            let number = usize::from(r.u8("split number")?);
            let size = if size_field {
                Some(r.u16_le("split size")?)
            } else {
                None
            };
            (total, number, size)
        }
    };
    Ok(Part {
        total,
        number,
        size,
        payload: r.rest(),
    })
}

/// Inflate a compressed reply (unless it is plainly not compressed) and check its header.
fn finish_reply(joined: Vec<u8>, compressed: bool) -> Result<Vec<u8>, DecodeError> {
    // A reply that already starts with the single-message header was not compressed whatever
    // the id's top bit says (a decision, spec §9).
    let reply = if compressed && !joined.starts_with(&SIMPLE_HEADER) {
        inflate(&joined)?
    } else {
        joined
    };
    if !reply.starts_with(&SIMPLE_HEADER) {
        return Err(DecodeError::BadMagic("reassembled reply"));
    }
    Ok(reply)
}

/// `decompressed_size:u32 crc32:u32 bzip2-stream` → the reply, never inflating past the
/// declared size (itself at most [`MAX_MESSAGE`]).
fn inflate(data: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut r = Reader::new(data);
    let size = usize::try_from(r.u32_le("bzip2 decompressed size")?)
        .map_err(|_| DecodeError::TooLarge("bzip2 decompressed size"))?;
    let crc = r.u32_le("bzip2 crc32")?;
    if size > MAX_MESSAGE {
        return Err(DecodeError::TooLarge("bzip2 decompressed size"));
    }
    let stream = r.rest();
    if !stream.starts_with(BZIP2_MAGIC) {
        return Err(DecodeError::BadMagic("bzip2 stream"));
    }
    let mut out = Vec::new();
    // One byte more than declared, to notice a stream that inflates beyond it.
    let limit = u64::try_from(size).unwrap_or(u64::MAX).saturating_add(1);
    bzip2::read::BzDecoder::new(stream)
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|_| DecodeError::Invalid("bzip2 stream"))?;
    if out.len() != size {
        return Err(DecodeError::Invalid("bzip2 size disagrees"));
    }
    if crc32fast::hash(&out) != crc {
        return Err(DecodeError::Invalid("bzip2 crc32"));
    }
    Ok(out)
}

/// Cut `reply` (what part 0 onwards carry: the message, or for a compressed Source reply its
/// size, CRC and bzip2 stream) into parts of at most `part_len` payload bytes, as a server
/// would. Returns no parts when the reply needs more than the layout can number.
#[must_use]
pub fn encode_parts(layout: Layout, id: u32, reply: &[u8], part_len: usize) -> Vec<Vec<u8>> {
    let chunks: Vec<&[u8]> = reply.chunks(part_len.max(1)).collect();
    let total = chunks.len();
    let max = match layout {
        Layout::GoldSrc => 15,
        Layout::Source { .. } => 255,
    };
    if total > max {
        return Vec::new();
    }
    let size = u16::try_from(part_len).unwrap_or(u16::MAX);
    chunks
        .iter()
        .enumerate()
        .map(|(n, chunk)| {
            let mut d = SPLIT_HEADER.to_vec();
            d.extend_from_slice(&id.to_le_bytes());
            // total <= 255 and n < total, checked above.
            let (t, k) = (
                u8::try_from(total).unwrap_or(u8::MAX),
                u8::try_from(n).unwrap_or(u8::MAX),
            );
            match layout {
                Layout::GoldSrc => d.push((k << 4) | t),
                Layout::Source { size_field } => {
                    d.extend_from_slice(&[t, k]);
                    if size_field {
                        d.extend_from_slice(&size.to_le_bytes());
                    }
                }
            }
            d.extend_from_slice(chunk);
            d
        })
        .collect()
}

#[cfg(test)]
mod tests;
