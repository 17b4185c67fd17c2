//! Conformance of the gameagent responder with real client peers: there are none to run.
//!
//! No third-party query tool speaks GameAgent (`docs/protocols/peers.md` §8 lists none, spec §10): qstat's `-sms`,
//! gamedig's `serioussam`/`sstse` and opengsq's `ssc` all speak GameSpy v1 to the same query
//! port, which a Serious Engine server answers only in legacy mode; the GameSpy v1 responder's
//! conformance tests cover those peers. The only GameAgent peers are the Serious Engine 1.10
//! game and dedicated server themselves, which are not installed by `scripts/install-peers.sh`.
//!
//! What covers the GameAgent responder instead:
//! * byte-exact tests against the spec's vectors (G10, G11, G15–G19) and the quirks (name marks
//!   `11`/`12`, trailing request bytes, bots and spectators, `01` routing) in
//!   `muster_proto::gameagent::respond`;
//! * the round trips in `tests/integration/roundtrip_gameagent.rs`: Muster's own `gameagent`
//!   query reads the served responder back, including multi-datagram and reordered replies.
//!
//! This module deliberately holds no tests: a test that queries our responder with our own
//! decoder would only repeat the round trip under a conformance name.
