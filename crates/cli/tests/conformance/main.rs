//! `muster` against real third-party peers: real game servers queried and listed, results
//! compared with qstat, masters read. Peer discovery and the skip-or-fail rule are `muster_testkit`'s.

mod a2s;
mod common;
mod exporter;
mod list;
mod mastersrv;
mod quake3;
mod query;
mod valve;
