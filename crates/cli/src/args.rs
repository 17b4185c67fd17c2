//! The command line's shape: the commands, their global flags and the exit codes their
//! `--help` explains.

use clap::{Parser, Subcommand};

use crate::{browse, emulate, exporter, generate, list, query, scan, serve, watch};

/// How addresses are read, for the commands that take game addresses.
macro_rules! addresses_help {
    () => {
        "Addresses are game addresses, what a player connects to: host:port, a.b.c.d:port or
[v6]:port. Each protocol's convention gives the query port (game port + 1 for gameagent,
gamespy1 and unreal2; the game port itself for teeworlds, quake3 (default port 27960) and a2s
(default 27015)) unless --given-port-only is set:
then the port given is queried and the game port is read from the answer (GameSpy hostport,
the UE2 reply's port) where it says one. Results show the game address, with the query
address beside it where it differs, and a host name as given, with the address it resolved
to beside it."
    };
}

const MAIN_HELP: &str = "\
Exit codes (each command's --help says what they mean for it):
  0  done; every server and master asked answered
  1  a server or master did not answer; the rest were printed
  2  bad command line or input
  3  Muster itself failed (no socket, output not writable)

A reader that stops reading (`muster … | head`) ends the command quietly, with exit code 0.";

const QUERY_HELP: &str = concat!(
    "\
Exit codes:
  0  every server answered
  1  at least one server did not answer (timeout or error); the others were printed
  2  bad command line or input: unknown protocol, unparseable or ambiguous address (write
     IPv6 with brackets: [::1]:8303), no host resolved
  3  Muster itself failed (no socket, output not writable)

",
    addresses_help!()
);

const LIST_HELP: &str = "\
Exit codes:
  0  the master answered (also with an empty list)
  1  the master, or the list URL, did not answer or sent no list
  2  bad command line or input: unknown protocol, unparseable address, no host resolved, no
     --game for a GameSpy list, a list file that is missing or not a list
  3  Muster itself failed (no socket, output not writable)

Each row is the address a player connects to, with the query address beside it. GameSpy
lists carry only query addresses (marked \"(query)\"); `muster scan` reads each server's game
port from its answer.

Quake III / DarkPlaces masters (dpmaster, -p quake3, port 27950): without --game Muster asks
`getservers <N> empty full` (IPv4 servers of the games that send no name: Quake III Arena,
OpenArena, RtCW, ET); with --game NAME (Quake3Arena, Xonotic, q3urt43, …) it asks
`getserversExt NAME <N> empty full`, which lists IPv6 servers too. N is --protocol-version
(default 68). The list comes in several datagrams until the master's EOT mark.

Valve masters (-p valve, port 27010): the list comes a page per request, each asked after the
previous page's last address, one every 2 s (the masters answer about 30 requests a minute).
--game NAME asks for \\gamedir\\NAME, --master-filter adds conditions. --resume FILE keeps the
place in FILE after every page; a later run with the same FILE and filter goes on after the
last address read (a file of another query is refused, a complete list starts over), and
--max-pages N stops a run after N pages. With --steam-key KEY (or MUSTER_STEAM_KEY) the list
comes instead from Steam's Web API (IGameServersService/GetServerList, same filter, at most
--limit servers, base URL --steam-api) in one reply, with names, maps and players; the key is
never printed.";

const SCAN_HELP: &str = concat!(
    "\
Exit codes:
  0  every master and every server answered
  1  at least one master or server did not answer (timeout or error), or a --servers line
     was unusable; the rest were printed
  2  bad command line or input: nothing to scan, a bad --master, --filter or --sort,
     unknown protocol, unparseable or ambiguous address, a missing or empty --servers file
  3  Muster itself failed (no socket, output not writable)

",
    addresses_help!()
);

/// Muster: find game servers and ask them who is playing.
#[derive(Debug, Parser)]
#[command(name = "muster", version, about, after_help = MAIN_HELP)]
pub(crate) struct Cli {
    /// More log output on stderr (-v: every crate's info, -vv: debug, -vvv: trace); RUST_LOG
    /// overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,
    /// Less output on stderr (-q: warnings and errors only, no summary; -qq: errors only).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: u8,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Ask game servers for their status, players and rules.
    #[command(after_help = QUERY_HELP)]
    Query(query::QueryArgs),
    /// Fetch a master server's list of game servers.
    #[command(after_help = LIST_HELP)]
    List(list::ListArgs),
    /// List servers from masters and/or a file, then query every one of them.
    #[command(after_help = SCAN_HELP)]
    Scan(scan::ScanArgs),
    /// Run emulated game servers (one, from flags, or a farm from a TOML file).
    Emulate(emulate::EmulateArgs),
    /// Run the master daemon: every master protocol behind one persistent registry.
    Serve(serve::ServeArgs),
    /// Poll servers at an interval and report what changes: servers up and down, players,
    /// friends, maps, names, full servers.
    Watch(watch::WatchArgs),
    /// Serve Prometheus probes (GET /probe?target=…&protocol=…, or ?master=…): each scrape
    /// asks the game server, or a master's whole list, once.
    Exporter(exporter::ExporterArgs),
    /// Browse game servers: the chosen games' masters, every listed server queried from this
    /// machine, in a live table.
    #[command(after_help = browse::HELP)]
    Browse(browse::BrowseArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell) to stdout.
    Completions(generate::CompletionsArgs),
    /// Print the manual page (roff), or write one per command into a directory.
    Man(generate::ManArgs),
}
