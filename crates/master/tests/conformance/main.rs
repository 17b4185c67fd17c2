//! Conformance of the master's faces with real third-party peers: game servers registering
//! (teeworlds-server 0.7.5 over UDP, DDNet-Server 16.4 over HTTP), clients listing (qstat
//! `-gsm`, `-teem`), DDNet's own master (mastersrv) answering the same requests, and
//! 333networks' Perl master syncing with Muster both ways. Peer
//! discovery and the skip-or-fail rule are `muster_testkit`'s.

mod ddnet_parity;
mod gameagent;
mod gamespy;
mod mgmt;
mod perl_master;
mod teeworlds;
