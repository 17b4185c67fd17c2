//! `muster`: the command line. Parses flags, calls library code, maps outcomes to exit codes.
//! Nothing below this file knows that a flag exists.

mod args;
mod browse;
mod dto;
mod emulate;
mod exit;
mod exporter;
mod generate;
mod list;
mod output;
mod ping;
mod protocols;
mod query;
mod resume;
mod scan;
mod serve;
mod signal;
mod stdout;
mod steam_web;
mod target;
mod timing;
mod verbosity;
mod watch;

/// The allocator: a scan makes and frees many small strings per reply, and glibc's malloc
/// spends a third of a fast scan's time on them (measured with `perf record`). Built without
/// its transparent-huge-page advice (`no_thp`): with it, every 2 MiB region the master's many
/// small records touch becomes resident whole (idle `muster serve` 22 -> 14 MiB without it).
#[global_allocator]
static ALLOCATOR: muster_alloc::Allocator = muster_alloc::Allocator;

use std::io::Write as _;
use std::process::ExitCode;

use args::{Cli, Command};
use clap::{CommandFactory as _, Parser as _};
use verbosity::Verbosity;

/// Whether stderr takes colours: a terminal, and `NO_COLOR` unset or empty (no-color.org).
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn init_logging(verbosity: Verbosity, daemon: bool) {
    let default = match verbosity {
        Verbosity::Errors => "error",
        Verbosity::Quiet => "warn",
        // What the command itself is doing, and what the emulated servers' registrations do.
        Verbosity::Normal => "warn,muster=info,muster_server=info",
        Verbosity::Verbose(1) => "info",
        Verbosity::Verbose(2) => "debug",
        Verbosity::Verbose(_) => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logger = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr());
    // A daemon's log wants times and sources; a one-shot command's stderr wants short lines.
    if daemon {
        logger.init();
    } else {
        logger.without_time().with_target(false).init();
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // No runtime and no logging for what only prints text made from the flags' definitions.
    let generated = match &cli.command {
        Command::Completions(args) => Some(generate::completions(args, Cli::command())),
        Command::Man(args) => Some(generate::man(args, Cli::command())),
        _ => None,
    };
    if let Some(result) = generated {
        return finish(result);
    }
    let verbosity = Verbosity::of(cli.verbose, cli.quiet);
    let daemon = matches!(cli.command, Command::Emulate(_) | Command::Serve(_));
    if daemon {
        // Before any thread starts, the logger's included (see `muster_alloc`).
        muster_alloc::return_freed_promptly();
    }
    init_logging(verbosity, daemon);
    // Querying runs one engine task (one socket per family, one timer heap): a single thread
    // does it best, without handing every allocation across threads. The daemons use all cores.
    let builder = match cli.command {
        Command::Emulate(_) | Command::Serve(_) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            // A worker going idle hands back what it freed (see `muster_alloc`).
            b.on_thread_park(muster_alloc::on_thread_park);
            b
        }
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = match { builder }.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "muster: cannot start the runtime: {e}");
            return ExitCode::from(exit::INTERNAL);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Query(args) => query::run(args, verbosity).await,
            Command::List(args) => list::run(args, verbosity).await,
            Command::Scan(args) => scan::run(args, verbosity).await,
            Command::Emulate(args) => emulate::run(args).await,
            Command::Serve(args) => serve::run(args, verbosity).await,
            Command::Watch(args) => watch::run(args).await,
            Command::Exporter(args) => exporter::run(args).await,
            Command::Browse(args) => browse::run(args).await,
            Command::Completions(_) | Command::Man(_) => Ok(exit::OK),
        }
    });
    finish(result)
}

/// The exit code of a command's result; errors printed on one line.
fn finish(result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        // A closed pipe (`muster query … | head`) is not an error.
        Err(e) if is_broken_pipe(&e) => ExitCode::from(exit::OK),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "muster: {e:#}");
            let code = match e.downcast_ref::<query::UsageError>() {
                Some(_) => exit::USAGE,
                None => exit::INTERNAL,
            };
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory as _;
        super::Cli::command().debug_assert();
    }

    /// Text after the flags is printed as written when it fits clap's width (100 columns
    /// unless the terminal is narrower); a longer line is broken in the middle of a sentence.
    #[test]
    fn text_after_the_flags_fits_in_100_columns() {
        use clap::CommandFactory as _;
        let cli = super::Cli::command();
        let commands = std::iter::once(&cli).chain(cli.get_subcommands());
        for cmd in commands {
            let text = cmd.get_after_help().map(ToString::to_string);
            for line in text.iter().flat_map(|t| t.lines()) {
                assert!(
                    line.chars().count() <= 100,
                    "{}: {} columns: {line}",
                    cmd.get_name(),
                    line.chars().count()
                );
            }
        }
    }

    #[test]
    fn quiet_and_verbose_choose_what_goes_to_stderr() {
        use super::Verbosity;
        assert_eq!(Verbosity::of(0, 0), Verbosity::Normal);
        assert_eq!(Verbosity::of(0, 1), Verbosity::Quiet);
        assert_eq!(Verbosity::of(0, 3), Verbosity::Errors);
        assert_eq!(Verbosity::of(2, 0), Verbosity::Verbose(2));
        assert!(Verbosity::Normal.chatty() && !Verbosity::Quiet.chatty());
    }
}
