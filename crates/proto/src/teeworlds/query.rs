//! The sans-IO `teeworlds` query (spec §13 decision 1).
//!
//! At start it sends, to one target, both the DDNet extended request (`xe` + `gie3`, 24-bit
//! token) and the 0.7 TOKEN request (520 bytes). A token reply triggers the 0.7 `gie3` with
//! the browse token. It accepts `iext`/`iex+` echoing the 24-bit token (reassembled in any
//! order), `inf3` (0.6) echoing its low 8 bits, and a 0.7 `inf3` whose header token is the
//! client token and whose browse token matches; everything else (other senders, wrong
//! tokens, garbage, the 520-byte token request teeworlds sends back, duplicates) is ignored.
//!
//! The richest answer wins ([`Answer::richness`]): complete, then more records, then DDNet
//! extended over 0.7 over vanilla. A complete answer finishes the query once both requests
//! have been answered (the `xe` one by `iext` or, from a 0.6 server, `inf3`; the 0.7 one by
//! its `inf3`), or [`RICHER_ANSWER_GRACE`] after it arrived: a teeworlds 0.7.5 server, which
//! ignores `xe`, costs that grace. An extended answer keeps the 0.7 answer's host name and
//! skill level in `raw`. Otherwise it re-sends what is still missing after each
//! attempt timeout and, when the attempts run out (or on `abort`), returns the richest answer
//! marked partial, or fails.
//!
//! `fstd` is not sent.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::model::{Partial, RawValue};
use crate::query::{
    Event, QueryConfig, QueryError, QueryEvent, QueryMachine, RetryAction, RetrySchedule, Transmit,
};
use crate::wire::DecodeError;

use super::header::{Header, NO_TOKEN, TokenMessage};
use super::info::{Answer, ExtendedReassembly, Family};
use super::packet::{Datagram, GetInfo, GetInfo7, Info, Info7Body, Message};
use super::{BuildError, MAX_EXTENDED_TOKEN};

/// After a complete answer that a 0.7 answer could still beat, wait at most this long for it.
pub const RICHER_ANSWER_GRACE: Duration = Duration::from_millis(200);

/// The random values one query uses; the caller draws them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokens {
    extended: u32,
    client_token: [u8; 4],
    browse_token: i32,
}

impl Tokens {
    /// `extended`: the 24-bit `xe` token (high 16 bits go in the header, low 8 in the token
    /// byte); `client_token`: the 0.7 connless token (big-endian on the wire), not
    /// `0xffffffff`; `browse_token`: 0..2^31-1, never negative (-1 crashes teeworlds 0.7.5).
    pub fn new(extended: u32, client_token: u32, browse_token: i32) -> Result<Self, BuildError> {
        if extended > MAX_EXTENDED_TOKEN {
            return Err(BuildError::ExtendedToken);
        }
        if browse_token < 0 {
            return Err(BuildError::BrowseToken);
        }
        let client_token = client_token.to_be_bytes();
        if client_token == NO_TOKEN {
            return Err(BuildError::ClientToken);
        }
        Ok(Self {
            extended,
            client_token,
            browse_token,
        })
    }

    fn extended_header(self) -> Header {
        // The mask keeps 16 bits.
        #[allow(clippy::cast_possible_truncation)]
        Header::extended((self.extended >> 8) as u16)
    }

    fn token_byte(self) -> u8 {
        self.extended.to_le_bytes().first().copied().unwrap_or(0)
    }
}

/// The query machine; see the module docs.
#[derive(Debug)]
pub struct TeeworldsQuery {
    target: SocketAddr,
    tokens: Tokens,
    config: QueryConfig,
    retry: RetrySchedule,
    new_attempt: bool,
    send_extended: bool,
    send_token_request: bool,
    send_get_info7: bool,
    server_token: Option<[u8; 4]>,
    extended: ExtendedReassembly,
    vanilla: Option<Info>,
    sixup: Option<Info7Body>,
    answered: Vec<Family>,
    ping: Option<Duration>,
    last_error: Option<DecodeError>,
    grace: Option<Instant>,
    event: Option<QueryEvent>,
    finished: bool,
}

impl TeeworldsQuery {
    /// A query for `target`, nothing sent yet: call `poll_transmit` first.
    #[must_use]
    pub fn new(target: SocketAddr, config: QueryConfig, tokens: Tokens) -> Self {
        Self {
            target,
            tokens,
            config,
            retry: RetrySchedule::new(config),
            new_attempt: true,
            send_extended: true,
            send_token_request: true,
            send_get_info7: false,
            server_token: None,
            extended: ExtendedReassembly::new(),
            vanilla: None,
            sixup: None,
            answered: Vec::new(),
            ping: None,
            last_error: None,
            grace: None,
            event: None,
            finished: false,
        }
    }

    fn mark_answered(&mut self, now: Instant, family: Family) {
        if self.ping.is_none() {
            self.ping = self
                .retry
                .last_sent()
                .map(|t| now.saturating_duration_since(t));
        }
        if !self.answered.contains(&family) {
            self.answered.push(family);
            self.answered.sort();
        }
    }

    fn best(&self) -> Option<Answer> {
        let candidates = [
            self.vanilla.clone().map(Answer::Vanilla),
            self.extended.answer(),
            self.sixup.clone().map(Answer::Sixup),
        ];
        candidates
            .into_iter()
            .flatten()
            .max_by_key(Answer::richness)
    }

    fn evaluate(&mut self, now: Instant) {
        let Some(best) = self.best() else { return };
        if !best.is_complete() {
            return;
        }
        let xe_answered =
            self.answered.contains(&Family::Extended) || self.answered.contains(&Family::Vanilla);
        if xe_answered && self.answered.contains(&Family::Sixup) {
            self.finish();
        } else if self.grace.is_none() {
            let grace = RICHER_ANSWER_GRACE.min(self.config.attempt_timeout);
            self.grace = now.checked_add(grace);
        }
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.retry.stop();
        self.grace = None;
        self.event = Some(match self.best() {
            Some(best) => {
                let mut info = best.to_server_info(&self.answered);
                info.ping = self.ping;
                if let (Answer::Extended { .. }, Some(sixup)) = (&best, &self.sixup) {
                    // What only 0.7 says.
                    info.raw.push((
                        "hostname".into(),
                        RawValue::Text(super::decode_text(sixup.hostname.as_bytes())),
                    ));
                    info.raw.push((
                        "skill_level".into(),
                        RawValue::Int(sixup.skill_level.into()),
                    ));
                }
                let truncated = match &best {
                    Answer::Vanilla(i) => i.truncated,
                    Answer::Extended { truncated, .. } => *truncated,
                    Answer::Sixup(b) => b.truncated,
                };
                if !best.is_complete() {
                    let r = best.richness();
                    info.partial = Some(Partial {
                        reason: format!(
                            "{} of {} player records arrived",
                            r.records,
                            best.num_clients()
                        ),
                    });
                } else if truncated {
                    info.partial = Some(Partial {
                        reason: "a player record was cut off".to_owned(),
                    });
                }
                Event::Done(Box::new(info))
            }
            None => Event::Failed(match self.last_error.clone() {
                Some(e) => QueryError::Decode(e),
                None => QueryError::Timeout,
            }),
        });
    }

    fn on_datagram(&mut self, now: Instant, datagram: &[u8]) {
        let msg = match Datagram::decode(datagram) {
            Ok(m) => m,
            Err(e) => {
                self.last_error = Some(e);
                return;
            }
        };
        let tokens = self.tokens;
        match msg {
            Datagram::Token(t) => {
                // teeworlds answers some requests with its own token request (quirk 13):
                // its token field is "none", not ours.
                if t.token == tokens.client_token
                    && t.own_token != NO_TOKEN
                    && self.server_token != Some(t.own_token)
                    && self.sixup.is_none()
                {
                    self.server_token = Some(t.own_token);
                    self.send_get_info7 = true;
                }
            }
            Datagram::Connless(_, Message::Info(i)) => {
                if i.token == i32::from(tokens.token_byte()) {
                    self.mark_answered(now, Family::Vanilla);
                    if self.vanilla.is_none() {
                        self.vanilla = Some(i);
                    }
                }
            }
            Datagram::Connless(_, Message::InfoExtended(m)) => {
                if u32::try_from(m.token) == Ok(tokens.extended) {
                    self.mark_answered(now, Family::Extended);
                    self.extended.insert_main(m);
                }
            }
            Datagram::Connless(_, Message::InfoMore(m)) => {
                if u32::try_from(m.token) == Ok(tokens.extended) {
                    self.mark_answered(now, Family::Extended);
                    self.extended.insert_more(m);
                }
            }
            Datagram::Connless(
                Header::Sixup {
                    token,
                    response_token,
                },
                Message::Info7(m),
            ) => {
                if token == tokens.client_token
                    && Some(response_token) == self.server_token
                    && m.browse_token == tokens.browse_token
                {
                    self.mark_answered(now, Family::Sixup);
                    if let (None, Some(body)) = (&self.sixup, m.body) {
                        self.sixup = Some(body);
                    }
                }
            }
            Datagram::Connless(..) => {}
        }
    }
}

impl QueryMachine for TeeworldsQuery {
    type Output = Box<crate::model::ServerInfo>;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.finished || from != self.target {
            return;
        }
        self.on_datagram(now, datagram);
        self.evaluate(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        if self.grace.is_some_and(|g| now >= g) {
            self.finish();
            return;
        }
        match self.retry.on_timeout(now) {
            RetryAction::Wait => {}
            RetryAction::GiveUp => self.finish(),
            RetryAction::Resend => {
                self.new_attempt = true;
                if !self.extended.is_complete() {
                    self.send_extended = true;
                }
                if !self.answered.contains(&Family::Sixup) {
                    if self.server_token.is_some() {
                        self.send_get_info7 = true;
                    } else {
                        self.send_token_request = true;
                    }
                }
                if !(self.send_extended || self.send_get_info7 || self.send_token_request) {
                    // Nothing left to ask: count the attempt anyway so the schedule ends.
                    self.retry.on_send(now);
                    self.new_attempt = false;
                }
            }
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.finished {
            return None;
        }
        let tokens = self.tokens;
        if self.send_extended {
            self.send_extended = false;
            tokens.extended_header().encode(buf);
            Message::GetInfo(GetInfo {
                token: tokens.token_byte(),
            })
            .encode(buf);
        } else if self.send_token_request {
            self.send_token_request = false;
            TokenMessage::request(tokens.client_token).encode(buf);
        } else if self.send_get_info7 {
            self.send_get_info7 = false;
            let server_token = self.server_token?;
            Header::Sixup {
                token: server_token,
                response_token: tokens.client_token,
            }
            .encode(buf);
            Message::GetInfo7(GetInfo7 {
                browse_token: tokens.browse_token,
            })
            .encode(buf);
        } else {
            return None;
        }
        if self.new_attempt {
            self.new_attempt = false;
            self.retry.on_send(now);
        }
        Some(Transmit {
            destination: self.target,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.finished {
            return None;
        }
        match (self.grace, self.retry.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_event(&mut self) -> Option<QueryEvent> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.retry.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, _now: Instant) {
        self.finish();
    }
}

#[cfg(test)]
mod tests;
