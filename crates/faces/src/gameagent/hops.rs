//! Servers that answer their challenge from another port than it was sent to (a NAT that
//! rewrites ports, a second process): logged, at most once per address per interval, with a
//! bounded table of when each address was last logged.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// Addresses whose port hop was logged, at most.
const MAX_PORT_HOP_REPORTS: usize = 4096;

/// When each address's port hop was last logged.
#[derive(Debug, Default)]
pub(crate) struct PortHops {
    logged: HashMap<Ipv4Addr, Instant>,
}

impl PortHops {
    /// Logs that `a` answered the challenge sent to port `challenged`, unless its address was
    /// logged less than `every` ago or the table is full of recent reports.
    pub(crate) fn report(
        &mut self,
        now: Instant,
        every: Duration,
        a: SocketAddrV4,
        challenged: u16,
    ) {
        let due = self
            .logged
            .get(a.ip())
            .is_none_or(|t| now.saturating_duration_since(*t) >= every);
        if !due {
            return;
        }
        if self.logged.len() >= MAX_PORT_HOP_REPORTS {
            self.logged
                .retain(|_, t| now.saturating_duration_since(*t) < every);
            if self.logged.len() >= MAX_PORT_HOP_REPORTS {
                return;
            }
        }
        self.logged.insert(*a.ip(), now);
        tracing::info!(
            address = %a.ip(),
            challenged_port = challenged,
            answered_from = a.port(),
            "gameagent server answered its challenge from another port"
        );
    }

    /// Addresses in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.logged.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_logged_once_per_interval_and_the_table_stays_bounded() {
        let mut h = PortHops::default();
        let t0 = Instant::now();
        let every = Duration::from_secs(60);
        let a = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 25601);
        h.report(t0, every, a, 25600);
        h.report(t0 + Duration::from_secs(1), every, a, 25600);
        assert_eq!(h.len(), 1);
        for i in 0..(MAX_PORT_HOP_REPORTS as u32 + 10) {
            let ip = Ipv4Addr::from(0x0a00_0000 + i);
            h.report(t0, every, SocketAddrV4::new(ip, 1), 2);
        }
        assert_eq!(
            h.len(),
            MAX_PORT_HOP_REPORTS,
            "full of recent reports: no more"
        );
        // Once the old ones are due again, they make room.
        h.report(
            t0 + every,
            every,
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), 1),
            2,
        );
        assert_eq!(h.len(), 1);
    }
}
