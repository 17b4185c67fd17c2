#![no_main]
//! Every Teeworlds server-info decoder on arbitrary bytes; whatever decodes must re-encode
//! to bytes that decode to the same value. The responder gets the same bytes: it must not
//! panic, and every reply must fit one datagram and decode.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use muster_proto::respond::{PlayerState, Responder, ServerState};
use muster_proto::teeworlds::header::MAX_DATAGRAM;
use muster_proto::teeworlds::{ResponderConfig, TeeworldsResponder};
use muster_proto::teeworlds::header::{Frame, Header, TokenMessage};
use muster_proto::teeworlds::{Datagram, Info, Info7, Info64, InfoExtended, InfoMore, Message};

/// Player records cut off by the end of the input are dropped and flagged; the flag is not
/// encoded, so compare without it.
fn clear_truncated(m: &mut Message) {
    match m {
        Message::Info(i) => i.truncated = false,
        Message::Info64(i) => i.info.truncated = false,
        Message::InfoExtended(i) => i.truncated = false,
        Message::InfoMore(i) => i.truncated = false,
        Message::Info7(i) => {
            if let Some(b) = &mut i.body {
                b.truncated = false;
            }
        }
        _ => {}
    }
}

fn check<T: PartialEq + std::fmt::Debug>(
    data: &[u8],
    decode: fn(&[u8]) -> Result<T, muster_proto::DecodeError>,
    encode: fn(&T, &mut Vec<u8>),
    normalize: fn(&mut T),
) {
    if let Ok(mut x) = decode(data) {
        normalize(&mut x);
        let mut out = Vec::new();
        encode(&x, &mut out);
        let mut back = decode(&out).expect("re-encoded value decodes");
        normalize(&mut back);
        assert_eq!(back, x);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data, Datagram::decode, Datagram::encode, |d| {
        if let Datagram::Connless(_, m) = d {
            clear_truncated(m);
        }
    });
    check(data, TokenMessage::decode, TokenMessage::encode, |_| {});
    check(data, Info::decode, Info::encode, |i| i.truncated = false);
    check(data, Info64::decode, Info64::encode, |i| i.info.truncated = false);
    check(data, InfoExtended::decode, InfoExtended::encode, |i| i.truncated = false);
    check(data, InfoMore::decode, InfoMore::encode, |i| i.truncated = false);
    check(data, Info7::decode, Info7::encode, |i| {
        if let Some(b) = &mut i.body {
            b.truncated = false;
        }
    });
    for sixup in [false, true] {
        if let Ok(mut m) = Message::decode(data, sixup) {
            clear_truncated(&mut m);
            let mut out = Vec::new();
            m.encode(&mut out);
            let mut back = Message::decode(&out, sixup).expect("re-encoded message decodes");
            clear_truncated(&mut back);
            assert_eq!(back, m);
        }
    }
    if let Ok(Frame::Connless(h, _)) = Frame::split(data) {
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out.len(), h.encoded_len());
        // A legacy header spelled "xe" reads back as extended, so compare by re-splitting.
        let (back, rest) = Header::split(&out).expect("header decodes");
        assert!(rest.is_empty());
        let mut again = Vec::new();
        back.encode(&mut again);
        assert_eq!(again, out);
    }
    let state = ServerState {
        players: (0..64)
            .map(|i| PlayerState {
                name: format!("player ★ {i}"),
                ..PlayerState::default()
            })
            .collect(),
        max_players: 64,
        ..ServerState::default()
    };
    let mut responder = TeeworldsResponder::new(ResponderConfig::default(), [0; 16]);
    let mut out = Vec::new();
    let from = SocketAddr::from((Ipv4Addr::LOCALHOST, 1));
    let answered = responder.handle_datagram(Instant::now(), from, data, &state, &mut out);
    assert_eq!(answered, !out.is_empty());
    for reply in out {
        assert!(reply.bytes.len() <= MAX_DATAGRAM);
        Datagram::decode(&reply.bytes).expect("reply decodes");
    }
});
