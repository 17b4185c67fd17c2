//! Connection caps as data and the counts that enforce them: in total, per source (an IPv4
//! address or an IPv6 /64), per IPv6 /56 and /48, and the reserve kept for sources holding few.
//! The TCP runner counts accepted connections with these, the event hub its streams.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use muster_proto::limit::{SourceKey, v6_prefix};

use crate::drops::DropReason;

/// Connection caps and the idle timeout of one TCP face (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Concurrent connections in total.
    pub max_connections: usize,
    /// Concurrent connections per source (IPv4 address, IPv6 /64).
    pub max_per_source: usize,
    /// A stream without progress for this long fails with `TimedOut`; zero: never (a face
    /// that keeps long-lived connections runs its own timers).
    pub idle_timeout: Duration,
    /// Caps per IPv6 /56 and /48, and the reserve.
    pub prefix: PrefixCaps,
}

/// The caps beyond total and per source: per IPv6 prefix, and the reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixCaps {
    /// Concurrent connections per IPv6 /56.
    pub max_per_56: usize,
    /// Concurrent connections per IPv6 /48.
    pub max_per_48: usize,
    /// The last this many connections of the total (at most a quarter of it) go only to
    /// sources holding fewer than `fair_share`.
    pub reserved: usize,
    /// Connections a source may hold and still be let into the reserve.
    pub fair_share: usize,
}

/// Default of [`PrefixCaps::max_per_56`].
pub const DEFAULT_MAX_PER_56: usize = 1024;
/// Default of [`PrefixCaps::max_per_48`].
pub const DEFAULT_MAX_PER_48: usize = 2048;
/// Default of [`PrefixCaps::reserved`].
pub const DEFAULT_RESERVED: usize = 1024;
/// Default of [`PrefixCaps::fair_share`].
pub const DEFAULT_FAIR_SHARE: usize = 8;

impl Default for PrefixCaps {
    fn default() -> Self {
        Self {
            max_per_56: DEFAULT_MAX_PER_56,
            max_per_48: DEFAULT_MAX_PER_48,
            reserved: DEFAULT_RESERVED,
            fair_share: DEFAULT_FAIR_SHARE,
        }
    }
}

/// Where a connection (or an event stream, [`crate::events`]) is counted: its source and, for
/// IPv6, its /56 and /48.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The source: an IPv4 address or an IPv6 /64.
    pub source: SourceKey,
    p56: Option<u128>,
    p48: Option<u128>,
}

impl Slot {
    /// The slot of a connection from `ip`.
    #[must_use]
    pub fn of(ip: std::net::IpAddr) -> Self {
        Self {
            source: SourceKey::of(ip),
            p56: v6_prefix(ip, 56),
            p48: v6_prefix(ip, 48),
        }
    }
}

/// Connections held per source and per IPv6 prefix (entries at zero are removed, so the maps
/// hold at most one entry per open connection). The event hub counts its streams with these
/// caps too.
#[derive(Debug, Default)]
pub struct Counts {
    source: HashMap<SourceKey, usize>,
    p56: HashMap<u128, usize>,
    p48: HashMap<u128, usize>,
}

fn held<K: std::hash::Hash + Eq>(m: &HashMap<K, usize>, k: Option<&K>) -> usize {
    k.and_then(|k| m.get(k)).copied().unwrap_or(0)
}

fn add<K: std::hash::Hash + Eq>(m: &mut HashMap<K, usize>, k: Option<K>) {
    if let Some(k) = k {
        *m.entry(k).or_insert(0) += 1;
    }
}

fn sub<K: std::hash::Hash + Eq>(m: &mut HashMap<K, usize>, k: Option<K>) {
    if let Some(k) = k
        && let Some(n) = m.get_mut(&k)
    {
        *n = n.saturating_sub(1);
        if *n == 0 {
            m.remove(&k);
        }
    }
}

impl Counts {
    /// Counts a new connection of `slot` when the caps allow it; `in_use`: connections open
    /// on the face, this one not included; `proven`: servers the source has registered (0
    /// when not looked up). `Err`: the cap that refuses it.
    pub fn try_take(
        &mut self,
        slot: Slot,
        limits: &ConnLimits,
        in_use: usize,
        proven: usize,
    ) -> Result<(), DropReason> {
        let caps = &limits.prefix;
        let source = held(&self.source, Some(&slot.source));
        let p56 = held(&self.p56, slot.p56.as_ref());
        let p48 = held(&self.p48, slot.p48.as_ref());
        if source >= limits.max_per_source {
            return Err(DropReason::TcpSourceCap);
        }
        if p56 >= caps.max_per_56 || p48 >= caps.max_per_48 {
            return Err(DropReason::TcpPrefixCap);
        }
        let reserved = caps.reserved.min(limits.max_connections / 4);
        let in_reserve = in_use >= limits.max_connections.saturating_sub(reserved);
        let fair = caps.fair_share;
        let over = source >= fair || p56 >= fair * 2 || p48 >= fair * 4;
        if in_reserve && over && source >= fair.saturating_add(proven.saturating_mul(2)) {
            return Err(DropReason::TcpReserve);
        }
        *self.source.entry(slot.source).or_insert(0) += 1;
        add(&mut self.p56, slot.p56);
        add(&mut self.p48, slot.p48);
        Ok(())
    }

    /// Gives back what [`Counts::try_take`] counted for `slot`.
    pub fn give_back(&mut self, slot: Slot) {
        sub(&mut self.source, Some(slot.source));
        sub(&mut self.p56, slot.p56);
        sub(&mut self.p48, slot.p48);
    }
}

#[derive(Debug, Default)]
/// [`Counts`] behind a lock, shared by a face's listeners.
pub struct PerSource(Mutex<Counts>);

impl PerSource {
    /// [`Counts::try_take`] under the lock.
    pub fn try_take(
        &self,
        slot: Slot,
        limits: &ConnLimits,
        in_use: usize,
        proven: usize,
    ) -> Result<(), DropReason> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_take(slot, limits, in_use, proven)
    }

    /// [`Counts::give_back`] under the lock.
    pub fn give_back(&self, slot: Slot) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .give_back(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_source: usize, idle_ms: u64) -> ConnLimits {
        ConnLimits {
            max_connections: total,
            max_per_source: per_source,
            idle_timeout: Duration::from_millis(idle_ms),
            prefix: PrefixCaps::default(),
        }
    }

    fn ip(s: &str) -> std::net::IpAddr {
        s.parse().unwrap()
    }

    /// Takes connections from `addrs` (cycling) until `n` were tried; returns what refused.
    fn fill(
        c: &mut Counts,
        l: &ConnLimits,
        in_use: &mut usize,
        addrs: &[String],
        n: usize,
    ) -> Vec<DropReason> {
        let mut refused = Vec::new();
        for i in 0..n {
            if *in_use >= l.max_connections {
                refused.push(DropReason::TcpConnCap);
                continue;
            }
            match c.try_take(Slot::of(ip(&addrs[i % addrs.len()])), l, *in_use, 0) {
                Ok(()) => *in_use += 1,
                Err(r) => refused.push(r),
            }
        }
        refused
    }

    #[test]
    fn one_v6_prefix_cannot_fill_the_face() {
        // The defaults of the daemon: 4096 in total, 512 per source.
        let l = ConnLimits {
            prefix: PrefixCaps::default(),
            ..limits(4096, 512, 0)
        };
        let mut c = Counts::default();
        let mut in_use = 0;
        // 256 /64s of one /56, 16 connections each: the /56 stops at its cap.
        let slash56: Vec<String> = (0..256).map(|i| format!("2001:db8:0:{i:x}::1")).collect();
        let refused = fill(&mut c, &l, &mut in_use, &slash56, 256 * 16);
        assert_eq!(in_use, DEFAULT_MAX_PER_56);
        assert!(refused.iter().all(|r| *r == DropReason::TcpPrefixCap));
        // The other /56s of the /48 stop at the /48's cap.
        let slash48: Vec<String> = (0..4096)
            .map(|i| format!("2001:db8:0:{:x}::1", 0x100 + i))
            .collect();
        fill(&mut c, &l, &mut in_use, &slash48, 8192);
        assert_eq!(in_use, DEFAULT_MAX_PER_48);
        // A hosting box on one IPv4 address holds its 512.
        let hosting = ["192.0.2.1".to_owned()];
        fill(&mut c, &l, &mut in_use, &hosting, 600);
        assert_eq!(c.source[&SourceKey::of(ip("192.0.2.1"))], 512);
        // Other sources, 16 connections each, fill up to the reserve and no further…
        let many: Vec<String> = (0..64)
            .map(|i| format!("2001:db8:{:x}::1", 0x100 + i))
            .collect();
        let refused = fill(&mut c, &l, &mut in_use, &many, 64 * 16);
        assert_eq!(in_use, 4096 - DEFAULT_RESERVED);
        assert_eq!(refused.len(), 64 * 8);
        assert!(refused.iter().all(|r| *r == DropReason::TcpReserve));
        // …and the reserve still lets in a reader or a server holding few connections.
        for i in 0..10 {
            let r = c.try_take(Slot::of(ip(&format!("198.51.100.{i}"))), &l, in_use, 0);
            assert_eq!(r, Ok(()));
            in_use += 1;
        }
        // But not the hosting box, which holds more than its fair share.
        assert_eq!(
            c.try_take(Slot::of(ip("192.0.2.1")), &l, in_use, 0),
            Err(DropReason::TcpSourceCap)
        );
        let big = Slot::of(ip("2001:db8:100::1"));
        assert_eq!(c.try_take(big, &l, in_use, 0), Err(DropReason::TcpReserve));
        // A source with registered servers gets two more per server (8 held, 3 servers: 14).
        for _ in 0..6 {
            assert_eq!(c.try_take(big, &l, in_use, 3), Ok(()));
            in_use += 1;
        }
        assert_eq!(c.try_take(big, &l, in_use, 3), Err(DropReason::TcpReserve));
        // Giving back frees the slot and leaves no empty entries behind.
        let mut c = Counts::default();
        let s = Slot::of(ip("2001:db8::1"));
        c.try_take(s, &l, 0, 0).unwrap();
        c.give_back(s);
        assert!(c.source.is_empty() && c.p56.is_empty() && c.p48.is_empty());
    }
}
