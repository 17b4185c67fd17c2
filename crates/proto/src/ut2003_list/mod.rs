//! The UT2003 plain-text master list: one `IPv4 TAB game port TAB GameSpy query port LF` line
//! per server, as Epic published it over HTTP and as Muster's master publishes it again.
//!
//! ```text
//! 192.0.2.10<TAB>7777<TAB>7787<LF>
//! 198.51.100.7<TAB>8980<TAB>8992<LF>
//! ```
//!
//! [`packet::ListFile::decode`] reads a list leniently (spec §3: BOM, CR LF, blank lines,
//! `#` comments, runs of spaces and tabs, invalid lines skipped and counted, duplicates
//! dropped); [`packet::ListFile::encode`] writes it exactly (§4: sorted, tabs, LF, no header).
//!
//! What this module deliberately does **not** do: no HTTP (the master and the client's
//! fetcher move the body), no hostnames or IPv6 (the format never carried them), and nothing
//! of Epic's native CD-key master on TCP 28902 (§5).
//!
//! Reference: `docs/protocols/ut2003-list.md`; qstat `info/UT2003.txt`; XQF `src/stat.c`.

pub mod packet;

pub use packet::{Entry, InvalidLine, ListFile};

use crate::model::Text;
use crate::text::decode_windows1252;

/// Largest list body read; a larger one is refused as a whole (§3 item 1).
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// Longest valid line in bytes (without its line end); longer lines are invalid (§3 item 3).
pub const MAX_LINE: usize = 1024;

/// How many invalid lines are kept for diagnostics (§3 item 9).
pub const MAX_INVALID_KEPT: usize = 10;

/// Never preallocate more entries than this, whatever the body size suggests.
pub const MAX_ENTRIES_PREALLOC: usize = 4096;

/// Decode a line of the list for diagnostics.
///
/// Valid lines are ASCII by definition; an invalid line may hold anything, so it is decoded
/// as Windows-1252, which maps every byte (never lossy). `plain` turns tabs into spaces and
/// drops other control characters.
/// Invalid lines longer than [`MAX_LINE`] are kept truncated to [`MAX_LINE`] bytes.
#[must_use]
pub fn decode_text(raw: &[u8]) -> Text {
    let raw = raw.get(..MAX_LINE).unwrap_or(raw);
    let text = decode_windows1252(raw);
    let plain = text
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .filter(|c| !c.is_control())
        .collect();
    Text {
        raw: raw.to_vec(),
        text,
        plain,
        lossy: false,
    }
}
