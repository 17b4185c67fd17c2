//! Replies held back by the `delay` impairment, sent when they are due by one thread per
//! process.
//!
//! A tokio timer fires on a whole-millisecond tick and only when the runtime gets round to
//! it, so a reply delayed with one left 0–2 ms late, and later still when a burst of requests
//! came at once (every delayed reply of the burst waking on the same tick, each spawned task
//! polled in turn). A client's measured ping then varied by several percent of a 20 ms delay
//! from one request to the next, which is the very thing a ping comparison must not see. The
//! line keeps the held replies in a queue ordered by due time and one thread sleeps until the
//! first is due (a kernel timer with tens of microseconds of slack), then sends it straight
//! from that thread.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use muster_proto::respond::Reply;
use tokio::net::UdpSocket;

use crate::udp::Stats;

/// Items ordered by due time, then by arrival (two items due at once leave in the order they
/// were held). Time is passed in, so the order is tested without a clock.
#[derive(Debug)]
pub(crate) struct Queue<T> {
    heap: BinaryHeap<Reverse<(Instant, u64, Slot<T>)>>,
    next_seq: u64,
}

/// An item in the heap, compared by nothing (the due time and sequence number order it).
#[derive(Debug)]
struct Slot<T>(T);

impl<T> PartialEq for Slot<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Slot<T> {}
impl<T> PartialOrd for Slot<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Slot<T> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<T> Queue<T> {
    /// Holds `item` until `due`.
    pub(crate) fn push(&mut self, due: Instant, item: T) {
        self.heap.push(Reverse((due, self.next_seq, Slot(item))));
        self.next_seq = self.next_seq.wrapping_add(1);
    }

    /// When the first held item is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// The first held item if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<T> {
        if self.next_due()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse((_, _, Slot(item)))| item)
    }

    /// Items held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

/// Replies to send from one socket.
struct Held {
    socket: Arc<UdpSocket>,
    replies: Vec<Reply>,
    stats: Arc<Stats>,
    /// Where a send the socket could not take at once is finished.
    runtime: tokio::runtime::Handle,
}

struct Line {
    queue: Mutex<Queue<Held>>,
    wake: Condvar,
}

static LINE: OnceLock<Option<Arc<Line>>> = OnceLock::new();

/// The process's line, its thread started on first use; `None` if no thread could be started.
fn line() -> Option<&'static Arc<Line>> {
    LINE.get_or_init(|| {
        let line = Arc::new(Line {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        });
        let run = Arc::clone(&line);
        match std::thread::Builder::new()
            .name("muster-delay".into())
            .spawn(move || run_line(&run))
        {
            Ok(_) => Some(line),
            Err(e) => {
                tracing::warn!("no thread for delayed replies ({e}); tokio timers are used");
                None
            }
        }
    })
    .as_ref()
}

/// Sends `replies` from `socket` at `due`, counting them in `stats`. Called from within a
/// tokio runtime.
pub(crate) fn hold(due: Instant, socket: Arc<UdpSocket>, replies: Vec<Reply>, stats: Arc<Stats>) {
    let runtime = tokio::runtime::Handle::current();
    let Some(line) = line() else {
        runtime.spawn(async move {
            tokio::time::sleep_until(due.into()).await;
            crate::udp::send_all(&socket, &replies, &stats).await;
        });
        return;
    };
    let mut queue = line.queue.lock().unwrap_or_else(PoisonError::into_inner);
    let first = queue.next_due().is_none_or(|d| due < d);
    queue.push(
        due,
        Held {
            socket,
            replies,
            stats,
            runtime,
        },
    );
    drop(queue);
    if first {
        line.wake.notify_one();
    }
}

fn run_line(line: &Line) {
    let mut queue = line.queue.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let now = Instant::now();
        if let Some(held) = queue.pop_due(now) {
            drop(queue);
            send(held);
            queue = line.queue.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        queue = match queue.next_due() {
            Some(due) => {
                line.wake
                    .wait_timeout(queue, due.saturating_duration_since(now))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => line
                .wake
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner),
        };
    }
}

/// Sends what the socket takes at once; the rest (a full send buffer) goes through the
/// runtime, which waits for the socket to be writable.
fn send(held: Held) {
    let Held {
        socket,
        replies,
        stats,
        runtime,
    } = held;
    for (i, reply) in replies.iter().enumerate() {
        match socket.try_send_to(&reply.bytes, reply.to) {
            Ok(_) => Stats::bump(&stats.sent),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let rest = replies[i..].to_vec();
                runtime.spawn(async move { crate::udp::send_all(&socket, &rest, &stats).await });
                return;
            }
            Err(e) => tracing::debug!(to = %reply.to, error = %e, "reply not sent"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn items_leave_in_due_order_and_only_when_due() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut q = Queue::default();
        q.push(at(30), "c");
        q.push(at(10), "a");
        q.push(at(20), "b");
        q.push(at(10), "a2");
        assert_eq!(q.next_due(), Some(at(10)));
        assert_eq!(q.pop_due(at(9)), None);
        assert_eq!(q.pop_due(at(10)), Some("a"));
        assert_eq!(
            q.pop_due(at(10)),
            Some("a2"),
            "held at the same due time: held order"
        );
        assert_eq!(q.pop_due(at(19)), None);
        assert_eq!(q.pop_due(at(25)), Some("b"));
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop_due(at(100)), Some("c"));
        assert_eq!(q.pop_due(at(100)), None);
        assert_eq!(q.next_due(), None);
    }

    #[tokio::test]
    async fn a_held_reply_is_sent_no_earlier_than_due() {
        let server = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = client.local_addr().unwrap();
        let stats = Arc::new(Stats::default());
        let start = Instant::now();
        let reply = |b: &[u8]| Reply {
            to,
            bytes: b.to_vec(),
        };
        hold(
            start + Duration::from_millis(60),
            Arc::clone(&server),
            vec![reply(b"late")],
            Arc::clone(&stats),
        );
        hold(
            start + Duration::from_millis(30),
            Arc::clone(&server),
            vec![reply(b"early"), reply(b"early2")],
            Arc::clone(&stats),
        );
        let mut buf = [0u8; 16];
        let mut got = Vec::new();
        for _ in 0..3 {
            let n = tokio::time::timeout(Duration::from_secs(10), client.recv(&mut buf))
                .await
                .expect("a held reply came")
                .unwrap();
            got.push((buf[..n].to_vec(), start.elapsed()));
        }
        assert_eq!(got[0].0, b"early");
        assert_eq!(got[1].0, b"early2");
        assert_eq!(got[2].0, b"late");
        assert!(got[0].1 >= Duration::from_millis(30), "{:?}", got[0].1);
        assert!(got[2].1 >= Duration::from_millis(60), "{:?}", got[2].1);
        // The count follows the send, so the client can hold the last reply just before it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while stats.sent.load(std::sync::atomic::Ordering::Relaxed) < 3 && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(stats.sent.load(std::sync::atomic::Ordering::Relaxed), 3);
    }
}
