//! The list body: [`ListFile::decode`] (lenient, counted) and [`ListFile::encode`] (exact).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::num::NonZeroU16;

use super::{MAX_BODY, MAX_ENTRIES_PREALLOC, MAX_INVALID_KEPT, MAX_LINE, decode_text};
use crate::model::{ListedServer, Partial, ServerList, Text};
use crate::wire::DecodeError;

/// One server of the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// The server's IPv4 address.
    pub ip: Ipv4Addr,
    /// The game port (what players connect to; the UE2 native query is game port + 1).
    pub game_port: NonZeroU16,
    /// The GameSpy v1 query port.
    pub query_port: NonZeroU16,
}

impl Entry {
    /// The game address.
    #[must_use]
    pub fn game_address(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.ip, self.game_port.get())
    }

    /// The GameSpy query address.
    #[must_use]
    pub fn query_address(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.ip, self.query_port.get())
    }
}

/// An invalid line kept for diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidLine {
    /// 1-based line number.
    pub line: usize,
    /// The line as read (without its line end), see [`super::decode_text`].
    pub text: Text,
}

/// A parsed list: entries in file order and the counts of §3.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFile {
    /// Entries in file order, first occurrence of each (IP, game port).
    pub entries: Vec<Entry>,
    /// Lines that were not entries, blanks or comments.
    pub invalid: usize,
    /// Entries skipped because their (IP, game port) came earlier.
    pub duplicates: usize,
    /// Empty or whitespace-only lines.
    pub blank: usize,
    /// `#` comment lines.
    pub comments: usize,
    /// The first [`MAX_INVALID_KEPT`] invalid lines.
    pub invalid_lines: Vec<InvalidLine>,
}

impl ListFile {
    /// A list of `entries` as the writer would hold them: sorted by IP then game port, one per
    /// (IP, game port) (the first wins), all counts zero.
    #[must_use]
    pub fn from_entries(entries: impl IntoIterator<Item = Entry>) -> Self {
        let mut seen = std::collections::HashSet::new();
        let mut entries: Vec<Entry> = entries
            .into_iter()
            .filter(|e| seen.insert((e.ip, e.game_port)))
            .collect();
        entries.sort_by_key(|e| (e.ip, e.game_port));
        Self {
            entries,
            ..Self::default()
        }
    }

    /// Read a list body by the rules of spec §3. Only a body over [`MAX_BODY`] is an error
    /// ([`DecodeError::TooLarge`]); every bad line is counted and skipped.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        if body.len() > MAX_BODY {
            return Err(DecodeError::TooLarge("ut2003 list body"));
        }
        let body = body.strip_prefix(UTF8_BOM).unwrap_or(body);
        let mut out = Self {
            entries: Vec::with_capacity((body.len() / MIN_LINE_LEN).min(MAX_ENTRIES_PREALLOC)),
            ..Self::default()
        };
        let mut seen = std::collections::HashSet::new();
        let mut lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
        // The empty piece after a final LF is not a line.
        if lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        for (i, line) in lines.into_iter().enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            match classify(line) {
                Line::Blank => out.blank += 1,
                Line::Comment => out.comments += 1,
                Line::Invalid => {
                    out.invalid += 1;
                    if out.invalid_lines.len() < MAX_INVALID_KEPT {
                        out.invalid_lines.push(InvalidLine {
                            line: i + 1,
                            text: decode_text(line),
                        });
                    }
                }
                Line::Entry(e) => {
                    if seen.insert((e.ip, e.game_port)) {
                        out.entries.push(e);
                    } else {
                        out.duplicates += 1;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Write the entries as §4 says: one `IP TAB game TAB query LF` line each, sorted by IP
    /// (numerically) then game port, no header; nothing at all for an empty list. Entries
    /// whose (IP, game port) repeats are written once (the first in `entries` order).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut seen = std::collections::HashSet::new();
        let mut sorted: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| seen.insert((e.ip, e.game_port)))
            .collect();
        sorted.sort_by_key(|e| (e.ip, e.game_port));
        for e in sorted {
            out.extend_from_slice(e.ip.to_string().as_bytes());
            out.push(b'\t');
            out.extend_from_slice(e.game_port.to_string().as_bytes());
            out.push(b'\t');
            out.extend_from_slice(e.query_port.to_string().as_bytes());
            out.push(b'\n');
        }
    }

    /// What a reader reports about the list (spec §3: "412 servers, 3 invalid lines"):
    /// `4 servers, 5 invalid lines (6, 7, 8, 9, 11), 1 duplicate`. The line numbers are those
    /// of the kept invalid lines ([`MAX_INVALID_KEPT`]), `…` marks more.
    #[must_use]
    pub fn summary(&self) -> String {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut out = plural(self.entries.len(), "server", "servers");
        if self.invalid > 0 {
            let mut numbers: Vec<String> = self
                .invalid_lines
                .iter()
                .map(|l| l.line.to_string())
                .collect();
            if self.invalid > self.invalid_lines.len() {
                numbers.push("…".to_owned());
            }
            out.push_str(&format!(
                ", {} ({})",
                plural(self.invalid, "invalid line", "invalid lines"),
                numbers.join(", ")
            ));
        }
        if self.duplicates > 0 {
            out.push_str(&format!(
                ", {}",
                plural(self.duplicates, "duplicate", "duplicates")
            ));
        }
        out
    }

    /// The entries as a [`ServerList`]: `address` is the game address, `query_address` the
    /// GameSpy query address. Invalid lines make it partial, the reason being
    /// [`Self::summary`]: the file listed servers that could not be read.
    #[must_use]
    pub fn to_server_list(&self) -> ServerList {
        ServerList {
            servers: self
                .entries
                .iter()
                .map(|e| ListedServer {
                    address: SocketAddr::V4(e.game_address()),
                    query_address: Some(SocketAddr::V4(e.query_address())),
                })
                .collect(),
            partial: (self.invalid > 0).then(|| Partial {
                reason: self.summary(),
            }),
        }
    }
}

enum Line {
    Blank,
    Comment,
    Invalid,
    Entry(Entry),
}

fn classify(line: &[u8]) -> Line {
    if line.len() > MAX_LINE || !line.is_ascii() {
        return Line::Invalid;
    }
    let is_space = |b: &u8| *b == b' ' || *b == b'\t';
    let mut cols = line.split(is_space).filter(|c| !c.is_empty());
    let Some(first) = cols.next() else {
        return Line::Blank;
    };
    if first.first() == Some(&b'#') {
        return Line::Comment;
    }
    let (Some(port), Some(query), None) = (cols.next(), cols.next(), cols.next()) else {
        return Line::Invalid;
    };
    match (parse_ip(first), parse_port(port), parse_port(query)) {
        (Some(ip), Some(game_port), Some(query_port)) => Line::Entry(Entry {
            ip,
            game_port,
            query_port,
        }),
        _ => Line::Invalid,
    }
}

fn parse_ip(col: &[u8]) -> Option<Ipv4Addr> {
    std::str::from_utf8(col).ok()?.parse().ok()
}

/// 1 to 5 ASCII digits, value 1..=65535.
fn parse_port(col: &[u8]) -> Option<NonZeroU16> {
    if col.is_empty() || col.len() > 5 || !col.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(col).ok()?.parse().ok()
}

/// A UTF-8 byte-order mark, removed from the start of a body (§3 item 1).
const UTF8_BOM: &[u8] = &[0xef, 0xbb, 0xbf];
/// The shortest possible entry line, `1.1.1.1 1 1` plus LF, for preallocation.
const MIN_LINE_LEN: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Spec §3 test vector (244 bytes).
    const VECTOR: &[u8] = b"# Muster test list\r\n192.0.2.10\t7777\t7787\r\n\r\n192.0.2.10\t7797\t7807\r\n198.51.100.7 8980  8992\r\n192.0.2.300\t7777\t7787\r\n192.0.2.11\t7777\r\n192.0.2.12\t0\t7787\r\n192.0.2.13\t7777\t7787\tx\r\n192.0.2.10\t7777\t7788\r\nut2.example.org\t7777\t7787\r\n203.0.113.5\t7777\t7787";
    /// Spec §2 example (87 bytes).
    const WRITTEN: &[u8] = b"192.0.2.10\t7777\t7787\n192.0.2.10\t7797\t7807\n198.51.100.7\t8980\t8992\n203.0.113.5\t7777\t7787\n";

    fn entry(ip: &str, game: u16, query: u16) -> Entry {
        Entry {
            ip: ip.parse().unwrap(),
            game_port: NonZeroU16::new(game).unwrap(),
            query_port: NonZeroU16::new(query).unwrap(),
        }
    }

    #[test]
    fn decode_list_file() {
        assert_eq!(VECTOR.len(), 244);
        let l = ListFile::decode(VECTOR).unwrap();
        assert_eq!(
            l.entries,
            vec![
                entry("192.0.2.10", 7777, 7787),
                entry("192.0.2.10", 7797, 7807),
                entry("198.51.100.7", 8980, 8992),
                entry("203.0.113.5", 7777, 7787),
            ]
        );
        assert_eq!((l.invalid, l.duplicates, l.blank, l.comments), (5, 1, 1, 1));
        let lines: Vec<usize> = l.invalid_lines.iter().map(|i| i.line).collect();
        assert_eq!(lines, [6, 7, 8, 9, 11]);
        assert_eq!(l.invalid_lines[0].text.text, "192.0.2.300\t7777\t7787");
    }

    #[test]
    fn encode_list_file() {
        let l = ListFile::decode(VECTOR).unwrap();
        let mut out = vec![0xa5];
        l.encode(&mut out);
        assert_eq!(out.get(1..), Some(WRITTEN));
        assert_eq!(WRITTEN.len(), 87);
    }

    #[test]
    fn encode_list_file_sorts_numerically_and_empty_is_empty() {
        let l = ListFile {
            entries: vec![
                entry("10.0.0.2", 7777, 7787),
                entry("9.0.0.1", 7797, 7807),
                entry("9.0.0.1", 7777, 7787),
                entry("9.0.0.1", 7777, 9999),
            ],
            ..ListFile::default()
        };
        let mut out = Vec::new();
        l.encode(&mut out);
        assert_eq!(
            out,
            b"9.0.0.1\t7777\t7787\n9.0.0.1\t7797\t7807\n10.0.0.2\t7777\t7787\n"
        );
        let mut out = Vec::new();
        ListFile::default().encode(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn decode_list_file_rejects_oversized_body() {
        let body = vec![b'\n'; MAX_BODY + 1];
        assert_eq!(
            ListFile::decode(&body),
            Err(DecodeError::TooLarge("ut2003 list body"))
        );
    }

    #[test]
    fn quirk_bom_crlf_and_empty_bodies() {
        let l = ListFile::decode(b"\xef\xbb\xbf1.2.3.4\t1\t2\r\n").unwrap();
        assert_eq!(l.entries, vec![entry("1.2.3.4", 1, 2)]);
        assert_eq!(ListFile::decode(b"").unwrap(), ListFile::default());
        let l = ListFile::decode(b"  \t\n# c\n   # indented comment\n").unwrap();
        assert_eq!((l.blank, l.comments, l.entries.len()), (1, 2, 0));
    }

    #[test]
    fn quirk_strict_content() {
        for bad in [
            &b"01.2.3.4\t1\t2"[..],
            b"1.2.3.4\t65536\t2",
            b"1.2.3.4\t+5\t2",
            b"::1\t1\t2",
            b"1.2.3.4\t1\t2\xe9",
            b":: some master line",
        ] {
            let l = ListFile::decode(bad).unwrap();
            assert_eq!((l.invalid, l.entries.len()), (1, 0), "{bad:?}");
        }
        let long = [b"1.2.3.4\t1\t2".as_slice(), &[b' '; MAX_LINE]].concat();
        assert_eq!(ListFile::decode(&long).unwrap().invalid, 1);
    }

    #[test]
    fn invalid_lines_kept_are_capped() {
        let body = b"x\n".repeat(MAX_INVALID_KEPT + 5);
        let l = ListFile::decode(&body).unwrap();
        assert_eq!(l.invalid, MAX_INVALID_KEPT + 5);
        assert_eq!(l.invalid_lines.len(), MAX_INVALID_KEPT);
    }

    #[test]
    fn to_server_list_uses_both_ports() {
        let l = ListFile::from_entries([entry("192.0.2.10", 7777, 7787)]).to_server_list();
        assert_eq!(l.servers[0].address, "192.0.2.10:7777".parse().unwrap());
        assert_eq!(
            l.servers[0].query_address,
            Some("192.0.2.10:7787".parse().unwrap())
        );
    }

    fn entries() -> impl Strategy<Value = Vec<Entry>> {
        prop::collection::vec(
            (any::<[u8; 4]>(), 1..=u16::MAX, 1..=u16::MAX).prop_map(|(ip, g, q)| Entry {
                ip: ip.into(),
                game_port: NonZeroU16::new(g).unwrap(),
                query_port: NonZeroU16::new(q).unwrap(),
            }),
            0..30,
        )
    }

    proptest! {
        #[test]
        fn prop_decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let l = ListFile::decode(&bytes).unwrap();
            let lines = bytes.split(|&b| b == b'\n').count();
            prop_assert!(l.entries.len() + l.invalid + l.duplicates + l.blank + l.comments <= lines);
        }

        #[test]
        fn prop_round_trip(e in entries()) {
            let l = ListFile::from_entries(e);
            let mut out = Vec::new();
            l.encode(&mut out);
            prop_assert_eq!(ListFile::decode(&out), Ok(l));
        }
    }
}
