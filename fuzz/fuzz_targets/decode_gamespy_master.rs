#![no_main]
//! Every GameSpy master decoder and the UT2003 list reader on arbitrary bytes; where the
//! format is symmetric, decode → encode → decode must give the same value.

use libfuzzer_sys::fuzz_target;
use muster_proto::gamespy_master::{
    ClientMessage, Greeting, Heartbeat, ListForm, ListReply, MasterQuery, QueryReply,
    RequestParser, Secure, SyncReply, ValidateAnswer,
};
use muster_proto::ut2003_list::ListFile;

macro_rules! round_trip {
    ($ty:ty, $data:expr) => {
        if let Ok(msg) = <$ty>::decode($data) {
            let mut out = Vec::new();
            msg.encode(&mut out);
            assert_eq!(<$ty>::decode(&out), Ok(msg));
        }
    };
}

fuzz_target!(|data: &[u8]| {
    round_trip!(Heartbeat, data);
    round_trip!(Secure, data);
    round_trip!(ValidateAnswer, data);
    round_trip!(MasterQuery, data);
    round_trip!(QueryReply, data);
    round_trip!(Greeting, data);
    round_trip!(SyncReply, data);

    // Client messages: `\final\`-terminated ones re-encode exactly to an equal value; an
    // unterminated one is only decoded (sync requests keep their terminator flag).
    if let Ok(msg) = ClientMessage::decode(data) {
        let mut out = Vec::new();
        msg.encode(&mut out);
        assert_eq!(ClientMessage::decode_unterminated(&out), Ok(msg));
    }
    let _ = ClientMessage::decode_unterminated(data);

    for form in [ListForm::Text, ListForm::Cmp] {
        if let Ok(list) = ListReply::decode(data, form) {
            let mut out = Vec::new();
            list.encode(&mut out);
            assert_eq!(ListReply::decode(&out, form), Ok(list));
        }
    }

    // The server-side parser, fed in two pieces.
    let mut p = RequestParser::new();
    let (a, b) = data.split_at(data.len() / 2);
    if p.feed(a).is_ok() {
        let _ = p.feed(b);
    }
    let _ = p.flush();

    // The UT2003 list: never fails below its size cap; what it read writes back and reads
    // again to the same entries.
    if let Ok(list) = ListFile::decode(data) {
        let canonical = ListFile::from_entries(list.entries.iter().copied());
        let mut out = Vec::new();
        canonical.encode(&mut out);
        assert_eq!(ListFile::decode(&out), Ok(canonical));
    }
});
