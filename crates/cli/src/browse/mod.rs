//! `muster browse`: the server browser a player runs. The masters of the chosen games are
//! asked for their lists (`directory`), every listed server is queried from the player's
//! machine and what is on screen is queried again and again (`engine`), into a pure state
//! machine (`model`) that the terminal shows (`tui`); the player's favourites, friends,
//! recent servers and last filters live in a profile (`profile`).

mod directory;
mod engine;
mod join;
mod model;
mod profile;
mod tui;
mod web;
mod width;

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use crate::exit;
use crate::protocols::ProtocolArg;
use crate::query::UsageError;
use crate::scan;
use crate::timing::{TimingArgs, duration};

/// What `muster browse --help` says after the flags.
pub(crate) const HELP: &str = "\
Exit codes:
  0  quit with q (page mode: Ctrl-C or SIGTERM)
  2  bad command line: an unknown --game, a bad --master, a GameSpy --master with no game to
     ask for, an unreadable --servers file, --tui without a terminal
  3  Muster itself failed (no terminal control, no socket)

Page mode (--web, the default without a terminal) prints the page's address, with a token
that lets the page set favourites; only that page (and loopback) is answered.

Keys: / search, s sort, r reverse, f favourite, F favourites only, e hide empty, u hide full,
g choose games, Enter players and rules (p: friend), c join link or command, q quit.
The profile (favourites, friends, recent servers, last filters) is kept in
$XDG_STATE_HOME/muster (else ~/.local/state/muster) unless --profile says another directory.";

/// Flags of `muster browse`.
#[derive(Debug, clap::Args)]
pub(crate) struct BrowseArgs {
    /// A game to browse, by key (repeatable; `--list-games` prints them). Default: every game
    /// with a public master, unless --master is given.
    #[arg(long = "game", short = 'g', value_name = "NAME")]
    pub games: Vec<String>,
    /// Print the games and their public masters, and exit.
    #[arg(long)]
    pub list_games: bool,
    /// A master to ask, as KIND:ADDR (the kinds of `muster scan --master`). It replaces the
    /// chosen games' public masters of the same kind, or is added; given without --game,
    /// only the given masters are browsed. Repeatable.
    #[arg(long = "master", value_name = "KIND:ADDR")]
    pub masters: Vec<String>,
    /// A file of servers to add, one per line: `host:port` or `PROTOCOL host:port`.
    #[arg(long, value_name = "FILE")]
    pub servers: Option<PathBuf>,
    /// A friend's player name, shown wherever they play (repeatable; kept in the profile).
    #[arg(long = "friend", value_name = "NAME")]
    pub friends: Vec<String>,
    /// The profile directory (favourites, friends, recent servers, last filters). Default:
    /// $XDG_STATE_HOME/muster, else ~/.local/state/muster.
    #[arg(long, value_name = "DIR")]
    pub profile: Option<PathBuf>,
    /// Terminal mode: the live table (the default on a terminal).
    #[arg(long, conflicts_with = "web")]
    pub tui: bool,
    /// Page mode: serve the browser page on --listen and print its address (the default
    /// without a terminal).
    #[arg(long)]
    pub web: bool,
    /// Where page mode listens. Loopback by default; the port is chosen when 0.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
    /// How often the servers on screen are queried again.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration)]
    pub refresh: Duration,
    /// How often the masters are asked again (and every listed server queried).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
    pub relist: Duration,
    #[command(flatten)]
    pub timing: TimingArgs,
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(crate) async fn run(args: BrowseArgs) -> anyhow::Result<u8> {
    if args.list_games {
        let mut out = crate::stdout::stdout();
        out.write_all(directory::list_games().as_bytes())?;
        out.flush()?;
        return Ok(exit::OK);
    }
    let masters = args
        .masters
        .iter()
        .map(|m| scan::parse_master(m))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // A --servers file alone is browsed alone: the directory is for when nothing is given.
    let asks = if args.games.is_empty() && args.masters.is_empty() && args.servers.is_some() {
        Vec::new()
    } else {
        directory::plan(&args.games, &masters).map_err(|e| UsageError(e.to_string()))?
    };
    let mut fixed = Vec::new();
    let mut notes = Vec::new();
    if let Some(path) = &args.servers {
        let mut index = 0;
        let (targets, errors) = scan::file_targets(path, ProtocolArg::Auto, &mut index).await?;
        fixed.extend(targets.into_iter().map(|(t, _)| t));
        notes.extend(errors);
    }
    let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    let web = args.web || (!args.tui && !terminal);
    if !web && !terminal {
        return Err(UsageError(
            "muster browse --tui needs a terminal: run it in one, or use --web".into(),
        )
        .into());
    }
    let dir = args.profile.clone().or_else(|| {
        profile::default_dir(
            std::env::var("XDG_STATE_HOME").ok().as_deref(),
            std::env::var("HOME").ok().as_deref(),
        )
    });
    let (mut prof, note) = match &dir {
        Some(d) => profile::load(d, unix_secs()),
        None => (
            profile::Profile::default(),
            Some("no profile directory (set HOME or --profile): nothing is kept".into()),
        ),
    };
    notes.extend(note);
    for f in &args.friends {
        prof.befriend(f);
    }
    // The last games shown are kept only while the same masters are browsed: another choice
    // may list none of them, and the table would stay empty.
    if !args.games.is_empty() || !args.masters.is_empty() {
        prof.filters.games.clear();
    }
    if web {
        // The page filters and sorts by itself: the model keeps every row, in no filter.
        let model = model::Model::new(
            model::Filters::default(),
            prof.favourites.clone(),
            &prof.friends,
        );
        let (tx, rx) = tokio::sync::mpsc::channel(8192);
        let (screen_tx, screen_rx) = tokio::sync::watch::channel(Vec::new());
        let pace = engine::Pace {
            refresh: args.refresh,
            relist: args.relist,
            timing: args.timing.clone(),
        };
        let engine = tokio::spawn(engine::run(asks, fixed, pace, screen_rx, tx));
        let setup = web::Setup {
            model,
            profile: prof,
            dir,
            note: notes.join("; "),
            listen: args.listen,
            refresh: args.refresh,
        };
        let result = web::run(setup, rx, screen_tx).await;
        engine.abort();
        result?;
        return Ok(exit::OK);
    }
    let model = model::Model::new(prof.filters.clone(), prof.favourites.clone(), &prof.friends);
    let mut app = tui::App::new(model, prof, dir);
    app.message = notes.join("; ");

    let (tx, rx) = tokio::sync::mpsc::channel(8192);
    let (screen_tx, screen_rx) = tokio::sync::watch::channel(Vec::new());
    let pace = engine::Pace {
        refresh: args.refresh,
        relist: args.relist,
        timing: args.timing.clone(),
    };
    let engine = tokio::spawn(engine::run(asks, fixed, pace, screen_rx, tx));
    let ui = tokio::task::spawn_blocking(move || tui::run(app, rx, &screen_tx));
    let result = ui.await;
    engine.abort();
    result??;
    Ok(exit::OK)
}
