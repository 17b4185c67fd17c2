//! Valve master family codecs: list requests and pages, the server's challenge request,
//! heartbeat and removal, the challenge reply, and the filter string; the master's side: a
//! heartbeat read as an announcement, versions, and the pages it cuts. Whatever decodes must
//! re-encode to something that decodes to the same value.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use muster_proto::valve_master::packet::put_entry;
use muster_proto::valve_master::serve::{
    Announcement, Version, every_page, list_order, page_after,
};
use muster_proto::valve_master::{
    ChallengeReply, Filter, LIST_DATAGRAM_LIMIT, ListReply, ListRequest, Semantics, ServerFacts,
    ServerPacket,
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
        assert_eq!(ServerPacket::decode(&p.encode()), Ok(p.clone()));
        if let ServerPacket::Heartbeat(hb) = &p {
            let _ = Announcement::read(hb);
        }
    }
    if let Some(v) = Version::parse(data) {
        assert_eq!(Version::parse(v.to_string().as_bytes()), Some(v));
    }
    // The bytes as addresses: every page after any of them decodes, holds at most a page,
    // and the pages of everything give back everything.
    let mut addrs: Vec<SocketAddr> = data
        .chunks_exact(6)
        .map(|c| {
            let ip = Ipv4Addr::new(c[0], c[1], c[2], c[3]);
            SocketAddr::new(IpAddr::V4(ip), u16::from_be_bytes([c[4], c[5]]))
        })
        .filter(|a| !(a.ip().is_unspecified() && a.port() == 0))
        .collect();
    addrs.sort_by(list_order);
    addrs.dedup();
    // Packed as a master keeps them: the pages are cut from these bytes.
    let mut packed = Vec::new();
    for &a in &addrs {
        put_entry(&mut packed, a);
    }
    if let Some(&last) = addrs.first() {
        let page = page_after(&packed, last, None, false);
        assert!(page.len() <= LIST_DATAGRAM_LIMIT);
        assert!(ListReply::decode(&page, false, false).is_ok());
    }
    let mut back = Vec::new();
    for p in every_page(&packed, Some(1), false) {
        assert!(p.len() <= LIST_DATAGRAM_LIMIT);
        back.extend(ListReply::decode(&p, false, true).unwrap().servers);
    }
    assert_eq!(back, addrs);
    if let Ok(f) = Filter::parse(data) {
        let _ = f.matches(&ServerFacts::default(), Semantics::Xash);
    }
});
