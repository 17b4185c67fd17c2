//! Quake III / DarkPlaces codecs: every connectionless datagram and the info string. Whatever
//! decodes must re-encode to something that decodes to the same value; a decoded server list
//! must survive being split into datagrams again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use muster_proto::quake3::{InfoString, Packet, ServerList, decode_text};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Packet::decode(data) {
        let mut out = Vec::new();
        p.encode(&mut out);
        assert_eq!(Packet::decode(&out), Ok(p.clone()));
        if let Packet::ServerList(list) = p {
            let mut servers = Vec::new();
            for d in ServerList::encode_datagrams(list.ext, &list.servers) {
                assert!(d.len() <= muster_proto::quake3::LIST_DATAGRAM_LIMIT);
                match Packet::decode(&d) {
                    Ok(Packet::ServerList(part)) => servers.extend(part.servers),
                    other => panic!("re-split list datagram did not decode: {other:?}"),
                }
            }
            assert_eq!(servers, list.servers);
        }
    }
    if let Ok(info) = InfoString::decode(data) {
        for (_, v) in info.iter() {
            let _ = decode_text(v);
        }
        let mut out = Vec::new();
        info.encode(&mut out);
        assert_eq!(InfoString::decode(&out), Ok(info));
    }
});
