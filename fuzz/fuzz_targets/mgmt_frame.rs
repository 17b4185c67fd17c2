//! The mgmt frame codec and message decoder on arbitrary bytes.
//!
//! Checks more than "no panic": `check`, `Frame::decode` and the incremental `FrameDecoder`
//! agree; the decoder never buffers more than one frame; every decoded frame and message
//! re-encodes to something that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use muster_proto::DecodeError;
use muster_proto::mgmt::{Frame, FrameDecoder, MAX_WIRE_FRAME_LEN, Message, check};

fuzz_target!(|data: &[u8]| {
    // One-shot check against the incremental decoder, fed in two pieces.
    let (a, b) = data.split_at(data.len() / 3);
    let mut dec = FrameDecoder::new();
    let mut frames = Vec::new();
    let mut error = None;
    for mut piece in [a, b] {
        loop {
            match dec.feed(&mut piece) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
            assert!(dec.buffered() <= MAX_WIRE_FRAME_LEN);
        }
        if error.is_some() {
            break;
        }
    }
    match check(data) {
        Ok(n) => {
            let (first, used) = Frame::decode_from(data).expect("check said whole frame");
            assert_eq!(used, n);
            assert_eq!(frames.first(), Some(&first));
        }
        Err(DecodeError::Incomplete(_)) => assert!(frames.is_empty() && error.is_none()),
        Err(e) => assert_eq!(error, Some(e)),
    }

    for frame in &frames {
        let mut out = Vec::new();
        frame.encode(&mut out);
        assert_eq!(out.len(), frame.encoded_len());
        assert_eq!(Frame::decode(&out).as_ref(), Ok(frame));

        if let Ok(msg) = Message::from_frame(frame) {
            let mut out = Vec::new();
            msg.encode(&mut out);
            let again = Message::from_frame(&Frame::decode(&out).expect("own frame"));
            // Entries the decoder skipped are not re-encoded: compare what was kept.
            match (&msg, again) {
                (Message::QueryGameServersAnswer(a), Ok(Message::QueryGameServersAnswer(b))) => {
                    assert_eq!(a.servers(), b.servers());
                    assert_eq!(b.skipped(), 0);
                }
                (_, again) => assert_eq!(again, Ok(msg.clone())),
            }
        }
    }

    // The JSON decoder on its own, without framing.
    if let Ok(msg) = Message::decode(data) {
        let mut json = Vec::new();
        msg.encode_json(&mut json);
        assert!(Message::decode(&json).is_ok());
    }
});
