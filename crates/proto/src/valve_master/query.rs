//! The client's list machine for the Valve master query (see the module docs and
//! `docs/protocols/valve-master.md` §1–§2).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::packet::{ListReply, ListRequest, Region, SEED};
use crate::model::{ListedServer, Partial, ServerList};
use crate::query::{
    Event, ListEvent, QueryConfig, QueryError, QueryMachine, RetryAction, RetrySchedule, Transmit,
};
use crate::wire::DecodeError;

/// Between two page requests to one master: Valve's masters answer about 30 requests a minute
/// per client.
pub const PAGE_INTERVAL: Duration = Duration::from_secs(2);

/// After a page closed by the zero address, datagrams that still come are taken for this long
/// (the Xash3D master closes every datagram of a list so).
pub const COMPLETE_GRACE: Duration = Duration::from_millis(250);

/// Most pages one list may take.
pub const MAX_PAGES: usize = 1024;

/// Most distinct servers one list may hold; more are dropped and the list is marked partial.
pub const MAX_SERVERS: usize = 65_536;

/// What to ask a master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListAsk {
    /// The region (every region: [`Region::WORLD`]).
    pub region: Region,
    /// The raw filter string.
    pub filter: Vec<u8>,
    /// Whether the pages hold IPv6 entries (a Xash3D master asked over IPv6).
    pub ipv6: bool,
}

impl ListAsk {
    /// Every server `filter` selects, everywhere, IPv4.
    #[must_use]
    pub fn new(filter: &[u8]) -> Self {
        Self {
            region: Region::WORLD,
            filter: filter.to_vec(),
            ipv6: false,
        }
    }

    fn has_key(&self) -> bool {
        super::Filter::parse(&self.filter).is_ok_and(|f| f.key.is_some())
    }
}

/// Pages through a master's list:
///
/// * the first request carries the seed address; a page that does not end with the zero
///   address is followed, [`PAGE_INTERVAL`] later, by a request for the page after its last
///   address;
/// * a page ending with the zero address completes the list once [`COMPLETE_GRACE`] passes
///   without another datagram;
/// * each request is re-sent on the shared schedule until its page comes; a page that never
///   comes after the first leaves the list marked partial;
/// * duplicates are removed (order of first appearance kept); at most [`MAX_PAGES`] pages and
///   [`MAX_SERVERS`] servers.
#[derive(Debug)]
pub struct ListQuery {
    master: SocketAddr,
    ask: ListAsk,
    with_key: bool,
    config: QueryConfig,
    retry: RetrySchedule,
    last: SocketAddr,
    send: bool,
    next_page_at: Option<Instant>,
    complete_at: Option<Instant>,
    waiting: bool,
    pages: usize,
    seen: HashSet<SocketAddr>,
    servers: Vec<ListedServer>,
    overflow: bool,
    last_error: Option<DecodeError>,
    event: Option<ListEvent>,
    done: bool,
}

impl ListQuery {
    /// A list query to `master`.
    #[must_use]
    pub fn new(master: SocketAddr, ask: ListAsk, config: QueryConfig) -> Self {
        Self {
            master,
            with_key: ask.has_key(),
            ask,
            config,
            retry: RetrySchedule::new(config),
            last: SEED,
            send: true,
            next_page_at: None,
            complete_at: None,
            waiting: true,
            pages: 0,
            seen: HashSet::new(),
            servers: Vec::new(),
            overflow: false,
            last_error: None,
            event: None,
            done: false,
        }
    }

    fn finish(&mut self, reason: Option<String>) {
        if self.done {
            return;
        }
        self.done = true;
        self.send = false;
        self.retry.stop();
        if self.pages == 0 {
            let err = self
                .last_error
                .clone()
                .map_or(QueryError::Timeout, QueryError::Decode);
            self.event = Some(Event::Failed(err));
            return;
        }
        let reason = if self.overflow {
            Some(format!(
                "the list exceeded {MAX_SERVERS} servers or {MAX_PAGES} pages"
            ))
        } else {
            reason
        };
        self.event = Some(Event::Done(ServerList {
            servers: std::mem::take(&mut self.servers),
            partial: reason.map(|reason| Partial { reason }),
        }));
    }

    fn on_page(&mut self, now: Instant, page: ListReply) {
        if self.pages >= MAX_PAGES {
            self.overflow = true;
            self.finish(None);
            return;
        }
        self.pages += 1;
        self.waiting = false;
        self.retry.stop();
        for addr in page.servers {
            if addr.port() == 0 {
                continue;
            }
            if self.seen.len() >= MAX_SERVERS {
                self.overflow = true;
                break;
            }
            if self.seen.insert(addr) {
                self.servers.push(ListedServer {
                    address: addr,
                    query_address: None,
                });
            }
            self.last = addr;
        }
        if self.overflow {
            self.finish(None);
        } else if page.complete {
            self.next_page_at = None;
            self.complete_at = now.checked_add(COMPLETE_GRACE);
        } else if self.complete_at.is_none() {
            self.next_page_at = now.checked_add(PAGE_INTERVAL);
        }
    }
}

impl QueryMachine for ListQuery {
    type Output = ServerList;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.done || from != self.master {
            return;
        }
        match ListReply::decode(datagram, self.ask.ipv6, self.with_key) {
            Ok(page) => self.on_page(now, page),
            Err(e) => self.last_error = Some(e),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        if self.complete_at.is_some_and(|t| now >= t) {
            self.finish(None);
            return;
        }
        if self.next_page_at.is_some_and(|t| now >= t) {
            self.next_page_at = None;
            self.waiting = true;
            self.retry = RetrySchedule::new(self.config);
            self.send = true;
            return;
        }
        if self.waiting {
            match self.retry.on_timeout(now) {
                RetryAction::Resend => self.send = true,
                RetryAction::GiveUp => {
                    let reason =
                        (self.pages > 0).then(|| format!("page {} did not come", self.pages + 1));
                    self.finish(reason);
                }
                RetryAction::Wait => {}
            }
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.send || self.done {
            return None;
        }
        self.send = false;
        let req = ListRequest {
            region: self.ask.region,
            last: self.last,
            filter: self.ask.filter.clone(),
        };
        buf.extend_from_slice(&req.encode());
        self.retry.on_send(now);
        Some(Transmit {
            destination: self.master,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done {
            return None;
        }
        [self.complete_at, self.next_page_at, self.retry.deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    fn poll_event(&mut self) -> Option<ListEvent> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.retry.set_attempt_timeout(timeout);
        self.config.attempt_timeout = timeout;
    }

    fn abort(&mut self, _now: Instant) {
        let reason =
            (self.complete_at.is_none()).then(|| "aborted before the list was complete".to_owned());
        self.finish(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::valve_master::packet::ListReply;

    fn config() -> QueryConfig {
        QueryConfig {
            attempt_timeout: Duration::from_millis(500),
            retries: 1,
        }
    }

    fn page(servers: &[&str], complete: bool) -> Vec<u8> {
        ListReply {
            key: None,
            servers: servers.iter().map(|s| s.parse().unwrap()).collect(),
            complete,
        }
        .encode()
    }

    fn sent(q: &mut ListQuery, now: Instant) -> Option<ListRequest> {
        let mut buf = Vec::new();
        q.poll_transmit(now, &mut buf)?;
        Some(ListRequest::decode(&buf).unwrap())
    }

    fn done(q: &mut ListQuery) -> ServerList {
        match q.poll_event() {
            Some(Event::Done(l)) => l,
            other => panic!("no list: {other:?}"),
        }
    }

    #[test]
    fn pages_follow_the_last_address_at_the_masters_pace() {
        let m: SocketAddr = "127.0.0.1:27010".parse().unwrap();
        let t0 = Instant::now();
        let mut q = ListQuery::new(m, ListAsk::new(b"\\gamedir\\valve"), config());
        let first = sent(&mut q, t0).unwrap();
        assert_eq!(first.last, SEED);
        assert_eq!(first.filter, b"\\gamedir\\valve");
        q.handle_datagram(t0, m, &page(&["192.0.2.1:27015", "192.0.2.2:27015"], false));
        assert!(sent(&mut q, t0).is_none(), "the next page waits");
        assert_eq!(q.poll_timeout(), Some(t0 + PAGE_INTERVAL));
        q.handle_timeout(t0 + PAGE_INTERVAL);
        let second = sent(&mut q, t0 + PAGE_INTERVAL).unwrap();
        assert_eq!(second.last, "192.0.2.2:27015".parse().unwrap());
        let t1 = t0 + PAGE_INTERVAL;
        q.handle_datagram(t1, m, &page(&["192.0.2.2:27015", "192.0.2.3:27015"], true));
        q.handle_timeout(t1 + COMPLETE_GRACE);
        let list = done(&mut q);
        assert!(list.partial.is_none());
        let addrs: Vec<String> = list.servers.iter().map(|s| s.address.to_string()).collect();
        assert_eq!(
            addrs,
            ["192.0.2.1:27015", "192.0.2.2:27015", "192.0.2.3:27015"]
        );
    }

    #[test]
    fn complete_datagrams_that_keep_coming_are_all_taken() {
        let m: SocketAddr = "127.0.0.1:27010".parse().unwrap();
        let t0 = Instant::now();
        let mut q = ListQuery::new(m, ListAsk::new(b""), config());
        let _ = sent(&mut q, t0);
        q.handle_datagram(t0, m, &page(&["192.0.2.1:1"], true));
        q.handle_datagram(
            t0 + Duration::from_millis(10),
            m,
            &page(&["192.0.2.9:1"], true),
        );
        q.handle_timeout(t0 + Duration::from_millis(10) + COMPLETE_GRACE);
        assert_eq!(done(&mut q).servers.len(), 2);
    }

    #[test]
    fn a_missing_page_leaves_a_partial_list_and_no_page_a_failure() {
        let m: SocketAddr = "127.0.0.1:27010".parse().unwrap();
        let t0 = Instant::now();
        let mut q = ListQuery::new(m, ListAsk::new(b""), config());
        let _ = sent(&mut q, t0);
        q.handle_datagram(t0, m, &page(&["192.0.2.1:1"], false));
        let mut now = t0 + PAGE_INTERVAL;
        q.handle_timeout(now);
        for _ in 0..10 {
            let _ = sent(&mut q, now);
            now += Duration::from_millis(500);
            q.handle_timeout(now);
        }
        let list = done(&mut q);
        assert!(list.partial.unwrap().reason.contains("page 2"));

        let mut q = ListQuery::new(m, ListAsk::new(b""), config());
        let mut now = t0;
        for _ in 0..10 {
            let _ = sent(&mut q, now);
            now += Duration::from_millis(500);
            q.handle_timeout(now);
        }
        assert!(matches!(
            q.poll_event(),
            Some(Event::Failed(QueryError::Timeout))
        ));
    }

    #[test]
    fn other_sources_and_garbage_are_ignored() {
        let m: SocketAddr = "127.0.0.1:27010".parse().unwrap();
        let t0 = Instant::now();
        let mut q = ListQuery::new(m, ListAsk::new(b""), config());
        let _ = sent(&mut q, t0);
        q.handle_datagram(
            t0,
            "127.0.0.2:27010".parse().unwrap(),
            &page(&["192.0.2.1:1"], true),
        );
        q.handle_datagram(t0, m, b"junk");
        assert!(q.poll_event().is_none());
        assert_eq!(q.pages, 0);
    }
}
