//! The TCP 28900 conversation without the TCP: a list client ([`ListClient`]) that turns
//! received bytes into bytes to write and a final [`ServerList`], and the list server's
//! incremental parser of what a client sends ([`RequestParser`]).
//!
//! Neither reads a clock or touches a socket. The driver writes what `poll_write` hands out,
//! feeds what it reads, reports EOF, and sleeps until `poll_timeout`.

use std::time::{Duration, Instant};

use super::gsmsalg::{Enctype, game_keys, gsmsalg};
use super::packet::{
    ClientAuth, ClientMessage, GREETING_LEN, GREETING_PREFIX, Greeting, Key, ListForm, ListMode,
    ListRequest, SyncRequest, Token, parse_cmp_records, parse_text_list, to_server_list,
};
use super::{FINAL, MAX_CLIENT_REQUEST, MAX_LIST_BYTES, find_final};
use crate::model::{Partial, ServerList};
use crate::query::{Event, ListEvent, QueryError};
use crate::wire::DecodeError;

/// How a [`ListClient`] authenticates and what it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListClientConfig {
    /// The gamename to authenticate as (its key computes the validate).
    pub auth_gamename: Key,
    /// The key to use; `None` looks the gamename up in [`super::GAME_KEYS`].
    pub auth_key: Option<Vec<u8>>,
    /// The `\location\` value sent (UBrowser sends its region, usually `0`).
    pub location: Token,
    /// The game whose list is wanted.
    pub list_gamename: Key,
    /// Text or cmp.
    pub form: ListForm,
    /// The whole conversation must finish within this time of [`ListClient::new`].
    pub timeout: Duration,
}

impl ListClientConfig {
    /// UBrowser's defaults for the list of `gamename`: authenticate as the same game with its
    /// key from [`super::GAME_KEYS`], location `0`, [`DEFAULT_LIST_TIMEOUT`].
    #[must_use]
    pub fn new(gamename: Key, form: ListForm) -> Self {
        Self {
            auth_gamename: gamename.clone(),
            auth_key: None,
            location: Token::default_location(),
            list_gamename: gamename,
            form,
            timeout: DEFAULT_LIST_TIMEOUT,
        }
    }
}

/// The default time a [`ListClient`] allows for the whole conversation (UBrowser waits 30 s
/// for the first entry, spec §5.7).
pub const DEFAULT_LIST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
enum State {
    AwaitGreeting,
    AwaitList,
    Done,
}

/// A sans-IO list client: UBrowser's conversation (§5.1) with a real validate.
///
/// Driving it:
/// 1. after creating it and after every `handle_*` call, write out what
///    [`Self::poll_write`] appends;
/// 2. feed every read with [`Self::handle_data`], and EOF with [`Self::handle_eof`];
/// 3. call [`Self::handle_timeout`] at [`Self::poll_timeout`];
/// 4. stop when [`Self::poll_event`] returns the outcome, and close the connection.
///
/// A list that ends without `\final\` (EOF, timeout, [`Self::abort`]) yields whatever whole
/// entries arrived, marked partial; no entries at all is [`QueryError::Timeout`] (timeout,
/// abort) or [`DecodeError::Incomplete`] (EOF). Bad bytes are [`DecodeError`]s inside
/// [`QueryError::Decode`]; more than [`MAX_LIST_BYTES`] is [`DecodeError::TooLarge`]; a
/// master's `\echo\…` refusal is [`QueryError::Rejected`].
///
/// Known limits, both needing an unlucky read boundary: a Perl master's `\final\` after the
/// greeting that arrives in a *later* read than the greeting reads as an empty list; and a
/// `cmp` list is finished at the first read that ends in `\final\` on a record boundary, so a
/// record spelling `\final` (92.102.105.110:24940) followed by a read boundary one byte into
/// the next record ends it early.
#[derive(Debug)]
pub struct ListClient {
    config: ListClientConfig,
    state: State,
    buf: Vec<u8>,
    write: Vec<u8>,
    deadline: Instant,
    event: Option<ListEvent>,
}

impl ListClient {
    /// A client that has just connected at `now`; it writes nothing until the greeting came.
    #[must_use]
    pub fn new(config: ListClientConfig, now: Instant) -> Self {
        let deadline = now.checked_add(config.timeout).unwrap_or(now);
        Self {
            config,
            state: State::AwaitGreeting,
            buf: Vec::new(),
            write: Vec::new(),
            deadline,
            event: None,
        }
    }

    /// Append the bytes to write to the connection, if any; true when something was added.
    #[must_use]
    pub fn poll_write(&mut self, out: &mut Vec<u8>) -> bool {
        if self.write.is_empty() {
            return false;
        }
        out.append(&mut self.write);
        true
    }

    /// When [`Self::handle_timeout`] must be called; `None` once the outcome is known.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Done => None,
            _ => Some(self.deadline),
        }
    }

    /// The outcome, returned exactly once.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ListEvent> {
        self.event.take()
    }

    /// Feed bytes read from the connection.
    pub fn handle_data(&mut self, _now: Instant, bytes: &[u8]) {
        if matches!(self.state, State::Done) {
            return;
        }
        if self.buf.len().saturating_add(bytes.len()) > MAX_LIST_BYTES {
            return self.fail(QueryError::Decode(DecodeError::TooLarge("list reply")));
        }
        self.buf.extend_from_slice(bytes);
        if matches!(self.state, State::AwaitGreeting) {
            self.try_greeting();
        }
        if matches!(self.state, State::AwaitList) {
            self.try_list();
        }
    }

    /// The master closed the connection.
    pub fn handle_eof(&mut self, _now: Instant) {
        match self.state {
            State::Done => {}
            State::AwaitGreeting => {
                self.fail(QueryError::Decode(DecodeError::Incomplete("greeting")));
            }
            State::AwaitList => {
                self.finish_partial("connection closed before \\final\\", || {
                    QueryError::Decode(DecodeError::Incomplete("list reply"))
                });
            }
        }
    }

    /// Call at [`Self::poll_timeout`]; earlier calls do nothing.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now >= self.deadline {
            self.abort(now);
        }
    }

    /// Stop now with whatever whole entries arrived (partial), or [`QueryError::Timeout`].
    pub fn abort(&mut self, _now: Instant) {
        match self.state {
            State::Done => {}
            State::AwaitGreeting => self.fail(QueryError::Timeout),
            State::AwaitList => {
                self.finish_partial("list reply timed out", || QueryError::Timeout);
            }
        }
    }

    fn try_greeting(&mut self) {
        let n = self.buf.len().min(GREETING_PREFIX.len());
        if self.buf.get(..n) != GREETING_PREFIX.get(..n) {
            return self.fail(QueryError::Decode(DecodeError::BadMagic("greeting")));
        }
        let Some(greeting) = self.buf.get(..GREETING_LEN) else {
            return;
        };
        let greeting = match Greeting::decode(greeting) {
            Ok(g) => g,
            Err(e) => return self.fail(QueryError::Decode(e)),
        };
        // The Perl master appends `\final\` to the greeting (§12 quirk 1). Wait while what
        // follows could still be the start of it; drop it once complete.
        let rest = self.buf.get(GREETING_LEN..).unwrap_or_default();
        let skip = if rest.starts_with(FINAL) {
            FINAL.len()
        } else if !rest.is_empty() && FINAL.starts_with(rest) {
            return;
        } else {
            0
        };
        let key = match &self.config.auth_key {
            Some(k) => k.clone(),
            None => match game_keys(self.config.auth_gamename.as_bytes()).first() {
                Some(k) => k.as_bytes().to_vec(),
                None => return self.fail(QueryError::Rejected("no key for the auth gamename")),
            },
        };
        let validate = gsmsalg(greeting.challenge.as_bytes(), &key, Enctype::Zero)
            .and_then(|v| Token::new(v).ok());
        let Some(validate) = validate else {
            return self.fail(QueryError::Rejected("empty auth key"));
        };
        ClientAuth::ubrowser(
            self.config.auth_gamename.clone(),
            self.config.location.clone(),
            validate,
        )
        .encode(&mut self.write);
        let mode = match self.config.form {
            ListForm::Text => ListMode::Text,
            ListForm::Cmp => ListMode::Cmp,
        };
        ListRequest::new(mode, self.config.list_gamename.clone()).encode(&mut self.write);
        self.buf.drain(..GREETING_LEN + skip);
        self.state = State::AwaitList;
    }

    fn try_list(&mut self) {
        match self.config.form {
            ListForm::Text => {
                // Tolerate a line end or NUL after the closing `\final\`.
                let end = self
                    .buf
                    .iter()
                    .rposition(|b| !matches!(b, b'\0' | b'\r' | b'\n' | b' '))
                    .map_or(0, |p| p + 1);
                let text = self.buf.get(..end).unwrap_or_default();
                if !text.ends_with(FINAL) {
                    return;
                }
                if let Some(e) = self.refusal() {
                    return self.fail(e);
                }
                match parse_text_list(text) {
                    Ok((servers, true)) => self.done(to_server_list(&servers)),
                    Ok((_, false)) => {}
                    Err(e) => self.fail(QueryError::Decode(e)),
                }
            }
            ListForm::Cmp => {
                if !self.buf.ends_with(FINAL) {
                    return;
                }
                // Count records from the total length (§5.6): a record spelling `\final\`
                // cannot end the list early unless a read boundary falls one byte after it.
                let body_len = self.buf.len() - FINAL.len();
                if body_len % super::packet::CMP_RECORD_LEN == 0 {
                    let body = self.buf.get(..body_len).unwrap_or_default();
                    let list = to_server_list(&parse_cmp_records(body));
                    self.done(list);
                }
            }
        }
    }

    /// A master that refuses the client answers `\echo\<reason>\final\` (the Perl master).
    fn refusal(&self) -> Option<QueryError> {
        self.buf
            .starts_with(b"\\echo\\")
            .then_some(QueryError::Rejected("master refused the request"))
    }

    fn finish_partial(&mut self, reason: &str, none: impl FnOnce() -> QueryError) {
        let servers = match self.config.form {
            ListForm::Text => {
                if let Some(e) = self.refusal() {
                    return self.fail(e);
                }
                // Drop a truncated last entry before parsing.
                let end = self
                    .buf
                    .iter()
                    .rposition(|&b| b == b'\\')
                    .unwrap_or_default();
                let complete = self.buf.get(..end).unwrap_or_default();
                let complete = complete.strip_suffix(b"\\ip").unwrap_or(complete);
                match parse_text_list(complete) {
                    Ok((s, _)) => s,
                    Err(_) if complete.is_empty() => Vec::new(),
                    Err(e) => return self.fail(QueryError::Decode(e)),
                }
            }
            ListForm::Cmp => parse_cmp_records(&self.buf),
        };
        if servers.is_empty() {
            return self.fail(none());
        }
        let mut list = to_server_list(&servers);
        list.partial = Some(Partial {
            reason: reason.to_owned(),
        });
        self.done(list);
    }

    fn done(&mut self, list: ServerList) {
        self.state = State::Done;
        self.event = Some(Event::Done(list));
    }

    fn fail(&mut self, e: QueryError) {
        self.state = State::Done;
        self.event = Some(Event::Failed(e));
    }
}

/// What a client asked for once it authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestAction {
    /// A list of one game.
    List(ListRequest),
    /// A master-to-master sync.
    Sync(SyncRequest),
}

/// A complete client request: the authentication message and what followed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRequest {
    /// The authentication message (its gamename, validate and enctype check the challenge,
    /// §5.4 item 3).
    pub auth: ClientAuth,
    /// The list or sync request.
    pub action: RequestAction,
}

impl ClientRequest {
    /// The game whose list is wanted: the list request's gamename, else the authenticated one
    /// (§5.4 item 4). `None` for syncs and when neither names a game.
    #[must_use]
    pub fn list_gamename(&self) -> Option<&[u8]> {
        match &self.action {
            RequestAction::List(l) => l
                .gamename
                .as_ref()
                .map(Key::as_bytes)
                .or_else(|| self.auth.gamename().map(Token::as_bytes)),
            RequestAction::Sync(_) => None,
        }
    }
}

/// The list server's incremental parser of a client's bytes (§5.4), capped at
/// [`MAX_CLIENT_REQUEST`].
///
/// Feed every read to [`Self::feed`]; it returns the request once an authentication message
/// and a list or sync request are complete, in any segmentation (§12 quirks 2, 3, 5). It does
/// not check the validate: the caller does, with [`super::check_validate`] and its own policy.
#[derive(Debug, Default)]
pub struct RequestParser {
    buf: Vec<u8>,
    auth: Option<ClientAuth>,
    done: bool,
}

impl RequestParser {
    /// A parser for a new connection.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed bytes. `Ok(Some(_))` once (later bytes are ignored); `Ok(None)` while more is
    /// needed. Errors: [`DecodeError::TooLarge`] past [`MAX_CLIENT_REQUEST`],
    /// [`DecodeError::Invalid`] for a list or sync request before authentication (§5.4 item 5:
    /// close without a list), and decode errors of malformed messages.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<ClientRequest>, DecodeError> {
        if self.done {
            return Ok(None);
        }
        if self.buf.len().saturating_add(bytes.len()) > MAX_CLIENT_REQUEST {
            return Err(DecodeError::TooLarge("client request"));
        }
        self.buf.extend_from_slice(bytes);
        while let Some(pos) = find_final(&self.buf) {
            let end = pos + FINAL.len();
            let msg: Vec<u8> = self.buf.drain(..end).collect();
            if let Some(req) = self.take(ClientMessage::decode(&msg)?)? {
                return Ok(Some(req));
            }
        }
        // Qt5 sends `\sync\…\msid\<uuid>` without `\final\` (§7): complete once the msid is.
        if self.auth.is_some() && self.buf.starts_with(b"\\sync\\") {
            let msid_end = self
                .buf
                .windows(MSID_KEY.len())
                .position(|w| w == MSID_KEY)
                .map(|p| p + MSID_KEY.len() + MSID_LEN);
            if msid_end.is_some_and(|e| e <= self.buf.len()) {
                return self.flush();
            }
        }
        Ok(None)
    }

    /// Treat what is buffered as a complete message (the caller saw the connection idle for
    /// a second after authentication, §14 sync advice).
    pub fn flush(&mut self) -> Result<Option<ClientRequest>, DecodeError> {
        if self.done || self.buf.is_empty() {
            return Ok(None);
        }
        let msg = std::mem::take(&mut self.buf);
        self.take(ClientMessage::decode_unterminated(&msg)?)
    }

    fn take(&mut self, msg: ClientMessage) -> Result<Option<ClientRequest>, DecodeError> {
        let action = match msg {
            ClientMessage::Auth(a) => {
                self.auth = Some(a);
                return Ok(None);
            }
            ClientMessage::Other(_) => return Ok(None),
            ClientMessage::List(l) => RequestAction::List(l),
            ClientMessage::Sync(s) => RequestAction::Sync(s),
        };
        let auth = self
            .auth
            .take()
            .ok_or(DecodeError::Invalid("request before authentication"))?;
        self.done = true;
        Ok(Some(ClientRequest { auth, action }))
    }
}

/// The `\msid\` key of a Qt5 sync request.
const MSID_KEY: &[u8] = b"\\msid\\";
/// A Qt5 master id is a 36-character UUID (§14).
const MSID_LEN: usize = 36;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SS_REQUEST: &[u8] = b"\\gamename\\serioussamse\\enctype\\0\\validate\\zbGgINC8\\final\\\\queryid\\1.1\\list\\cmp\\gamename\\serioussamse\\gamever\\1.05\\final\\";
    const QSTAT_REQUEST: &[u8] = b"\\gamename\\gamespy2\\gamever\\020109017\\location\\5\\validate\\12345678\\final\\\\list\\\\gamename\\serioussamse\\final\\";

    fn config(form: ListForm) -> ListClientConfig {
        ListClientConfig {
            auth_gamename: Key::new("ut").unwrap(),
            auth_key: None,
            location: Token::new("0").unwrap(),
            list_gamename: Key::new("ut").unwrap(),
            form,
            timeout: Duration::from_secs(30),
        }
    }

    fn written(c: &mut ListClient) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = c.poll_write(&mut out);
        out
    }

    fn addrs(list: &ServerList) -> Vec<String> {
        list.servers.iter().map(|s| s.address.to_string()).collect()
    }

    #[test]
    fn client_text_list_conversation() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        assert!(written(&mut c).is_empty());
        assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(30)));
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        assert_eq!(
            written(&mut c),
            b"\\gamename\\ut\\location\\0\\validate\\5OOIQ5Ha\\final\\\\list\\\\gamename\\ut\\final\\"
        );
        c.handle_data(t0, b"\\ip\\1.2.3.4:7778\\ip\\5.6.7");
        assert_eq!(c.poll_event(), None);
        c.handle_data(t0, b".8:7778\\final\\");
        let Some(Event::Done(list)) = c.poll_event() else {
            panic!("no list")
        };
        assert_eq!(addrs(&list), ["1.2.3.4:7778", "5.6.7.8:7778"]);
        assert_eq!(list.partial, None);
        assert_eq!(c.poll_event(), None);
        assert_eq!(c.poll_timeout(), None);
    }

    #[test]
    fn client_cmp_list_byte_by_byte() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Cmp), t0);
        let mut all = b"\\basic\\\\secure\\ABCDEF".to_vec();
        all.extend_from_slice(&[
            0x01, 0x02, 0x03, 0x04, 0x64, 0x01, 0x05, 0x06, 0x07, 0x08, 0x1e, 0x62,
        ]);
        all.extend_from_slice(FINAL);
        for b in &all {
            c.handle_data(t0, std::slice::from_ref(b));
        }
        let w = written(&mut c);
        assert!(w.ends_with(b"\\list\\cmp\\gamename\\ut\\final\\"));
        let Some(Event::Done(list)) = c.poll_event() else {
            panic!("no list")
        };
        assert_eq!(addrs(&list), ["1.2.3.4:25601", "5.6.7.8:7778"]);
    }

    #[test]
    fn quirk_greeting_with_final() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF\\fin");
        assert!(written(&mut c).is_empty(), "could still be \\final\\");
        c.handle_data(t0, b"al\\");
        assert!(!written(&mut c).is_empty());
        assert_eq!(
            c.poll_event(),
            None,
            "the greeting's \\final\\ is not an empty list"
        );
        c.handle_data(t0, b"\\ip\\1.2.3.4:7778\\final\\");
        assert!(matches!(c.poll_event(), Some(Event::Done(l)) if l.servers.len() == 1));
    }

    #[test]
    fn client_empty_text_list() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.handle_data(t0, b"\\final\\");
        assert_eq!(c.poll_event(), Some(Event::Done(ServerList::default())));
        // A line end or NUL after `\final\` does not hide it.
        let mut c = ListClient::new(
            ListClientConfig::new(Key::new("ut").unwrap(), ListForm::Text),
            t0,
        );
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.handle_data(t0, b"\\ip\\1.2.3.4:7778\\final\\\r\n\0");
        assert!(
            matches!(c.poll_event(), Some(Event::Done(l)) if l.servers.len() == 1 && l.partial.is_none())
        );
    }

    #[test]
    fn client_rejects_bad_greeting() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"HTTP/1.1 200 OK\r\n");
        assert_eq!(
            c.poll_event(),
            Some(Event::Failed(QueryError::Decode(DecodeError::BadMagic(
                "greeting"
            ))))
        );
        assert!(written(&mut c).is_empty());
    }

    #[test]
    fn client_unknown_auth_game_is_rejected() {
        let t0 = Instant::now();
        let mut cfg = config(ListForm::Text);
        cfg.auth_gamename = Key::new("nosuchgame").unwrap();
        let mut c = ListClient::new(cfg, t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        assert_eq!(
            c.poll_event(),
            Some(Event::Failed(QueryError::Rejected(
                "no key for the auth gamename"
            )))
        );
    }

    #[test]
    fn client_explicit_key() {
        let t0 = Instant::now();
        let mut cfg = config(ListForm::Text);
        cfg.auth_gamename = Key::new("serioussamse").unwrap();
        cfg.auth_key = Some(b"AKbna4".to_vec());
        let mut c = ListClient::new(cfg, t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        let w = written(&mut c);
        assert!(
            w.starts_with(b"\\gamename\\serioussamse\\location\\0\\validate\\zbGgINC8\\final\\")
        );
    }

    #[test]
    fn client_refused_by_echo() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.handle_data(t0, b"\\echo\\You failed to authenticate\\final\\");
        assert_eq!(
            c.poll_event(),
            Some(Event::Failed(QueryError::Rejected(
                "master refused the request"
            )))
        );
    }

    #[test]
    fn client_garbage_list_is_invalid() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.handle_data(t0, b"\\ip\\not-an-address\\final\\");
        assert_eq!(
            c.poll_event(),
            Some(Event::Failed(QueryError::Decode(DecodeError::Invalid(
                "text list entry"
            ))))
        );
    }

    #[test]
    fn quirk_read_until_close_partial() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.handle_data(t0, b"\\ip\\1.2.3.4:7778\\ip\\5.6.");
        c.handle_eof(t0);
        let Some(Event::Done(list)) = c.poll_event() else {
            panic!("no list")
        };
        assert_eq!(addrs(&list), ["1.2.3.4:7778"]);
        assert_eq!(
            list.partial.map(|p| p.reason),
            Some("connection closed before \\final\\".to_owned())
        );
    }

    #[test]
    fn quirk_cmp_until_close_without_final() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Cmp), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.handle_data(t0, &[1, 2, 3, 4, 0x1e, 0x62, 5, 6]);
        c.handle_eof(t0);
        let Some(Event::Done(list)) = c.poll_event() else {
            panic!("no list")
        };
        assert_eq!(addrs(&list), ["1.2.3.4:7778"]);
        assert!(list.partial.is_some());
    }

    #[test]
    fn client_eof_before_greeting_and_before_list() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"\\basic\\");
        c.handle_eof(t0);
        assert_eq!(
            c.poll_event(),
            Some(Event::Failed(QueryError::Decode(DecodeError::Incomplete(
                "greeting"
            ))))
        );
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.handle_eof(t0);
        assert_eq!(
            c.poll_event(),
            Some(Event::Failed(QueryError::Decode(DecodeError::Incomplete(
                "list reply"
            ))))
        );
    }

    #[test]
    fn client_timeout_on_virtual_clock() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_timeout(t0 + Duration::from_secs(29));
        assert_eq!(c.poll_event(), None);
        c.handle_timeout(t0 + Duration::from_secs(30));
        assert_eq!(c.poll_event(), Some(Event::Failed(QueryError::Timeout)));
        assert_eq!(c.poll_timeout(), None);

        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF\\ip\\1.2.3.4:7778\\ip\\");
        c.handle_timeout(t0 + Duration::from_secs(30));
        let Some(Event::Done(list)) = c.poll_event() else {
            panic!("no list")
        };
        assert_eq!(list.servers.len(), 1);
        assert_eq!(
            list.partial.map(|p| p.reason),
            Some("list reply timed out".to_owned())
        );
    }

    #[test]
    fn client_abort_and_cap() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Cmp), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.abort(t0);
        assert_eq!(c.poll_event(), Some(Event::Failed(QueryError::Timeout)));
        // Data after the outcome is ignored.
        c.handle_data(t0, b"\\final\\");
        assert_eq!(c.poll_event(), None);

        let mut c = ListClient::new(config(ListForm::Cmp), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.handle_data(t0, &vec![0u8; MAX_LIST_BYTES + 1]);
        assert_eq!(
            c.poll_event(),
            Some(Event::Failed(QueryError::Decode(DecodeError::TooLarge(
                "list reply"
            ))))
        );
    }

    #[test]
    fn client_duplicates_removed() {
        let t0 = Instant::now();
        let mut c = ListClient::new(config(ListForm::Text), t0);
        c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
        c.handle_data(t0, b"\\ip\\1.2.3.4:7778\\ip\\1.2.3.4:7778\\final\\");
        assert!(matches!(c.poll_event(), Some(Event::Done(l)) if l.servers.len() == 1));
    }

    // ---- server side ----

    #[test]
    fn quirk_two_finals_in_one_buffer() {
        let mut p = RequestParser::new();
        let req = p.feed(SS_REQUEST).unwrap().unwrap();
        assert_eq!(req.auth.gamename().unwrap().as_bytes(), b"serioussamse");
        assert_eq!(req.auth.validate().unwrap().as_bytes(), b"zbGgINC8");
        let RequestAction::List(l) = &req.action else {
            panic!("not a list")
        };
        assert_eq!(l.mode, ListMode::Cmp);
        assert_eq!(l.queryid.as_ref().map(Token::as_bytes), Some(&b"1.1"[..]));
        assert_eq!(req.list_gamename(), Some(&b"serioussamse"[..]));
        // Later bytes are ignored.
        assert_eq!(p.feed(b"\\list\\\\final\\"), Ok(None));
    }

    #[test]
    fn quirk_any_segmentation() {
        let whole = RequestParser::new().feed(SS_REQUEST).unwrap();
        for split in 0..=SS_REQUEST.len() {
            let (a, b) = SS_REQUEST.split_at(split);
            let mut p = RequestParser::new();
            let first = p.feed(a).unwrap();
            let got = if first.is_some() {
                first
            } else {
                p.feed(b).unwrap()
            };
            assert_eq!(got, whole, "split at {split}");
        }
        let mut p = RequestParser::new();
        let mut got = None;
        for b in QSTAT_REQUEST {
            if let Some(r) = p.feed(std::slice::from_ref(b)).unwrap() {
                got = Some(r);
            }
        }
        assert!(got.is_some());
    }

    #[test]
    fn quirk_auth_and_list_gamenames_differ() {
        let req = RequestParser::new().feed(QSTAT_REQUEST).unwrap().unwrap();
        assert_eq!(req.auth.gamename().unwrap().as_bytes(), b"gamespy2");
        assert_eq!(req.list_gamename(), Some(&b"serioussamse"[..]));
        assert_eq!(
            super::super::check_validate(
                b"gamespy2",
                &super::super::Challenge::new(b"ABCDEF").unwrap(),
                req.auth.enctype().unwrap(),
                req.auth.validate().unwrap().as_bytes()
            ),
            super::super::ValidateCheck::Mismatch {
                expected: "/+SZGk4P".to_owned()
            }
        );
    }

    #[test]
    fn quirk_list_without_gamename_uses_auth_gamename() {
        let req = RequestParser::new()
            .feed(b"\\gamename\\ut\\validate\\x\\final\\\\list\\\\final\\")
            .unwrap()
            .unwrap();
        assert_eq!(req.list_gamename(), Some(&b"ut"[..]));
    }

    #[test]
    fn quirk_stray_basic_before_auth() {
        let req = RequestParser::new()
            .feed(
                b"\\basic\\\\gamename\\ut\\validate\\x\\final\\\\list\\cmp\\gamename\\ut\\final\\",
            )
            .unwrap()
            .unwrap();
        assert_eq!(req.auth.gamename().unwrap().as_bytes(), b"ut");
    }

    #[test]
    fn parser_rejects_list_before_auth() {
        assert_eq!(
            RequestParser::new().feed(b"\\list\\\\gamename\\ut\\final\\"),
            Err(DecodeError::Invalid("request before authentication"))
        );
    }

    #[test]
    fn parser_caps_request_size() {
        let mut p = RequestParser::new();
        assert_eq!(p.feed(&[b'a'; MAX_CLIENT_REQUEST]), Ok(None));
        assert_eq!(p.feed(b"x"), Err(DecodeError::TooLarge("client request")));
    }

    #[test]
    fn quirk_sync_without_final() {
        let mut p = RequestParser::new();
        let auth = b"\\validate\\TcGdY/3Q\\queryid\\1.1\\gamename\\333networks\\gamever\\Qt-0.28\\location\\0\\queryid\\1.2\\final\\";
        assert_eq!(p.feed(auth), Ok(None));
        assert_eq!(p.feed(b"\\sync\\all\\msid\\0f1e2d3c-4b5a-6978-"), Ok(None));
        let req = p.feed(b"8796-a5b4c3d2e1f0").unwrap().unwrap();
        assert_eq!(req.auth.gamename().unwrap().as_bytes(), b"333networks");
        let RequestAction::Sync(s) = req.action else {
            panic!("not a sync")
        };
        assert!(!s.terminated);
        assert_eq!(
            s.msid.unwrap().as_bytes(),
            b"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
        );
    }

    #[test]
    fn sync_perl_form_and_idle_flush() {
        let mut p = RequestParser::new();
        let req = p
            .feed(b"\\gamename\\333networks\\location\\0\\validate\\TcGdY/3Q\\final\\\\sync\\all\\final\\")
            .unwrap()
            .unwrap();
        assert!(matches!(
            req.action,
            RequestAction::Sync(SyncRequest {
                terminated: true,
                ..
            })
        ));
        let mut p = RequestParser::new();
        let _ = p.feed(b"\\gamename\\333networks\\validate\\x\\final\\\\sync\\ut unreal");
        let req = p.flush().unwrap().unwrap();
        let RequestAction::Sync(s) = req.action else {
            panic!("not a sync")
        };
        assert_eq!(
            s.games,
            super::super::SyncGames::Games(vec![
                Key::new("ut").unwrap(),
                Key::new("unreal").unwrap()
            ])
        );
    }

    proptest! {
        #[test]
        fn prop_parser_never_panics(chunks in prop::collection::vec(prop::collection::vec(prop::sample::select(vec![b'\\', b'f', b'i', b'n', b'a', b'l', b'g', b's', b'y', b'c', b'x']), 0..30), 0..10)) {
            let mut p = RequestParser::new();
            for c in &chunks {
                if p.feed(c).is_err() { break; }
            }
            let _ = p.flush();
        }

        #[test]
        fn prop_client_never_panics(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..6), cmp in any::<bool>()) {
            let t0 = Instant::now();
            let mut c = ListClient::new(config(if cmp { ListForm::Cmp } else { ListForm::Text }), t0);
            c.handle_data(t0, b"\\basic\\\\secure\\ABCDEF");
            for ch in &chunks {
                c.handle_data(t0, ch);
            }
            c.handle_eof(t0);
            prop_assert!(c.poll_event().is_some());
        }
    }
}
