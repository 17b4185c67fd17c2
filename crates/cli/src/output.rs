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

/// Streamed output waiting in [`Sink`]'s buffer beyond this many bytes is written at once.
const STREAM_BUFFER: usize = 64 << 10;

/// Collects or streams results in the chosen format.
pub(crate) struct Sink<W: Write> {
    format: Format,
    out: W,
    /// NDJSON lines not yet written: one write per batch instead of many small ones per line.
    pending: Vec<u8>,
    held: Vec<ServerResult>,
    details: bool,
    filters: Vec<Filter>,
    sort: Option<SortSpec>,
    /// Results that passed the filters.
    shown: usize,
}

/// `1 server`, `2 servers`, `0 servers`.
pub(crate) fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// The line a table run ends with, on stderr.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    /// Servers asked.
    pub servers: usize,
    /// Of them, answered.
    pub answered: usize,
    /// Of them, did not answer.
    pub failed: usize,
    /// Rows printed, when filters left some out.
    pub shown: Option<usize>,
    pub elapsed: std::time::Duration,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} answered, {} failed",
            plural(self.servers, "server"),
            self.answered,
            self.failed
        )?;
        if let Some(n) = self.shown {
            write!(f, ", {n} shown")?;
        }
        write!(f, ", in {:.2} s", self.elapsed.as_secs_f64())
    }
}

/// Writes `line` to stderr (a summary or a hint; a closed stderr is no error).
pub(crate) fn note(line: &str) {
    let _ = writeln!(io::stderr(), "{line}");
}

/// One `--filter` condition of `muster scan`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Filter {
    /// `players>N`, `players>=N`, `players<N`, `players<=N`, `players=N`.
    Players(Cmp, u32),
    /// `game=KEY`: the game key (`ut`, `serioussamse`, `ddnet`, `teeworlds`, …; the
    /// result's `game`), case-insensitive.
    Game(String),
    /// `gametype=NAME`: the game type (mode) the server reports, case-insensitive.
    GameType(String),
    /// `name~TEXT`: case-insensitive substring of the server name.
    NameContains(String),
    /// `name=TEXT`: the whole name, case-insensitive.
    Name(String),
    /// `map=NAME` (case-insensitive) or `map~TEXT`.
    Map(String, bool),
    /// `protocol=NAME`.
    Protocol(String),
    /// `password=true|false`.
    Password(bool),
    /// `full=true|false`.
    Full(bool),
    /// `lobby=open|closed` (management servers).
    Lobby(bool),
}

/// What a filter looks at: a query result, or a master's list entry.
pub(crate) trait Filterable {
    fn name(&self) -> Option<&str>;
    fn map(&self) -> Option<&str>;
    fn num_players(&self) -> Option<u32>;
    fn max_players(&self) -> Option<u32>;
    /// Whether the game key is `lower_name`.
    fn is_game(&self, lower_name: &str) -> bool;
    /// The game type (mode), when known.
    fn game_type(&self) -> Option<&str> {
        None
    }
    fn protocol(&self) -> &str;
    /// Whether joining needs a password, when the server answered and said so.
    fn password(&self) -> Option<bool>;
    fn lobby_open(&self) -> Option<bool>;
}

impl Filterable for ServerResult {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    fn map(&self) -> Option<&str> {
        self.map.as_deref()
    }
    fn num_players(&self) -> Option<u32> {
        self.num_players
    }
    fn max_players(&self) -> Option<u32> {
        self.max_players
    }
    fn is_game(&self, g: &str) -> bool {
        self.game
            .as_deref()
            .is_some_and(|k| k.eq_ignore_ascii_case(g))
    }
    fn game_type(&self) -> Option<&str> {
        self.game_type.as_deref()
    }
    fn protocol(&self) -> &str {
        self.protocol
    }
    fn password(&self) -> Option<bool> {
        (self.status == Status::Ok).then(|| self.password.unwrap_or(false))
    }
    fn lobby_open(&self) -> Option<bool> {
        self.lobby.as_ref().map(|l| l.open)
    }
}

/// A comparison in a `players` filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

impl Filter {
    /// Parses `players>0`, `game=ut2`, `gametype=ctf`, `name~text`, `map=…`, `protocol=…`,
    /// `password=false`, `full=false`, `lobby=open`.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--filter {s:?}: expected e.g. players>0, game=ut2, gametype=ctf, name~text, map=X, protocol=X, password=false, full=false, lobby=open"
            )
        };
        let ops = [">=", "<=", "~", ">", "<", "="];
        let (key, op, value) = ops
            .iter()
            .filter_map(|op| s.find(op).map(|i| (i, *op)))
            .min_by_key(|(i, op)| (*i, std::cmp::Reverse(op.len())))
            .map(|(i, op)| (s[..i].trim(), op, s[i + op.len()..].trim()))
            .ok_or_else(bad)?;
        let key = key.to_ascii_lowercase();
        let f = match (key.as_str(), op) {
            ("players", _) if op != "~" => {
                let n: u32 = value.parse().map_err(|_| bad())?;
                let cmp = match op {
                    ">" => Cmp::Gt,
                    ">=" => Cmp::Ge,
                    "<" => Cmp::Lt,
                    "<=" => Cmp::Le,
                    _ => Cmp::Eq,
                };
                Self::Players(cmp, n)
            }
            ("game", "=") => Self::Game(value.to_lowercase()),
            ("gametype" | "game_type", "=") => Self::GameType(value.to_lowercase()),
            ("name", "~") => Self::NameContains(value.to_lowercase()),
            ("name", "=") => Self::Name(value.to_lowercase()),
            ("map", "=") => Self::Map(value.to_lowercase(), false),
            ("map", "~") => Self::Map(value.to_lowercase(), true),
            ("protocol", "=") => Self::Protocol(value.to_lowercase()),
            ("password", "=") => Self::Password(parse_bool(value).ok_or_else(bad)?),
            ("full", "=") => Self::Full(parse_bool(value).ok_or_else(bad)?),
            ("lobby", "=") => Self::Lobby(match value.to_ascii_lowercase().as_str() {
                "open" => true,
                "closed" => false,
                v => parse_bool(v).ok_or_else(bad)?,
            }),
            _ => return Err(bad()),
        };
        Ok(f)
    }

    /// Whether `r` passes. A server that did not answer passes only filters that need no
    /// answer (`protocol=`).
    pub(crate) fn matches(&self, r: &impl Filterable) -> bool {
        let lower = |v: Option<&str>| v.unwrap_or("").to_lowercase();
        let players = r.num_players().unwrap_or(0);
        match self {
            Self::Players(cmp, n) => {
                r.num_players().is_some()
                    && match cmp {
                        Cmp::Gt => players > *n,
                        Cmp::Ge => players >= *n,
                        Cmp::Lt => players < *n,
                        Cmp::Le => players <= *n,
                        Cmp::Eq => players == *n,
                    }
            }
            Self::Game(g) => r.is_game(g),
            Self::GameType(t) => lower(r.game_type()) == *t,
            Self::NameContains(t) => lower(r.name()).contains(t.as_str()),
            Self::Name(t) => lower(r.name()) == *t,
            Self::Map(t, false) => lower(r.map()) == *t,
            Self::Map(t, true) => lower(r.map()).contains(t.as_str()),
            Self::Protocol(p) => r.protocol().eq_ignore_ascii_case(p),
            Self::Password(p) => r.password() == Some(*p),
            Self::Full(f) => {
                let full = match (r.num_players(), r.max_players()) {
                    (Some(n), Some(m)) => m > 0 && n >= m,
                    _ => return false,
                };
                full == *f
            }
            Self::Lobby(open) => r.lobby_open() == Some(*open),
        }
    }
}

/// A `--sort COLUMN[:desc]` of `muster scan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SortSpec {
    column: SortColumn,
    descending: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SortColumn {
    Address,
    Protocol,
    Ping,
    Players,
    Map,
    Name,
    Status,
}

impl SortSpec {
    /// Parses `players`, `players:desc`, `ping:asc`, … (columns: address, protocol, ping,
    /// players, map, name, status).
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let (col, dir) = s.split_once(':').unwrap_or((s, "asc"));
        let column = match col.trim().to_ascii_lowercase().as_str() {
            "address" => SortColumn::Address,
            "protocol" => SortColumn::Protocol,
            "ping" => SortColumn::Ping,
            "players" => SortColumn::Players,
            "map" => SortColumn::Map,
            "name" => SortColumn::Name,
            "status" => SortColumn::Status,
            _ => {
                return Err(format!(
                    "--sort {s:?}: columns are address, protocol, ping, players, map, name, status"
                ));
            }
        };
        let descending = match dir.trim().to_ascii_lowercase().as_str() {
            "asc" => false,
            "desc" => true,
            _ => return Err(format!("--sort {s:?}: direction must be asc or desc")),
        };
        Ok(Self { column, descending })
    }

    fn compare(self, a: &ServerResult, b: &ServerResult) -> std::cmp::Ordering {
        let text = |v: &Option<String>| v.as_deref().unwrap_or("").to_lowercase();
        let o = match self.column {
            SortColumn::Address => a.address.cmp(&b.address),
            SortColumn::Protocol => a.protocol.cmp(b.protocol),
            SortColumn::Ping => a
                .ping_ms
                .unwrap_or(f64::INFINITY)
                .total_cmp(&b.ping_ms.unwrap_or(f64::INFINITY)),
            SortColumn::Players => a.num_players.cmp(&b.num_players),
            SortColumn::Map => text(&a.map).cmp(&text(&b.map)),
            SortColumn::Name => text(&a.name).cmp(&text(&b.name)),
            SortColumn::Status => (a.status as u8).cmp(&(b.status as u8)),
        };
        if self.descending { o.reverse() } else { o }
    }
}

impl<W: Write> Sink<W> {
    /// `details`: in table form, list players and rules under each server (`query` does,
    /// `scan` does not).
    pub(crate) fn new(format: Format, out: W, details: bool) -> Self {
        Self {
            format,
            out,
            pending: Vec::new(),
            held: Vec::new(),
            details,
            filters: Vec::new(),
            sort: None,
            shown: 0,
        }
    }

    /// Only results passing every filter are written; with a sort, results are held and
    /// written sorted at `finish` (also in ndjson).
    pub(crate) fn with_selection(mut self, filters: Vec<Filter>, sort: Option<SortSpec>) -> Self {
        self.filters = filters;
        self.sort = sort;
        self
    }

    /// The format results are written in.
    pub(crate) fn format(&self) -> Format {
        self.format
    }

    /// Take one result: printed now (ndjson) or held for `finish`.
    pub(crate) fn push(&mut self, result: ServerResult) -> io::Result<()> {
        if !self.filters.iter().all(|f| f.matches(&result)) {
            return Ok(());
        }
        self.shown += 1;
        match self.format {
            Format::Ndjson if self.sort.is_some() => {
                self.held.push(result);
                Ok(())
            }
            Format::Ndjson => {
                serde_json::to_writer(&mut self.pending, &result)?;
                self.pending.push(b'\n');
                if self.pending.len() >= STREAM_BUFFER {
                    self.flush()?;
                }
                Ok(())
            }
            Format::Json | Format::Table => {
                self.held.push(result);
                Ok(())
            }
        }
    }

    /// Write out the streamed lines pushed so far. Callers streaming results call it whenever
    /// no further result is ready, so lines appear as they arrive without one write per line.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.out.write_all(&self.pending)?;
            self.pending.clear();
        }
        self.out.flush()
    }

    /// Whether filters are set.
    pub(crate) fn filtering(&self) -> bool {
        !self.filters.is_empty()
    }

    /// Print whatever was held, in the order it was pushed; the number of results that
    /// passed the filters.
    pub(crate) fn finish(mut self) -> io::Result<usize> {
        let shown = self.shown;
        self.flush()?;
        if let Some(sort) = self.sort {
            // Stable: equal keys keep the order results arrived in.
            self.held.sort_by(|a, b| sort.compare(a, b));
        }
        match self.format {
            Format::Ndjson => {
                let mut out = io::BufWriter::new(&mut self.out);
                for r in &self.held {
                    serde_json::to_writer(&mut out, r)?;
                    out.write_all(b"\n")?;
                }
                out.flush()?;
            }
            Format::Json => {
                let mut out = io::BufWriter::new(&mut self.out);
                serde_json::to_writer_pretty(&mut out, &self.held)?;
                out.write_all(b"\n")?;
                out.flush()?;
            }
            Format::Table => {
                let mut out = io::BufWriter::new(&mut self.out);
                write_table(&mut out, &self.held, self.details)?;
                out.flush()?;
            }
        }
        Ok(shown)
    }
}

/// Terminal columns `s` takes (wide CJK characters count two, combining marks zero).
fn cols(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// Cut `s` to at most `width` terminal columns, marking the cut with `…`.
fn fit(s: &str, width: usize) -> String {
    if cols(s) <= width {
        return s.to_owned();
    }
    let mut t = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        used += w;
        t.push(c);
    }
    t.push('…');
    t
}

/// Replace control characters so a hostile name cannot move the cursor or clear the screen.
pub(crate) fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
}

/// One column of a [`Table`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column {
    pub title: &'static str,
    /// Widest cell, in terminal columns; longer cells are cut with `…`.
    pub max: usize,
    pub right: bool,
}

impl Column {
    pub(crate) const fn left(title: &'static str, max: usize) -> Self {
        Self {
            title,
            max,
            right: false,
        }
    }

    pub(crate) const fn right(title: &'static str, max: usize) -> Self {
        Self {
            title,
            max,
            right: true,
        }
    }
}

/// A table whose columns are as wide as their widest cell in terminal columns (CJK and other
/// wide characters count two, combining marks none), each cell made printable.
#[derive(Debug)]
pub(crate) struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(columns: Vec<Column>) -> Self {
        Self {
            columns,
            rows: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, cells: Vec<String>) {
        self.rows.push(cells.iter().map(|c| printable(c)).collect());
    }

    /// Leave out the columns whose cells are all empty, except those named in `keep`.
    pub(crate) fn drop_empty(&mut self, keep: &[&str]) {
        let empty: Vec<bool> = (0..self.columns.len())
            .map(|i| {
                !keep.contains(&self.columns[i].title)
                    && self
                        .rows
                        .iter()
                        .all(|r| r.get(i).is_none_or(String::is_empty))
            })
            .collect();
        let keep_cell = |i: &usize| !empty[*i];
        self.columns = (0..self.columns.len())
            .filter(keep_cell)
            .map(|i| self.columns[i])
            .collect();
        for row in &mut self.rows {
            *row = std::mem::take(row)
                .into_iter()
                .enumerate()
                .filter(|(i, _)| keep_cell(i))
                .map(|(_, c)| c)
                .collect();
        }
    }

    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| cols(c.title)).collect();
        for r in &self.rows {
            for ((w, cell), col) in widths.iter_mut().zip(r).zip(&self.columns) {
                *w = (*w).max(cols(cell).min(col.max));
            }
        }
        widths
    }

    fn line(&self, widths: &[usize], cells: &[String], indent: &str) -> String {
        let mut s = indent.to_owned();
        let last = self.columns.len().saturating_sub(1);
        for (i, ((cell, w), col)) in cells.iter().zip(widths).zip(&self.columns).enumerate() {
            // Nothing follows the last column: it is never cut (an error message there is
            // read whole, however wide the terminal or wherever the output goes).
            let cell = if i == last && !col.right {
                cell.clone()
            } else {
                fit(cell, *w)
            };
            let pad = " ".repeat(w.saturating_sub(cols(&cell)));
            if col.right {
                s.push_str(&pad);
                s.push_str(&cell);
            } else {
                s.push_str(&cell);
                s.push_str(&pad);
            }
            s.push_str("  ");
        }
        s.trim_end().to_owned()
    }

    /// The title line, then one line per row, each starting with `indent`.
    pub(crate) fn lines(&self, indent: &str) -> Vec<String> {
        let widths = self.widths();
        let titles: Vec<String> = self.columns.iter().map(|c| c.title.to_owned()).collect();
        std::iter::once(self.line(&widths, &titles, indent))
            .chain(self.rows.iter().map(|r| self.line(&widths, r, indent)))
            .collect()
    }
}

fn row(r: &ServerResult) -> Vec<String> {
    // Tenths below 10 ms, whole above, as the browser shows it.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ping = r
        .ping_ms
        .map(
            |p| crate::ping::ping_text((p * 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as u32),
        )
        .unwrap_or_default();
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
    // The query address only when it says more than the address.
    let query = match &r.query_address {
        Some(q) if *q != r.address => q.clone(),
        _ => String::new(),
    };
    vec![
        r.address.clone(),
        query,
        r.resolved_address.show(),
        r.protocol.to_owned(),
        r.game_name.clone().unwrap_or_default(),
        ping,
        players,
        r.lobby
            .as_ref()
            .map(|l| l.state().to_owned())
            .unwrap_or_default(),
        r.map.clone().unwrap_or_default(),
        r.name.clone().unwrap_or_default(),
        status,
    ]
}

fn write_table<W: Write>(out: &mut W, results: &[ServerResult], details: bool) -> io::Result<()> {
    let mut table = Table::new(vec![
        Column::left("ADDRESS", 45),
        Column::left("QUERY ADDRESS", 45),
        Column::left("RESOLVED", 45),
        Column::left("PROTOCOL", 9),
        Column::left("GAME", 40),
        Column::right("PING", 7),
        Column::right("PLAYERS", 9),
        Column::left("LOBBY", 6),
        Column::left("MAP", 24),
        Column::left("NAME", 48),
        Column::left("STATUS", 40),
    ]);
    for r in results {
        table.push(row(r));
    }
    table.drop_empty(&["ADDRESS", "PROTOCOL", "PLAYERS", "MAP", "NAME", "STATUS"]);
    let mut lines = table.lines("").into_iter();
    if let Some(title) = lines.next() {
        writeln!(out, "{title}")?;
    }
    for (r, line) in results.iter().zip(lines) {
        writeln!(out, "{line}")?;
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
        let opt = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
        let mut table = Table::new(vec![
            Column::left("PLAYER", 32),
            Column::right("SCORE", 6),
            Column::right("PING", 5),
            Column::left("TEAM", 4),
        ]);
        for p in &r.players {
            table.push(vec![
                p.name.clone(),
                opt(p.score),
                opt(p.ping_ms.map(i64::from)),
                opt(p.team.map(i64::from)),
            ]);
        }
        for line in table.lines("    ") {
            writeln!(out, "{line}")?;
        }
    }
    if !r.rules.is_empty() {
        writeln!(out, "    RULE")?;
        for line in rule_lines(&r.rules) {
            writeln!(out, "    {line}")?;
        }
    }
    Ok(())
}

/// One line per rule for the table's detail view: the English name of the key (the seed's
/// `Prop2En`, [`muster_proto::display::property_name`]), the key as sent in parentheses when
/// it differs, and the value. JSON output keeps the keys as sent.
fn rule_lines(rules: &crate::dto::Fields) -> Vec<String> {
    let labels: Vec<String> = rules
        .iter()
        .map(|(k, _)| {
            let name = muster_proto::display::property_name(k);
            if name == k {
                printable(k)
            } else {
                format!("{name} ({})", printable(k))
            }
        })
        .collect();
    let width = labels.iter().map(|l| cols(l).min(40)).max().unwrap_or(0);
    labels
        .iter()
        .zip(rules.iter())
        .map(|(label, (_, v))| {
            let label = fit(label, 40);
            let pad = width.saturating_sub(cols(&label));
            format!("{label}{}  {}", " ".repeat(pad), printable(&v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_show_english_names_beside_the_keys() {
        let mut rules = crate::dto::Fields::default();
        rules.insert(
            "AdminEMail".into(),
            crate::dto::Field::Str("hex@example.org".into()),
        );
        rules.insert("friendlyfire".into(), crate::dto::Field::Str("0".into()));
        rules.insert(
            "Num trader weapons".into(),
            crate::dto::Field::Str("5".into()),
        );
        rules.insert(
            "Mutator".into(),
            crate::dto::Field::List(vec!["MutA".into(), "MutB".into()]),
        );
        assert_eq!(
            rule_lines(&rules),
            [
                "Admin E-Mail (AdminEMail)     hex@example.org",
                "Mutator                       MutA,MutB",
                "Num trader weapons            5",
                "Friendly Fire (friendlyfire)  0",
            ]
        );
    }

    #[test]
    fn fit_marks_cuts() {
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
    }

    #[test]
    fn fit_counts_display_columns() {
        assert_eq!(fit("日本語サーバ", 7), "日本語…");
        assert_eq!(cols(&fit("日本語サーバ", 7)), 7);
        assert_eq!(fit("ab", 2), "ab");
    }

    #[test]
    fn filters_parse_and_match() {
        let mut r = ServerResult::failed(
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:1".parse().unwrap(),
            "gamespy1",
            Status::Ok,
            String::new(),
        );
        r.error = None;
        r.name = Some("Jérôme's UT".into());
        r.map = Some("DM-Antalus".into());
        r.num_players = Some(3);
        r.max_players = Some(16);
        r.game_type = Some("xGame.xDeathMatch".into());
        let r = r.with_game("ut2");
        let ok = |e: &str| Filter::parse(e).unwrap().matches(&r);
        assert!(ok("players>0") && ok("players>=3") && !ok("players>3") && ok("players<=3"));
        assert!(ok("game=UT2") && !ok("game=ut2004"));
        // `game=` is the game key only; the mode has its own filter.
        assert!(!ok("game=xgame.xdeathmatch") && ok("gametype=XGame.xDeathMatch"));
        assert!(!ok("gametype=ut2") && !ok("game_type=ctf"));
        assert!(ok("name~jérô") && ok("map=dm-antalus") && ok("map~antal"));
        assert!(ok("protocol=gamespy1") && ok("password=false") && ok("full=false"));
        assert!(!ok("full=true") && !ok("password=true"));
        for bad in ["players>x", "bogus=1", "full=maybe", "players"] {
            assert!(Filter::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sort_specs() {
        assert!(SortSpec::parse("players:desc").unwrap().descending);
        assert!(!SortSpec::parse("ping").unwrap().descending);
        assert!(SortSpec::parse("players:up").is_err());
        assert!(SortSpec::parse("colour").is_err());
    }

    #[test]
    fn the_table_shows_the_game_by_name_where_known() {
        let mut ut = ServerResult::listed("gamespy1");
        ut.game = Some("ut".into());
        ut.game_name = Some("Unreal Tournament".into());
        let unknown = ServerResult::listed("teeworlds");
        let mut out = Vec::new();
        write_table(&mut out, &[ut, unknown], false).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        let title = lines.next().unwrap();
        let at = title.find("GAME").expect("a GAME column");
        let first = lines.next().unwrap();
        assert_eq!(first.get(at..at + 17), Some("Unreal Tournament"), "{text}");
        // No result names its game: no empty column.
        let mut out = Vec::new();
        write_table(&mut out, &[ServerResult::listed("teeworlds")], false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("GAME"), "{text}");
    }

    #[test]
    fn the_table_shows_tenths_of_a_ping_below_10_ms_and_rounds_above() {
        let mut results = Vec::new();
        for ping in [0.3, 4.2, 9.96, 21.7] {
            let mut r = ServerResult::listed("teeworlds");
            r.ping_ms = Some(ping);
            results.push(r);
        }
        let mut out = Vec::new();
        write_table(&mut out, &results, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        let title = lines.next().unwrap();
        let end = title.find("PING").expect("a PING column") + "PING".len();
        let cells: Vec<&str> = lines
            .map(|l| l.get(..end).unwrap_or(l).trim_end())
            .collect();
        let pings: Vec<&str> = cells
            .iter()
            .map(|c| c.rsplit(' ').next().unwrap_or_default())
            .collect();
        assert_eq!(pings, ["0.3", "4.2", "10", "22"], "{text}");
    }

    #[test]
    fn player_tables_align_wide_names_by_display_width() {
        let mut r = ServerResult::listed("teeworlds");
        for (name, score) in [("日本語", 10), ("ab", 2), ("e\u{301}x", 3)] {
            r.players.push(crate::dto::PlayerResult {
                name: name.into(),
                score: Some(score),
                ping_ms: None,
                team: None,
                spectator: None,
                clan: None,
                country: None,
                raw: crate::dto::Fields::default(),
            });
        }
        let mut out = Vec::new();
        write_details(&mut out, &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "    PLAYER  SCORE  PING  TEAM");
        assert_eq!(lines[1], "    日本語     10");
        assert_eq!(lines[2], "    ab          2");
        // A combining accent takes no column.
        assert_eq!(lines[3], "    e\u{301}x          3");
        // Every score ends in the same terminal column.
        let ends: Vec<usize> = lines[1..].iter().map(|l| cols(l)).collect();
        assert!(ends.iter().all(|e| *e == ends[0]), "{ends:?}\n{text}");
    }

    #[test]
    fn summaries_count_in_words() {
        assert_eq!(plural(1, "server"), "1 server");
        assert_eq!(plural(0, "server"), "0 servers");
        let s = Summary {
            servers: 2,
            answered: 1,
            failed: 1,
            shown: Some(1),
            elapsed: std::time::Duration::from_millis(1234),
        };
        assert_eq!(
            s.to_string(),
            "2 servers: 1 answered, 1 failed, 1 shown, in 1.23 s"
        );
    }

    #[test]
    fn lobby_filter() {
        let mut r = ServerResult::listed("mgmt");
        assert!(!Filter::parse("lobby=open").unwrap().matches(&r));
        r.lobby = Some(crate::dto::LobbyResult {
            open: true,
            mode: "Standard A",
        });
        assert!(Filter::parse("lobby=open").unwrap().matches(&r));
        assert!(Filter::parse("lobby=true").unwrap().matches(&r));
        assert!(!Filter::parse("lobby=closed").unwrap().matches(&r));
        assert!(Filter::parse("lobby=ajar").is_err());
    }

    #[test]
    fn printable_removes_terminal_escapes() {
        assert_eq!(printable("a\u{1b}[2Jb"), "a\u{fffd}[2Jb");
    }
}
