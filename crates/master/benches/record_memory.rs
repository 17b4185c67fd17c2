//! Live heap per server, counted by the allocator: N servers register through a face's own
//! path into a [`MasterHandle`] with a store that keeps nothing, the snapshot is published and
//! a list is served, as `muster-bench` does with the daemon; then every server refreshes once
//! (the same exchange again). After each phase it prints the bytes still allocated per server:
//! as requested, and rounded up to mimalloc's size classes (what the daemon's allocator hands
//! out for them), and the blocks; and the most allocated at once during the phase (its
//! transient copies included: old snapshots, caches rebuilt). Unlike a resident-set reading this does not move with the
//! machine: the same build gives the same figures.
//!
//! Two faces, as `muster-bench quake3` and `muster-bench valve` drive them:
//! - Quake III (the default): `heartbeat` → `getinfo` → `infoResponse`, then `getservers`.
//! - Half-Life / Xash3D (`valve`): challenge request → challenge → heartbeat (protocol 48, 4 of
//!   16 players, game directory `valve`, map `crossfire`, version 0.21, region 255), then a
//!   list request filtered by `\gamedir\valve\clver\0.21`.
//!
//! `cargo bench -p muster-master --bench record_memory -- 100000` (the default size);
//! `cargo bench -p muster-master --bench record_memory -- valve 20000`.

// A report: its figures go to standard output.
#![allow(clippy::print_stdout)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use muster_master::MasterHandle;
use muster_master::faces::quake3::{Quake3Face, Quake3Settings};
use muster_master::faces::valve::{ValveFace, ValveSettings};
use muster_master::registry::{PollInfo, Record, RegistryConfig, Timestamp};
use muster_master::runtime::udp::{Cx, Datagrams, Outbox, UdpMachine};
use muster_master::store::NullStore;
use muster_proto::limit::BucketConfig;
use muster_proto::valve_master::packet::{
    ChallengeReply, ChallengeRequest, Heartbeat, ListRequest, Region, SEED, ServerPacket,
};
use tracking_allocator::{
    AllocationGroupId, AllocationRegistry, AllocationTracker, Allocator as Tracking,
};

#[global_allocator]
static GLOBAL: Tracking<std::alloc::System> = Tracking::system();

/// Bytes requested and not freed.
static LIVE: AtomicI64 = AtomicI64::new(0);
/// The same blocks in mimalloc's size classes.
static LIVE_CLASS: AtomicI64 = AtomicI64::new(0);
/// Blocks not freed.
static BLOCKS: AtomicI64 = AtomicI64::new(0);
/// The most [`LIVE_CLASS`] reached since the last [`reset_peak`]: what a phase needed at
/// once, its transient copies (old snapshots, caches being rebuilt) included.
static PEAK_CLASS: AtomicI64 = AtomicI64::new(0);

/// Starts a new peak from what is allocated now.
fn reset_peak() {
    PEAK_CLASS.store(LIVE_CLASS.load(Relaxed), Relaxed);
}

/// The size mimalloc gives a request of `size` bytes: whole words up to 64 bytes, then four
/// classes per power of two (80, 96, 112, 128, 160, …); past 128 KiB, what was asked.
fn mi_class(size: usize) -> usize {
    let words = size.div_ceil(8).max(1);
    if words <= 8 || words > 16 * 1024 {
        return words * 8;
    }
    let w = words - 1;
    let top = usize::BITS - 1 - w.leading_zeros();
    let step = 1usize << (top - 2);
    ((w >> (top - 2)) + 1) * step * 8
}

struct Counter;

impl AllocationTracker for Counter {
    fn allocated(&self, _: usize, size: usize, _: usize, _: AllocationGroupId) {
        LIVE.fetch_add(i64::try_from(size).unwrap_or(0), Relaxed);
        let class = i64::try_from(mi_class(size)).unwrap_or(0);
        let now = LIVE_CLASS.fetch_add(class, Relaxed) + class;
        PEAK_CLASS.fetch_max(now, Relaxed);
        BLOCKS.fetch_add(1, Relaxed);
    }

    fn deallocated(
        &self,
        _: usize,
        size: usize,
        _: usize,
        _: AllocationGroupId,
        _: AllocationGroupId,
    ) {
        LIVE.fetch_sub(i64::try_from(size).unwrap_or(0), Relaxed);
        LIVE_CLASS.fetch_sub(i64::try_from(mi_class(size)).unwrap_or(0), Relaxed);
        BLOCKS.fetch_sub(1, Relaxed);
    }
}

#[derive(Clone, Copy)]
struct Reading {
    live: i64,
    class: i64,
    blocks: i64,
}

fn read() -> Reading {
    Reading {
        live: LIVE.load(Relaxed),
        class: LIVE_CLASS.load(Relaxed),
        blocks: BLOCKS.load(Relaxed),
    }
}

/// The address of server `i`: 100 per `127.x.y.z`, ports from 20000, as `muster-bench` gives.
fn server(i: usize) -> SocketAddr {
    let a = u32::try_from(i / 100).unwrap_or(0) + 1;
    let ip = Ipv4Addr::from(0x7f00_0000 | a);
    SocketAddr::from((ip, 20000 + u16::try_from(i % 100).unwrap_or(0)))
}

fn dgram(text: &str) -> Vec<u8> {
    let mut d = vec![0xFF; 4];
    d.extend_from_slice(text.as_bytes());
    d
}

/// The `infoResponse` `muster-bench quake3` sends for server `i`.
fn info_response(i: usize, challenge: &str) -> Vec<u8> {
    dgram(&format!(
        "infoResponse\n\\gamename\\BenchGame\\modname\\data\\gameversion\\20000\\sv_maxclients\\16\
         \\clients\\4\\bots\\0\\mapname\\stormkeep\\hostname\\Bench server {i}\\protocol\\3\
         \\challenge\\{challenge}"
    ))
}

/// A face the bench registers servers through, and how.
trait Family {
    /// What the report calls its servers.
    const SERVERS: &'static str;
    /// The face.
    type Face: UdpMachine;
    /// The face, taking `n` servers from one source without limiting them.
    fn face(n: usize, now: Instant) -> Self::Face;
    /// Server `i`'s exchange with the face; whether it was registered or refreshed.
    fn register(b: &mut Bench<Self>, i: usize) -> bool
    where
        Self: Sized;
    /// A client's list request.
    fn list_request() -> Vec<u8>;
}

/// Quake III servers, as `muster-bench quake3` sends them.
struct Quake3;

impl Family for Quake3 {
    const SERVERS: &'static str = "Quake III";
    type Face = Quake3Face;

    fn face(n: usize, now: Instant) -> Quake3Face {
        let settings = Quake3Settings {
            allow_loopback: true,
            heartbeats: BucketConfig::one_every(1_000_000, Duration::from_micros(1)),
            max_per_source: n,
            max_servers: n.saturating_mul(2),
            ..Quake3Settings::default()
        };
        Quake3Face::new(settings, 7, now)
    }

    fn register(b: &mut Bench<Self>, i: usize) -> bool {
        let from = server(i);
        let out = b.datagram(from, &dgram("heartbeat DarkPlaces\n"));
        let Some(Datagrams::One(getinfo)) = out.replies.first().map(|r| &r.datagrams) else {
            return false;
        };
        let challenge = String::from_utf8_lossy(getinfo.get(12..).unwrap_or_default()).into_owned();
        let out = b.datagram(from, &info_response(i, &challenge));
        out.drops.is_empty()
    }

    fn list_request() -> Vec<u8> {
        dgram("getservers BenchGame 3")
    }
}

/// Half-Life / Xash3D servers, as `muster-bench valve` sends them.
struct Valve;

/// The filter of `muster-bench valve`'s list requests.
const VALVE_FILTER: &[u8] = b"\\gamedir\\valve\\clver\\0.21";

/// The heartbeat `muster-bench valve` sends for server `i`.
fn valve_heartbeat(i: usize, challenge: u32) -> Vec<u8> {
    let pairs: [(&str, String); 15] = [
        ("protocol", "48".to_owned()),
        ("challenge", challenge.to_string()),
        ("players", "4".to_owned()),
        ("max", "16".to_owned()),
        ("bots", "0".to_owned()),
        ("gamedir", "valve".to_owned()),
        ("map", "crossfire".to_owned()),
        ("type", "d".to_owned()),
        ("password", "0".to_owned()),
        ("os", "l".to_owned()),
        ("secure", "0".to_owned()),
        ("lan", "0".to_owned()),
        ("version", "0.21".to_owned()),
        ("region", "255".to_owned()),
        ("product", format!("bench{}", i % 7)),
    ];
    ServerPacket::Heartbeat(Heartbeat::new(
        pairs
            .into_iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.into_bytes()))
            .collect(),
    ))
    .encode()
}

impl Family for Valve {
    const SERVERS: &'static str = "Half-Life / Xash3D";
    type Face = ValveFace;

    fn face(_: usize, now: Instant) -> ValveFace {
        let settings = ValveSettings {
            allow_loopback: true,
            heartbeats: BucketConfig::one_every(1_000_000, Duration::from_micros(1)),
            ..ValveSettings::default()
        };
        ValveFace::new(settings, 7, now)
    }

    fn register(b: &mut Bench<Self>, i: usize) -> bool {
        let from = server(i);
        let own = u32::try_from(i).unwrap_or(0) ^ 0x5A5A_0000;
        let ask = ServerPacket::Challenge(ChallengeRequest {
            server_challenge: Some(own),
        })
        .encode();
        let out = b.datagram(from, &ask);
        let Some(Datagrams::One(reply)) = out.replies.first().map(|r| &r.datagrams) else {
            return false;
        };
        let Ok(reply) = ChallengeReply::decode(reply) else {
            return false;
        };
        let out = b.datagram(from, &valve_heartbeat(i, reply.challenge));
        out.drops.is_empty() && out.verifications_failed == 0
    }

    fn list_request() -> Vec<u8> {
        ListRequest {
            region: Region::WORLD,
            last: SEED,
            filter: VALVE_FILTER.to_vec(),
        }
        .encode()
    }
}

struct Bench<F: Family> {
    handle: MasterHandle,
    face: F::Face,
    now: Instant,
    wall: Timestamp,
}

impl<F: Family> Bench<F> {
    /// Runs `step` on the face with the current snapshot and registry; returns what it sent.
    fn on_face(&mut self, step: impl FnOnce(&mut F::Face, &mut Cx<'_>)) -> Outbox {
        let view = self.handle.snapshot();
        let mut out = Outbox::default();
        let mut w = self.handle.lazy_writer();
        let mut cx = Cx {
            now: self.now,
            wall: self.wall,
            view: &view,
            registry: &mut w,
            out: &mut out,
        };
        step(&mut self.face, &mut cx);
        out
    }

    fn datagram(&mut self, from: SocketAddr, data: &[u8]) -> Outbox {
        self.on_face(|face, cx| face.on_datagram(cx, 0, from, data))
    }

    fn timeout(&mut self) {
        self.on_face(|face, cx| face.on_timeout(cx));
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.wall = self.wall.plus(d);
    }

    /// All `n` servers register (or refresh), published every 1,000 and stored every 40,000
    /// as the daemon's publisher (every few ms) and persister (every second) do at ~40,000
    /// registrations a second; then the burst settles: published, stored, the face's sweep
    /// after its challenges' timeout, and one list served from the snapshot.
    fn phase(&mut self, n: usize) -> usize {
        let mut ok = 0;
        for i in 0..n {
            ok += usize::from(F::register(self, i));
            if i % 1_000 == 999 {
                self.advance(Duration::from_millis(25));
                self.handle.publish();
                self.timeout();
            }
            if i % 40_000 == 39_999 {
                self.handle.flush().ok();
            }
        }
        self.handle.publish();
        self.handle.flush().ok();
        self.advance(Duration::from_secs(3));
        self.timeout();
        let out = self.datagram(
            SocketAddr::from(([127, 255, 0, 1], 5000)),
            &F::list_request(),
        );
        assert!(!out.replies.is_empty(), "no list");
        ok
    }
}

/// One phase's figures per server: what stayed allocated after it (`after`) and the most
/// allocated at once during it (`peak`, in size classes), over what was allocated before the
/// first phase.
fn report(what: &str, before: Reading, after: Reading, peak: i64, n: usize) {
    let per = |a: i64, b: i64| (a - b) as f64 / n as f64;
    println!(
        "{what:<30} {:>7.1} B requested  {:>7.1} B in size classes  {:>5.2} blocks  \
         (peak {:>7.1} B)  per server",
        per(after.live, before.live),
        per(after.class, before.class),
        per(after.blocks, before.blocks),
        per(peak, before.class),
    );
}

/// Registers `n` servers of family `F`, refreshes them, and prints what stayed allocated.
fn run<F: Family>(n: usize) {
    let t0 = Timestamp::from_secs(1_700_000_000);
    let config = RegistryConfig {
        max_per_source: n,
        max_records: n.saturating_mul(2),
        ..RegistryConfig::default()
    };
    let (handle, _) = MasterHandle::open(config, Box::new(NullStore), t0).expect("open");
    let now = Instant::now();
    let mut b = Bench::<F> {
        handle,
        face: F::face(n, now),
        now,
        wall: t0,
    };
    let empty = read();
    reset_peak();
    let registered = b.phase(n);
    assert_eq!(registered, n, "every server registers");
    assert_eq!(b.handle.snapshot().len(), n, "every server listed");
    let after_register = read();
    let register_peak = PEAK_CLASS.load(Relaxed);
    reset_peak();
    let refreshed = b.phase(n);
    assert_eq!(refreshed, n, "every server refreshes");
    let after_refresh = read();
    let refresh_peak = PEAK_CLASS.load(Relaxed);

    println!(
        "{n} {} servers; size_of Record {} B, PollInfo {} B",
        F::SERVERS,
        size_of::<Record>(),
        size_of::<PollInfo>()
    );
    report(
        "registered, published, listed",
        empty,
        after_register,
        register_peak,
        n,
    );
    report(
        "after one refresh of each",
        empty,
        after_refresh,
        refresh_peak,
        n,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(100_000);
    AllocationRegistry::set_global_tracker(Counter).expect("one tracker");
    AllocationRegistry::enable_tracking();
    if args.iter().any(|a| a == "valve") {
        run::<Valve>(n);
    } else {
        run::<Quake3>(n);
    }
    AllocationRegistry::disable_tracking();
}
