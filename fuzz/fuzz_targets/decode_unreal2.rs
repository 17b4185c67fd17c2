#![no_main]
//! Unreal 2 native query: decode any datagram as a reply and as a request; whatever decodes
//! must re-encode to a value that decodes equal (and, for this format, to the same bytes).

use libfuzzer_sys::fuzz_target;
use muster_proto::unreal2::U2String;
use muster_proto::unreal2::packet::{Reply, Request};

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = Reply::decode(data) {
        let mut out = Vec::new();
        reply.encode(&mut out);
        assert_eq!(Reply::decode(&out), Ok(reply));
        assert_eq!(out, data, "decoders keep every spelling, so encode is byte-exact");
    }
    if let Ok(request) = Request::decode(data) {
        let mut out = Vec::new();
        request.encode(&mut out);
        assert_eq!(Request::decode(&out), Ok(request));
    }
    if let Ok(s) = U2String::decode(data) {
        let mut out = Vec::new();
        s.encode(&mut out);
        assert_eq!(U2String::decode(&out), Ok(s.clone()));
        let _ = muster_proto::unreal2::decode_text(&s);
    }
});
