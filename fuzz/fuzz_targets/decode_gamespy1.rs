//! GameSpy v1: reply datagrams, requests and the reassembler on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use muster_proto::gamespy1::map::to_server_info;
use muster_proto::gamespy1::packet::{ReplyDatagram, Request, RequestKind};
use muster_proto::gamespy1::reassembly::{PartialReason, Reassembler};
use muster_proto::gamespy1::{MAX_DATAGRAM_LEN, MAX_REQUEST_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(dg) = ReplyDatagram::decode(data) {
        let _ = dg.query_ids();
        let mut out = Vec::new();
        dg.encode(&mut out);
        let again = ReplyDatagram::decode(&out);
        // Symmetric when no value holds a recovered `\` and every key after the first starts
        // with a letter (a digit key after a skipped `\\` would be re-joined by rule (a) of
        // §8.2): then re-tokenizing gives the same pairs. Otherwise the tokenizer may
        // legitimately read the re-encoded bytes differently (spec §8.5).
        // A NUL that ended a value in the middle of the input would become trailing (and be
        // stripped) after re-encoding, so NULs also make the datagram asymmetric.
        let clean_values = dg.pairs.iter().all(|p| {
            !p.value().contains(&b'\\') && !p.value().contains(&0) && !p.key().contains(&0)
        });
        let letter_keys = dg
            .pairs
            .iter()
            .skip(1)
            .all(|p| p.key().first().is_some_and(u8::is_ascii_alphabetic));
        // Re-encoding adds a `\` after an odd trailing key, which can cross the size limit.
        let fits = out.len() <= MAX_DATAGRAM_LEN;
        if clean_values && letter_keys && fits {
            assert_eq!(again, Ok(dg));
        } else if fits {
            assert!(again.is_ok());
        }
    }

    if let Ok(req) = Request::decode(data) {
        let mut out = Vec::new();
        req.encode(&mut out);
        // Same NUL caveat as above; otherwise requests are symmetric.
        let no_nul = req
            .items()
            .iter()
            .all(|i| !i.kind().name().contains(&0) && !i.value().unwrap_or_default().contains(&0));
        if out.len() <= MAX_REQUEST_LEN && no_nul {
            assert_eq!(Request::decode(&out), Ok(req));
        }
    }
    let _ = Request::serious_sam_kind(data);

    // Feed the reassembler: the input split at 0xFF bytes is a sequence of datagrams.
    let mut r = Reassembler::new(&RequestKind::Status);
    for d in data.split(|&b| b == 0xFF) {
        let _ = r.push(d);
    }
    let _ = r.finish(PartialReason::Aborted);
    let _ = to_server_info(&r.pairs());
});
