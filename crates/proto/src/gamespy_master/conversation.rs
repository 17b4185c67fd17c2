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
        if !self.buf.ends_with(FINAL) {
            return;
        }
        match self.config.form {
            ListForm::Text => {
                if let Some(e) = self.refusal() {
                    return self.fail(e);
                }
                match parse_text_list(&self.buf) {
                    Ok((servers, true)) => self.done(to_server_list(&servers)),
                    Ok((_, false)) => {}
                    Err(e) => self.fail(QueryError::Decode(e)),
                }
            }
            ListForm::Cmp => {
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
