//! The `servers.json` document: built from the view off the reactor (one build at a time),
//! kept in an unnamed file or a memory file ([`MemFile`]), its gzip form made once per
//! document; the rules of when a request waits for a rebuild are in [`super`]'s docs.
//!
//! Does not: answer HTTP (the routes do), or limit who asks.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, header};
use serde_json::{Value, json};

use super::request::StreamProtocol;
use super::{FRESH_BUILD, lock, stream_url};
use crate::teeworlds::LISTED_BY_07;
use muster_core::MasterHandle;
use muster_core::memfile::MemFile;
use muster_core::registry::{DdnetInfo, DdnetSecret, Face, GameAddr, PollInfo, TEEWORLDS_GAMES};
use muster_core::views::Snapshot;

/// One built `servers.json`: the snapshot content version it shows, when it was built and
/// what the build cost; its gzip form once a request asked for it.
#[derive(Debug)]
pub(super) struct Doc {
    /// Unique per build in this process (for the ETag).
    id: u64,
    version: u64,
    built: Instant,
    cost: Duration,
    pub(super) plain: MemFile,
    pub(super) gz: tokio::sync::OnceCell<MemFile>,
    /// The plain and gzip bytes in memory, read once for the router's answers (conditional,
    /// cross-origin and HEAD requests, HTTP/1.0) if any come.
    pub(super) heap_plain: tokio::sync::OnceCell<Bytes>,
    pub(super) heap_gz: tokio::sync::OnceCell<Bytes>,
}

impl Doc {
    /// The ETag of the plain or gzip form: names this build, so that the middleware that
    /// hashes other bodies skips this one.
    pub(super) fn tag(&self, gzip: bool) -> String {
        format!(
            "\"sj-{:x}-{:x}{}\"",
            process_nonce() ^ self.id,
            self.plain.len(),
            if gzip { "-gz" } else { "" }
        )
    }

    /// The headers of the plain or gzip form, whether sent from the file or by the router.
    /// `Content-Encoding` only for the gzip form, as nginx sends a file (the router's answer
    /// is marked [`crate::runtime::http::Precompressed`], so the HTTP layer does not compress it again).
    pub(super) fn headers(&self, gzip: bool) -> Vec<(header::HeaderName, String)> {
        let mut h = vec![
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::VARY, "accept-encoding".to_owned()),
            (header::ETAG, self.tag(gzip)),
            (header::CACHE_CONTROL, "no-cache".to_owned()),
        ];
        if gzip {
            h.push((header::CONTENT_ENCODING, "gzip".to_owned()));
        }
        h
    }
}

/// The current document and whether a rebuild runs.
#[derive(Debug, Default)]
struct Docs {
    doc: Option<Arc<Doc>>,
    building: bool,
}

/// The documents of one face: the current one and its rebuilds.
#[derive(Debug)]
pub(super) struct ServersJson {
    handle: MasterHandle,
    /// Where the files are made ([`super::DdnetSettings::body_dir`]).
    body_dir: Option<std::path::PathBuf>,
    docs: Mutex<Docs>,
    /// Woken when a rebuild ends.
    built: tokio::sync::Notify,
}

impl ServersJson {
    pub(super) fn new(handle: MasterHandle, body_dir: Option<std::path::PathBuf>) -> Arc<Self> {
        Arc::new(Self {
            handle,
            body_dir,
            docs: Mutex::new(Docs::default()),
            built: tokio::sync::Notify::new(),
        })
    }
}

pub(super) fn accepts_gzip(headers: &HeaderMap) -> bool {
    accepts_gzip_in(
        headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .map(HeaderValue::as_bytes),
    )
}

/// Whether these `Accept-Encoding` values accept gzip.
pub(super) fn accepts_gzip_in<'a>(values: impl Iterator<Item = &'a [u8]>) -> bool {
    values
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .any(|e| {
            let mut it = e.split(';');
            let name = it.next().unwrap_or_default().trim();
            let q0 = it.any(|p| p.trim().replace(' ', "") == "q=0");
            name.eq_ignore_ascii_case("gzip") && !q0
        })
}

/// The document to serve now (see the module docs): the current one when it shows the latest
/// snapshot, or when it is costly and was built less than four of its costs ago, or while a
/// background rebuild of a costly one runs; else the one a rebuild makes (one at a time).
pub(super) async fn current_document(face: &Arc<ServersJson>, now: Instant) -> Arc<Doc> {
    loop {
        let view = face.handle.snapshot();
        // Registered before looking, so that a rebuild ending in between is not missed.
        let built = face.built.notified();
        tokio::pin!(built);
        built.as_mut().enable();
        let next = {
            let mut docs = lock(&face.docs);
            let costly = docs.doc.as_ref().is_some_and(|d| d.cost > FRESH_BUILD);
            let fresh = docs.doc.as_ref().is_some_and(|d| {
                d.version == view.content_version()
                    || (costly && now.saturating_duration_since(d.built) < d.cost.saturating_mul(4))
            });
            match docs.doc.clone() {
                Some(d) if fresh || (costly && docs.building) => Next::Serve(d),
                _ if docs.building => Next::Wait,
                stale => {
                    docs.building = true;
                    let f = Arc::clone(face);
                    let job = tokio::spawn(async move { rebuild(&f, view).await });
                    match stale.filter(|_| costly) {
                        Some(d) => Next::Serve(d),
                        None => Next::Join(job),
                    }
                }
            }
        };
        match next {
            Next::Serve(d) => return d,
            Next::Join(job) => match job.await {
                Ok(d) => return d,
                Err(_) => {
                    // The rebuild task died: let the next request try again.
                    lock(&face.docs).building = false;
                    face.built.notify_waiters();
                }
            },
            Next::Wait => built.await,
        }
    }
}

/// What a request does about the document.
enum Next {
    Serve(Arc<Doc>),
    Join(tokio::task::JoinHandle<Arc<Doc>>),
    Wait,
}

/// Builds the document of `view` off the reactor and makes it current.
async fn rebuild(face: &ServersJson, view: Arc<Snapshot>) -> Arc<Doc> {
    // The builder, a task of its own like the publisher, times its builds.
    let t = muster_core::clock::now();
    let version = view.content_version();
    let dir = face.body_dir.clone();
    let plain = muster_core::bulk::spawn(move || {
        MemFile::written_in(dir.as_deref(), "servers.json", |out| {
            write_document(&view, out)
        })
    })
    .await
    .unwrap_or(MemFile::Heap(Bytes::new()));
    let doc = Arc::new(Doc {
        id: next_doc_id(),
        version,
        built: muster_core::clock::now(),
        cost: muster_core::clock::now().saturating_duration_since(t),
        plain,
        gz: tokio::sync::OnceCell::new(),
        heap_plain: tokio::sync::OnceCell::new(),
        heap_gz: tokio::sync::OnceCell::new(),
    });
    {
        let mut docs = lock(&face.docs);
        docs.doc = Some(Arc::clone(&doc));
        docs.building = false;
    }
    face.built.notify_waiters();
    doc
}

/// The gzip form of `doc`, made once (off the reactor) by the first request that asks.
pub(super) async fn gzipped(face: &ServersJson, doc: &Doc) -> MemFile {
    doc.gz
        .get_or_init(|| async {
            let src = doc.plain.clone();
            let dir = face.body_dir.clone();
            muster_core::bulk::spawn(move || {
                // Streamed from one file into the other: neither form is held whole.
                MemFile::written_in(dir.as_deref(), "servers.json.gz", |out| {
                    let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
                    src.write_to(&mut e)?;
                    e.finish().map(drop)
                })
            })
            .await
            .unwrap_or(MemFile::Heap(Bytes::new()))
        })
        .await
        .clone()
}

/// A number for each document built by this process.
fn next_doc_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A random number drawn once per process, so ETags of two processes never collide.
fn process_nonce() -> u64 {
    static NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NONCE.get_or_init(rand::random)
}

/// Where an address sorts in `servers.json`: IP, port, protocol (as the reference master
/// orders them; a stored scheme it does not know sorts before the known ones), then the URL
/// (borrowed from the snapshot when it keeps one, spelled once when it keeps only a scheme).
type AddrKey<'a> = (
    IpAddr,
    u16,
    Option<StreamProtocol>,
    std::borrow::Cow<'a, str>,
);

fn addr_key(addr: SocketAddr, url: std::borrow::Cow<'_, str>) -> AddrKey<'_> {
    let protocol = url
        .split_once("://")
        .and_then(|(scheme, _)| StreamProtocol::from_scheme(scheme));
    (addr.ip(), addr.port(), protocol, url)
}

/// One `servers.json` entry: its addresses, and the info as registered (with its serial) or
/// as made from a poll.
enum EntryInfo {
    Registered(i64, DdnetInfo),
    Made(Value),
}

/// `servers.json` of `view`: every listed Teeworlds or DDNet server
/// with an IP address. Addresses registered by one DDNet `Secret` are one entry with the info
/// as registered. Servers of the Teeworlds UDP faces (not at an address a DDNet server
/// registered) get an info made from their last poll, one address each; they are sorted in
/// with the others, as the reference master sorts the entries it imports from the old UDP
/// masters with its own. Entries are ordered by their sorted address lists, so with DDNet
/// registrations only the document is the reference master's, byte for byte.
///
/// Not kept in the snapshot's cache: the route's current document is its one owner, so a
/// snapshot that outlives it (a reader still holding it, heartbeat-only successors sharing
/// its cache) does not keep a second copy of the largest thing the master holds.
#[must_use]
pub fn document(s: &Snapshot) -> Bytes {
    let mut out = Vec::new();
    // Writing to memory cannot fail.
    let _ = write_document(s, &mut out);
    Bytes::from(out)
}

/// Writes [`document`] to `out` entry by entry (the route streams it into its file: the
/// document is never held whole in the heap).
fn write_document(s: &Snapshot, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut entries: Vec<(Vec<AddrKey<'_>>, EntryInfo)> = Vec::new();
    let mut by_secret: std::collections::HashMap<&DdnetSecret, usize> =
        std::collections::HashMap::new();
    let mut seen = std::collections::HashSet::new();
    let teeworlds =
        |r: &&Arc<muster_core::registry::Record>| TEEWORLDS_GAMES.contains(&r.key.game.as_str());
    for (i, r) in s.listed().iter().filter(teeworlds).enumerate() {
        muster_core::bulk::pace(i);
        let (GameAddr::Ip(addr), Some(d)) = (&r.key.addr, r.ddnet()) else {
            continue;
        };
        if d.streams.is_empty() {
            continue;
        }
        let addr = *addr;
        seen.insert(addr);
        let keys = d
            .streams
            .iter()
            .map(|st| addr_key(addr, st.url(&r.key.addr)));
        let fresh = || EntryInfo::Registered(d.serial, d.info.clone());
        match by_secret.get(&d.secret).and_then(|&i| entries.get_mut(i)) {
            Some((addrs, info)) => {
                addrs.extend(keys);
                if matches!(info, EntryInfo::Registered(serial, _) if *serial < d.serial) {
                    *info = fresh();
                }
            }
            None => {
                by_secret.insert(&d.secret, entries.len());
                entries.push((keys.collect(), fresh()));
            }
        }
    }
    for r in s.listed().iter().filter(teeworlds) {
        let GameAddr::Ip(addr) = r.key.addr else {
            continue;
        };
        if r.ddnet().is_some() || (!LISTED_BY_07.contains(&r.face) && r.face != Face::Teeworlds06) {
            continue;
        }
        let Some(info) = &r.info else { continue };
        if !seen.insert(addr) {
            continue;
        }
        let protocol = if r.face == Face::Teeworlds07 {
            StreamProtocol::V7
        } else {
            StreamProtocol::V6
        };
        entries.push((
            vec![addr_key(addr, stream_url(protocol, addr).into())],
            EntryInfo::Made(synthesized_info(info)),
        ));
    }
    for (addrs, _) in &mut entries {
        addrs.sort();
        addrs.dedup();
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    out.write_all(b"{\"servers\":[")?;
    let mut written = 0usize;
    // How many infos could not be read, and the first error.
    let mut unreadable: (usize, Option<std::io::Error>) = (0, None);
    for (i, (addrs, info)) in entries.into_iter().enumerate() {
        muster_core::bulk::pace(i);
        // Read before the entry starts: an info that cannot be read leaves its server out.
        let info = match info {
            EntryInfo::Registered(_, i) => match i.bytes() {
                Ok(raw) => Ok(raw),
                Err(e) => {
                    unreadable.0 += 1;
                    unreadable.1.get_or_insert(e);
                    continue;
                }
            },
            EntryInfo::Made(v) => Err(v),
        };
        if written > 0 {
            out.write_all(b",")?;
        }
        written += 1;
        out.write_all(b"{\"addresses\":")?;
        let urls: Vec<&str> = addrs.iter().map(|k| &*k.3).collect();
        serde_json::to_writer(&mut *out, &urls)?;
        if let Some(l) = addrs
            .iter()
            .find_map(|k| muster_core::locations::of_ip(k.0))
        {
            out.write_all(b",\"location\":")?;
            serde_json::to_writer(&mut *out, &*l)?;
        }
        out.write_all(b",\"info\":")?;
        match info {
            Ok(raw) => out.write_all(&raw)?,
            Err(made) => serde_json::to_writer(&mut *out, &made)?,
        }
        out.write_all(b"}")?;
    }
    if let (n, Some(e)) = unreadable {
        tracing::warn!(
            unreadable = n,
            error = %e,
            "servers left out of servers.json: their info could not be read"
        );
    }
    out.write_all(b"]}\n")
}

/// A `servers.json` info object from what the registry knows (restored or polled records),
/// shaped to pass the DDNet 16.4 client's checks.
fn synthesized_info(p: &PollInfo) -> Value {
    let max_players = i64::from(p.max_players);
    let players: Vec<Value> = p
        .players()
        .iter()
        .enumerate()
        .map(|(i, pl)| {
            json!({
                "name": pl.name,
                "clan": "",
                "country": -1,
                "score": pl.score().unwrap_or(0),
                "is_player": i64::try_from(i).unwrap_or(i64::MAX) < max_players,
            })
        })
        .collect();
    let max_clients = max_players.max(i64::try_from(players.len()).unwrap_or(i64::MAX));
    let [name, map, game_type] = p.texts();
    json!({
        "max_clients": max_clients,
        "max_players": max_players,
        "passworded": p.password.unwrap_or(false),
        "game_type": game_type,
        "name": name,
        "map": {"name": map},
        "version": "",
        "clients": players,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::teeworlds::ddnet::normalized_info;
    use muster_core::registry::PollFields;
    use muster_proto::teeworlds_master::RegisterInfo;

    #[test]
    fn normalized_info_is_compact_and_keeps_order() {
        let raw = br#" { "b" : 1 , "a" : [ "x y" , "q\" z" ] , "c":{ } } "#;
        assert_eq!(
            normalized_info(raw).unwrap(),
            br#"{"b":1,"a":["x y","q\" z"],"c":{}}"#.to_vec()
        );
        assert_eq!(normalized_info(b"{nope"), None);
    }

    #[test]
    fn addresses_sort_by_ip_port_protocol() {
        let a: SocketAddr = "10.0.0.2:8303".parse().unwrap();
        let b: SocketAddr = "10.0.0.10:8300".parse().unwrap();
        let mut keys = [
            addr_key(b, stream_url(StreamProtocol::V6, b).into()),
            addr_key(a, stream_url(StreamProtocol::V7, a).into()),
            addr_key(a, stream_url(StreamProtocol::V6, a).into()),
        ];
        keys.sort();
        let urls: Vec<&str> = keys.iter().map(|k| &*k.3).collect();
        // Not the URLs' text order ("10.0.0.10" < "10.0.0.2", "tw-0.6" < "tw-0.7").
        assert_eq!(
            urls,
            [
                "tw-0.6+udp://10.0.0.2:8303",
                "tw-0.7+udp://10.0.0.2:8303",
                "tw-0.6+udp://10.0.0.10:8300"
            ]
        );
    }

    #[test]
    fn gzip_is_offered_when_accepted() {
        let mut h = HeaderMap::new();
        assert!(!accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br, gzip;q=0.8"),
        );
        assert!(accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=0, br"),
        );
        assert!(!accepts_gzip(&h));
    }

    #[test]
    fn synthesized_info_passes_the_client_rules() {
        let p = PollInfo::from(PollFields {
            name: "n".into(),
            map: "m".into(),
            game_type: "g".into(),
            num_players: 3,
            max_players: 2,
            players: (0..3)
                .map(|i| {
                    muster_core::registry::PollPlayer::new(format!("p{i}")).with_score(Some(i))
                })
                .collect(),
            ..PollFields::default()
        });
        let v = synthesized_info(&p);
        let info: RegisterInfo = serde::Deserialize::deserialize(&v).unwrap();
        info.check_client_rules().unwrap();
    }
}
