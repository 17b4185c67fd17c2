//! Standard output for what the commands print. A reader that goes away (`muster … | head`,
//! `| true`) closes the pipe; the next write then fails with `EPIPE`, which here ends the
//! program at once with exit code 0 instead of an error message, a panic in a library that
//! treats every write error as fatal, or a long scan whose output nobody reads.

use std::io::{self, Write};

use crate::exit;

/// Locked standard output whose writes end the program quietly on a closed pipe.
#[derive(Debug)]
pub(crate) struct Stdout(io::StdoutLock<'static>);

/// Standard output, locked, through [`Stdout`].
pub(crate) fn stdout() -> Stdout {
    Stdout(io::stdout().lock())
}

/// `result` unchanged, unless it is a closed pipe: then the program ends with exit code 0.
fn closed_pipe_ends<T>(result: io::Result<T>) -> io::Result<T> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(i32::from(exit::OK)),
        other => other,
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        closed_pipe_ends(self.0.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        closed_pipe_ends(self.0.write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        closed_pipe_ends(self.0.flush())
    }
}
