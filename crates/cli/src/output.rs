//! Writing results as a table, one JSON array, or one JSON object per line.

use std::io::{self, Write};

use crate::dto::{ServerResult, Status};

/// The output formats of `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// A readable table, printed when every result is in (players listed under `query`).
    Table,
    /// One JSON array, printed when every result is in.
    Json,
    /// One JSON object per line, printed as each result arrives.
    Ndjson,
}

/// Collects or streams results in the chosen format.
pub(crate) struct Sink<W: Write> {
    format: Format,
    out: W,
    held: Vec<ServerResult>,
    details: bool,
}

impl<W: Write> Sink<W> {
    /// `details`: in table form, list players and rules under each server (`query` does,
    /// `scan` does not).
    pub(crate) fn new(format: Format, out: W, details: bool) -> Self {
        Self {
            format,
            out,
            held: Vec::new(),
            details,
        }
    }

    /// The format results are written in.
    pub(crate) fn format(&self) -> Format {
        self.format
    }

    /// Take one result: printed now (ndjson) or held for `finish`.
    pub(crate) fn push(&mut self, result: ServerResult) -> io::Result<()> {
        match self.format {
            Format::Ndjson => {
                serde_json::to_writer(&mut self.out, &result)?;
                self.out.write_all(b"\n")?;
                self.out.flush()
            }
            Format::Json | Format::Table => {
                self.held.push(result);
                Ok(())
            }
        }
    }

    /// Print whatever was held, in the order it was pushed.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        match self.format {
            Format::Ndjson => Ok(()),
            Format::Json => {
                serde_json::to_writer_pretty(&mut self.out, &self.held)?;
                self.out.write_all(b"\n")?;
                self.out.flush()
            }
            Format::Table => {
                write_table(&mut self.out, &self.held, self.details)?;
                self.out.flush()
            }
        }
    }
}

/// Cut `s` to at most `width` characters, marking the cut with `…`.
fn fit(s: &str, width: usize) -> String {
    let count = s.chars().count();
    if count <= width {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Replace control characters so a hostile name cannot move the cursor or clear the screen.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
}

struct Column {
    title: &'static str,
    max: usize,
    right: bool,
}

const COLUMNS: [Column; 7] = [
    Column {
        title: "ADDRESS",
        max: 40,
        right: false,
    },
    Column {
        title: "PROTOCOL",
        max: 9,
        right: false,
    },
    Column {
        title: "PING",
        max: 7,
        right: true,
    },
    Column {
        title: "PLAYERS",
        max: 9,
        right: true,
    },
    Column {
        title: "MAP",
        max: 24,
        right: false,
    },
    Column {
        title: "NAME",
        max: 48,
        right: false,
    },
    Column {
        title: "STATUS",
        max: 40,
        right: false,
    },
];

fn row(r: &ServerResult) -> [String; 7] {
    let ping = r.ping_ms.map(|p| format!("{p:.0}")).unwrap_or_default();
    let players = match (r.num_players, r.max_players) {
        (Some(n), Some(m)) => format!("{n}/{m}"),
        _ => String::new(),
    };
    let status = match (r.status, &r.error) {
        (Status::Ok, _) if r.partial => "partial".to_owned(),
        (Status::Ok, _) => "ok".to_owned(),
        (_, Some(e)) => e.clone(),
        (Status::Timeout, None) => "timeout".to_owned(),
        (Status::Error, None) => "error".to_owned(),
    };
    [
        r.address.clone(),
        r.protocol.to_owned(),
        ping,
        players,
        printable(r.map.as_deref().unwrap_or("")),
        printable(r.name.as_deref().unwrap_or("")),
        status,
    ]
}

fn write_table<W: Write>(out: &mut W, results: &[ServerResult], details: bool) -> io::Result<()> {
    let rows: Vec<[String; 7]> = results.iter().map(row).collect();
    let mut widths: Vec<usize> = COLUMNS.iter().map(|c| c.title.len()).collect();
    for r in &rows {
        for ((w, cell), col) in widths.iter_mut().zip(r).zip(&COLUMNS) {
            *w = (*w).max(cell.chars().count().min(col.max));
        }
    }
    let line = |cells: &[String]| -> String {
        let mut s = String::new();
        for ((cell, w), col) in cells.iter().zip(&widths).zip(&COLUMNS) {
            let cell = fit(cell, *w);
            let pad = w.saturating_sub(cell.chars().count());
            if col.right {
                s.push_str(&" ".repeat(pad));
                s.push_str(&cell);
            } else {
                s.push_str(&cell);
                s.push_str(&" ".repeat(pad));
            }
            s.push_str("  ");
        }
        s.trim_end().to_owned()
    };
    let titles: Vec<String> = COLUMNS.iter().map(|c| c.title.to_owned()).collect();
    writeln!(out, "{}", line(&titles))?;
    for (r, cells) in results.iter().zip(&rows) {
        writeln!(out, "{}", line(cells))?;
        if details {
            write_details(out, r)?;
        }
    }
    Ok(())
}

fn write_details<W: Write>(out: &mut W, r: &ServerResult) -> io::Result<()> {
    if r.status != Status::Ok {
        return Ok(());
    }
    if let Some(reason) = &r.partial_reason {
        writeln!(out, "    partial: {reason}")?;
    }
    if !r.players.is_empty() {
        let name_w = r
            .players
            .iter()
            .map(|p| printable(&p.name).chars().count().min(32))
            .max()
            .unwrap_or(4)
            .max(4);
        writeln!(
            out,
            "    {:<name_w$}  {:>6}  {:>5}  TEAM",
            "PLAYER", "SCORE", "PING"
        )?;
        for p in &r.players {
            let opt = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
            writeln!(
                out,
                "    {:<name_w$}  {:>6}  {:>5}  {}",
                fit(&printable(&p.name), 32),
                opt(p.score),
                opt(p.ping_ms.map(i64::from)),
                opt(p.team.map(i64::from)),
            )?;
        }
    }
    if !r.rules.is_empty() {
        let rules: Vec<String> = r
            .rules
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={}", printable(s)),
                other => format!("{k}={}", printable(&other.to_string())),
            })
            .collect();
        writeln!(out, "    rules: {}", rules.join(", "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_marks_cuts() {
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
    }

    #[test]
    fn printable_removes_terminal_escapes() {
        assert_eq!(printable("a\u{1b}[2Jb"), "a\u{fffd}[2Jb");
    }
}
