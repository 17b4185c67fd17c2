//! `--notify KIND:URL`: chat alerts to Discord, Slack, Telegram, ntfy or a JSON webhook.
//!
//! - [`format`](mod@format): what each service is sent and what its answers mean (pure).
//! - [`courier`]: one notifier's deliveries: order, rate limits, retries (pure, time
//!   passed in).
//! - here: the worker that runs a courier over HTTP, fed by a queue the watch loop pushes
//!   to without ever waiting, and the file `--status-message` keeps its message ids in.

pub(crate) mod courier;
pub(crate) mod format;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use self::courier::{Answer, Courier, Step};
pub(crate) use self::format::Notifier;
use self::format::{Method, Request};
use super::machine::Event;
use super::sinks::DropOldest;

/// Events waiting for one notifier; beyond this the oldest waiting one is dropped.
pub(crate) const QUEUE: usize = 256;
/// Longest one request may take, answer included.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);
/// Most of an answer's body that is read (ids and error descriptions are near the start).
const ANSWER_MAX: usize = 64 * 1024;

/// `--notify`'s value parser.
pub(crate) fn parse(spec: &str) -> Result<Notifier, String> {
    Notifier::parse(spec)
}

/// The status message ids of every notifier, kept in a JSON file so that a restart edits
/// the messages it posted before instead of posting new ones. A notifier is known by a
/// hash of its URL, so the file holds no webhook token.
#[derive(Debug)]
pub(crate) struct StateFile {
    path: PathBuf,
    ids: Mutex<HashMap<String, HashMap<String, String>>>,
}

/// FNV-1a, 64 bits: a stable name for a notifier in the state file.
fn notifier_key(n: &Notifier) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let text = format!(
        "{}:{}:{}",
        n.kind.name(),
        n.url,
        n.target.as_deref().unwrap_or("")
    );
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{}-{h:016x}", n.kind.name())
}

/// Largest state file read (a few ids per watched server).
const STATE_MAX: u64 = 16 * 1024 * 1024;

impl StateFile {
    /// Read `path` (missing is empty; unreadable or damaged is an error naming it).
    pub(crate) fn open(path: PathBuf) -> anyhow::Result<Self> {
        let ids = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
            Ok(m) if m.len() > STATE_MAX => {
                anyhow::bail!("{}: larger than {STATE_MAX} bytes", path.display())
            }
            Ok(_) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
                serde_json::from_str(&text).map_err(|e| {
                    anyhow::anyhow!("{}: not a status-message state file: {e}", path.display())
                })?
            }
        };
        Ok(Self {
            path,
            ids: Mutex::new(ids),
        })
    }

    fn get(&self, n: &Notifier) -> HashMap<String, String> {
        let ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        ids.get(&notifier_key(n)).cloned().unwrap_or_default()
    }

    /// Keep `ids` for `n`, written whole to a new file then renamed over the old one.
    fn put(&self, n: &Notifier, ids: &HashMap<String, String>) {
        let text = {
            let mut all = self.ids.lock().unwrap_or_else(|e| e.into_inner());
            all.insert(notifier_key(n), ids.clone());
            serde_json::to_string_pretty(&*all).unwrap_or_default()
        };
        let tmp = self.path.with_extension("tmp");
        let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            tracing::warn!("cannot write {}: {e}", self.path.display());
        }
    }
}

/// Start the worker of `n` in `workers`; the queue to push its events to.
pub(crate) fn spawn(
    n: Notifier,
    status: bool,
    state: Option<Arc<StateFile>>,
    workers: &mut JoinSet<()>,
) -> anyhow::Result<Arc<DropOldest<Event>>> {
    if status && !n.kind.edits() {
        tracing::warn!(
            "--status-message: {} cannot edit messages; it gets one message per event",
            n.kind.name()
        );
    }
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .user_agent(concat!("muster/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| anyhow::anyhow!("cannot set up the HTTP client: {e}"))?;
    let ids = state.as_ref().map(|s| s.get(&n)).unwrap_or_default();
    let courier = Courier::new(n, status, ids);
    let queue = Arc::new(DropOldest::new(QUEUE));
    workers.spawn(run(courier, queue.clone(), client, state));
    Ok(queue)
}

/// Deliver what comes on `queue` until it is closed and empty.
async fn run(
    mut c: Courier,
    queue: Arc<DropOldest<Event>>,
    client: reqwest::Client,
    state: Option<Arc<StateFile>>,
) {
    loop {
        if c.takes_any_time() {
            // Every change that came meanwhile, on its board: one edit shows them all.
            while let Some(e) = queue.try_pop() {
                c.take(Instant::now(), &e);
            }
        }
        match c.poll(Instant::now()) {
            Step::Send(r) => {
                let (answer, remaining, reset_after) = send(&client, &r).await;
                let now = Instant::now();
                c.rate_headers(now, remaining.as_deref(), reset_after.as_deref());
                c.answered(now, answer);
                if let (Some(state), Some(ids)) = (&state, c.ids_if_changed()) {
                    let ids = ids.clone();
                    state.put(c.notifier(), &ids);
                }
            }
            Step::Wait(at) => tokio::time::sleep_until(at).await,
            Step::Idle => match queue.pop().await {
                Some(e) => c.take(Instant::now(), &e),
                None => break,
            },
        }
    }
}

/// Send one request: its status, `Retry-After` and (the start of) its body, and the
/// rate-limit headers `X-RateLimit-Remaining` and `X-RateLimit-Reset-After`.
async fn send(client: &reqwest::Client, r: &Request) -> (Answer, Option<String>, Option<String>) {
    let method = match r.method {
        Method::Post => reqwest::Method::POST,
        Method::Patch => reqwest::Method::PATCH,
    };
    let sent = client
        .request(method, r.url.clone())
        .header(reqwest::header::CONTENT_TYPE, r.content_type)
        .body(r.body.to_string())
        .send()
        .await;
    let mut response = match sent {
        Ok(r) => r,
        Err(e) => return (Err(muster_proto::errors::error_chain(&e)), None, None),
    };
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = header("retry-after");
    let remaining = header("x-ratelimit-remaining");
    let reset_after = header("x-ratelimit-reset-after");
    let status = response.status().as_u16();
    let mut body = Vec::new();
    while body.len() < ANSWER_MAX {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => break,
            // The status is what matters; a body cut short reads as no body.
            Err(_) => break,
        }
    }
    body.truncate(ANSWER_MAX);
    (Ok((status, retry_after, body)), remaining, reset_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_keeps_ids_per_notifier_without_tokens() {
        let scratch = muster_testkit::process::ScratchDir::new("notify-state");
        let path = scratch.path().join("state.json");
        let d = Notifier::parse("discord:http://127.0.0.1:9/api/webhooks/1/SECRET").unwrap();
        let t = Notifier::parse("telegram:http://127.0.0.1:9/botSECRET?chat_id=5").unwrap();
        let s = StateFile::open(path.clone()).unwrap();
        assert!(s.get(&d).is_empty());
        s.put(&d, &HashMap::from([("a:1".into(), "900".into())]));
        s.put(&t, &HashMap::from([("a:1".into(), "7".into())]));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("SECRET"), "{text}");
        let again = StateFile::open(path.clone()).unwrap();
        assert_eq!(again.get(&d).get("a:1").map(String::as_str), Some("900"));
        assert_eq!(again.get(&t).get("a:1").map(String::as_str), Some("7"));
        std::fs::write(&path, "{not json").unwrap();
        let e = StateFile::open(path.clone()).unwrap_err().to_string();
        assert!(e.contains("state.json"), "{e}");
    }
}
