//! Rate limits every Muster server face shares: per-source token buckets and a global byte
//! budget. Pure: time is an argument.
//!
//! A *source* is an IPv4 address or an IPv6 /64 (one host usually owns a whole /64, so
//! per-address limits would be trivial to dodge). Memory is bounded: at most `max_sources`
//! buckets are tracked; when full, buckets that have refilled completely (and so carry no
//! state worth keeping) are dropped first, then the least recently touched.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

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
    buckets: HashMap<SourceKey, Bucket>,
}

impl SourceLimiter {
    /// A limiter tracking at most `max_sources` sources (at least 1).
    #[must_use]
    pub fn new(config: BucketConfig, max_sources: usize) -> Self {
        Self {
            config,
            max_sources: max_sources.max(1),
            buckets: HashMap::new(),
        }
    }

    /// Take `cost` tokens for `ip` at `now`; false (and nothing taken) when there are not
    /// enough.
    pub fn allow(&mut self, ip: IpAddr, now: Instant, cost: f64) -> bool {
        let key = SourceKey::of(ip);
        if !self.buckets.contains_key(&key) && self.buckets.len() >= self.max_sources {
            self.evict(now);
        }
        let cfg = self.config;
        let bucket = self.buckets.entry(key).or_insert(Bucket {
            tokens: cfg.burst,
            at: now,
        });
        let level = bucket.level(now, &cfg);
        bucket.at = now;
        if level >= cost {
            bucket.tokens = level - cost;
            true
        } else {
            bucket.tokens = level;
            false
        }
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

    /// Forget every bucket that has refilled completely by `now`.
    pub fn prune(&mut self, now: Instant) {
        let full_after = self.config.full_after();
        self.buckets
            .retain(|_, b| now.saturating_duration_since(b.at) < full_after);
    }

    fn evict(&mut self, now: Instant) {
        self.prune(now);
        if self.buckets.len() >= self.max_sources {
            // Still full of active sources: drop the least recently touched one. A flood of
            // distinct sources can then reset someone's bucket, which errs on the side of
            // answering; the global byte budget bounds what that can cost.
            if let Some(oldest) = self
                .buckets
                .iter()
                .min_by_key(|(_, b)| b.at)
                .map(|(k, _)| *k)
            {
                self.buckets.remove(&oldest);
            }
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
    fn byte_budget_sends_whole_replies_only() {
        let t0 = Instant::now();
        let mut b = ByteBudget::new(1000);
        assert!(b.spend(600, t0));
        assert!(!b.spend(600, t0));
        assert!(b.spend(400, t0));
        assert!(b.spend(500, t0 + Duration::from_millis(500)));
    }
}
