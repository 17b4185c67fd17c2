//! Teeworlds master codecs: every UDP master datagram, the DDNet register headers, bodies and
//! responses, and `servers.json`. Whatever decodes must re-encode to something that decodes to
//! the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use muster_proto::teeworlds_master::packet::{Message, Packet};
use muster_proto::teeworlds_master::{RegisterInfo, RegisterRequest, RegisterResponse, ServersJson};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Packet::decode(data) {
        let mut out = Vec::new();
        p.encode(&mut out);
        assert_eq!(out.len(), p.encoded_len());
        assert_eq!(Packet::decode(&out), Ok(p));
    }
    if let Ok(m) = Message::decode(data) {
        let mut out = Vec::new();
        m.encode(&mut out);
        assert_eq!(Message::decode(&out), Ok(m));
    }
    if let Ok(doc) = ServersJson::decode(data) {
        let _ = doc.to_server_list();
        for s in &doc.servers {
            let _ = s.server_info();
        }
        let mut out = Vec::new();
        doc.encode(&mut out);
        assert_eq!(ServersJson::decode(&out), Ok(doc));
    }
    if let Ok(info) = RegisterInfo::decode(data) {
        let _ = info.to_server_info();
        let mut out = Vec::new();
        info.encode(&mut out);
        assert_eq!(RegisterInfo::decode(&out), Ok(info));
    }
    if let Ok(r) = RegisterResponse::decode(data) {
        let mut out = Vec::new();
        r.encode(&mut out);
        assert_eq!(RegisterResponse::decode(&out), Ok(r));
    }
    // Header lists as "Name: value" lines.
    if let Ok(text) = std::str::from_utf8(data) {
        let headers: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.split_once(": "))
            .collect();
        if let Ok(req) = RegisterRequest::from_headers(&headers) {
            let emitted = req.to_headers();
            let borrowed: Vec<(&str, &str)> = emitted
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(RegisterRequest::from_headers(&borrowed), Ok(req));
        }
    }
});
