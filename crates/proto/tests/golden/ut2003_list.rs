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

/// Seed 002's reader counts the list's lines; Muster reports the invalid ones: the count, their
/// line numbers, and the list marked partial.
#[test]
fn invalid_lines_are_counted_and_reported() {
    let list = ListFile::decode(&fixture("ut2003_list/spec-3-test-vector.txt")).unwrap();
    assert_eq!(
        list.summary(),
        "4 servers, 5 invalid lines (6, 7, 8, 9, 11), 1 duplicate"
    );
    let servers = list.to_server_list();
    assert_eq!(servers.servers.len(), 4);
    assert_eq!(
        servers.partial.map(|p| p.reason).as_deref(),
        Some("4 servers, 5 invalid lines (6, 7, 8, 9, 11), 1 duplicate")
    );
    // More invalid lines than are kept: the count stays exact, `…` marks the rest.
    let body: String = (0..25).map(|i| format!("bad line {i}\n")).collect();
    let list = ListFile::decode(body.as_bytes()).unwrap();
    assert_eq!(
        list.summary(),
        "0 servers, 25 invalid lines (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, …)"
    );
    // A clean list is not partial.
    let clean = ListFile::decode(&fixture("ut2003_list/spec-2-muster-written.txt")).unwrap();
    assert_eq!(clean.summary(), "4 servers");
    assert_eq!(clean.to_server_list().partial, None);
}
