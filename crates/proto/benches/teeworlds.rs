//! Decode and reassemble DDNet's 64-player extended reply (`iext` + one `iex+`, captured from
//! DDNet-Server 16.4), and build + encode it again.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use muster_proto::teeworlds::info::ExtendedReassembly;
use muster_proto::teeworlds::{Datagram, Message};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/teeworlds/serverinfo/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn reassemble(main: &[u8], more: &[u8]) -> ExtendedReassembly {
    let mut ra = ExtendedReassembly::new();
    for d in [more, main] {
        match Datagram::decode(d) {
            Ok(Datagram::Connless(_, Message::InfoExtended(m))) => {
                ra.insert_main(m);
            }
            Ok(Datagram::Connless(_, Message::InfoMore(m))) => {
                ra.insert_more(m);
            }
            other => panic!("{other:?}"),
        }
    }
    ra
}

fn bench(c: &mut Criterion) {
    let main = fixture("ddnet-16.4-xe-p64-reply-main.bin");
    let more = fixture("ddnet-16.4-xe-p64-reply-more1.bin");
    assert!(reassemble(&main, &more).is_complete());

    c.bench_function("teeworlds/decode_reassemble_p64_extended", |b| {
        b.iter(|| {
            let ra = reassemble(black_box(&main), black_box(&more));
            black_box(ra.answer())
        });
    });

    c.bench_function("teeworlds/decode_p64_extended_main_only", |b| {
        b.iter(|| black_box(Datagram::decode(black_box(&main))));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
