//! Conformance of the mgmt face with real peers: **there are none.**
//!
//! No third-party implementation of the Bomberman management server, or of a game server or
//! client that speaks to one, is known (`management-server.md` §11), and none of the peers in
//! `docs/peers.md` (qstat, gamedig, opengsq, teeworlds-server, DDNet-Server) knows the
//! protocol. So this module deliberately holds no tests: a test here could only talk to our
//! own code, which would be a fake conformance test.
//!
//! What covers conformance instead, all in `tests/integration/face_mgmt.rs` over real
//! loopback TCP:
//!
//! - the seed's own examples, byte for byte as printed in the German specification
//!   (pretty-printed JSON, §9): the three registrations, the update, the unregister and the
//!   query are accepted by the face; the three answer examples (with string player counts)
//!   are read by Muster's client and discarded by the face; the §9 round trip;
//! - the byte-exact frames of §8 and the framing examples of §2;
//! - every malformed and edge input of §10 (F1–F10, A1–A7, M1–M14, OK1–OK3, R1–R26, U1–U14,
//!   N1–N4, L1–L8), each also proving that a well-behaved game server on another connection
//!   is still listed correctly.
//!
//! The manual check of §11 (`exec 3<>/dev/tcp/127.0.0.1/51963`) exercises the same bytes as
//! `empty_answer_is_byte_exact`.
