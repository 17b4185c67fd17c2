//! The delivery machine of one notifier: one event at a time, in order; the service's rate
//! limits; retries with doubling waits after a failure (no answer, 5xx, 408); the wait a
//! 429 asks for (its `Retry-After`, Discord's `retry_after`, Telegram's
//! `parameters.retry_after`); and, for `--status-message`, one message per server posted
//! once and edited after. Pure: the time is passed in, requests come out as data and their
//! answers go back in; the worker in `mod.rs` does the I/O.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::format::{self, Board, Kind, Notifier, Request, Verdict};
use crate::watch::machine::Event;

/// Attempts per message after failures (the first and its retries).
pub(crate) const ATTEMPTS: u32 = 5;
/// The wait before the first retry; doubled for each further one.
pub(crate) const BACKOFF: Duration = Duration::from_millis(500);
/// 429 answers one message may get before it is given up.
pub(crate) const LIMITED_MAX: u32 = 10;

/// One rate limit.
#[derive(Debug, Clone)]
pub(crate) enum Window {
    /// At most `n` requests in any `span`: a sliding window over the last sends.
    Sliding {
        n: usize,
        span: Duration,
        sent: VecDeque<Instant>,
    },
    /// A token bucket: `burst` requests at once, then one more every `every`.
    Bucket {
        burst: u32,
        every: Duration,
        /// Tokens at `at`.
        tokens: f64,
        at: Option<Instant>,
    },
}

impl Window {
    pub(crate) fn new(n: usize, span: Duration) -> Self {
        Self::Sliding {
            n: n.max(1),
            span,
            sent: VecDeque::new(),
        }
    }

    pub(crate) fn bucket(burst: u32, every: Duration) -> Self {
        let burst = burst.max(1);
        Self::Bucket {
            burst,
            every,
            tokens: f64::from(burst),
            at: None,
        }
    }

    /// The earliest time from `now` on when one more request fits.
    fn ready_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        match self {
            Self::Sliding { n, span, sent } => Self::sliding_ready_at(*n, *span, sent, now),
            Self::Bucket { every, tokens, .. } if *tokens < 1.0 => {
                now + every.mul_f64(1.0 - *tokens)
            }
            Self::Bucket { .. } => now,
        }
    }

    /// A bucket's tokens brought up to `now`.
    fn refill(&mut self, now: Instant) {
        if let Self::Bucket {
            burst,
            every,
            tokens,
            at,
        } = self
        {
            if let Some(then) = *at {
                let gained = now.saturating_duration_since(then).as_secs_f64()
                    / every.as_secs_f64().max(f64::MIN_POSITIVE);
                *tokens = (*tokens + gained).min(f64::from(*burst));
            }
            *at = Some(now);
        }
    }

    fn sliding_ready_at(
        n: usize,
        span: Duration,
        sent: &mut VecDeque<Instant>,
        now: Instant,
    ) -> Instant {
        while sent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= span)
        {
            sent.pop_front();
        }
        if sent.len() < n {
            return now;
        }
        sent.front().map_or(now, |t| *t + span)
    }

    fn record(&mut self, now: Instant) {
        self.refill(now);
        match self {
            Self::Sliding { n, sent, .. } => {
                sent.push_back(now);
                while sent.len() > *n {
                    sent.pop_front();
                }
            }
            Self::Bucket { tokens, .. } => *tokens = (*tokens - 1.0).max(0.0),
        }
    }
}

/// The limits a service documents for one webhook or chat:
/// - Discord: a webhook's bucket allows 5 requests per 2 seconds (its `X-RateLimit-*`
///   headers say so; a 429 says how long to wait);
/// - Slack: incoming webhooks, 1 message per second (short bursts tolerated);
/// - Telegram: 1 message per second in one chat, and 20 per minute in a group or channel
///   (a chat id that is negative or an `@name`);
/// - ntfy: the server's default bucket for one visitor: 60 requests at once, then one
///   every 5 seconds;
/// - json: none documented; 10 per second keeps a runaway loop from flooding a receiver.
pub(crate) fn limits(n: &Notifier) -> Vec<Window> {
    let s = Duration::from_secs;
    match n.kind {
        Kind::Discord => vec![Window::new(5, s(2))],
        Kind::Slack => vec![Window::new(1, s(1))],
        Kind::Telegram => {
            let group = n
                .target
                .as_deref()
                .is_some_and(|c| c.starts_with('-') || c.starts_with('@'));
            let mut w = vec![Window::new(1, s(1))];
            if group {
                w.push(Window::new(20, s(60)));
            }
            w
        }
        Kind::Ntfy => vec![Window::bucket(60, s(5))],
        Kind::Json => vec![Window::new(10, s(1))],
    }
}

/// What the worker does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// Send this request and hand its answer to [`Courier::answered`].
    Send(Request),
    /// Nothing to do before this time.
    Wait(Instant),
    /// Give me the next event ([`Courier::take`]).
    Idle,
}

/// The answer to a request: status, `Retry-After` header and body; or why none came.
pub(crate) type Answer = Result<(u16, Option<String>, Vec<u8>), String>;

#[derive(Debug)]
struct Current {
    /// The server's address (status messages) and what to log.
    address: std::sync::Arc<str>,
    kind: &'static str,
    request: Request,
    /// The status message being edited, if this request edits one.
    editing: Option<String>,
    failures: u32,
    limited: u32,
    /// The wait before the next retry after a failure.
    backoff: Duration,
    not_before: Instant,
    in_flight: bool,
}

/// One notifier's deliveries.
#[derive(Debug)]
pub(crate) struct Courier {
    notifier: Notifier,
    /// `--status-message` (only for services that edit).
    status: bool,
    windows: Vec<Window>,
    current: Option<Current>,
    boards: HashMap<std::sync::Arc<str>, Board>,
    /// Servers whose board changed since its message was last sent, oldest change first
    /// (each once: several changes waiting make one edit).
    pending: VecDeque<std::sync::Arc<str>>,
    /// Status message ids by server address.
    ids: HashMap<String, String>,
    ids_changed: bool,
    /// Nothing is sent before this: the service said its bucket is empty.
    blocked_until: Option<Instant>,
    /// Messages delivered, and given up.
    pub delivered: u64,
    pub given_up: u64,
}

impl Courier {
    /// A courier for `notifier`; `ids` are the status messages of an earlier run.
    pub(crate) fn new(notifier: Notifier, status: bool, ids: HashMap<String, String>) -> Self {
        let status = status && notifier.kind.edits();
        Self {
            windows: limits(&notifier),
            notifier,
            status,
            current: None,
            boards: HashMap::new(),
            pending: VecDeque::new(),
            ids,
            ids_changed: false,
            blocked_until: None,
            delivered: 0,
            given_up: 0,
        }
    }

    pub(crate) fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// The status message ids, and whether they changed since the last call.
    pub(crate) fn ids_if_changed(&mut self) -> Option<&HashMap<String, String>> {
        std::mem::take(&mut self.ids_changed).then_some(&self.ids)
    }

    /// Whether events may be taken at any time ([`Courier::take`]): status boards only
    /// note the change; a message of its own per event waits for [`Step::Idle`].
    pub(crate) fn takes_any_time(&self) -> bool {
        self.status
    }

    /// Take `e`: start on its message (only when [`Courier::poll`] said [`Step::Idle`]),
    /// or, for status messages, note the change on its server's board.
    pub(crate) fn take(&mut self, now: Instant, e: &Event) {
        if self.status {
            self.boards
                .entry(e.address.clone())
                .or_insert_with(|| Board::new(&e.address))
                .apply(e);
            if !self.pending.contains(&e.address) {
                self.pending.push_back(e.address.clone());
            }
            return;
        }
        let request = format::event_request(&self.notifier, e);
        self.start(now, e.address.clone(), e.kind.name(), request, None);
    }

    fn start(
        &mut self,
        now: Instant,
        address: std::sync::Arc<str>,
        kind: &'static str,
        request: Request,
        editing: Option<String>,
    ) {
        self.current = Some(Current {
            address,
            kind,
            request,
            editing,
            failures: 0,
            limited: 0,
            backoff: BACKOFF,
            not_before: now,
            in_flight: false,
        });
    }

    /// The next server's board to send, if one changed.
    fn next_board(&mut self, now: Instant) {
        while self.current.is_none() {
            let Some(address) = self.pending.pop_front() else {
                return;
            };
            let Some(board) = self.boards.get(&address).cloned() else {
                continue;
            };
            if let Some((request, editing)) = self.status_request(&address, &board) {
                self.start(now, address, "status", request, editing);
            }
        }
    }

    /// The post or edit that shows `board`, and the id it edits.
    fn status_request(&self, address: &str, board: &Board) -> Option<(Request, Option<String>)> {
        match self.ids.get(address) {
            Some(id) => Some((
                format::status_edit(&self.notifier, board, id)?,
                Some(id.clone()),
            )),
            None => Some((format::status_post(&self.notifier, board)?, None)),
        }
    }

    /// What to do at `now`.
    pub(crate) fn poll(&mut self, now: Instant) -> Step {
        self.next_board(now);
        let Some(c) = &mut self.current else {
            return Step::Idle;
        };
        if c.in_flight {
            // The worker sends one request at a time; nothing else until its answer.
            return Step::Wait(now + Duration::from_secs(3600));
        }
        let mut at = c.not_before.max(now);
        if let Some(until) = self.blocked_until {
            at = at.max(until);
        }
        for w in &mut self.windows {
            at = at.max(w.ready_at(now));
        }
        if at > now {
            return Step::Wait(at);
        }
        for w in &mut self.windows {
            w.record(now);
        }
        c.in_flight = true;
        Step::Send(c.request.clone())
    }

    /// What an answer's rate-limit headers say (Discord's `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset-After`, in seconds): with nothing left in the bucket, nothing is
    /// sent until it refills, so the next request is not answered 429.
    pub(crate) fn rate_headers(
        &mut self,
        now: Instant,
        remaining: Option<&str>,
        reset_after: Option<&str>,
    ) {
        if remaining.map(str::trim) != Some("0") {
            return;
        }
        if let Some(wait) = reset_after.and_then(format::retry_after_header) {
            self.blocked_until = Some(now + wait);
        }
    }

    /// The answer to the request [`Courier::poll`] gave, at `now`.
    pub(crate) fn answered(&mut self, now: Instant, answer: Answer) {
        let Some(mut c) = self.current.take() else {
            return;
        };
        c.in_flight = false;
        let name = self.notifier.kind.name();
        let verdict = match &answer {
            Ok((status, retry_after, body)) => format::verdict(
                self.notifier.kind,
                c.editing.is_some(),
                *status,
                retry_after
                    .as_deref()
                    .and_then(|v| retry_after_seconds(v, std::time::SystemTime::now()))
                    .as_deref(),
                body,
            ),
            Err(_) => Verdict::Retry(None),
        };
        match verdict {
            Verdict::Done(id) => {
                self.delivered += 1;
                if self.status && c.editing.is_none() {
                    if let Some(id) = id {
                        self.ids.insert(c.address.to_string(), id);
                        self.ids_changed = true;
                    }
                }
            }
            Verdict::Gone => {
                // Deleted by someone: post the board anew, at once.
                tracing::info!(
                    "--notify {name}: the status message of {} is gone; posting a new one",
                    c.address
                );
                self.ids.remove(&*c.address);
                self.ids_changed = true;
                let board = self.boards.get(&c.address).cloned();
                if let Some(post) = board.and_then(|b| format::status_post(&self.notifier, &b)) {
                    c.request = post;
                    c.editing = None;
                    self.current = Some(c);
                }
            }
            Verdict::Retry(Some(wait)) if c.limited < LIMITED_MAX => {
                c.limited += 1;
                tracing::warn!(
                    "--notify {name}: rate limited for {} at {}; waiting {}ms as asked",
                    c.kind,
                    c.address,
                    wait.as_millis()
                );
                c.not_before = now + wait;
                self.current = Some(c);
            }
            Verdict::Retry(_) if c.failures + 1 < ATTEMPTS && c.limited < LIMITED_MAX => {
                c.failures += 1;
                let why = match &answer {
                    Ok((status, _, _)) => status.to_string(),
                    Err(e) => e.clone(),
                };
                tracing::warn!(
                    "--notify {name}: {} at {}: {why}; retrying in {}ms",
                    c.kind,
                    c.address,
                    c.backoff.as_millis()
                );
                c.not_before = now + c.backoff;
                c.backoff *= 2;
                self.current = Some(c);
            }
            Verdict::Retry(_) => {
                self.given_up += 1;
                tracing::warn!(
                    "--notify {name}: {} at {}: gave up after {} attempts",
                    c.kind,
                    c.address,
                    c.failures + c.limited + 1
                );
            }
            Verdict::Fail(why) => {
                self.given_up += 1;
                tracing::warn!(
                    "--notify {name}: {} at {}: {why}; not retried",
                    c.kind,
                    c.address
                );
            }
        }
    }
}

/// A `Retry-After` value in seconds, as [`format::verdict`] reads it: a number is kept; an
/// HTTP date (the header's other form) becomes the seconds from `wall` (the clock the date
/// is on) to it, 0 when it is past; anything else is dropped (the backoff applies).
fn retry_after_seconds(v: &str, wall: std::time::SystemTime) -> Option<String> {
    let v = v.trim();
    if v.parse::<f64>().is_ok() {
        return Some(v.to_owned());
    }
    let at = httpdate::parse_http_date(v).ok()?;
    let wait = at.duration_since(wall).unwrap_or_default();
    Some(format!("{:.3}", wait.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::watch::machine::EventKind;
    use crate::watch::notify::format::Method;

    fn event(kind: EventKind, address: &str) -> Event {
        Event {
            kind,
            address: address.into(),
            time: SystemTime::UNIX_EPOCH,
            name: Some("Srv".into()),
            map: Some("dm1".into()),
            players: Some(1),
            max_players: Some(8),
            player: None,
            previous: None,
            error: None,
        }
    }

    fn courier(spec: &str, status: bool) -> Courier {
        Courier::new(Notifier::parse(spec).unwrap(), status, HashMap::new())
    }

    fn ok(body: &str) -> Answer {
        Ok((200, None, body.as_bytes().to_vec()))
    }

    /// Take `e` and expect it to be sent at once; the request.
    fn send_now(c: &mut Courier, now: Instant, e: &Event) -> Request {
        assert_eq!(c.poll(now), Step::Idle);
        c.take(now, e);
        match c.poll(now) {
            Step::Send(r) => r,
            other => panic!("expected a send, got {other:?}"),
        }
    }

    #[test]
    fn discord_sends_five_per_two_seconds_then_waits() {
        let t0 = Instant::now();
        let mut c = courier("discord:http://127.0.0.1:9/api/webhooks/1/t", false);
        for _ in 0..5 {
            send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
            c.answered(t0, Ok((204, None, vec![])));
        }
        c.take(t0, &event(EventKind::ServerUp, "a:1"));
        assert_eq!(c.poll(t0), Step::Wait(t0 + Duration::from_secs(2)));
        assert_eq!(
            c.poll(t0 + Duration::from_millis(1999)),
            Step::Wait(t0 + Duration::from_secs(2))
        );
        assert!(matches!(c.poll(t0 + Duration::from_secs(2)), Step::Send(_)));
        assert_eq!(c.delivered, 5);
    }

    #[test]
    fn an_empty_discord_bucket_waits_for_its_reset() {
        let t0 = Instant::now();
        let mut c = courier("discord:http://127.0.0.1:9/api/webhooks/1/t", false);
        send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
        c.rate_headers(t0, Some("0"), Some("1.5"));
        c.answered(t0, Ok((204, None, vec![])));
        c.take(t0, &event(EventKind::ServerDown, "a:1"));
        assert_eq!(c.poll(t0), Step::Wait(t0 + Duration::from_millis(1500)));
        assert!(matches!(
            c.poll(t0 + Duration::from_millis(1500)),
            Step::Send(_)
        ));
        // Requests left: no wait.
        c.rate_headers(t0, Some("3"), Some("9"));
        c.answered(t0, Ok((204, None, vec![])));
        c.take(t0, &event(EventKind::ServerUp, "a:1"));
        assert!(matches!(
            c.poll(t0 + Duration::from_millis(1500)),
            Step::Send(_)
        ));
    }

    #[test]
    fn ntfy_sends_sixty_at_once_then_one_every_five_seconds() {
        let t0 = Instant::now();
        let mut c = courier("ntfy:http://127.0.0.1:9/alerts", false);
        for _ in 0..60 {
            send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
            c.answered(t0, ok("{}"));
        }
        c.take(t0, &event(EventKind::ServerUp, "a:1"));
        let t5 = t0 + Duration::from_secs(5);
        assert_eq!(c.poll(t0), Step::Wait(t5));
        assert_eq!(c.poll(t0 + Duration::from_secs(2)), Step::Wait(t5));
        assert!(matches!(c.poll(t5), Step::Send(_)));
        c.answered(t5, ok("{}"));
        c.take(t5, &event(EventKind::ServerUp, "a:1"));
        assert_eq!(c.poll(t5), Step::Wait(t5 + Duration::from_secs(5)));
        // A long quiet refills the whole burst, no more.
        let later = t5 + Duration::from_secs(3600);
        assert!(matches!(c.poll(later), Step::Send(_)));
        c.answered(later, ok("{}"));
        for _ in 0..59 {
            send_now(&mut c, later, &event(EventKind::ServerUp, "a:1"));
            c.answered(later, ok("{}"));
        }
        c.take(later, &event(EventKind::ServerUp, "a:1"));
        assert!(matches!(c.poll(later), Step::Wait(_)));
    }

    #[test]
    fn telegram_groups_also_get_twenty_a_minute() {
        let t0 = Instant::now();
        let mut c = courier("telegram:http://127.0.0.1:9/bot1:T?chat_id=-5", false);
        let mut now = t0;
        for i in 0..20 {
            // One a second is allowed.
            send_now(&mut c, now, &event(EventKind::ServerUp, "a:1"));
            c.answered(now, ok(r#"{"ok":true,"result":{"message_id":1}}"#));
            assert!(i < 20);
            now += Duration::from_secs(1);
        }
        c.take(now, &event(EventKind::ServerUp, "a:1"));
        assert_eq!(c.poll(now), Step::Wait(t0 + Duration::from_secs(60)));
        // A private chat has only the per-second limit.
        let mut c = courier("telegram:http://127.0.0.1:9/bot1:T?chat_id=5", false);
        send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
        c.answered(t0, ok(r#"{"ok":true,"result":{"message_id":1}}"#));
        c.take(t0, &event(EventKind::ServerUp, "a:1"));
        assert_eq!(c.poll(t0), Step::Wait(t0 + Duration::from_secs(1)));
    }

    #[test]
    fn a_429_waits_as_long_as_asked_then_sends_the_same_request() {
        let t0 = Instant::now();
        let mut c = courier("slack:http://127.0.0.1:9/hook", false);
        let first = send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
        c.answered(t0, Ok((429, Some("30".into()), b"rate_limited".to_vec())));
        assert_eq!(c.poll(t0), Step::Wait(t0 + Duration::from_secs(30)));
        let again = c.poll(t0 + Duration::from_secs(30));
        assert_eq!(again, Step::Send(first));
        c.answered(t0 + Duration::from_secs(30), ok("ok"));
        assert_eq!(c.poll(t0 + Duration::from_secs(31)), Step::Idle);
        assert_eq!((c.delivered, c.given_up), (1, 0));
        // Telegram's wait is in the body.
        let mut c = courier("telegram:http://127.0.0.1:9/bot1:T?chat_id=5", false);
        send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
        c.answered(
            t0,
            Ok((
                429,
                None,
                br#"{"ok":false,"error_code":429,"parameters":{"retry_after":7}}"#.to_vec(),
            )),
        );
        assert_eq!(c.poll(t0), Step::Wait(t0 + Duration::from_secs(7)));
    }

    #[test]
    fn failures_back_off_doubling_then_give_up() {
        let t0 = Instant::now();
        let mut c = courier("json:http://127.0.0.1:9/hook", false);
        send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
        let mut now = t0;
        let mut waits = Vec::new();
        loop {
            c.answered(
                now,
                if waits.len() % 2 == 0 {
                    Err("connection refused".into())
                } else {
                    Ok((503, None, vec![]))
                },
            );
            match c.poll(now) {
                Step::Wait(at) => {
                    waits.push(at - now);
                    now = at;
                    assert!(matches!(c.poll(now), Step::Send(_)));
                }
                Step::Idle => break,
                Step::Send(_) => panic!("sent again without waiting"),
            }
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [500, 1000, 2000, 4000]);
        assert_eq!((c.delivered, c.given_up), (0, 1));
        // A 4xx is not retried.
        send_now(&mut c, now, &event(EventKind::ServerUp, "a:1"));
        c.answered(now, Ok((400, None, b"bad".to_vec())));
        assert_eq!(c.poll(now), Step::Idle);
        assert_eq!(c.given_up, 2);
    }

    #[test]
    fn status_messages_post_once_then_edit_per_server() {
        let t0 = Instant::now();
        let mut c = courier("discord:http://127.0.0.1:9/api/webhooks/1/t", true);
        let post = send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
        assert_eq!(post.method, Method::Post);
        assert_eq!(post.url.query(), Some("wait=true"));
        c.answered(t0, ok(r#"{"id":"900"}"#));
        assert_eq!(
            c.ids_if_changed().unwrap().get("a:1").map(String::as_str),
            Some("900")
        );
        assert!(c.ids_if_changed().is_none());
        let now = t0 + Duration::from_secs(2);
        let edit = send_now(&mut c, now, &event(EventKind::MapChanged, "a:1"));
        assert_eq!(edit.method, Method::Patch);
        assert_eq!(edit.url.path(), "/api/webhooks/1/t/messages/900");
        c.answered(now, ok(r#"{"id":"900"}"#));
        // Another server has a message of its own.
        let other = send_now(
            &mut c,
            now + Duration::from_secs(2),
            &event(EventKind::ServerUp, "b:1"),
        );
        assert_eq!(other.method, Method::Post);
        c.answered(now, ok(r#"{"id":"901"}"#));
        // Someone deleted a's message: the edit is answered 404 and a new one is posted.
        let now = now + Duration::from_secs(4);
        send_now(&mut c, now, &event(EventKind::SlotFree, "a:1"));
        c.answered(
            now,
            Ok((
                404,
                None,
                br#"{"message":"Unknown Message","code":10008}"#.to_vec(),
            )),
        );
        match c.poll(now) {
            Step::Send(r) => {
                assert_eq!((r.method, r.url.query()), (Method::Post, Some("wait=true")))
            }
            other => panic!("{other:?}"),
        }
        c.answered(now, ok(r#"{"id":"902"}"#));
        let ids = c.ids_if_changed().unwrap();
        assert_eq!(ids.get("a:1").map(String::as_str), Some("902"));
        assert_eq!(ids.get("b:1").map(String::as_str), Some("901"));
    }

    #[test]
    fn status_changes_waiting_together_make_one_edit() {
        let t0 = Instant::now();
        let mut c = courier("telegram:http://127.0.0.1:9/bot1:T?chat_id=5", true);
        assert!(c.takes_any_time());
        c.take(t0, &event(EventKind::ServerUp, "a:1"));
        let Step::Send(post) = c.poll(t0) else {
            panic!("no post")
        };
        assert!(post.url.path().ends_with("/sendMessage"));
        // Three changes while the post is answered and the chat's second runs out.
        let mut map = event(EventKind::MapChanged, "a:1");
        map.map = Some("dm9".into());
        map.players = Some(2);
        let mut joined = event(EventKind::PlayerJoined, "a:1");
        joined.players = Some(2);
        c.take(t0, &joined);
        c.take(t0, &map);
        c.take(t0, &event(EventKind::ServerUp, "b:1"));
        c.answered(t0, ok(r#"{"ok":true,"result":{"message_id":5}}"#));
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(c.poll(t0), Step::Wait(t1));
        let Step::Send(edit) = c.poll(t1) else {
            panic!("no edit")
        };
        assert!(edit.url.path().ends_with("/editMessageText"));
        let text = edit.body["text"].as_str().unwrap();
        assert!(
            text.contains("Map: dm9") && text.contains("Players: 2/8"),
            "{text}"
        );
        c.answered(t1, ok(r#"{"ok":true,"result":{"message_id":5}}"#));
        let t2 = t1 + Duration::from_secs(1);
        let Step::Send(other) = c.poll(t2) else {
            panic!("no post for b")
        };
        assert!(other.url.path().ends_with("/sendMessage"));
        c.answered(t2, ok(r#"{"ok":true,"result":{"message_id":6}}"#));
        assert_eq!(c.poll(t2), Step::Idle);
        assert_eq!(c.delivered, 3);
    }

    #[test]
    fn status_ids_from_an_earlier_run_are_edited() {
        let t0 = Instant::now();
        let ids = HashMap::from([("a:1".to_owned(), "31".to_owned())]);
        let n = Notifier::parse("telegram:http://127.0.0.1:9/bot1:T?chat_id=5").unwrap();
        let mut c = Courier::new(n, true, ids);
        let r = send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
        assert_eq!(r.url.path(), "/bot1:T/editMessageText");
        assert_eq!(r.body["message_id"], 31);
    }

    #[test]
    fn status_is_ignored_for_services_that_cannot_edit() {
        let t0 = Instant::now();
        let mut c = courier("slack:http://127.0.0.1:9/hook", true);
        let r = send_now(&mut c, t0, &event(EventKind::ServerUp, "a:1"));
        assert!(r.body["text"].as_str().unwrap().contains("is up"));
    }

    #[test]
    fn a_retry_after_date_is_the_wait_until_it() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        // RFC 9110's example date, 5 minutes after `wall`.
        assert_eq!(
            retry_after_seconds("Wed, 21 Oct 2015 07:33:00 GMT", wall).as_deref(),
            Some("300.000")
        );
        assert_eq!(
            retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", wall).as_deref(),
            Some("0.000"),
            "a date past is no wait"
        );
        assert_eq!(retry_after_seconds(" 2.5 ", wall).as_deref(), Some("2.5"));
        assert_eq!(retry_after_seconds("soon", wall), None);
        // Read as a 429's wait.
        let v = retry_after_seconds("Wed, 21 Oct 2015 07:33:00 GMT", wall);
        assert!(matches!(
            format::verdict(Kind::Slack, false, 429, v.as_deref(), b"rate_limited"),
            Verdict::Retry(Some(w)) if w == Duration::from_secs(300)
        ));
    }
}
