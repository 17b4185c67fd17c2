//! Retransmission timeouts in the manner of TCP's RTO (RFC 6298), for a scanner: one estimate
//! per server once it has answered, and one for the whole population of servers that sets the
//! attempts of servers not heard from yet.
//!
//! * [`RttEstimate`] is RFC 6298 §2 as written: `SRTT`, `RTTVAR`, `RTO = SRTT + max(G, 4·RTTVAR)`.
//! * [`Population`] runs the same estimator over the samples of *all* servers in the order they
//!   arrive, so its `RTTVAR` is the spread across servers and its `SRTT` follows the latest
//!   replies. That recency is the point: when a scan's first burst queues at the servers, the
//!   replies arriving at instant t took about t, so `SRTT` grows with t and no first attempt
//!   expires while replies as old as it still come in; when the queue has drained, later
//!   attempts see short round trips and the estimate falls with them. Samples arriving in
//!   batches are alike, so `RTTVAR` alone underrates the spread: the RTO is also at least half
//!   again the largest of the latest [`RECENT_SAMPLES`]. A log-scale histogram keeps the
//!   quantiles of all samples for reports.
//! * [`backed_off`]: every retransmission doubles the timeout (RFC 6298 §5.5), up to the cap.
//!
//! Samples follow Karn's rule for a server's own estimate: only a reply to an attempt sent
//! once counts, since a reply after a retransmission may answer either copy. The population
//! also takes a reply that came back within half the time the previous attempt had waited
//! (for it to answer the earlier copy, that copy's round trip would have to exceed the
//! timeout the population chose by half again), until replies for queries already over show
//! that retransmissions were spurious. Nothing here reads a clock.

use std::time::Duration;

/// Clock granularity `G` of RFC 6298 §2: the variance term is never less than this.
pub const GRANULARITY: Duration = Duration::from_millis(1);
/// Samples the population needs before its estimate is used: fewer could come from the few
/// nearest servers only.
pub const MIN_POPULATION_SAMPLES: u64 = 4;
/// The latest samples whose largest, with a quarter more, is a floor of the population's RTO.
pub const RECENT_SAMPLES: usize = 128;

/// One server's smoothed round-trip time (RFC 6298 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttEstimate {
    /// Smoothed round-trip time.
    pub srtt: Duration,
    /// Round-trip time variation.
    pub rttvar: Duration,
}

impl RttEstimate {
    /// The estimate after the first sample `r`: `SRTT = R`, `RTTVAR = R/2` (§2.2).
    #[must_use]
    pub fn first(r: Duration) -> Self {
        Self {
            srtt: r,
            rttvar: r / 2,
        }
    }

    /// Take a later sample `r` (§2.3, α = 1/8, β = 1/4).
    pub fn update(&mut self, r: Duration) {
        let diff = self.srtt.abs_diff(r);
        self.rttvar = (self.rttvar * 3 + diff) / 4;
        self.srtt = (self.srtt * 7 + r) / 8;
    }

    /// `SRTT + max(G, 4·RTTVAR)`, before any clamping.
    #[must_use]
    pub fn rto(&self) -> Duration {
        self.srtt
            .saturating_add(self.rttvar.saturating_mul(4).max(GRANULARITY))
    }
}

/// Sub-buckets per power of two in [`Population`]'s histogram (about 6 % resolution).
const SUB_BUCKETS: usize = 16;
/// Powers of two covered above the linear range: 16 µs · 2^23 ≈ 134 s.
const OCTAVES: usize = 23;
const BUCKETS: usize = SUB_BUCKETS * (OCTAVES + 1);

/// Round-trip samples of every server of a batch.
#[derive(Debug, Clone)]
pub struct Population {
    smoothed: Option<RttEstimate>,
    counts: Box<[u32; BUCKETS]>,
    samples: u64,
    recent: [Duration; RECENT_SAMPLES],
    recent_max: Duration,
}

impl Default for Population {
    fn default() -> Self {
        Self {
            smoothed: None,
            counts: Box::new([0; BUCKETS]),
            samples: 0,
            recent: [Duration::ZERO; RECENT_SAMPLES],
            recent_max: Duration::ZERO,
        }
    }
}

/// Histogram bucket of `us` microseconds: linear below 16 µs, then 16 per octave.
fn bucket(us: u64) -> usize {
    let sub = SUB_BUCKETS as u64;
    if us < sub {
        return usize::try_from(us).unwrap_or(0);
    }
    // us is in [2^(octave+3), 2^(octave+4)); its top five bits pick the sub-bucket.
    let octave = u64::from(63 - us.leading_zeros()) - 3;
    let mantissa = (us >> (octave - 1)) - sub;
    let index = octave * sub + mantissa;
    usize::try_from(index)
        .unwrap_or(usize::MAX)
        .min(BUCKETS - 1)
}

/// The largest value (µs) that falls into bucket `i`.
fn bucket_top(i: usize) -> u64 {
    let sub = SUB_BUCKETS as u64;
    let i = i as u64;
    if i < sub {
        return i;
    }
    let octave = i / sub;
    let mantissa = i % sub;
    ((sub + mantissa + 1) << (octave - 1)) - 1
}

impl Population {
    /// Add one server's round-trip sample.
    pub fn add(&mut self, r: Duration) {
        match &mut self.smoothed {
            Some(s) => s.update(r),
            None => self.smoothed = Some(RttEstimate::first(r)),
        }
        let us = u64::try_from(r.as_micros()).unwrap_or(u64::MAX);
        if let Some(c) = self.counts.get_mut(bucket(us)) {
            *c = c.saturating_add(1);
        }
        let slot = usize::try_from(self.samples % RECENT_SAMPLES as u64).unwrap_or(0);
        if let Some(old) = self.recent.get_mut(slot) {
            let evicted = std::mem::replace(old, r);
            if r >= self.recent_max {
                self.recent_max = r;
            } else if evicted >= self.recent_max {
                self.recent_max = self.recent.iter().copied().max().unwrap_or(r);
            }
        }
        self.samples += 1;
    }

    /// The largest of the latest [`RECENT_SAMPLES`] samples.
    #[must_use]
    pub fn recent_max(&self) -> Duration {
        self.recent_max
    }

    /// Samples so far.
    #[must_use]
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The smoothed estimate over all servers, if any sample came.
    #[must_use]
    pub fn smoothed(&self) -> Option<RttEstimate> {
        self.smoothed
    }

    /// The `q` quantile (0–1) of the samples, rounded up to its histogram bucket.
    #[must_use]
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.samples == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: at least 1, at most every sample.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = ((self.samples as f64 * q.clamp(0.0, 1.0)).ceil() as u64).clamp(1, self.samples);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(Duration::from_micros(bucket_top(i)));
            }
        }
        None
    }

    /// The timeout for a server not heard from yet, before clamping: `SRTT + max(G, 4·RTTVAR)`
    /// over all servers, and at least 5/4 of the largest of the latest [`RECENT_SAMPLES`];
    /// `None` until [`MIN_POPULATION_SAMPLES`] samples came.
    #[must_use]
    pub fn rto(&self) -> Option<Duration> {
        if self.samples < MIN_POPULATION_SAMPLES {
            return None;
        }
        let recent = self.recent_max.saturating_mul(3) / 2;
        self.smoothed.map(|s| s.rto().max(recent))
    }
}

/// `base` doubled `n` times, at most `max`.
#[must_use]
pub fn backed_off(base: Duration, n: u32, max: Duration) -> Duration {
    base.checked_mul(1u32.checked_shl(n.min(16)).unwrap_or(u32::MAX))
        .unwrap_or(max)
        .min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn first_sample_gives_three_times_it() {
        let r = RttEstimate::first(ms(100));
        assert_eq!(r.rto(), ms(300));
    }

    #[test]
    fn estimate_follows_samples_down() {
        let mut r = RttEstimate::first(ms(100));
        for _ in 0..50 {
            r.update(ms(10));
        }
        assert!(r.rto() < ms(40), "{:?}", r.rto());
        assert!(r.rto() >= ms(10) + GRANULARITY, "{:?}", r.rto());
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        assert_eq!(backed_off(ms(10), 0, ms(100)), ms(10));
        assert_eq!(backed_off(ms(10), 1, ms(100)), ms(20));
        assert_eq!(backed_off(ms(10), 3, ms(100)), ms(80));
        assert_eq!(backed_off(ms(10), 4, ms(100)), ms(100));
        assert_eq!(backed_off(ms(10), u32::MAX, ms(100)), ms(100));
        assert_eq!(backed_off(Duration::MAX, 2, ms(100)), ms(100));
    }

    #[test]
    fn buckets_are_ordered_and_contain_their_values() {
        let mut last = 0;
        for us in (0..200_000u64).step_by(7).chain([u64::MAX / 2, u64::MAX]) {
            let b = bucket(us);
            assert!(b >= last, "{us}");
            last = b;
            if b < BUCKETS - 1 {
                assert!(bucket_top(b) >= us, "{us} in {b} tops at {}", bucket_top(b));
                assert!(b == 0 || bucket_top(b - 1) < us, "{us}");
            }
        }
    }

    #[test]
    fn quantile_of_a_spread() {
        let mut p = Population::default();
        for i in 1..=100 {
            p.add(ms(i));
        }
        let q50 = p.quantile(0.5).unwrap();
        assert!(q50 >= ms(50) && q50 <= ms(54), "{q50:?}");
        let q99 = p.quantile(0.99).unwrap();
        assert!(q99 >= ms(99) && q99 <= ms(104), "{q99:?}");
        assert_eq!(p.quantile(1.0), p.quantile(0.999));
    }

    #[test]
    fn population_needs_a_few_samples_then_follows_the_latest() {
        let mut p = Population::default();
        for _ in 0..MIN_POPULATION_SAMPLES - 1 {
            p.add(ms(5));
        }
        assert_eq!(p.rto(), None);
        // Replies of a burst that queued at the servers: each took as long as it is late.
        for t in 5..=120 {
            p.add(ms(t));
        }
        // At least half again the largest recent sample: replies as old as the oldest unheard
        // request may still come, and the servers may pause.
        assert_eq!(p.recent_max(), ms(120));
        assert_eq!(p.rto().unwrap(), ms(180));
        // The queue drained: retransmissions come back at once, and the estimate follows once
        // they fill the recent samples.
        for _ in 0..RECENT_SAMPLES {
            p.add(ms(1));
        }
        let rto = p.rto().unwrap();
        assert!(rto <= ms(3), "{rto:?}");
        // The quantiles still describe every sample.
        assert!(p.quantile(0.99).unwrap() >= ms(115));
    }
}
