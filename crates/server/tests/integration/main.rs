//! Loopback tests of the responder driver, and round trips: Muster's own query engine reads
//! every emulated protocol served by Muster's responders with nothing lost.

mod counted;
mod mgmt;
mod udp;

mod ddnet_http;
mod library_api;

mod roundtrip_gameagent;
mod roundtrip_gamespy1;
mod roundtrip_quake3;
mod roundtrip_teeworlds;
mod roundtrip_unreal2;

mod seeds;
