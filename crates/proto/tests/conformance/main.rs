//! Conformance tests against real third-party peers (qstat, gamedig, opengsq, teeworlds-server, ddnet-server).
//!
//! The peers are installed by `scripts/install-peers.sh` (Debian packages on the system, gamedig and opengsq under
//! `<repo>/.peers/`). How a test decides between skipping and failing when a peer is missing is documented in
//! `muster_testkit`: with `MUSTER_REQUIRE_PEERS=1` (set by `.ci/run`) a missing peer FAILS the test; without it the test
//! prints a `SKIP` line on stderr and passes.
//!
//! All traffic stays on 127.0.0.1; every game server is started with registration off, bound to 127.0.0.1 on a
//! non-default port, in a scratch folder with `HOME` inside it, and killed by PID when its guard drops.
//!
//! | module | what it checks |
//! |---|---|
//! | [`requests`] | the exact request bytes (and port offset) of every client peer, against the specs |
//! | [`game_servers`] | teeworlds-server 0.7.5 and DDNet-Server 16.4 start, answer on loopback and stop |
//! | [`canned_replies`] | client peers read hand-written or captured replies served by the test |
//! | [`valve_master`] | the Valve master codecs against FWGS's xash3d-master (registration, list pages, key echo, filters) |

use muster_testkit as harness;

mod canned_replies;
mod game_servers;
mod requests;
mod valve_master;
