//! `muster-bench`: measured comparisons.
//!
//! * `muster-bench scan`: starts a loopback farm of GameSpy v1 (or, with `--protocol quake3` or
//!   `a2s`, Quake III or A2S) servers with the release `muster` binary (`muster emulate`), then
//!   times Muster, qstat and GameDig on it, one after another, and Muster's datagrams per second
//!   against the loopback limit of this machine.
//! * `muster-bench master`: runs the master in a child process and measures registrations, list
//!   requests served per second, the API under load and memory per registered server.
//! * `muster-bench events`: the master's live event streams while its servers change.
//! * `muster-bench quake3`: Muster's Quake III master face and dpmaster side by side:
//!   registrations, lists and memory per server.
//! * `muster-bench valve`: Muster's Half-Life / Xash3D master face and xash3d-master side by
//!   side, the same way.
//!
//! This is a bench, not a test: missing peers are reported and skipped. Every child process
//! and every wait is bounded.
// A bench's whole job is to print tables.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use clap::{Parser, Subcommand};

/// The allocator the `muster` binary ships with, so that the master child's memory and CPU
/// are those of `muster serve`; the master child also counts the bytes its Rust code holds
/// ([`muster_alloc::Counting::live`]), which tells live data per server from what the
/// allocator keeps around it.
#[global_allocator]
static ALLOCATOR: muster_alloc::Counting = muster_alloc::Counting::new();

mod browse;
mod loopback;
mod master;
mod procs;
mod quake3;
mod scan;
mod side;
mod table;
mod valve;

/// Benchmarks comparing Muster with qstat and GameDig, and measuring the master.
#[derive(Debug, Parser)]
#[command(name = "muster-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Time Muster, qstat and GameDig on one farm of emulated GameSpy v1, Quake III or A2S
    /// servers.
    Scan(scan::ScanArgs),
    /// Measure the master: registrations, list requests per second, API latency under load,
    /// memory per server; optionally side by side with DDNet's mastersrv + nginx.
    Master(master::MasterArgs),
    /// Measure the master's live events: event streams while servers change, the latency
    /// from a change to its event, and what a browser page downloads.
    Events(master::EventsArgs),
    /// Muster's Quake III face and dpmaster side by side: registrations/s, getservers and
    /// getserversExt lists/s, memory per server.
    Quake3(quake3::Quake3Args),
    /// Muster's Half-Life / Xash3D face and xash3d-master side by side: registrations/s,
    /// lists/s, memory per server.
    Valve(valve::ValveArgs),
    /// `muster browse --tui` in tmux: time to a full first screen, ping against `muster
    /// query`, memory with 20,000 servers listed.
    Browse(browse::BrowseArgs),
    /// The master under test, driven by `master` over stdin/stdout (internal).
    #[command(hide = true)]
    MasterChild(master::ChildArgs),
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Scan(args) => scan::run(&args),
        Command::Master(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(master::run(&args))
        }
        Command::Events(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(master::run_events(&args))
        }
        Command::Quake3(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(quake3::run(&args))
        }
        Command::Valve(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(valve::run(&args))
        }
        Command::Browse(args) => browse::run(&args),
        Command::MasterChild(args) => master::run_child(&args),
    }
}
