//! Rate limits every Muster server face shares: per-source token buckets and a global byte
//! budget. Pure: time is an argument.
//!
//! A *source* is an IPv4 address or an IPv6 /64 (one host usually owns a whole /64, so
//! per-address limits would be trivial to dodge). Memory is bounded: at most `max_sources`
//! buckets are tracked; when full, buckets that have refilled completely (and so carry no
//! state worth keeping) are dropped first, then the least recently touched.
//!
//! **Proven sources.** One address may be a hosting box running hundreds of game servers, or
//! a carrier-grade NAT in front of many players. A limiter made with
//! [`SourceLimiter::with_growth`] gives a source that has *proven* servers (the caller says how
//! many: records the registry holds for it, each registered with a proof of ownership) the
//! budget of one source per proven server on top of its own: burst and refill both multiplied
//! by `1 + servers`, with `servers` capped. An unproven source keeps the base budget. The count
//! is asked for only when the base budget would refuse (at most once per
//! [`PROVEN_RECHECK`] per source), and again every [`PROVEN_REFRESH`] while the source draws on
//! a grown budget, so the lookup stays off the common path.

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use hashlink::LinkedHashMap;
use hashlink::linked_hash_map::Entry;

/// The key a limit is tracked under: an IPv4 address or an IPv6 /64 prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKey {
    /// An IPv4 address (IPv4-mapped IPv6 addresses count as IPv4).
    V4(u32),
    /// The upper 64 bits of an IPv6 address.
    V6(u64),
}

impl SourceKey {
    /// The key of `ip`.
    #[must_use]
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(u32::from(v4)),
                None => Self::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }

    /// The prefix as an address (IPv6 with the low 64 bits zero), for logs and metrics.
    #[must_use]
    pub fn to_ip(self) -> IpAddr {
        match self {
            Self::V4(v4) => IpAddr::V4(v4.into()),
            Self::V6(p) => IpAddr::V6(Ipv6Addr::from(u128::from(p) << 64)),
        }
    }
}

/// A refused source's proven servers are counted again at most this often.
pub const PROVEN_RECHECK: Duration = Duration::from_millis(250);
/// A source drawing on a grown budget has its proven servers counted again this often (so a
/// budget shrinks once the servers are gone).
pub const PROVEN_REFRESH: Duration = Duration::from_secs(10);

/// The IPv6 prefix of `ip` of `bits` bits (1..=128) as the top bits of a `u128`, or `None` for
/// IPv4 and IPv4-mapped addresses (connection caps per /56 and /48 use it).
#[must_use]
pub fn v6_prefix(ip: IpAddr, bits: u32) -> Option<u128> {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let bits = bits.clamp(1, 128);
            Some(u128::from(v6) >> (128 - bits))
        }
        _ => None,
    }
}

/// Burst and refill of a token bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketConfig {
    /// Tokens available at once (and the bucket's size).
    pub burst: f64,
    /// Tokens added per second.
    pub per_second: f64,
}

impl BucketConfig {
    /// `burst` tokens, one more every `every`.
    #[must_use]
    pub fn one_every(burst: u32, every: Duration) -> Self {
        let secs = every.as_secs_f64();
        Self {
            burst: f64::from(burst),
            per_second: if secs > 0.0 {
                1.0 / secs
            } else {
                f64::INFINITY
            },
        }
    }

    /// This budget grown by `servers` proven servers: `1 + servers` times burst and refill.
    #[must_use]
    pub fn grown(&self, servers: u32) -> Self {
        let k = 1.0 + f64::from(servers);
        Self {
            burst: self.burst * k,
            per_second: self.per_second * k,
        }
    }

    fn full_after(&self) -> Duration {
        if self.per_second.is_finite() && self.per_second > 0.0 {
            Duration::from_secs_f64(self.burst / self.per_second)
        } else {
            Duration::ZERO
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// Proven servers the budget is grown by (0: the base budget).
    servers: u32,
    /// When `servers` was last asked for.
    counted: Option<Instant>,
}

impl Bucket {
    fn level(&self, now: Instant, cfg: &BucketConfig) -> f64 {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + dt * cfg.per_second).min(cfg.burst)
    }
}

/// Per-source token buckets with a cap on how many sources are tracked.
#[derive(Debug)]
pub struct SourceLimiter {
    config: BucketConfig,
    max_sources: usize,
    /// Proven servers a budget grows by at most (0: budgets never grow).
    max_servers: u32,
    /// Least recently touched first (a touch moves a bucket to the back), so the buckets
    /// that refilled, all touched before the rest, are at the front.
    buckets: LinkedHashMap<SourceKey, Bucket>,
}

impl SourceLimiter {
    /// A limiter tracking at most `max_sources` sources (at least 1).
    #[must_use]
    pub fn new(config: BucketConfig, max_sources: usize) -> Self {
        Self {
            config,
            max_sources: max_sources.max(1),
            max_servers: 0,
            buckets: LinkedHashMap::new(),
        }
    }

    /// Lets budgets grow with proven servers (see the module docs), by `max_servers` servers
    /// at most.
    #[must_use]
    pub fn with_growth(mut self, max_servers: u32) -> Self {
        self.max_servers = max_servers;
        self
    }

    /// Take `cost` tokens for `ip` at `now`; false (and nothing taken) when there are not
    /// enough. A budget grown earlier by [`SourceLimiter::allow_proven`] stays grown.
    pub fn allow(&mut self, ip: IpAddr, now: Instant, cost: f64) -> bool {
        self.allow_proven(ip, now, cost, |_| 0)
    }

    /// [`SourceLimiter::allow`] for a limiter made [`SourceLimiter::with_growth`]: `proven`
    /// counts the source's proven servers when the budget must be looked at again (see the
    /// module docs); a lookup that says 0 never changes a budget, so `|_| 0` is plain `allow`.
    pub fn allow_proven(
        &mut self,
        ip: IpAddr,
        now: Instant,
        cost: f64,
        proven: impl FnOnce(SourceKey) -> usize,
    ) -> bool {
        let key = SourceKey::of(ip);
        if !self.buckets.contains_key(&key) && self.buckets.len() >= self.max_sources {
            self.evict(now);
        }
        let base = self.config;
        let max_servers = self.max_servers;
        let bucket = match self.buckets.entry(key) {
            Entry::Occupied(mut o) => {
                o.to_back();
                o.into_mut()
            }
            Entry::Vacant(v) => v.insert(Bucket {
                tokens: base.burst,
                at: now,
                servers: 0,
                counted: None,
            }),
        };
        let cfg = base.grown(bucket.servers);
        let mut level = bucket.level(now, &cfg);
        bucket.at = now;
        let since = |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t));
        let recount = max_servers > 0
            && if level < cost {
                since(bucket.counted).is_none_or(|d| d >= PROVEN_RECHECK)
            } else {
                bucket.servers > 0 && since(bucket.counted).is_none_or(|d| d >= PROVEN_REFRESH)
            };
        if recount {
            bucket.counted = Some(now);
            let n = u32::try_from(proven(key))
                .unwrap_or(u32::MAX)
                .min(max_servers);
            if n != bucket.servers && (n > 0 || bucket.servers > 0) {
                // What was spent stays spent: the level moves by the change of burst.
                let new = base.grown(n);
                level = (level + new.burst - cfg.burst).clamp(0.0, new.burst);
                bucket.servers = n;
            }
        }
        if level >= cost {
            bucket.tokens = level - cost;
            true
        } else {
            bucket.tokens = level;
            false
        }
    }

    /// The proven servers `ip`'s budget is grown by now (0 for an untracked source).
    #[must_use]
    pub fn grown_by(&self, ip: IpAddr) -> u32 {
        self.buckets
            .get(&SourceKey::of(ip))
            .map_or(0, |b| b.servers)
    }

    /// How many sources are tracked.
    #[must_use]
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True when no source is tracked.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Forget every bucket that has refilled completely by `now`: the run of them at the
    /// front, in time for what it drops (every bucket refills in the same time, so a bucket
    /// touched later than one still refilling is still refilling too).
    pub fn prune(&mut self, now: Instant) {
        let full_after = self.config.full_after();
        while self
            .buckets
            .front()
            .is_some_and(|(_, b)| now.saturating_duration_since(b.at) >= full_after)
        {
            self.buckets.pop_front();
        }
    }

    fn evict(&mut self, now: Instant) {
        self.prune(now);
        if self.buckets.len() >= self.max_sources {
            // Still full of active sources: drop the least recently touched one. A flood of
            // distinct sources can then reset someone's bucket, which errs on the side of
            // answering; the global byte budget bounds what that can cost.
            self.buckets.pop_front();
        }
    }
}

/// A global budget of bytes per second for everything a face sends.
#[derive(Debug, Clone)]
pub struct ByteBudget {
    bytes_per_second: f64,
    burst: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl ByteBudget {
    /// A budget of `bytes_per_second`, allowing a burst of one second's worth.
    #[must_use]
    pub fn new(bytes_per_second: u64) -> Self {
        #[allow(clippy::cast_precision_loss)]
        let rate = bytes_per_second as f64;
        Self {
            bytes_per_second: rate,
            burst: rate,
            tokens: rate,
            at: None,
        }
    }

    /// Spend `bytes` at `now` if the budget allows all of them; a reply is sent whole or not at
    /// all.
    pub fn spend(&mut self, bytes: usize, now: Instant) -> bool {
        if let Some(at) = self.at {
            let dt = now.saturating_duration_since(at).as_secs_f64();
            self.tokens = (self.tokens + dt * self.bytes_per_second).min(self.burst);
        }
        self.at = Some(now);
        #[allow(clippy::cast_precision_loss)]
        let cost = bytes as f64;
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn burst_then_refill() {
        let t0 = Instant::now();
        let mut l = SourceLimiter::new(BucketConfig::one_every(2, Duration::from_secs(5)), 100);
        assert!(l.allow(ip("192.0.2.1"), t0, 1.0));
        assert!(l.allow(ip("192.0.2.1"), t0, 1.0));
        assert!(!l.allow(ip("192.0.2.1"), t0, 1.0));
        // Another source has its own bucket.
        assert!(l.allow(ip("192.0.2.2"), t0, 1.0));
        assert!(!l.allow(ip("192.0.2.1"), t0 + Duration::from_secs(4), 1.0));
        assert!(l.allow(ip("192.0.2.1"), t0 + Duration::from_secs(5), 1.0));
    }

    #[test]
    fn ipv6_slash_64_shares_a_bucket_and_mapped_v4_is_v4() {
        let t0 = Instant::now();
        let mut l = SourceLimiter::new(BucketConfig::one_every(1, Duration::from_secs(60)), 100);
        assert!(l.allow(ip("2001:db8:1:2::1"), t0, 1.0));
        assert!(!l.allow(ip("2001:db8:1:2:ffff::9"), t0, 1.0));
        assert!(l.allow(ip("2001:db8:1:3::1"), t0, 1.0));
        assert!(l.allow(ip("::ffff:192.0.2.7"), t0, 1.0));
        assert!(!l.allow(ip("192.0.2.7"), t0, 1.0));
        assert_eq!(
            SourceKey::of(ip("2001:db8:1:2::1")).to_ip(),
            ip("2001:db8:1:2::")
        );
    }

    #[test]
    fn memory_is_bounded() {
        let t0 = Instant::now();
        let mut l = SourceLimiter::new(BucketConfig::one_every(1, Duration::from_secs(60)), 10);
        for i in 0..1000u32 {
            l.allow(
                IpAddr::V4(i.into()),
                t0 + Duration::from_millis(u64::from(i)),
                1.0,
            );
            assert!(l.len() <= 10);
        }
        l.prune(t0 + Duration::from_secs(3600));
        assert!(l.is_empty());
    }

    #[test]
    fn a_full_limiter_drops_the_refilled_then_the_least_recently_touched() {
        let t0 = Instant::now();
        let cfg = BucketConfig::one_every(2, Duration::from_secs(10));
        let mut l = SourceLimiter::new(cfg, 3);
        let [a, b, c, d, e] = [
            "192.0.2.1",
            "192.0.2.2",
            "192.0.2.3",
            "192.0.2.4",
            "192.0.2.5",
        ]
        .map(ip);
        for s in [a, b, c] {
            assert!(l.allow(s, t0, 1.0));
        }
        // `a` is touched again, so `b` is now the least recently touched: a new source
        // evicts `b`, whose spent token is forgotten (its next datagram finds a full bucket).
        let t1 = t0 + Duration::from_secs(1);
        assert!(l.allow(a, t1, 1.0));
        assert!(l.allow(d, t1, 1.0));
        assert_eq!(l.len(), 3);
        assert!(!l.allow(a, t1, 1.0), "a kept its spent tokens");
        assert!(
            l.allow(b, t1, 1.0) && l.allow(b, t1, 1.0),
            "b came back full"
        );
        // Everything touched at t1 or later; `c` (t0) was evicted by `b`. After a refill time
        // the buckets touched at t1 are all due and go, and a new source finds room.
        let t2 = t1 + Duration::from_secs(20);
        l.prune(t2);
        assert!(l.is_empty());
        assert!(l.allow(e, t2, 1.0));
    }

    #[test]
    fn a_proven_source_has_one_budget_per_server() {
        let t0 = Instant::now();
        let cfg = BucketConfig::one_every(2, Duration::from_secs(1));
        let mut l = SourceLimiter::new(cfg, 100).with_growth(1000);
        let box_ip = ip("192.0.2.1");
        let stranger = ip("192.0.2.2");
        // Unproven: the base budget, and the count is asked for only on a refusal.
        let mut asked = 0;
        for _ in 0..2 {
            assert!(l.allow_proven(stranger, t0, 1.0, |_| unreachable!()));
        }
        assert!(!l.allow_proven(stranger, t0, 1.0, |_| {
            asked += 1;
            0
        }));
        assert_eq!(asked, 1);
        // A source with 9 proven servers gets ten budgets: 20 at once.
        let mut took = 0;
        while l.allow_proven(box_ip, t0, 1.0, |_| 9) {
            took += 1;
            assert!(took <= 100, "bounded");
        }
        assert_eq!(took, 20);
        assert_eq!(l.grown_by(box_ip), 9);
        // …and ten times the refill: 10 more after one second, but not 11.
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..10 {
            assert!(l.allow_proven(box_ip, t1, 1.0, |_| 9));
        }
        assert!(!l.allow_proven(box_ip, t1, 1.0, |_| 9));
        // The growth is capped.
        let mut capped = SourceLimiter::new(cfg, 100).with_growth(3);
        let mut n = 0;
        while capped.allow_proven(box_ip, t0, 1.0, |_| 1_000_000) {
            n += 1;
            assert!(n <= 100, "bounded");
        }
        assert_eq!(n, 8);
        // A limiter without growth never asks.
        let mut plain = SourceLimiter::new(cfg, 100);
        for _ in 0..5 {
            plain.allow_proven(box_ip, t0, 1.0, |_| unreachable!());
        }
    }

    #[test]
    fn a_grown_budget_shrinks_when_the_servers_are_gone() {
        let t0 = Instant::now();
        let cfg = BucketConfig::one_every(2, Duration::from_secs(1));
        let mut l = SourceLimiter::new(cfg, 100).with_growth(1000);
        let box_ip = ip("192.0.2.1");
        assert!(l.allow(box_ip, t0, 1.0));
        assert!(l.allow(box_ip, t0, 1.0));
        assert!(l.allow_proven(box_ip, t0, 1.0, |_| 4));
        assert_eq!(l.grown_by(box_ip), 4);
        // Within the refresh period the count is not asked for again…
        let t1 = t0 + Duration::from_secs(2);
        assert!(l.allow_proven(box_ip, t1, 1.0, |_| unreachable!()));
        // …after it, it is: the servers are gone, the budget is the base one again.
        let t2 = t0 + PROVEN_REFRESH;
        assert!(l.allow_proven(box_ip, t2, 1.0, |_| 0));
        assert_eq!(l.grown_by(box_ip), 0);
        assert!(l.allow_proven(box_ip, t2, 1.0, |_| 0));
        assert!(!l.allow_proven(box_ip, t2, 1.0, |_| 0));
    }

    #[test]
    fn v6_prefixes() {
        let a = ip("2001:db8:1:2ff::1");
        let b = ip("2001:db8:1:200::1");
        let c = ip("2001:db8:1:300::1");
        assert_eq!(v6_prefix(a, 56), v6_prefix(b, 56));
        assert_ne!(v6_prefix(a, 56), v6_prefix(c, 56));
        assert_eq!(v6_prefix(a, 48), v6_prefix(c, 48));
        assert_eq!(v6_prefix(ip("192.0.2.1"), 56), None);
        assert_eq!(v6_prefix(ip("::ffff:192.0.2.1"), 48), None);
    }

    #[test]
    fn byte_budget_sends_whole_replies_only() {
        let t0 = Instant::now();
        let mut b = ByteBudget::new(1000);
        assert!(b.spend(600, t0));
        assert!(!b.spend(600, t0));
        assert!(b.spend(400, t0));
        assert!(b.spend(500, t0 + Duration::from_millis(500)));
    }
}
