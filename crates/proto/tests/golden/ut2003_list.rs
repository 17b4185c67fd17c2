//! Golden tests for ut2003_list: the spec §3 test vector reads to the expected entries and
//! counts, and writes back to exactly the 87-byte example of §2.

use muster_proto::ut2003_list::ListFile;

use crate::util::fixture;

#[test]
fn spec_test_vector_reads_and_writes_back() {
    let body = fixture("ut2003_list/spec-3-test-vector.txt");
    assert_eq!(body.len(), 244);
    let list = ListFile::decode(&body).unwrap();
    assert_eq!(list.entries.len(), 4);
    assert_eq!(
        (list.invalid, list.duplicates, list.blank, list.comments),
        (5, 1, 1, 1)
    );
    let mut out = Vec::new();
    list.encode(&mut out);
    assert_eq!(out, fixture("ut2003_list/spec-2-muster-written.txt"));
    let invalid: Vec<(usize, &str)> = list
        .invalid_lines
        .iter()
        .map(|l| (l.line, l.text.plain.as_str()))
        .collect();
    insta::assert_debug_snapshot!(
        "ut2003_spec_test_vector",
        (
            &list.entries,
            list.duplicates,
            list.blank,
            list.comments,
            invalid
        )
    );
}

#[test]
fn written_example_round_trips() {
    let body = fixture("ut2003_list/spec-2-muster-written.txt");
    let list = ListFile::decode(&body).unwrap();
    assert_eq!(list, ListFile::from_entries(list.entries.clone()));
    let mut out = Vec::new();
    list.encode(&mut out);
    assert_eq!(out, body);
    insta::assert_debug_snapshot!("ut2003_written_server_list", list.to_server_list());
}
