//! What each chat service is sent for an event or a status message, and what its answer
//! means. Pure: an event (or a server's board) in, a request (method, URL, headers, body)
//! out; a status, headers and body in, a verdict out. Nothing here does I/O.
//!
//! The request formats (see `docs/watch.md`, "Notifiers"):
//! - Discord: execute a webhook, `POST {webhook}` with a JSON body of `embeds` (`?wait=true`
//!   when the created message's `id` is wanted back); edit one, `PATCH
//!   {webhook}/messages/{id}`. `allowed_mentions` is empty so a player called `@everyone`
//!   pings nobody.
//! - Slack: an incoming webhook, `POST {webhook}` with `text` (the notification's fallback)
//!   and `blocks`; `mrkdwn` text escapes `&`, `<` and `>`.
//! - Telegram: `POST {api}/bot{token}/sendMessage` and `…/editMessageText` with `chat_id`,
//!   `text` and `parse_mode` `HTML` (`&`, `<` and `>` escaped in every name).
//! - ntfy: a JSON publish, `POST` to the server's root with `topic`, `title`, `message`,
//!   `tags` and `priority`, so that names need no header encoding.
//! - json: the event's own JSON (as `--webhook` posts it).

use std::time::{Duration, SystemTime};

use reqwest::Url;
use serde_json::{Value, json};

use crate::watch::machine::{Event, EventKind};
use crate::watch::sinks::to_json;

/// The services `--notify` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Discord,
    Slack,
    Telegram,
    Ntfy,
    Json,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Discord => "discord",
            Self::Slack => "slack",
            Self::Telegram => "telegram",
            Self::Ntfy => "ntfy",
            Self::Json => "json",
        }
    }

    /// Whether the service can edit a message it posted (`--status-message`).
    pub(crate) fn edits(self) -> bool {
        matches!(self, Self::Discord | Self::Telegram)
    }
}

/// Where one `--notify KIND:URL` sends, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notifier {
    pub kind: Kind,
    /// Discord, Slack, json: the webhook. Telegram: the API's `…/bot<TOKEN>` (no query, no
    /// trailing slash). ntfy: the server's root.
    pub url: Url,
    /// Telegram's `chat_id`, ntfy's topic.
    pub target: Option<String>,
}

/// Longest Telegram message text, in characters (the Bot API's limit, after entities).
const TELEGRAM_TEXT_MAX: usize = 4096;
/// Longest Discord embed title, in characters.
const DISCORD_TITLE_MAX: usize = 256;
/// Longest Discord embed field value, in characters.
const DISCORD_FIELD_MAX: usize = 1024;
/// Longest name or map put into any message, in characters: a hostile server cannot fill
/// a message with its name.
const NAME_MAX: usize = 100;

impl Notifier {
    /// Parse `KIND:URL`. The URL is http or https; Telegram's is
    /// `https://api.telegram.org/bot<TOKEN>?chat_id=<ID>`, ntfy's the topic's URL.
    pub(crate) fn parse(spec: &str) -> Result<Self, String> {
        let (kind, rest) = spec.split_once(':').ok_or_else(|| {
            format!("{spec:?}: expected KIND:URL (discord, slack, telegram, ntfy or json)")
        })?;
        let kind = match kind.to_ascii_lowercase().as_str() {
            "discord" => Kind::Discord,
            "slack" => Kind::Slack,
            "telegram" => Kind::Telegram,
            "ntfy" => Kind::Ntfy,
            "json" => Kind::Json,
            other => {
                return Err(format!(
                    "unknown notifier {other:?}: expected discord, slack, telegram, ntfy or json"
                ));
            }
        };
        let mut url = Url::parse(rest)
            .map_err(|e| format!("{kind:?} URL {rest:?}: {e}", kind = kind.name()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "{}: only http and https URLs, not {}",
                kind.name(),
                url.scheme()
            ));
        }
        let mut target = None;
        match kind {
            Kind::Telegram => {
                let chat = url
                    .query_pairs()
                    .find(|(k, _)| k == "chat_id")
                    .map(|(_, v)| v.into_owned())
                    .filter(|v| !v.is_empty())
                    .ok_or("telegram: the URL needs ?chat_id=<ID> (a number, or @channelname)")?;
                url.set_query(None);
                url.set_fragment(None);
                let path = url.path().trim_end_matches('/').to_owned();
                let last = path.rsplit('/').next().unwrap_or("");
                if !last.starts_with("bot") || last.len() <= 3 {
                    return Err(
                        "telegram: the URL's path must end in /bot<TOKEN>, as in https://api.telegram.org/bot123:ABC?chat_id=42"
                            .into(),
                    );
                }
                url.set_path(&path);
                target = Some(chat);
            }
            Kind::Ntfy => {
                let path = url.path().trim_end_matches('/').to_owned();
                let (root, topic) = path.rsplit_once('/').unwrap_or(("", ""));
                if topic.is_empty() || url.query().is_some() {
                    return Err(
                        "ntfy: the URL is the topic's, as in https://ntfy.sh/mytopic".into(),
                    );
                }
                target = Some(topic.to_owned());
                url.set_path(&format!("{root}/"));
            }
            Kind::Discord | Kind::Slack | Kind::Json => {}
        }
        Ok(Self { kind, url, target })
    }
}

/// HTTP methods the services are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Post,
    Patch,
}

/// One request, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    pub method: Method,
    pub url: Url,
    /// Always `application/json` today; kept with the request so tests see it.
    pub content_type: &'static str,
    pub body: Value,
}

impl Request {
    fn post(url: Url, body: Value) -> Self {
        Self {
            method: Method::Post,
            url,
            content_type: "application/json",
            body,
        }
    }
}

/// A name cut to [`NAME_MAX`] characters, control characters replaced.
fn clean(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(NAME_MAX)
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if s.chars().count() > NAME_MAX {
        out.push('…');
    }
    out
}

/// `s` cut to `max` characters (the last one an ellipsis when cut).
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Text for Telegram's HTML and Slack's mrkdwn: `&`, `<`, `>` as entities.
pub(crate) fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Text for Discord markdown: its formatting characters backslashed.
pub(crate) fn escape_markdown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(
            c,
            '\\' | '*' | '_' | '~' | '`' | '|' | '>' | '#' | '[' | ']' | '(' | ')' | '-' | '@'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The server as people call it: its name, else its address.
fn server_name(e: &Event) -> String {
    clean(
        e.name
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(&e.address),
    )
}

/// What an event says, in the words of a notification: the headline, with names as given
/// (each service escapes them its own way), built from escaped parts.
fn headline(e: &Event, esc: &dyn Fn(&str) -> String) -> String {
    let server = esc(&server_name(e));
    let player = esc(&clean(e.player.as_deref().unwrap_or("")));
    let map = esc(&clean(e.map.as_deref().unwrap_or("")));
    let previous = esc(&clean(e.previous.as_deref().unwrap_or("")));
    match e.kind {
        EventKind::ServerUp => format!("{server} is up"),
        EventKind::ServerDown => format!("{server} is down"),
        EventKind::PlayerJoined => format!("{player} joined {server}"),
        EventKind::PlayerLeft => format!("{player} left {server}"),
        EventKind::MapChanged => format!("{server}: map {previous} → {map}"),
        EventKind::NameChanged => format!("{previous} is now {server}"),
        EventKind::ServerFull => format!("{server} is full"),
        EventKind::SlotFree => format!("{server} has a free slot"),
        EventKind::FriendOnline => format!("{player} is online on {server}"),
        EventKind::FriendOffline => format!("{player} went offline ({server})"),
    }
}

fn players_text(players: Option<u32>, max: Option<u32>) -> Option<String> {
    match (players, max) {
        (Some(n), Some(m)) if m > 0 => Some(format!("{n}/{m}")),
        (Some(n), _) => Some(n.to_string()),
        _ => None,
    }
}

/// An embed's colour (0xRRGGBB) per kind: green for good news, red for bad, blue otherwise.
fn colour(kind: EventKind) -> u32 {
    match kind {
        EventKind::ServerUp | EventKind::FriendOnline | EventKind::SlotFree => 0x2e_cc_71,
        EventKind::ServerDown | EventKind::FriendOffline => 0xe7_4c_3c,
        EventKind::ServerFull => 0xe6_7e_22,
        _ => 0x34_98_db,
    }
}

/// ntfy's priority (1 min … 5 max) and tags (emoji short codes) per kind.
fn ntfy_priority_and_tags(kind: EventKind) -> (u8, &'static [&'static str]) {
    match kind {
        EventKind::ServerUp => (3, &["green_circle"]),
        EventKind::ServerDown => (4, &["red_circle"]),
        EventKind::PlayerJoined => (2, &["inbox_tray"]),
        EventKind::PlayerLeft => (2, &["outbox_tray"]),
        EventKind::MapChanged => (3, &["world_map"]),
        EventKind::NameChanged => (2, &["label"]),
        EventKind::ServerFull => (3, &["no_entry"]),
        EventKind::SlotFree => (3, &["white_check_mark"]),
        EventKind::FriendOnline => (4, &["wave"]),
        EventKind::FriendOffline => (3, &["zzz"]),
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The details under a headline: map, players, address, why a server is down.
fn details(e: &Event) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(map) = e.map.as_deref().filter(|m| !m.is_empty()) {
        out.push(("Map", clean(map)));
    }
    if let Some(p) = players_text(e.players, e.max_players) {
        out.push(("Players", p));
    }
    out.push(("Address", clean(&e.address)));
    if let Some(err) = e.error.as_deref() {
        out.push(("Error", clean(err)));
    }
    out
}

/// The request that reports `e` as a message of its own.
pub(crate) fn event_request(n: &Notifier, e: &Event) -> Request {
    match n.kind {
        Kind::Discord => {
            let fields: Vec<Value> = details(e)
                .into_iter()
                .map(|(k, v)| {
                    json!({"name": k, "value": cut(&escape_markdown(&v), DISCORD_FIELD_MAX), "inline": k != "Error"})
                })
                .collect();
            let body = json!({
                "allowed_mentions": {"parse": []},
                "embeds": [{
                    "title": cut(&headline(e, &|s| s.to_owned()), DISCORD_TITLE_MAX),
                    "color": colour(e.kind),
                    "fields": fields,
                    "timestamp": rfc3339(e.time),
                    "footer": {"text": e.kind.name()},
                }],
            });
            Request::post(n.url.clone(), body)
        }
        Kind::Slack => {
            let head = headline(e, &escape_html);
            let context: Vec<String> = details(e)
                .into_iter()
                .map(|(k, v)| format!("{k}: {}", escape_html(&v)))
                .collect();
            let body = json!({
                "text": head,
                "blocks": [
                    {"type": "section", "text": {"type": "mrkdwn", "text": format!("*{head}*")}},
                    {"type": "context", "elements": [{"type": "mrkdwn", "text": context.join(" · ")}]},
                ],
            });
            Request::post(n.url.clone(), body)
        }
        Kind::Telegram => {
            let text = telegram_text(&headline(e, &escape_html), &details(e));
            telegram_request(n, "sendMessage", text, None)
        }
        Kind::Ntfy => {
            let (priority, tags) = ntfy_priority_and_tags(e.kind);
            let message: Vec<String> = details(e)
                .into_iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            let body = json!({
                "topic": n.target.as_deref().unwrap_or(""),
                "title": headline(e, &|s| s.to_owned()),
                "message": message.join("\n"),
                "tags": tags,
                "priority": priority,
            });
            Request::post(n.url.clone(), body)
        }
        Kind::Json => {
            // `to_json` always gives an object.
            let body = serde_json::from_str(&to_json(e)).unwrap_or(Value::Null);
            Request::post(n.url.clone(), body)
        }
    }
}

fn telegram_text(head: &str, details: &[(&'static str, String)]) -> String {
    let mut text = format!("<b>{head}</b>");
    for (k, v) in details {
        let v = escape_html(v);
        if *k == "Address" {
            text.push_str(&format!("\n{k}: <code>{v}</code>"));
        } else {
            text.push_str(&format!("\n{k}: {v}"));
        }
    }
    text
}

fn telegram_request(n: &Notifier, method: &str, text: String, message_id: Option<i64>) -> Request {
    let mut url = n.url.clone();
    let path = format!("{}/{method}", url.path().trim_end_matches('/'));
    url.set_path(&path);
    // Every part of the text is short (names are cut), so this stays far below the limit;
    // cut anyway rather than have the API refuse it.
    let text = if text.chars().count() > TELEGRAM_TEXT_MAX {
        escape_html(&cut(&text, TELEGRAM_TEXT_MAX / 2))
    } else {
        text
    };
    let chat = n.target.as_deref().unwrap_or("");
    // A numeric chat id goes as a number, a channel's @name as a string.
    let chat_id = chat
        .parse::<i64>()
        .map_or_else(|_| json!(chat), |id| json!(id));
    let mut body = json!({
        "chat_id": chat_id,
        "text": text,
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": true},
    });
    if let (Some(id), Some(obj)) = (message_id, body.as_object_mut()) {
        obj.insert("message_id".into(), json!(id));
    }
    Request::post(url, body)
}

/// What one server's status message shows; kept up to date from its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Board {
    pub address: String,
    pub name: Option<String>,
    pub map: Option<String>,
    pub players: Option<u32>,
    pub max_players: Option<u32>,
    pub up: bool,
    pub error: Option<String>,
    /// Friends on the server, as seen.
    pub friends: Vec<String>,
    /// The last event's headline (plain) and time.
    pub last: String,
    pub time: SystemTime,
}

impl Board {
    pub(crate) fn new(address: &str) -> Self {
        Self {
            address: address.to_owned(),
            name: None,
            map: None,
            players: None,
            max_players: None,
            up: false,
            error: None,
            friends: Vec::new(),
            last: String::new(),
            time: SystemTime::UNIX_EPOCH,
        }
    }

    /// Take in one event of this server.
    pub(crate) fn apply(&mut self, e: &Event) {
        if e.name.is_some() {
            self.name.clone_from(&e.name);
        }
        if e.map.is_some() {
            self.map.clone_from(&e.map);
        }
        if e.kind == EventKind::ServerUp {
            self.up = true;
        }
        // What comes after a server_down (its friends' friend_offline) still carries the
        // last count; a down server shows none.
        if e.players.is_some() && self.up {
            self.players = e.players;
        }
        if e.max_players.is_some() {
            self.max_players = e.max_players;
        }
        match e.kind {
            EventKind::ServerUp => {
                self.up = true;
                self.error = None;
            }
            EventKind::ServerDown => {
                self.up = false;
                self.error.clone_from(&e.error);
                self.players = None;
            }
            EventKind::FriendOnline => {
                if let Some(p) = &e.player {
                    self.friends.push(p.clone());
                }
            }
            EventKind::FriendOffline => {
                if let Some(i) = e
                    .player
                    .as_ref()
                    .and_then(|p| self.friends.iter().position(|f| f == p))
                {
                    self.friends.remove(i);
                }
            }
            _ => {}
        }
        self.last = headline(e, &|s| s.to_owned());
        self.time = e.time;
    }

    fn title(&self) -> String {
        clean(
            self.name
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(&self.address),
        )
    }

    fn lines(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![(
            "Status",
            if self.up {
                "🟢 up".to_owned()
            } else {
                "🔴 down".to_owned()
            },
        )];
        if let Some(map) = self.map.as_deref().filter(|m| !m.is_empty()) {
            out.push(("Map", clean(map)));
        }
        if let Some(p) = players_text(self.players, self.max_players) {
            out.push(("Players", p));
        }
        if !self.friends.is_empty() {
            let names: Vec<String> = self.friends.iter().take(20).map(|f| clean(f)).collect();
            out.push(("Friends", names.join(", ")));
        }
        out.push(("Address", clean(&self.address)));
        if let Some(err) = self.error.as_deref().filter(|_| !self.up) {
            out.push(("Error", clean(err)));
        }
        out.push(("Last", clean(&self.last)));
        out
    }
}

/// The request that posts `b` as a new status message (one whose id comes back).
pub(crate) fn status_post(n: &Notifier, b: &Board) -> Option<Request> {
    match n.kind {
        Kind::Discord => {
            let mut url = n.url.clone();
            url.query_pairs_mut().append_pair("wait", "true");
            Some(Request::post(url, discord_board(b)))
        }
        Kind::Telegram => Some(telegram_request(n, "sendMessage", telegram_board(b), None)),
        _ => None,
    }
}

/// The request that edits status message `id` to show `b`.
pub(crate) fn status_edit(n: &Notifier, b: &Board, id: &str) -> Option<Request> {
    match n.kind {
        Kind::Discord => {
            let mut url = n.url.clone();
            let path = format!("{}/messages/{id}", url.path().trim_end_matches('/'));
            url.set_path(&path);
            Some(Request {
                method: Method::Patch,
                ..Request::post(url, discord_board(b))
            })
        }
        Kind::Telegram => {
            let id = id.parse::<i64>().ok()?;
            Some(telegram_request(
                n,
                "editMessageText",
                telegram_board(b),
                Some(id),
            ))
        }
        _ => None,
    }
}

fn discord_board(b: &Board) -> Value {
    let fields: Vec<Value> = b
        .lines()
        .into_iter()
        .map(|(k, v)| {
            let inline = !matches!(k, "Error" | "Last" | "Friends");
            json!({"name": k, "value": cut(&escape_markdown(&v), DISCORD_FIELD_MAX), "inline": inline})
        })
        .collect();
    json!({
        "allowed_mentions": {"parse": []},
        "embeds": [{
            "title": cut(&b.title(), DISCORD_TITLE_MAX),
            "color": if b.up { 0x2e_cc_71 } else { 0xe7_4c_3c },
            "fields": fields,
            "timestamp": rfc3339(b.time),
            "footer": {"text": "muster watch"},
        }],
    })
}

fn telegram_board(b: &Board) -> String {
    let mut text = format!("<b>{}</b>", escape_html(&b.title()));
    for (k, v) in b.lines() {
        let v = escape_html(&v);
        if k == "Address" {
            text.push_str(&format!("\n{k}: <code>{v}</code>"));
        } else {
            text.push_str(&format!("\n{k}: {v}"));
        }
    }
    text.push_str(&format!("\n<i>{}</i>", rfc3339(b.time)));
    text
}

/// What an answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Delivered; the created message's id when the service sent one back.
    Done(Option<String>),
    /// Try again: after the wait the service asked for (429), else after the backoff.
    Retry(Option<Duration>),
    /// The message to edit is gone (deleted): post a new one.
    Gone,
    /// Refused for good (a 4xx, a redirect): why.
    Fail(String),
}

/// Longest wait a service may ask for that is honoured as asked; longer ones are cut.
pub(crate) const RETRY_AFTER_MAX: Duration = Duration::from_secs(3600);

fn seconds(s: f64) -> Option<Duration> {
    (s.is_finite() && s >= 0.0)
        .then(|| Duration::from_secs_f64(s.min(RETRY_AFTER_MAX.as_secs_f64())))
}

/// A `Retry-After` header's delay given in seconds (the courier turns an HTTP date into
/// seconds before it gets here).
pub(crate) fn retry_after_header(v: &str) -> Option<Duration> {
    seconds(v.trim().parse::<f64>().ok()?)
}

/// Read the answer to a request of `kind`: its status, `Retry-After` header and body.
/// `editing` says whether the request edited a message.
pub(crate) fn verdict(
    kind: Kind,
    editing: bool,
    status: u16,
    retry_after: Option<&str>,
    body: &[u8],
) -> Verdict {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let field = |path: &[&str]| -> Option<&Value> {
        let mut v = json.as_ref()?;
        for p in path {
            v = v.get(p)?;
        }
        Some(v)
    };
    if status == 429 {
        // The body's figure is the precise one where the service sends it.
        let body_wait = match kind {
            Kind::Discord => field(&["retry_after"])
                .and_then(Value::as_f64)
                .and_then(seconds),
            Kind::Telegram => field(&["parameters", "retry_after"])
                .and_then(Value::as_f64)
                .and_then(seconds),
            _ => None,
        };
        return Verdict::Retry(body_wait.or_else(|| retry_after.and_then(retry_after_header)));
    }
    if status >= 500 || status == 408 {
        return Verdict::Retry(None);
    }
    let description = || {
        field(&["description"])
            .or_else(|| field(&["message"]))
            .and_then(Value::as_str)
            .map(clean)
            .unwrap_or_else(|| clean(&String::from_utf8_lossy(body.get(..200).unwrap_or(body))))
    };
    if (200..300).contains(&status) {
        let id = match kind {
            Kind::Discord => field(&["id"]).and_then(Value::as_str).map(str::to_owned),
            Kind::Telegram => {
                if field(&["ok"]).and_then(Value::as_bool) == Some(false) {
                    return Verdict::Fail(description());
                }
                field(&["result", "message_id"])
                    .and_then(Value::as_i64)
                    .map(|i| i.to_string())
            }
            _ => None,
        };
        return Verdict::Done(id);
    }
    if editing {
        match kind {
            // Unknown Message: deleted from the channel.
            Kind::Discord if status == 404 => return Verdict::Gone,
            Kind::Telegram if status == 400 => {
                let d = description().to_lowercase();
                // The board did not change since the last edit: nothing to do.
                if d.contains("not modified") {
                    return Verdict::Done(None);
                }
                if d.contains("not found") || d.contains("can't be edited") {
                    return Verdict::Gone;
                }
            }
            _ => {}
        }
    }
    if (300..400).contains(&status) {
        return Verdict::Fail(format!("{status} (redirects are not followed)"));
    }
    Verdict::Fail(format!("{status}: {}", description()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind) -> Event {
        Event {
            kind,
            address: "127.0.0.1:7777".into(),
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_064_800),
            name: Some("<Cats & Dogs>".into()),
            map: Some("DM-*Rankin*".into()),
            players: Some(3),
            max_players: Some(16),
            player: None,
            previous: None,
            error: None,
        }
    }

    fn notifier(spec: &str) -> Notifier {
        Notifier::parse(spec).unwrap()
    }

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let t = notifier("telegram:https://api.telegram.org/bot123:ABC/?chat_id=-10042");
        assert_eq!(t.kind, Kind::Telegram);
        assert_eq!(t.url.as_str(), "https://api.telegram.org/bot123:ABC");
        assert_eq!(t.target.as_deref(), Some("-10042"));
        let n = notifier("ntfy:http://127.0.0.1:8080/alerts");
        assert_eq!(n.url.as_str(), "http://127.0.0.1:8080/");
        assert_eq!(n.target.as_deref(), Some("alerts"));
        let d = notifier("DISCORD:https://discord.com/api/webhooks/1/tok");
        assert_eq!(d.kind, Kind::Discord);
        for (bad, why) in [
            ("discord", "KIND:URL"),
            ("teams:https://x.example/", "unknown notifier"),
            ("slack:ftp://x.example/", "only http and https"),
            ("telegram:https://api.telegram.org/bot1:A", "chat_id"),
            (
                "telegram:https://api.telegram.org/x?chat_id=1",
                "/bot<TOKEN>",
            ),
            ("ntfy:https://ntfy.sh/", "topic"),
            ("json:not a url", "URL"),
        ] {
            let e = Notifier::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn discord_execute_is_an_embed_with_no_mentions() {
        let mut e = event(EventKind::PlayerJoined);
        e.player = Some("@everyone".into());
        let r = event_request(
            &notifier("discord:http://127.0.0.1:9/api/webhooks/1/tok"),
            &e,
        );
        assert_eq!(r.method, Method::Post);
        assert_eq!(r.url.as_str(), "http://127.0.0.1:9/api/webhooks/1/tok");
        assert_eq!(
            r.body,
            json!({
                "allowed_mentions": {"parse": []},
                "embeds": [{
                    "title": "@everyone joined <Cats & Dogs>",
                    "color": 0x34_98_db,
                    "fields": [
                        {"name": "Map", "value": "DM\\-\\*Rankin\\*", "inline": true},
                        {"name": "Players", "value": "3/16", "inline": true},
                        {"name": "Address", "value": "127.0.0.1:7777", "inline": true},
                    ],
                    "timestamp": "2025-11-25T10:00:00Z",
                    "footer": {"text": "player_joined"},
                }],
            })
        );
    }

    #[test]
    fn slack_has_text_and_blocks_with_entities_escaped() {
        let r = event_request(
            &notifier("slack:http://127.0.0.1:9/services/T/B/X"),
            &event(EventKind::ServerUp),
        );
        assert_eq!(
            r.body,
            json!({
                "text": "&lt;Cats &amp; Dogs&gt; is up",
                "blocks": [
                    {"type": "section", "text": {"type": "mrkdwn", "text": "*&lt;Cats &amp; Dogs&gt; is up*"}},
                    {"type": "context", "elements": [{"type": "mrkdwn",
                        "text": "Map: DM-*Rankin* · Players: 3/16 · Address: 127.0.0.1:7777"}]},
                ],
            })
        );
    }

    #[test]
    fn telegram_send_is_html_with_names_escaped() {
        let mut e = event(EventKind::ServerDown);
        e.error = Some("timeout <3 tries>".into());
        let r = event_request(
            &notifier("telegram:http://127.0.0.1:9/bot1:T?chat_id=42"),
            &e,
        );
        assert_eq!(r.url.as_str(), "http://127.0.0.1:9/bot1:T/sendMessage");
        assert_eq!(
            r.body,
            json!({
                "chat_id": 42,
                "text": "<b>&lt;Cats &amp; Dogs&gt; is down</b>\nMap: DM-*Rankin*\nPlayers: 3/16\nAddress: <code>127.0.0.1:7777</code>\nError: timeout &lt;3 tries&gt;",
                "parse_mode": "HTML",
                "link_preview_options": {"is_disabled": true},
            })
        );
        // A channel's @name stays a string.
        let r = event_request(
            &notifier("telegram:http://127.0.0.1:9/bot1:T?chat_id=@news"),
            &e,
        );
        assert_eq!(r.body["chat_id"], "@news");
    }

    #[test]
    fn ntfy_is_a_json_publish_to_the_root() {
        let mut e = event(EventKind::FriendOnline);
        e.player = Some("Bob".into());
        let r = event_request(&notifier("ntfy:http://127.0.0.1:9/alerts"), &e);
        assert_eq!(r.url.as_str(), "http://127.0.0.1:9/");
        assert_eq!(
            r.body,
            json!({
                "topic": "alerts",
                "title": "Bob is online on <Cats & Dogs>",
                "message": "Map: DM-*Rankin*\nPlayers: 3/16\nAddress: 127.0.0.1:7777",
                "tags": ["wave"],
                "priority": 4,
            })
        );
    }

    #[test]
    fn json_is_the_event_itself() {
        let r = event_request(
            &notifier("json:http://127.0.0.1:9/hook"),
            &event(EventKind::ServerFull),
        );
        assert_eq!(r.body["event"], "server_full");
        assert_eq!(r.body["players"], 3);
    }

    #[test]
    fn every_kind_has_a_headline_naming_the_server() {
        for kind in EventKind::ALL {
            let mut e = event(kind);
            e.name = Some("Srv".into());
            e.previous = Some("Old".into());
            assert!(headline(&e, &|s| s.to_owned()).contains("Srv"), "{kind:?}");
        }
    }

    #[test]
    fn status_posts_then_edits_on_each_service_route() {
        let mut b = Board::new("127.0.0.1:7777");
        let mut e = event(EventKind::ServerUp);
        b.apply(&e);
        e.kind = EventKind::FriendOnline;
        e.player = Some("Bob".into());
        b.apply(&e);
        let d = notifier("discord:http://127.0.0.1:9/api/webhooks/1/tok");
        let post = status_post(&d, &b).unwrap();
        assert_eq!(post.method, Method::Post);
        assert_eq!(
            post.url.as_str(),
            "http://127.0.0.1:9/api/webhooks/1/tok?wait=true"
        );
        let edit = status_edit(&d, &b, "555").unwrap();
        assert_eq!(edit.method, Method::Patch);
        assert_eq!(
            edit.url.as_str(),
            "http://127.0.0.1:9/api/webhooks/1/tok/messages/555"
        );
        assert_eq!(edit.body, post.body);
        assert_eq!(edit.body["embeds"][0]["title"], "<Cats & Dogs>");
        assert_eq!(
            edit.body["embeds"][0]["fields"][3],
            json!({"name": "Friends", "value": "Bob", "inline": false})
        );

        let t = notifier("telegram:http://127.0.0.1:9/bot1:T?chat_id=42");
        let post = status_post(&t, &b).unwrap();
        assert_eq!(post.url.path(), "/bot1:T/sendMessage");
        let edit = status_edit(&t, &b, "7").unwrap();
        assert_eq!(edit.url.path(), "/bot1:T/editMessageText");
        assert_eq!(edit.body["message_id"], 7);
        assert_eq!(edit.body["chat_id"], 42);
        assert!(
            edit.body["text"]
                .as_str()
                .unwrap()
                .starts_with("<b>&lt;Cats &amp; Dogs&gt;</b>\nStatus: 🟢 up")
        );
        // Slack and ntfy cannot edit.
        assert!(status_post(&notifier("slack:http://127.0.0.1:9/x"), &b).is_none());
        assert!(!Kind::Ntfy.edits());

        // Down: the friends stay listed until their friend_offline comes.
        e.kind = EventKind::ServerDown;
        e.error = Some("timeout".into());
        b.apply(&e);
        assert!(!b.up);
        assert_eq!(b.players, None, "a down server shows no players");
        e.kind = EventKind::FriendOffline;
        b.apply(&e);
        assert!(b.friends.is_empty());
        assert_eq!(b.players, None, "still down");
    }

    #[test]
    fn answers_are_read_per_service() {
        use Verdict::*;
        let discord_msg = br#"{"id":"1234567890","channel_id":"1"}"#;
        assert_eq!(
            verdict(Kind::Discord, false, 200, None, discord_msg),
            Done(Some("1234567890".into()))
        );
        assert_eq!(verdict(Kind::Discord, false, 204, None, b""), Done(None));
        assert_eq!(
            verdict(
                Kind::Discord,
                false,
                429,
                Some("3"),
                br#"{"message":"You are being rate limited.","retry_after":0.25,"global":false}"#
            ),
            Retry(Some(Duration::from_millis(250)))
        );
        assert_eq!(
            verdict(
                Kind::Discord,
                true,
                404,
                None,
                br#"{"message":"Unknown Message","code":10008}"#
            ),
            Gone
        );
        let tg_ok = br#"{"ok":true,"result":{"message_id":77,"chat":{"id":42}}}"#;
        assert_eq!(
            verdict(Kind::Telegram, false, 200, None, tg_ok),
            Done(Some("77".into()))
        );
        assert_eq!(
            verdict(Kind::Telegram, false, 429, None, br#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 5","parameters":{"retry_after":5}}"#),
            Retry(Some(Duration::from_secs(5)))
        );
        let not_modified = br#"{"ok":false,"error_code":400,"description":"Bad Request: message is not modified"}"#;
        assert_eq!(
            verdict(Kind::Telegram, true, 400, None, not_modified),
            Done(None)
        );
        let missing = br#"{"ok":false,"error_code":400,"description":"Bad Request: message to edit not found"}"#;
        assert_eq!(verdict(Kind::Telegram, true, 400, None, missing), Gone);
        assert!(matches!(
            verdict(Kind::Telegram, false, 400, None, missing),
            Fail(_)
        ));
        assert_eq!(
            verdict(Kind::Slack, false, 429, Some("2"), b"rate_limited"),
            Retry(Some(Duration::from_secs(2)))
        );
        assert_eq!(
            verdict(
                Kind::Slack,
                false,
                429,
                Some("Wed, 21 Oct 2015 07:28:00 GMT"),
                b""
            ),
            Retry(None)
        );
        assert_eq!(verdict(Kind::Ntfy, false, 503, None, b""), Retry(None));
        assert_eq!(
            verdict(Kind::Slack, false, 404, None, b"no_service"),
            Fail("404: no_service".into())
        );
        assert!(
            matches!(verdict(Kind::Json, false, 307, None, b""), Fail(why) if why.contains("redirect"))
        );
        assert_eq!(
            verdict(
                Kind::Telegram,
                false,
                429,
                None,
                br#"{"parameters":{"retry_after":99999999}}"#
            ),
            Retry(Some(RETRY_AFTER_MAX))
        );
    }
}
