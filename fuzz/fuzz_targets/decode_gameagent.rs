#![no_main]
//! Every GameAgent decoder on arbitrary bytes: no panic, and whatever decodes re-encodes to a
//! value that decodes equal (values are compared, not bytes: a key without value in a status
//! reply reads back with an empty value).

use libfuzzer_sys::fuzz_target;
use muster_proto::DecodeError;
use muster_proto::gameagent::MAX_DATAGRAM;
use muster_proto::gameagent::packet::{
    Challenge, CountReply, Heartbeat, ListReply, MasterPacket, PlayersDatagram, ServerRequest,
    StatusReply,
};

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    if let Ok(m) = MasterPacket::decode(data) {
        m.encode(&mut out);
        assert_eq!(MasterPacket::decode(&out), Ok(m));
    }
    out.clear();
    if let Ok(r) = ServerRequest::decode(data) {
        r.encode(&mut out);
        assert_eq!(ServerRequest::decode(&out), Ok(r));
    }
    out.clear();
    if let Ok(s) = StatusReply::decode(data) {
        s.encode(&mut out);
        // A key without a value decodes with an empty value and re-encodes with its `;`, so a
        // full datagram can re-encode a few bytes past the limit: then the decoder must say so.
        if out.len() <= MAX_DATAGRAM {
            assert_eq!(StatusReply::decode(&out), Ok(s));
        } else {
            assert_eq!(StatusReply::decode(&out), Err(DecodeError::TooLarge("status reply")));
        }
    }
    out.clear();
    if let Ok(p) = PlayersDatagram::decode(data) {
        p.encode(&mut out);
        assert_eq!(PlayersDatagram::decode(&out), Ok(p));
    }
    out.clear();
    if let Ok(c) = CountReply::decode(data) {
        c.encode(&mut out);
        assert_eq!(CountReply::decode(&out), Ok(c));
    }
    out.clear();
    if let Ok(l) = ListReply::decode(data) {
        l.encode(&mut out);
        assert_eq!(ListReply::decode(&out), Ok(l));
    }
    out.clear();
    if let Ok(h) = Heartbeat::decode(data) {
        h.encode(&mut out);
        assert_eq!(Heartbeat::decode(&out), Ok(h));
    }
    let _ = Challenge::decode(data);
});
