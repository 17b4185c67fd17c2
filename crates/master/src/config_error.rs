//! What is wrong with a configuration, and where: the file, line, column and key of a TOML
//! error or an out-of-range value, found in the text as written.

use std::path::{Path, PathBuf};

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// The TOML is malformed, has an unknown key or a value of the wrong type.
    #[error("{0}")]
    Parse(Box<Diagnostic>),
    /// A value is out of range.
    #[error("{0}")]
    OutOfRange(Box<Diagnostic>),
    /// A value given outside a file (a command-line flag) is not valid for this key.
    #[error("invalid value for {0}")]
    Invalid(&'static str),
}

/// Where a configuration error is and what was expected:
/// `muster.toml:7:22: limits.servers_per_source: 0 is out of range: expected at least 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, when the text came from one.
    pub file: Option<PathBuf>,
    /// Line and column, from 1, when known.
    pub at: Option<(usize, usize)>,
    /// The dotted key (`limits.servers_per_source`), when known.
    pub key: Option<String>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, self.at) {
            (Some(file), Some((l, c))) => write!(f, "{}:{l}:{c}: ", file.display())?,
            (Some(file), None) => write!(f, "{}: ", file.display())?,
            (None, Some((l, c))) => write!(f, "line {l}, column {c}: ")?,
            (None, None) => {}
        }
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl From<muster_core::config::InvalidSetting> for ConfigError {
    fn from(e: muster_core::config::InvalidSetting) -> Self {
        Self::Invalid(e.0)
    }
}

impl ConfigError {
    /// The diagnostic of a parse or range error.
    #[must_use]
    pub fn diagnostic(&self) -> Option<&Diagnostic> {
        match self {
            Self::Parse(d) | Self::OutOfRange(d) => Some(d),
            Self::Read(..) | Self::Invalid(_) => None,
        }
    }

    pub(crate) fn in_file(mut self, path: &Path) -> Self {
        if let Self::Parse(d) | Self::OutOfRange(d) = &mut self {
            d.file = Some(path.to_owned());
        }
        self
    }
}

/// Line and column (from 1, columns in characters) of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before.get(start..).map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The table a line opens (`[limits]` → `limits`, `[[x]]` → `x`), if it opens one.
fn header(line: &str) -> Option<String> {
    let t = line.trim();
    let inner = t.strip_prefix('[')?;
    let inner = inner.strip_prefix('[').unwrap_or(inner);
    let end = inner.find(']')?;
    Some(
        inner
            .get(..end)?
            .split('.')
            .map(|p| p.trim().trim_matches('"'))
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// The key a `key = value` line sets, if it sets one.
fn assigned_key(line: &str) -> Option<&str> {
    let t = line.trim_start();
    if t.starts_with('#') || t.starts_with('[') {
        return None;
    }
    let (k, _) = t.split_once('=')?;
    Some(k.trim().trim_matches('"'))
}

/// The dotted key set on line `line` (from 1): its table's name and the key.
fn key_at(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let here = lines.get(line.checked_sub(1)?)?;
    if let Some(h) = header(here) {
        return Some(h);
    }
    let key = assigned_key(here)?;
    let table = lines
        .get(..line - 1)
        .unwrap_or_default()
        .iter()
        .rev()
        .find_map(|l| header(l));
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_owned(),
    })
}

/// Where the dotted `key` is set in `text` (as a key or a table header): line and column of
/// its first character. A key set inside an inline table is found as its outer key.
pub(crate) fn locate(text: &str, key: &str) -> Option<(usize, usize)> {
    let indent = |line: &str| line.chars().take_while(|c| c.is_whitespace()).count() + 1;
    let mut table = String::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(h) = header(line) {
            if h == key {
                return Some((i + 1, indent(line)));
            }
            table = h;
            continue;
        }
        let Some(k) = assigned_key(line) else {
            continue;
        };
        let full = if table.is_empty() {
            k.to_owned()
        } else {
            format!("{table}.{k}")
        };
        if full == key {
            return Some((i + 1, indent(line)));
        }
    }
    key.rsplit_once('.')
        .and_then(|(outer, _)| locate(text, outer))
}

impl ConfigError {
    /// A TOML error located in `text`: its line, column and key.
    pub(crate) fn parse(text: &str, e: &toml::de::Error) -> Self {
        let at = e.span().map(|s| line_col(text, s.start));
        let key = at.and_then(|(line, _)| key_at(text, line));
        Self::Parse(Box::new(Diagnostic {
            file: None,
            at,
            key,
            message: e.message().trim_end().to_owned(),
        }))
    }
}
