//! Valve master family codecs: list requests and pages, the server's challenge request,
//! heartbeat and removal, the challenge reply, and the filter string. Whatever decodes must
//! re-encode to something that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use muster_proto::valve_master::{
    ChallengeReply, Filter, ListReply, ListRequest, Semantics, ServerFacts, ServerPacket,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = ListRequest::decode(data) {
        assert_eq!(ListRequest::decode(&r.encode()), Ok(r.clone()));
        if let Ok(f) = Filter::parse(&r.filter) {
            let _ = f.matches(&ServerFacts::default(), Semantics::Valve);
        }
    }
    for (ipv6, key) in [(false, false), (false, true), (true, false)] {
        if let Ok(page) = ListReply::decode(data, ipv6, key) {
            // An empty page re-encodes as IPv4; compare what it holds.
            let again = ListReply::decode(&page.encode(), ipv6 && !page.servers.is_empty(), key);
            assert_eq!(again.map(|p| p.servers), Ok(page.servers.clone()));
        }
    }
    if let Ok(c) = ChallengeReply::decode(data) {
        assert_eq!(ChallengeReply::decode(&c.encode()), Ok(c));
    }
    if let Ok(p) = ServerPacket::decode(data) {
        assert_eq!(ServerPacket::decode(&p.encode()), Ok(p));
    }
    if let Ok(f) = Filter::parse(data) {
        let _ = f.matches(&ServerFacts::default(), Semantics::Xash);
    }
});
