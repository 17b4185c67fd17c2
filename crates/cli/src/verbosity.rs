//! How much the commands say on stderr.

/// How much goes to stderr, from `-q`/`-v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verbosity {
    /// `-qq`: errors only.
    Errors,
    /// `-q`: warnings and errors, no summary.
    Quiet,
    /// The default: what the command is doing, and a summary.
    Normal,
    /// `-v` (1), `-vv` (2), `-vvv` (3).
    Verbose(u8),
}

impl Verbosity {
    pub(crate) fn of(verbose: u8, quiet: u8) -> Self {
        match (verbose, quiet) {
            (0, 0) => Self::Normal,
            (0, 1) => Self::Quiet,
            (0, _) => Self::Errors,
            (v, _) => Self::Verbose(v),
        }
    }

    /// Whether summaries and hints go to stderr.
    pub(crate) fn chatty(self) -> bool {
        matches!(self, Self::Normal | Self::Verbose(_))
    }
}
