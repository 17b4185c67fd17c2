//! `muster completions SHELL` and `muster man`: shell completions and manual pages, made from
//! the same clap definitions that parse the command line, so they cannot drift from it.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

use crate::exit;

/// Flags of `muster completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  muster completions bash > ~/.local/share/bash-completion/completions/muster
  muster completions zsh > ~/.zfunc/_muster      # with fpath+=~/.zfunc before compinit
  muster completions fish > ~/.config/fish/completions/muster.fish")]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Flags of `muster man`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  muster man | man -l -                       # read it now
  muster man --dir /usr/local/share/man/man1  # install muster.1, muster-query.1, …")]
pub(crate) struct ManArgs {
    /// Write one page per command (muster.1, muster-query.1, …) into DIR instead of printing
    /// muster.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Completions of `cmd` (the whole command line's definition).
pub(crate) fn completions(args: &CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<u8> {
    let mut out = crate::stdout::stdout();
    clap_complete::generate(args.shell, &mut cmd, "muster", &mut out);
    out.flush()?;
    Ok(exit::OK)
}

/// The manual pages of `cmd` (the whole command line's definition).
pub(crate) fn man(args: &ManArgs, cmd: clap::Command) -> anyhow::Result<u8> {
    match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("writing pages into {}", dir.display()))?;
        }
        None => {
            let mut out = crate::stdout::stdout();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            out.flush()?;
        }
    }
    Ok(exit::OK)
}
