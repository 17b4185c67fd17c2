//! The event log's wire form: each event rendered once as Server-Sent Events text (its data the
//! server as the API shows it) and compressed once for every gzip stream.

use muster_core::events::{EventKind, ServerEvent};
use muster_core::registry::Record;

use crate::api::dto::ServerDetail;

/// A deflate compressor reused for many pieces (its state is large: one per thread, see
/// [`Deflater::piece_here`]).
#[derive(Debug)]
pub struct Deflater(flate2::Compress);

impl Default for Deflater {
    fn default() -> Self {
        Self(flate2::Compress::new(flate2::Compression::fast(), false))
    }
}

impl Deflater {
    /// `text` deflated on its own (the compressor is reset first: a piece never refers to
    /// another's bytes), ending with a sync flush.
    #[must_use]
    pub fn piece(&mut self, text: &[u8]) -> bytes::Bytes {
        let z = &mut self.0;
        z.reset();
        let mut out = Vec::with_capacity(text.len() / 2 + 64);
        // A sync flush of at most the input plus its block overhead; loop until all is out.
        loop {
            let before = z.total_in();
            let input = text
                .get(usize::try_from(before).unwrap_or(0)..)
                .unwrap_or_default();
            out.reserve(input.len() + 64);
            if z.compress_vec(input, &mut out, flate2::FlushCompress::Sync)
                .is_err()
            {
                break;
            }
            if z.total_in() as usize >= text.len() && out.ends_with(&[0, 0, 0xff, 0xff]) {
                break;
            }
        }
        // Kept in the backlog: without the headroom reserved for incompressible input.
        out.shrink_to_fit();
        bytes::Bytes::from(out)
    }

    /// [`Deflater::piece`] with this thread's compressor (its state is large: one per thread,
    /// made on first use).
    #[must_use]
    pub fn piece_here(text: &[u8]) -> bytes::Bytes {
        thread_local! {
            static Z: std::cell::RefCell<Deflater> = std::cell::RefCell::new(Deflater::default());
        }
        Z.with(|z| z.borrow_mut().piece(text))
    }
}

/// One piece of an event stream as it goes on the wire: the SSE text, and the same text
/// compressed once for every stream that accepts gzip.
///
/// Each piece is deflated on its own (no back-references to earlier pieces) and ends with a
/// sync flush, so the pieces of any stream, whatever it joined or resumed at, concatenate into
/// one valid deflate stream: a gzip stream is a header, the pieces, and (when the stream ends)
/// an empty final block with the CRC-32 and length of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The SSE text.
    pub text: bytes::Bytes,
    /// `text` deflated on its own, ending with a sync flush.
    pub deflated: bytes::Bytes,
}

impl Frame {
    /// Frames `text`.
    #[must_use]
    pub fn new(text: String) -> Self {
        Self {
            deflated: Deflater::piece_here(text.as_bytes()),
            text: bytes::Bytes::from(text),
        }
    }

    /// The SSE text of an event.
    #[must_use]
    pub fn event(id: Option<u64>, name: &str, data: &str) -> Self {
        Self::new(event_text(id, name, data))
    }

    /// The SSE text of a comment.
    #[must_use]
    pub fn comment(text: &str) -> Self {
        Self::new(format!(": {text}\n\n"))
    }
}

/// The SSE text of an event: its id, name and one-line data.
fn event_text(id: Option<u64>, name: &str, data: &str) -> String {
    let mut t = String::with_capacity(data.len() + 48);
    if let Some(id) = id {
        t.push_str("id: ");
        t.push_str(&id.to_string());
        t.push('\n');
    }
    t.push_str("event: ");
    t.push_str(name);
    t.push_str("\ndata: ");
    t.push_str(data);
    t.push_str("\n\n");
    t
}

/// The data of a removal.
#[derive(Debug, serde::Serialize)]
struct Removed<'a> {
    address: String,
    registered_address: String,
    game: &'a str,
    protocol: &'static str,
}

/// An event's Server-Sent Events text (made on first read, then shared by every stream).
pub fn text(e: &ServerEvent) -> &bytes::Bytes {
    e.text_with(|e| {
        let data = data_of(e.kind, e.record());
        bytes::Bytes::from(event_text(Some(e.id), e.kind.name(), &data))
    })
}

/// An event's text deflated on its own, ending with a sync flush (made on first read; see
/// [`Frame`]).
pub fn deflated(e: &ServerEvent) -> &bytes::Bytes {
    e.compressed_with(|| Deflater::piece_here(text(e)))
}

/// The one-line JSON of an event's `data:` field.
pub fn data(e: &ServerEvent) -> &str {
    let t = std::str::from_utf8(text(e)).unwrap_or_default();
    t.split_once("\ndata: ")
        .map_or("", |(_, d)| d.strip_suffix("\n\n").unwrap_or(d))
}

fn data_of(kind: EventKind, r: &Record) -> String {
    let json = match kind {
        EventKind::Added | EventKind::Changed => {
            serde_json::to_string(&ServerDetail::from_record(r))
        }
        EventKind::Removed => serde_json::to_string(&Removed {
            address: r.shown_addr(),
            registered_address: r.key.addr.to_string(),
            game: &r.key.game,
            protocol: r.face.name(),
        }),
    };
    // These types serialise to strings and maps only; an error cannot happen.
    json.unwrap_or_else(|_| String::from("{}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::events::{Delta, EventHub, EventLimits, Next};
    use muster_core::registry::{
        Face, GameAddr, Registration, Registry, RegistryConfig, ServerKey, Timestamp,
    };
    use muster_proto::limit::SourceKey;
    use std::sync::Arc;

    fn record(port: u16) -> Arc<Record> {
        let addr: std::net::SocketAddr = format!("192.0.2.1:{port}").parse().unwrap();
        let mut r = Registry::new(RegistryConfig::default());
        r.register(
            Registration {
                key: ServerKey::new("ut", GameAddr::Ip(addr)),
                face: Face::GameSpy,
                game_port: None,
                query_addr: Some(addr),
                query_protocol: Some(muster_proto::Protocol::GameSpy1),
                source: SourceKey::of(addr.ip()),
            },
            Timestamp::from_secs(1_700_000_000),
        );
        r.iter_shared().next().cloned().unwrap()
    }

    fn hub(limits: EventLimits) -> EventHub {
        let h = EventHub::numbered_from(limits, 1);
        h.start();
        h
    }

    fn delta(kind: EventKind, port: u16) -> Delta {
        Delta {
            kind,
            record: record(port),
        }
    }

    fn src(last: u8) -> SourceKey {
        SourceKey::of(std::net::IpAddr::from([198, 51, 100, last]))
    }

    #[tokio::test]
    async fn events_are_numbered_and_carry_the_api_shape() {
        let h = hub(EventLimits::default());
        let mut s = h.subscribe(src(1), None).unwrap();
        assert_eq!(
            h.emit(&[delta(EventKind::Added, 1), delta(EventKind::Removed, 2)]),
            2
        );
        let Next::Event(a) = s.next().await else {
            panic!()
        };
        assert_eq!((a.id, a.kind), (1, EventKind::Added));
        let v: serde_json::Value = serde_json::from_str(data(&a)).unwrap();
        assert_eq!(v["address"], "192.0.2.1:1");
        assert!(text(&a).starts_with(b"id: 1\nevent: server_added\ndata: {"));
        let mut inflated = Vec::new();
        let mut z = flate2::Decompress::new(false);
        z.decompress_vec(deflated(&a), &mut inflated, flate2::FlushDecompress::Sync)
            .unwrap();
        inflated.reserve(text(&a).len() * 2);
        z.decompress_vec(
            deflated(&a)
                .get(z.total_in() as usize..)
                .unwrap_or_default(),
            &mut inflated,
            flate2::FlushDecompress::Sync,
        )
        .unwrap();
        assert_eq!(inflated, text(&a)[..], "the compressed text is the text");
        assert!(v["players"].is_array(), "{v}");
        let Next::Event(r) = s.next().await else {
            panic!()
        };
        let v: serde_json::Value = serde_json::from_str(data(&r)).unwrap();
        assert_eq!(
            (r.kind, v["address"].as_str()),
            (EventKind::Removed, Some("192.0.2.1:2"))
        );
        assert_eq!(v["game"], "ut");
    }

    #[test]
    fn frames_concatenate_into_one_gzip_stream() {
        use std::io::Read as _;
        let pieces = [
            Frame::comment("muster events"),
            Frame::event(Some(7), "server_added", r#"{"address":"192.0.2.1:1"}"#),
            Frame::event(Some(8), "server_changed", &"x".repeat(70_000)),
            Frame::comment("keep-alive"),
        ];
        let mut gz = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
        let mut crc = flate2::Crc::new();
        let mut text = Vec::new();
        // Any subset in any order is a valid stream: start from the second piece.
        for p in pieces.iter().skip(1) {
            gz.extend_from_slice(&p.deflated);
            crc.update(&p.text);
            text.extend_from_slice(&p.text);
        }
        gz.extend_from_slice(&[3, 0]);
        gz.extend_from_slice(&crc.sum().to_le_bytes());
        gz.extend_from_slice(&crc.amount().to_le_bytes());
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, text);
        assert!(
            pieces[1]
                .text
                .starts_with(b"id: 7\nevent: server_added\ndata: {")
        );
        assert!(
            pieces[2].deflated.len() < 1000,
            "compressed: {}",
            pieces[2].deflated.len()
        );
    }
}
