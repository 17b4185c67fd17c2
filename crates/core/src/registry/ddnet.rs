//! What DDNet's HTTP register adds to a record: its streams (addresses per protocol), its
//! secret and its info.

use std::fmt;
use std::sync::Arc;

use super::infos::DdnetInfo;
use super::key::{GameAddr, Timestamp};

/// Largest DDNet info object kept per server, in bytes: DDNet's own master refuses register
/// bodies over 32 KiB (`teeworlds-master.md` §3.6), so no real server sends more.
pub const MAX_DDNET_INFO: usize = 32 * 1024;
/// Most addresses (streams) one DDNet server may register.
pub const MAX_DDNET_STREAMS: usize = 8;

/// The URL schemes of the streams a DDNet server registers (`teeworlds-master.md` §3.1).
pub const DDNET_STREAM_SCHEMES: [&str; 3] = ["tw-0.5+udp", "tw-0.6+udp", "tw-0.7+udp"];

/// One address (stream) a DDNet server registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdnetStream {
    url: StreamUrl,
    /// Its last successful register POST.
    pub last: Timestamp,
}

/// A stream's URL. The master lists a stream at the address it was registered from, so a URL
/// is nearly always `<scheme>://<the record's address>`: then only the scheme is kept, and
/// the URL is spelled again from the record's address when asked for (an `Arc<str>` of it took
/// ~60 bytes per DDNet server).
#[derive(Debug, Clone, PartialEq, Eq)]
enum StreamUrl {
    /// `<DDNET_STREAM_SCHEMES[i]>://<the record's address>`.
    Own(u8),
    /// Any other URL, as given.
    Other(Arc<str>),
}

const _: () = assert!(size_of::<DdnetStream>() <= 24);

impl DdnetStream {
    /// The stream listed under `url`, of the record at `addr`, last registered at `last`.
    #[must_use]
    pub fn new(url: &str, addr: &GameAddr, last: Timestamp) -> Self {
        let own = url.split_once("://").and_then(|(scheme, rest)| {
            let i = DDNET_STREAM_SCHEMES.iter().position(|s| *s == scheme)?;
            (rest == addr.to_string()).then(|| u8::try_from(i).ok())?
        });
        Self {
            url: own.map_or_else(|| StreamUrl::Other(Arc::from(url)), StreamUrl::Own),
            last,
        }
    }

    /// The URL as listed in `servers.json` (`tw-0.7+udp://1.2.3.4:8303`), for the stream of
    /// the record at `addr`.
    #[must_use]
    pub fn url(&self, addr: &GameAddr) -> std::borrow::Cow<'_, str> {
        match &self.url {
            StreamUrl::Own(i) => {
                let scheme = DDNET_STREAM_SCHEMES
                    .get(usize::from(*i))
                    .copied()
                    .unwrap_or_default();
                std::borrow::Cow::Owned(format!("{scheme}://{addr}"))
            }
            StreamUrl::Other(u) => std::borrow::Cow::Borrowed(u),
        }
    }

    /// Whether this stream of the record at `addr` is listed under `url`.
    #[must_use]
    pub fn is(&self, url: &str, addr: &GameAddr) -> bool {
        match &self.url {
            StreamUrl::Own(_) => self.url(addr) == url,
            StreamUrl::Other(u) => **u == *url,
        }
    }
}

/// A DDNet server's `Secret` (`teeworlds-master.md` §3.1): a random UUID per server process.
/// A UUID in its usual spelling (lower-case hex in 8-4-4-4-12 groups) is kept as its 16 bytes,
/// and spelled again the same way: a string of it took ~56 bytes of heap per DDNet server. Any
/// other text is kept as given.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum DdnetSecret {
    /// A UUID, as its bytes.
    Uuid([u8; 16]),
    /// Any other secret, as given.
    Text(Arc<str>),
}

impl DdnetSecret {
    /// Bytes per hyphen-separated group of a UUID's usual spelling (8-4-4-4-12 hex digits).
    const GROUPS: [usize; 5] = [4, 2, 2, 2, 6];

    /// The bytes of `s` when it is a UUID in its usual spelling.
    fn uuid_of(s: &str) -> Option<[u8; 16]> {
        // Lower case only: upper case would not be spelled back the same.
        if s.bytes().any(|c| c.is_ascii_uppercase()) {
            return None;
        }
        let mut out = [0u8; 16];
        let mut parts = s.split('-');
        let mut at = 0;
        for n in Self::GROUPS {
            hex::decode_to_slice(parts.next()?, out.get_mut(at..at + n)?).ok()?;
            at += n;
        }
        parts.next().is_none().then_some(out)
    }
}

impl From<&str> for DdnetSecret {
    fn from(s: &str) -> Self {
        Self::uuid_of(s).map_or_else(|| Self::Text(Arc::from(s)), Self::Uuid)
    }
}

impl fmt::Display for DdnetSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Uuid(b) => {
                let mut rest = &b[..];
                for (i, n) in Self::GROUPS.into_iter().enumerate() {
                    let (group, tail) = rest.split_at(n.min(rest.len()));
                    if i > 0 {
                        f.write_str("-")?;
                    }
                    group.iter().try_for_each(|byte| write!(f, "{byte:02x}"))?;
                    rest = tail;
                }
                Ok(())
            }
            Self::Text(t) => f.write_str(t),
        }
    }
}

impl fmt::Debug for DdnetSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DdnetSecret({self})")
    }
}

/// What a DDNet server registered at a record's address (`teeworlds-master.md` §3.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdnetData {
    /// The server's `Secret`; the addresses of one secret are one `servers.json` entry.
    pub secret: DdnetSecret,
    /// The `Info-Serial` of `info`.
    pub serial: i64,
    /// The info object exactly as registered (compact JSON, at most [`MAX_DDNET_INFO`] bytes);
    /// in the registry's info file once the registry holds it.
    pub info: DdnetInfo,
    /// The streams registered at this address, sorted by URL (a boxed slice: nearly every
    /// server has one, and a `Vec`'s capacity would take the data into the next allocator
    /// size class).
    pub streams: Box<[DdnetStream]>,
}

// The data and its `Arc` counts fill one 80-byte allocator size class.
const _: () = assert!(size_of::<DdnetData>() <= 64);
