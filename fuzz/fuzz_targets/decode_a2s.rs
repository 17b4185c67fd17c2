#![no_main]
//! Valve A2S codecs on arbitrary bytes: whatever decodes must re-encode to bytes that decode
//! and re-encode identically (with and without The Ship's PLAYER fields). The same bytes, cut
//! into split parts, go through the reassembler: it must not panic, and a reply it hands back
//! starts with the single-message header and stays within the limit.

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use muster_proto::a2s::{MAX_MESSAGE, Packet, Reassembler, SIMPLE_HEADER, SPLIT_HEADER, THE_SHIP_APP_ID};

fn encoded(p: &Packet) -> Vec<u8> {
    let mut out = Vec::new();
    p.encode(&mut out);
    out
}

fuzz_target!(|data: &[u8]| {
    for app in [None, Some(THE_SHIP_APP_ID)] {
        if let Ok(p) = Packet::decode_for_app(data, app) {
            let once = encoded(&p);
            let again = Packet::decode_for_app(&once, app).map(|q| encoded(&q));
            assert_eq!(again, Ok(once));
        }
    }
    // The input as a run of split parts (after the fe ff ff ff header): each is a length byte
    // and that many bytes.
    let mut r = Reassembler::new(Duration::from_secs(1));
    let now = Instant::now();
    let mut rest = data;
    while let [len, tail @ ..] = rest {
        let (part, next) = tail.split_at(usize::from(*len).min(tail.len()));
        rest = next;
        let mut d = SPLIT_HEADER.to_vec();
        d.extend_from_slice(part);
        if let Ok(Some(reply)) = r.push(now, &d) {
            assert!(reply.starts_with(&SIMPLE_HEADER));
            assert!(reply.len() <= MAX_MESSAGE);
            let _ = Packet::decode(&reply);
        }
    }
    assert!(r.expire(now + Duration::from_secs(1)).len() <= muster_proto::a2s::MAX_IN_FLIGHT);
});
