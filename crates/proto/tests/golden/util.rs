//! Helpers shared by the golden tests.

use std::path::PathBuf;

/// The path of a fixture under `crates/proto/tests/fixtures/`.
#[allow(dead_code)]
pub(crate) fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// The bytes of a fixture under `crates/proto/tests/fixtures/`.
#[allow(dead_code)]
pub(crate) fn fixture(rel: &str) -> Vec<u8> {
    let path = fixture_path(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Bytes from a hex string that may contain spaces and newlines.
#[allow(dead_code)]
pub(crate) fn unhex(s: &str) -> Vec<u8> {
    let clean: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    hex::decode(clean).expect("valid hex")
}
