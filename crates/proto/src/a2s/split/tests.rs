use super::*;
use crate::a2s::Packet;
use proptest::prelude::*;
use std::io::Write as _;

const SIZED: Layout = Layout::Source { size_field: true };
const OLD: Layout = Layout::Source { size_field: false };

fn rules_message(pairs: usize) -> Vec<u8> {
    let mut m = b"\xff\xff\xff\xffE".to_vec();
    m.extend_from_slice(&u16::try_from(pairs).unwrap().to_le_bytes());
    for k in 0..pairs {
        m.extend_from_slice(format!("sv_rule_number_{k:04}\0value {k}\0").as_bytes());
    }
    m
}

fn bz2(data: &[u8]) -> Vec<u8> {
    let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Size, CRC32 and bzip2 stream, as part 0 onwards of a compressed reply carry them.
fn compressed_body(message: &[u8], declared: u32, crc: u32) -> Vec<u8> {
    let mut body = declared.to_le_bytes().to_vec();
    body.extend_from_slice(&crc.to_le_bytes());
    body.extend_from_slice(&bz2(message));
    body
}

fn feed(r: &mut Reassembler, parts: &[Vec<u8>]) -> Vec<Result<Option<Vec<u8>>, DecodeError>> {
    let now = Instant::now();
    parts.iter().map(|p| r.push(now, p)).collect()
}

fn reassembled(parts: &[Vec<u8>]) -> Result<Option<Vec<u8>>, DecodeError> {
    let mut r = Reassembler::new(Duration::from_secs(1));
    let mut last = Ok(None);
    for out in feed(&mut r, parts) {
        match out {
            Ok(Some(reply)) => return Ok(Some(reply)),
            other => last = other,
        }
    }
    last
}

#[test]
fn a2s_split_rules_larger_than_one_datagram_in_any_order_with_duplicates() {
    let message = rules_message(300);
    assert!(message.len() > 3 * 1248);
    let mut parts = encode_parts(SIZED, 0x0000_1234, &message, 1248);
    let n = parts.len();
    assert!(n >= 4);
    parts.reverse();
    // Duplicates of a middle part and of the last part to come, before it completes.
    let dup = parts[1].clone();
    parts.insert(2, dup);
    let again = parts[0].clone();
    parts.insert(1, again);
    let mut r = Reassembler::new(Duration::from_secs(1));
    let outs = feed(&mut r, &parts);
    let done: Vec<_> = outs.iter().filter(|o| matches!(o, Ok(Some(_)))).collect();
    assert_eq!(done.len(), 1, "exactly one reply: {outs:?}");
    assert!(outs.iter().all(Result::is_ok));
    assert_eq!(outs.last(), Some(&Ok(Some(message.clone()))));
    let Ok(Packet::Rules(rules)) = Packet::decode(&message) else {
        panic!("not rules");
    };
    assert_eq!(rules.rules.len(), 300);
    assert_eq!(r.in_flight(), 0);
    // A late copy of a part of the finished reply starts nothing.
    assert_eq!(r.push(Instant::now(), &parts[0]), Ok(None));
    assert_eq!(r.in_flight(), 0);
}

#[test]
fn a2s_split_without_size_field_for_old_engines() {
    let message = rules_message(120);
    let parts = encode_parts(OLD, 7, &message, 1400);
    assert_eq!(parts[0][8..12], [parts.len() as u8, 0, 0xFF, 0xFF]);
    assert_eq!(reassembled(&parts), Ok(Some(message)));
}

#[test]
fn a2s_goldsrc_split_carrying_a_source_info() {
    let mut info = b"\xff\xff\xff\xffI\x30".to_vec();
    info.extend_from_slice(&[b'x'; 1500]);
    info.extend_from_slice(b"\0map\0valve\0Half-Life\0\x46\x00\x01\x20\x00dl\x00\x011.1.2.2\0");
    let parts = encode_parts(Layout::GoldSrc, 99, &info, 1000);
    assert_eq!(parts.len(), 2);
    // Number in the high nibble, total in the low one.
    assert_eq!(parts[0][8], 0x02);
    assert_eq!(parts[1][8], 0x12);
    let Ok(Some(reply)) = reassembled(&[parts[1].clone(), parts[0].clone()]) else {
        panic!("not reassembled");
    };
    let Ok(Packet::Info(i)) = Packet::decode(&reply) else {
        panic!("not a Source INFO");
    };
    assert_eq!(i.name.len(), 1500);
    assert_eq!(i.app_id, 70);
    assert_eq!(i.version, b"1.1.2.2");
}

#[test]
fn a2s_split_bzip2_reply_is_inflated_and_checked() {
    let message = rules_message(400);
    let body = compressed_body(
        &message,
        u32::try_from(message.len()).unwrap(),
        crc32fast::hash(&message),
    );
    for layout in [SIZED, OLD] {
        let mut parts = encode_parts(layout, COMPRESSED_BIT | 5, &body, 300);
        assert!(parts.len() >= 2, "compressed body spans parts");
        parts.rotate_left(1);
        assert_eq!(reassembled(&parts), Ok(Some(message.clone())), "{layout:?}");
    }
    // A wrong CRC32 refuses the reply.
    let bad = compressed_body(&message, u32::try_from(message.len()).unwrap(), 1);
    let parts = encode_parts(SIZED, COMPRESSED_BIT | 6, &bad, 300);
    assert_eq!(
        reassembled(&parts),
        Err(DecodeError::Invalid("bzip2 crc32"))
    );
}

#[test]
fn a2s_split_bzip2_bomb_is_refused_not_inflated() {
    // 64 MiB of zeros compress to a few dozen bytes.
    let zeros = vec![0u8; 64 << 20];
    let stream = bz2(&zeros);
    assert!(stream.len() < 1000);
    // Declared small: inflation stops one byte past the declared size.
    let mut body = 1000u32.to_le_bytes().to_vec();
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&stream);
    let parts = encode_parts(SIZED, COMPRESSED_BIT | 8, &body, 1248);
    assert_eq!(
        reassembled(&parts),
        Err(DecodeError::Invalid("bzip2 size disagrees"))
    );
    // Declared as it is: refused before inflating anything.
    let mut body = (64u32 << 20).to_le_bytes().to_vec();
    body.extend_from_slice(&crc32fast::hash(&zeros).to_le_bytes());
    body.extend_from_slice(&stream);
    let parts = encode_parts(SIZED, COMPRESSED_BIT | 9, &body, 1248);
    assert_eq!(
        reassembled(&parts),
        Err(DecodeError::TooLarge("bzip2 decompressed size"))
    );
}

#[test]
fn a2s_split_compressed_flag_on_a_plain_reply_is_ignored() {
    let message = rules_message(80);
    let parts = encode_parts(SIZED, COMPRESSED_BIT | 10, &message, 1248);
    assert_eq!(reassembled(&parts), Ok(Some(message)));
}

fn with_header(id: u32, header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut d = SPLIT_HEADER.to_vec();
    d.extend_from_slice(&id.to_le_bytes());
    d.extend_from_slice(header);
    d.extend_from_slice(payload);
    d
}

#[test]
fn a2s_split_total_zero_or_255_is_refused() {
    let part0 = with_header(1, &[0, 0, 0xE0, 0x04], b"\xff\xff\xff\xffE\0\0");
    assert_eq!(
        reassembled(&[part0]),
        Err(DecodeError::Invalid("split total 0"))
    );
    let part0 = with_header(2, &[255, 0, 0xE0, 0x04], b"\xff\xff\xff\xffE\0\0");
    assert_eq!(
        reassembled(&[part0]),
        Err(DecodeError::TooLarge("split total"))
    );
    // GoldSrc with a total nibble of 0.
    let part0 = with_header(3, &[0x00], b"\xff\xff\xff\xffE\0\0");
    assert_eq!(
        reassembled(&[part0]),
        Err(DecodeError::Invalid("split total 0"))
    );
}

#[test]
fn a2s_split_parts_that_disagree_are_dropped_and_the_reply_goes_on() {
    let message = rules_message(60);
    let parts = encode_parts(SIZED, 11, &message, 1248);
    assert_eq!(parts.len(), 2);
    let mut r = Reassembler::new(Duration::from_secs(1));
    let now = Instant::now();
    assert_eq!(r.push(now, &parts[0]), Ok(None));
    // Same number 1, but another split size.
    let mut odd = parts[1].clone();
    odd[10] = 0xD0;
    assert_eq!(
        r.push(now, &odd),
        Err(DecodeError::Invalid("split sizes disagree"))
    );
    // Another total.
    let mut odd = parts[1].clone();
    odd[8] = 3;
    assert_eq!(
        r.push(now, &odd),
        Err(DecodeError::Invalid("split totals disagree"))
    );
    assert_eq!(r.push(now, &parts[1]), Ok(Some(message.clone())));
    // A reply whose parts carry more than their split size says.
    let mut small = encode_parts(SIZED, 12, &message, 1248);
    for p in &mut small {
        p[10..12].copy_from_slice(&1000u16.to_le_bytes());
    }
    assert_eq!(
        r.push(now, &small[0]),
        Err(DecodeError::Invalid("split part larger than its size"))
    );
    assert_eq!(r.push(now, &small[1]), Ok(None));
}

#[test]
fn a2s_split_in_flight_limit_and_expiry() {
    let t0 = Instant::now();
    let mut r = Reassembler::new(Duration::from_millis(500));
    let message = rules_message(60);
    for id in 0..u32::try_from(MAX_IN_FLIGHT).unwrap() {
        let parts = encode_parts(SIZED, 100 + id, &message, 1248);
        assert_eq!(r.push(t0, &parts[1]), Ok(None));
    }
    let parts = encode_parts(SIZED, 999, &message, 1248);
    assert_eq!(
        r.push(t0, &parts[0]),
        Err(DecodeError::TooLarge("split replies in flight"))
    );
    assert_eq!(r.deadline(), Some(t0 + Duration::from_millis(500)));
    assert!(r.expire(t0 + Duration::from_millis(499)).is_empty());
    // Part 0 of one reply came: its total is known when it expires.
    let one = encode_parts(SIZED, 100, &message, 1248);
    let _ = r.push(t0, &one[0]);
    let gone = r.expire(t0 + Duration::from_millis(500));
    assert_eq!(gone.len(), MAX_IN_FLIGHT - 1);
    assert!(gone.iter().all(|e| e.received == 1 && e.total.is_none()));
    assert_eq!(r.in_flight(), 0);
    // Room again.
    assert_eq!(r.push(t0, &parts[0]), Ok(None));
    let late = r.expire(t0 + Duration::from_secs(2));
    assert_eq!(
        late,
        vec![Expired {
            id: 999,
            received: 1,
            total: Some(2)
        }]
    );
}

#[test]
fn a2s_split_garbage_is_an_error_not_a_panic() {
    let mut r = Reassembler::new(Duration::from_secs(1));
    let now = Instant::now();
    assert_eq!(
        r.push(now, b"\xff\xff\xff\xffI"),
        Err(DecodeError::BadMagic("split header"))
    );
    assert_eq!(
        r.push(now, b"\xfe\xff\xff\xff\x01\x00"),
        Err(DecodeError::Truncated("split id"))
    );
    assert_eq!(
        r.push(now, b"\xfe\xff\xff\xff\x01\x00\x00\x00"),
        Err(DecodeError::Truncated("split part header"))
    );
}

proptest! {
    #[test]
    fn a2s_split_round_trips_in_any_order(pairs in 1usize..400, part_len in 200usize..1400,
                                          layout in prop_oneof![Just(SIZED), Just(OLD), Just(Layout::GoldSrc)],
                                          keys in proptest::collection::vec(any::<u32>(), 256),
                                          dup in any::<prop::sample::Index>()) {
        let message = rules_message(pairs);
        let parts = encode_parts(layout, 42, &message, part_len);
        prop_assume!(!parts.is_empty());
        let mut order: Vec<(u32, Vec<u8>)> =
            parts.iter().cloned().enumerate().map(|(i, p)| (keys[i], p)).collect();
        order.sort_by_key(|(k, _)| *k);
        let mut shuffled: Vec<Vec<u8>> = order.into_iter().map(|(_, p)| p).collect();
        let d = shuffled[dup.index(shuffled.len())].clone();
        shuffled.insert(0, d);
        prop_assert_eq!(reassembled(&shuffled), Ok(Some(message)));
    }

    #[test]
    fn a2s_split_arbitrary_parts_never_panic(parts in proptest::collection::vec(
            (0u32..4, proptest::collection::vec(any::<u8>(), 0..40)), 0..30)) {
        let mut r = Reassembler::new(Duration::from_secs(1));
        let now = Instant::now();
        for (id, body) in parts {
            let d = with_header(id | if id == 3 { COMPRESSED_BIT } else { 0 }, &[], &body);
            if let Ok(Some(reply)) = r.push(now, &d) {
                prop_assert!(reply.starts_with(&SIMPLE_HEADER));
            }
        }
        prop_assert!(r.in_flight() <= MAX_IN_FLIGHT);
    }
}
