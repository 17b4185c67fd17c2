//! Conformance of the gameagent face with real peers: **there are none on this machine.**
//!
//! No general-purpose tool speaks the GameAgent master protocol: qstat's `-sms`, gamedig's
//! `serioussam`/`sstse` and opengsq's `ssc` all speak GameSpy v1 to a Serious Sam server's
//! query port (legacy mode) and none of them lists a GameAgent master (`gameagent.md` §10,
//! `peers.md` §8). The only real peers are the original programs: Croteam's reference master
//! (`GameAgent/main.py`, Python 2) and Serious Engine 1.10 builds or the Classics Patch with
//! `ga_bMSLegacy = 0`; none of them is installed here, and the testkit has no peer for them.
//! So this module deliberately holds no tests: a test here could only talk to our own code,
//! which would be a fake conformance test.
//!
//! What covers the face instead:
//!
//! - `muster-proto`'s golden tests (`tests/golden/gameagent.rs`): the reference master's
//!   measured bytes (the two-server `s` reply, the challenges `01 dc de 45 6f`, the stock
//!   heartbeat answer) decode and re-encode byte for byte, and the list splitting of §2.3;
//! - the pure `GameAgentMaster`'s unit tests on explicit timestamps: every rule of §8.3
//!   (source-port rule, port hop, re-verification, expiry, caps, buckets, egress budget);
//! - `tests/integration/face_gameagent.rs`, over real loopback sockets: a server driven by
//!   `GameAgentRegistrar` (the stock registration sequence: `q`, challenge answer, periodic
//!   heartbeats) is verified and listed by `e` as read by `MasterListQuery` through
//!   `muster_query::spawn`, and by the HTTP API; port hop; flood and garbage with the
//!   amplification ratio measured; expiry; IPv6 `e`; per-product listeners; restart.
//!
//! When a stock server or the reference master becomes available as a testkit peer, the tests
//! to add here are: a stock dedicated server registering with the face (and showing the
//! port-hop bug of the ptitSeb build, §7 item 6), and a stock client enumerating it.
