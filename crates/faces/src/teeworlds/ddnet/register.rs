//! The register machine: one `POST /ddnet/15/register` in, what to do about it out (an
//! answer, or a registry command to run and answer after; and the UDP `chal` to send, if
//! any). No clock (times come in [`Cx`]), no socket (the challenge goes out as bytes for the
//! runtime's [`crate::runtime::sender::DatagramSender`]), no store: the route runs the
//! command and waits for the store.
//!
//! The checks run in the order of the module table in [`super`]; the first failing one
//! answers.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use muster_proto::limit::{BucketConfig, ByteBudget, SourceKey, SourceLimiter};
use muster_proto::teeworlds_master::packet::Challenge;
use muster_proto::teeworlds_master::{
    Framing, Message, Packet, RegisterInfo, RegisterResponse, Token,
};

use super::DdnetSettings;
use super::info::OrderedJson;
use super::request::{self, RegisterHeaders};
use crate::teeworlds::tokens::{CHALLENGE_SEED_PERIOD, ChallengeCheck, Tokens};
use muster_core::drops::DropReason;
use muster_core::metrics::Metrics;
use muster_core::registry::{
    DdnetOutcome, DdnetRegister, DdnetSecret, MAX_DDNET_INFO, PollInfo, Registration, Timestamp,
};

/// What the machine sees of the world for one request.
pub(super) struct Cx<'a> {
    /// Monotonic time, for the buckets and the budget.
    pub now: Instant,
    /// Wall-clock time, for the challenge tokens and the registry.
    pub wall: Timestamp,
    /// Where refusals and bad input are counted.
    pub metrics: &'a Metrics,
    /// Servers a source has registered (the buckets grow with them; asked only when short).
    pub proven: &'a dyn Proven,
}

/// How many servers a source has registered (the registry's count in the daemon).
pub(super) trait Proven {
    /// Servers `source` has registered.
    fn proven(&self, source: SourceKey) -> usize;
}

impl Proven for muster_core::MasterHandle {
    fn proven(&self, source: SourceKey) -> usize {
        self.proven_servers(source)
    }
}

/// An answer to send as it is.
#[derive(Debug, PartialEq)]
pub(super) enum Answer {
    /// A JSON register answer with this status.
    Json(StatusCode, RegisterResponse),
    /// `429` with `Retry-After` of this long.
    TooMany(Duration),
}

impl Answer {
    pub(super) fn error(status: StatusCode, message: &str) -> Self {
        Self::Json(
            status,
            RegisterResponse::Error {
                message: message.to_owned(),
            },
        )
    }
}

/// What the route does for a request that passed the length checks.
#[derive(Debug)]
pub(super) enum Then {
    /// Answer at once.
    Answer(Answer),
    /// Put this registration into the registry, then answer as [`after_register`] says.
    Register(Box<(DdnetRegister, Registration)>),
    /// Remove the stream `url` registered under `secret`, then answer once stored.
    Delete {
        /// The `Secret` header.
        secret: Box<str>,
        /// The stream's URL at the peer's IP.
        url: String,
    },
}

/// A UDP `chal` datagram to send (it already spent its bucket and the egress budget).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Datagram {
    pub to: SocketAddr,
    pub bytes: Vec<u8>,
}

/// The machine's decision about one request.
#[derive(Debug)]
pub(super) struct Step {
    pub then: Then,
    /// Sent after the registry command, before the answer.
    pub challenge: Option<Datagram>,
}

impl Step {
    fn answer(a: Answer) -> Self {
        Self {
            then: Then::Answer(a),
            challenge: None,
        }
    }
}

/// What a registration the registry took needs before its answer.
#[derive(Debug, PartialEq)]
pub(super) enum AfterRegister {
    /// Answer at once.
    Answer(Answer),
    /// Answer `success` once stored; with `visible`, once the lists show it too.
    Success { visible: bool },
}

/// The answer to what [`muster_core::MasterHandle::ddnet_register`] did.
pub(super) fn after_register(out: DdnetOutcome) -> AfterRegister {
    match out {
        DdnetOutcome::NeedInfo => {
            AfterRegister::Answer(Answer::Json(StatusCode::OK, RegisterResponse::NeedInfo))
        }
        DdnetOutcome::Rejected(why) => {
            AfterRegister::Answer(Answer::error(StatusCode::TOO_MANY_REQUESTS, why.name()))
        }
        DdnetOutcome::Refreshed => AfterRegister::Success { visible: false },
        DdnetOutcome::Success => AfterRegister::Success { visible: true },
    }
}

/// The register machine's state: challenge tokens and the per-source buckets of POSTs and
/// challenges, and the challenges' egress budget.
#[derive(Debug)]
pub(super) struct RegisterMachine {
    tokens: Tokens,
    register: SourceLimiter,
    challenge: SourceLimiter,
    budget: ByteBudget,
    body_limit: usize,
    register_refill: Duration,
}

impl RegisterMachine {
    pub(super) fn new(s: &DdnetSettings) -> Self {
        let n = s.max_tracked_sources;
        let grow = s.proven_servers_max;
        let bucket = |burst, refill| {
            SourceLimiter::new(BucketConfig::one_every(burst, refill), n).with_growth(grow)
        };
        Self {
            tokens: Tokens::random(CHALLENGE_SEED_PERIOD),
            register: bucket(s.register_burst, s.register_refill),
            challenge: bucket(s.challenge_burst, s.challenge_refill),
            budget: ByteBudget::new(s.egress_bytes_per_sec),
            body_limit: s.body_limit,
            register_refill: s.register_refill,
        }
    }

    /// The largest body read.
    pub(super) fn body_limit(&self) -> usize {
        self.body_limit
    }

    /// The checks before the body is read: the source's POST bucket, then `Content-Length`
    /// (required, as warp's `content_length_limit` in the reference master, and within the
    /// body limit).
    pub(super) fn admit(&mut self, cx: &Cx<'_>, ip: IpAddr, headers: &HeaderMap) -> Option<Answer> {
        if !self
            .register
            .allow_proven(ip, cx.now, 1.0, |k| cx.proven.proven(k))
        {
            cx.metrics.count_bucket_refusal("ddnet_register", ip);
            return Some(Answer::TooMany(self.register_refill));
        }
        let Some(length) = request::content_length(headers) else {
            cx.metrics.count_drop(DropReason::Malformed);
            return Some(Answer::error(
                StatusCode::LENGTH_REQUIRED,
                request::LENGTH_REQUIRED,
            ));
        };
        if usize::try_from(length).map_or(true, |n| n > self.body_limit) {
            return Some(too_large(cx.metrics));
        }
        None
    }

    /// A request whose body was read: `ip` is the peer's (IPv4-mapped made IPv4).
    pub(super) fn on_request(
        &mut self,
        cx: &Cx<'_>,
        ip: IpAddr,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Step {
        let m = cx.metrics;
        match headers.get("Action").map(HeaderValue::as_bytes) {
            None => match request::register_headers(headers) {
                Ok(h) => self.register_post(cx, ip, &h, headers, body),
                Err(e) => Step::answer(bad_request(m, &e)),
            },
            Some(v) if v == request::ACTION_DELETE => match request::delete_headers(headers) {
                Ok(d) => Step {
                    then: Then::Delete {
                        secret: Box::from(d.secret),
                        url: super::stream_url(
                            d.address.protocol,
                            SocketAddr::new(ip, d.address.port),
                        ),
                    },
                    challenge: None,
                },
                Err(e) => Step::answer(bad_request(m, &e)),
            },
            Some(other) => Step::answer(bad_request(m, &request::unknown_action(other))),
        }
    }

    /// A registration whose headers passed: the body, the 0.7 token, the community token,
    /// the challenge, then the registry; a challenge goes out unless the answer is an error
    /// about the request itself.
    fn register_post(
        &mut self,
        cx: &Cx<'_>,
        ip: IpAddr,
        h: &RegisterHeaders<'_>,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Step {
        let m = cx.metrics;
        let info = if body.is_empty() {
            None
        } else if !request::is_json(headers) {
            m.count_drop(DropReason::Malformed);
            return Step::answer(Answer::error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                request::UNSUPPORTED_MEDIA_TYPE,
            ));
        } else {
            match serde_json::from_slice::<OrderedJson>(body) {
                Ok(v) => Some(v),
                Err(e) => {
                    return Step::answer(bad_request(
                        m,
                        &format!("Request body deserialize error: {e}"),
                    ));
                }
            }
        };
        let token07 = match request::connless_token(h.address.protocol, h.connless_token) {
            Ok(t) => t,
            Err(e) => return Step::answer(bad_request(m, &e)),
        };
        let addr = SocketAddr::new(ip, h.address.port);
        let url = super::stream_url(h.address.protocol, addr);
        let check = h.challenge_token.map_or(ChallengeCheck::Invalid, |t| {
            self.tokens.check_challenge(&url, t, cx.wall)
        });
        if let Some(e) = h.community_token.and_then(request::community_token_error) {
            return Step::answer(bad_request(m, &e));
        }
        let then = if check == ChallengeCheck::Invalid {
            if h.challenge_token.is_some() {
                m.count_verification_failed();
            }
            Then::Answer(Answer::Json(
                StatusCode::OK,
                RegisterResponse::NeedChallenge,
            ))
        } else {
            if info.as_ref().is_some_and(|v| !v.is_object()) {
                return Step::answer(bad_request(m, request::NOT_AN_OBJECT));
            }
            list(m, h, addr, &url, info.as_ref())
        };
        let challenge = if check == ChallengeCheck::Current {
            None
        } else {
            self.challenge(cx, h.challenge_secret, token07, &url, addr)
        };
        Step { then, challenge }
    }

    /// The UDP `chal` for `url` to `to` (0.7 framing with the request's token), if the
    /// source's bucket and the egress budget allow it.
    fn challenge(
        &mut self,
        cx: &Cx<'_>,
        challenge_secret: &str,
        token07: Option<[u8; 4]>,
        url: &str,
        to: SocketAddr,
    ) -> Option<Datagram> {
        let m = cx.metrics;
        let token = self.tokens.challenge(url, cx.wall);
        let Ok(chal) = Challenge::new(challenge_secret.as_bytes(), token.as_bytes()) else {
            // Cannot happen: both are short visible ASCII.
            m.count_drop(DropReason::Malformed);
            return None;
        };
        let framing = match token07 {
            Some(t) => Framing::V07 {
                token: Token(t),
                response_token: Token::NONE,
            },
            None => Framing::STANDARD_06,
        };
        let p = Packet::Connless {
            framing,
            message: Message::Challenge(chal),
        };
        let mut bytes = Vec::with_capacity(p.encoded_len());
        p.encode(&mut bytes);
        let ok = self
            .challenge
            .allow_proven(to.ip(), cx.now, 1.0, |k| cx.proven.proven(k))
            && self.budget.spend(bytes.len(), cx.now);
        if !ok {
            m.count_bucket_refusal("ddnet_challenge", to.ip());
            return None;
        }
        Some(Datagram { to, bytes })
    }
}

/// A registration with a valid challenge token: the registry command (or 413 when the info
/// grows too large once written compact).
fn list(
    m: &Metrics,
    h: &RegisterHeaders<'_>,
    addr: SocketAddr,
    url: &str,
    info: Option<&OrderedJson>,
) -> Then {
    let raw = info.map(|v| Bytes::from(v.to_compact()));
    if raw.as_ref().is_some_and(|r| r.len() > MAX_DDNET_INFO) {
        m.count_drop(DropReason::TooLarge);
        return Then::Answer(Answer::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "info too large",
        ));
    }
    let d = DdnetRegister {
        addr,
        secret: DdnetSecret::from(h.secret),
        serial: h.info_serial,
        poll_info: raw.as_deref().and_then(poll_info_of),
        info: raw,
        url: Arc::from(url),
    };
    Then::Register(Box::new((d, super::ddnet_registration(addr))))
}

/// The registry's view of a registered info (name, map, players, …), when it has the schema
/// DDNet sends.
fn poll_info_of(raw: &[u8]) -> Option<PollInfo> {
    let info: RegisterInfo = serde_json::from_slice(raw).ok()?;
    Some(PollInfo::from_server_info(&info.to_server_info()))
}

/// `413`, counted.
pub(super) fn too_large(m: &Metrics) -> Answer {
    m.count_drop(DropReason::TooLarge);
    Answer::error(StatusCode::PAYLOAD_TOO_LARGE, request::PAYLOAD_TOO_LARGE)
}

/// A 400 the reference master gives too, counted as malformed.
fn bad_request(m: &Metrics, message: &str) -> Answer {
    m.count_drop(DropReason::Malformed);
    Answer::error(StatusCode::BAD_REQUEST, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_proto::teeworlds_master::packet::Challenge as Chal;

    struct NoServers;
    impl Proven for NoServers {
        fn proven(&self, _: SourceKey) -> usize {
            0
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn post(token: Option<&str>) -> HeaderMap {
        let mut p = vec![
            ("Address", "tw-0.6+udp://connecting-address.invalid:8303"),
            ("Secret", "s"),
            ("Challenge-Secret", "c:tw0.6/ipv4"),
            ("Info-Serial", "3"),
            ("Content-Length", "0"),
        ];
        if let Some(t) = token {
            p.push(("Challenge-Token", t));
        }
        headers(&p)
    }

    /// The challenge token a `chal` datagram carries.
    fn token_of(d: &Datagram) -> String {
        let Ok(Packet::Connless {
            message: Message::Challenge(c),
            ..
        }) = Packet::decode(&d.bytes)
        else {
            panic!("not a chal: {:?}", d.bytes);
        };
        let c: Chal = c;
        String::from_utf8(c.token().to_vec()).unwrap()
    }

    #[test]
    fn challenge_then_register_without_a_clock_or_socket() {
        let m = Metrics::default();
        let t0 = Instant::now();
        let cx = Cx {
            now: t0,
            wall: Timestamp::from_secs(1_000_000),
            metrics: &m,
            proven: &NoServers,
        };
        let mut machine = RegisterMachine::new(&DdnetSettings::default());
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(machine.admit(&cx, ip, &post(None)), None);
        // No token: need_challenge, and the chal for the stream at the peer's IP.
        let step = machine.on_request(&cx, ip, &post(None), &Bytes::new());
        assert!(matches!(
            step.then,
            Then::Answer(Answer::Json(
                StatusCode::OK,
                RegisterResponse::NeedChallenge
            ))
        ));
        let chal = step.challenge.expect("a chal");
        assert_eq!(chal.to, "10.1.2.3:8303".parse().unwrap());
        // The token it carries: a registry command, and no chal (the token is current).
        let token = token_of(&chal);
        let step = machine.on_request(&cx, ip, &post(Some(&token)), &Bytes::new());
        let Then::Register(cmd) = step.then else {
            panic!("no registry command: {:?}", step.then);
        };
        let (d, reg) = *cmd;
        assert_eq!(d.addr, chal.to);
        assert_eq!(&*d.url, "tw-0.6+udp://10.1.2.3:8303");
        assert_eq!(reg.face, muster_core::registry::Face::DdnetHttp);
        assert_eq!(step.challenge, None);
        // A wrong token is a failed verification, and a new chal.
        let step = machine.on_request(&cx, ip, &post(Some("nope")), &Bytes::new());
        assert!(step.challenge.is_some());
        assert!(matches!(
            step.then,
            Then::Answer(Answer::Json(
                StatusCode::OK,
                RegisterResponse::NeedChallenge
            ))
        ));
    }

    #[test]
    fn buckets_run_on_the_given_time() {
        let m = Metrics::default();
        let settings = DdnetSettings {
            register_burst: 1,
            challenge_burst: 1,
            ..DdnetSettings::default()
        };
        let mut machine = RegisterMachine::new(&settings);
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let t0 = Instant::now();
        let at = |now| Cx {
            now,
            wall: Timestamp::from_secs(1_000_000),
            metrics: &m,
            proven: &NoServers,
        };
        assert_eq!(machine.admit(&at(t0), ip, &post(None)), None);
        assert_eq!(
            machine.admit(&at(t0), ip, &post(None)),
            Some(Answer::TooMany(settings.register_refill))
        );
        // One refill later (no clock read: only the time given).
        assert_eq!(
            machine.admit(&at(t0 + settings.register_refill), ip, &post(None)),
            None
        );
        // The challenge bucket: one chal, then none until it refills.
        let first = machine.on_request(&at(t0), ip, &post(None), &Bytes::new());
        assert!(first.challenge.is_some());
        let second = machine.on_request(&at(t0), ip, &post(None), &Bytes::new());
        assert!(second.challenge.is_none());
        assert!(matches!(
            second.then,
            Then::Answer(Answer::Json(
                StatusCode::OK,
                RegisterResponse::NeedChallenge
            ))
        ));
        let later = t0 + settings.challenge_refill;
        assert!(
            machine
                .on_request(&at(later), ip, &post(None), &Bytes::new())
                .challenge
                .is_some()
        );
    }

    #[test]
    fn length_is_required_and_bounded() {
        let m = Metrics::default();
        let cx = Cx {
            now: Instant::now(),
            wall: Timestamp::from_secs(1_000_000),
            metrics: &m,
            proven: &NoServers,
        };
        let mut machine = RegisterMachine::new(&DdnetSettings::default());
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let none = headers(&[("Secret", "s")]);
        assert_eq!(
            machine.admit(&cx, ip, &none),
            Some(Answer::error(
                StatusCode::LENGTH_REQUIRED,
                request::LENGTH_REQUIRED
            ))
        );
        let big = headers(&[("Content-Length", "99999999")]);
        assert_eq!(
            machine.admit(&cx, ip, &big),
            Some(Answer::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                request::PAYLOAD_TOO_LARGE
            ))
        );
        assert_eq!(
            after_register(DdnetOutcome::Success),
            AfterRegister::Success { visible: true }
        );
        assert_eq!(
            after_register(DdnetOutcome::NeedInfo),
            AfterRegister::Answer(Answer::Json(StatusCode::OK, RegisterResponse::NeedInfo))
        );
    }
}
