//! Terminal mode: the live table (ratatui over crossterm). [`App`] is the interface's state
//! and its key handling, drawn by [`App::draw`] into any ratatui backend, so the tests draw
//! it into a `TestBackend`; [`run`] is the loop on a real terminal: updates from the engine
//! in, keys in, a redraw only when something shown changed (ratatui then writes only the
//! cells that differ, so nothing flickers).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use tokio::sync::{mpsc, watch};

use super::engine::Update;
use super::join;
use super::model::{Key, MasterState, Model, Row, ping_text};
use super::profile::{self, Profile};
use super::width::{fit, fit_right, printable};

/// Updates applied per frame at most, so a master listing 20,000 servers never holds the
/// keys back for long.
const UPDATES_PER_FRAME: usize = 4096;

/// What the keys act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The table.
    Table,
    /// Typing the search text.
    Search,
    /// One server's players and rules.
    Details(Key),
    /// Choosing the games shown: the highlighted line.
    Games(usize),
}

/// The interface's state.
#[derive(Debug)]
pub(crate) struct App {
    pub model: Model,
    pub profile: Profile,
    profile_dir: Option<PathBuf>,
    pub mode: Mode,
    /// The highlighted server, followed through re-sorts.
    selected: Option<Key>,
    /// Its row, where it was last drawn.
    index: usize,
    /// The first row drawn.
    offset: usize,
    /// The highlighted player in the details.
    player: usize,
    /// The last thing said (a join command, a saved friend, an error).
    pub message: String,
    /// Bumped by every key that changes what is shown.
    ui_generation: u64,
    pub quit: bool,
    /// Text to hand the terminal's clipboard (OSC 52) after the next draw.
    pub clipboard: Option<String>,
    /// What was on screen at the last draw.
    pub on_screen: Vec<Key>,
    /// How many rows the filters let through, at the last draw of the table.
    shown: usize,
}

impl App {
    pub(crate) fn new(model: Model, profile: Profile, profile_dir: Option<PathBuf>) -> Self {
        Self {
            model,
            profile,
            profile_dir,
            mode: Mode::Table,
            selected: None,
            index: 0,
            offset: 0,
            player: 0,
            message: String::new(),
            ui_generation: 0,
            quit: false,
            clipboard: None,
            on_screen: Vec::new(),
            shown: 0,
        }
    }

    /// Changes whenever the screen must be drawn again.
    pub(crate) fn version(&self) -> (u64, u64) {
        (self.model.generation(), self.ui_generation)
    }

    /// Applies one engine update.
    pub(crate) fn apply(&mut self, update: Update) {
        match update {
            Update::MasterAsking(label) => self.model.master_asking(&label),
            Update::MasterDone(label, r) => self.model.master_done(&label, r),
            Update::Listed(rows) => {
                for l in rows {
                    self.model.listed(l);
                }
            }
            Update::Answered(key, summary, now) => self.model.answered(key, *summary, now),
            Update::Failed(key) => self.model.failed(key),
        }
    }

    fn save(&mut self) {
        self.profile.favourites = self.model.favourites().clone();
        self.profile.filters = self.model.filters.clone();
        let Some(dir) = &self.profile_dir else { return };
        if let Err(e) = profile::save(dir, &self.profile) {
            self.message = format!("cannot save the profile in {}: {e}", dir.display());
        }
    }

    fn say(&mut self, text: String) {
        self.message = text;
        self.ui_generation += 1;
    }

    /// The selected row's key, resolved against the current view.
    fn current(&self, view: &[&Row]) -> Option<Key> {
        if let Some(k) = self.selected
            && view.iter().any(|r| r.key == k)
        {
            return Some(k);
        }
        view.get(self.index.min(view.len().saturating_sub(1)))
            .map(|r| r.key)
    }

    fn move_by(&mut self, delta: isize) {
        let view = self.model.view();
        if view.is_empty() {
            return;
        }
        let at = self
            .current(&view)
            .and_then(|k| view.iter().position(|r| r.key == k))
            .unwrap_or(0);
        let last = view.len() - 1;
        let to = at.saturating_add_signed(delta).min(last);
        self.selected = view.get(to).map(|r| r.key);
        self.index = to;
        self.ui_generation += 1;
    }

    /// Handles one key.
    pub(crate) fn key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        // In raw mode Ctrl-C is a key, not a signal: it quits as q does.
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.save();
            self.quit = true;
            return;
        }
        match self.mode.clone() {
            Mode::Search => self.search_key(key),
            Mode::Details(k) => self.details_key(key, k),
            Mode::Games(at) => self.games_key(key, at),
            Mode::Table => self.table_key(key),
        }
    }

    fn search_key(&mut self, key: KeyEvent) {
        let mut text = self.model.filters.search.clone();
        match key.code {
            KeyCode::Enter => self.mode = Mode::Table,
            KeyCode::Esc => {
                text.clear();
                self.mode = Mode::Table;
            }
            KeyCode::Backspace => {
                text.pop();
            }
            KeyCode::Char(c) => text.push(c),
            _ => {}
        }
        self.model.set_search(&text);
        self.ui_generation += 1;
    }

    fn table_key(&mut self, key: KeyEvent) {
        let view_key = {
            let view = self.model.view();
            self.current(&view)
        };
        match key.code {
            KeyCode::Char('q') => {
                self.save();
                self.quit = true;
            }
            KeyCode::Char('/') => {
                self.mode = Mode::Search;
                self.ui_generation += 1;
            }
            KeyCode::Char('s') => {
                self.model.cycle_sort();
                self.save();
            }
            KeyCode::Char('r') => {
                self.model.reverse();
                self.save();
            }
            KeyCode::Char('F') => {
                self.model.toggle_favourites_only();
                self.save();
            }
            KeyCode::Char('e') => {
                self.model.toggle_hide_empty();
                self.save();
            }
            KeyCode::Char('u') => {
                self.model.toggle_hide_full();
                self.save();
            }
            KeyCode::Char('g') => {
                self.mode = Mode::Games(0);
                self.ui_generation += 1;
            }
            KeyCode::Char('f') => self.favourite(view_key),
            KeyCode::Char('c') => self.join(view_key),
            KeyCode::Enter => {
                if let Some(k) = view_key {
                    self.selected = Some(k);
                    self.mode = Mode::Details(k);
                    self.player = 0;
                    self.ui_generation += 1;
                }
            }
            KeyCode::Down | KeyCode::Char('j') => self.move_by(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_by(-1),
            KeyCode::PageDown => self.move_by(10),
            KeyCode::PageUp => self.move_by(-10),
            KeyCode::Home => self.move_by(isize::MIN / 2),
            KeyCode::End => self.move_by(isize::MAX / 2),
            _ => {}
        }
    }

    fn games_key(&mut self, key: KeyEvent, at: usize) {
        let games = self.model.games();
        match key.code {
            KeyCode::Esc | KeyCode::Enter | KeyCode::Char('g') => {
                self.mode = Mode::Table;
                self.save();
            }
            KeyCode::Char('q') => {
                self.save();
                self.quit = true;
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.mode = Mode::Games((at + 1).min(games.len().saturating_sub(1)));
            }
            KeyCode::Up | KeyCode::Char('k') => self.mode = Mode::Games(at.saturating_sub(1)),
            KeyCode::Char(' ') => {
                if let Some(g) = games.get(at) {
                    self.model.toggle_game(g);
                }
            }
            KeyCode::Char('a') => self.model.all_games(),
            _ => {}
        }
        self.ui_generation += 1;
    }

    fn details_key(&mut self, key: KeyEvent, server: Key) {
        let players = self
            .model
            .row(&server)
            .and_then(|r| r.info.as_ref())
            .map_or(0, |i| i.players.len());
        match key.code {
            KeyCode::Char('q') => {
                self.save();
                self.quit = true;
            }
            KeyCode::Esc | KeyCode::Enter | KeyCode::Backspace => {
                self.mode = Mode::Table;
                self.ui_generation += 1;
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.player = (self.player + 1).min(players.saturating_sub(1));
                self.ui_generation += 1;
            }
            KeyCode::Up | KeyCode::Char('k') => {
                self.player = self.player.saturating_sub(1);
                self.ui_generation += 1;
            }
            KeyCode::Char('p') => {
                let name = self
                    .model
                    .row(&server)
                    .and_then(|r| r.info.as_ref())
                    .and_then(|i| i.players.get(self.player))
                    .map(|p| p.name.clone());
                if let Some(name) = name {
                    self.model.add_friend(&name);
                    self.profile.befriend(&name);
                    self.save();
                    self.say(format!("{name} is a friend now"));
                }
            }
            KeyCode::Char('f') => self.favourite(Some(server)),
            KeyCode::Char('c') => self.join(Some(server)),
            _ => {}
        }
    }

    fn favourite(&mut self, key: Option<Key>) {
        let Some(k) = key else { return };
        let on = self.model.toggle_favourite(&k);
        self.save();
        let name = self.model.row(&k).map(Row::name).unwrap_or_default();
        self.say(format!(
            "{} {}",
            printable(&name),
            if on {
                "is a favourite"
            } else {
                "is no longer a favourite"
            }
        ));
    }

    fn join(&mut self, key: Option<Key>) {
        let Some(k) = key else { return };
        let Some(row) = self.model.row(&k) else {
            return;
        };
        let j = join::join(k.1, row.game.as_deref(), row.join_address());
        let best = j.best().to_owned();
        self.profile.used(&super::model::id(&k));
        self.save();
        self.clipboard = Some(best.clone());
        let also = if j.link.is_some() {
            format!("  (console: {})", j.command)
        } else {
            String::new()
        };
        self.say(format!("join: {best}{also}  (copied)"));
    }

    /// Draws the whole screen.
    pub(crate) fn draw(&mut self, frame: &mut Frame<'_>) {
        let area = frame.area();
        if area.height < 4 || area.width < 20 {
            frame.render_widget(
                Paragraph::new("muster browse: the terminal is too small"),
                area,
            );
            return;
        }
        let body = Rect::new(area.x, area.y + 1, area.width, area.height - 3);
        let header = Rect::new(area.x, area.y, area.width, 1);
        let status = Rect::new(area.x, area.y + area.height - 2, area.width, 1);
        let bottom = Rect::new(area.x, area.y + area.height - 1, area.width, 1);
        // The table first: it counts the rows the header reports.
        match self.mode.clone() {
            Mode::Details(k) => self.draw_details(frame, body, k),
            Mode::Games(at) => self.draw_games(frame, body, at),
            Mode::Table | Mode::Search => self.draw_table(frame, body),
        }
        frame.render_widget(Paragraph::new(self.header_line()), header);
        frame.render_widget(
            Paragraph::new(fit(&self.status_line(), status.width.into())),
            status,
        );
        let last = match self.mode {
            Mode::Search => format!(
                "search: {}▏  (Enter keeps, Esc clears)",
                self.model.filters.search
            ),
            _ if !self.message.is_empty() => self.message.clone(),
            Mode::Details(_) => "↑↓ player  p friend  f favourite  c join  Esc back  q quit".into(),
            Mode::Games(_) => "↑↓ game  Space show or not  a every game  Enter back".into(),
            Mode::Table => {
                "/ search s sort r rev f fav F favs e empty u full g games ⏎ info c join q quit"
                    .into()
            }
        };
        frame.render_widget(
            Paragraph::new(fit(&printable(&last), bottom.width.into()))
                .style(Style::default().add_modifier(Modifier::DIM)),
            bottom,
        );
    }

    fn header_line(&self) -> String {
        let f = &self.model.filters;
        let view = self.shown;
        let mut parts = vec![format!(
            "muster browse: {} servers, {view} shown",
            self.model.len()
        )];
        parts.push(format!(
            "sort: {}{}",
            f.sort.name(),
            if f.reverse { " (reversed)" } else { "" }
        ));
        if !f.games.is_empty() {
            let games: Vec<&str> = f.games.iter().map(String::as_str).collect();
            parts.push(format!("games: {}", games.join(", ")));
        }
        let mut flags = Vec::new();
        if f.favourites_only {
            flags.push("favourites");
        }
        if f.hide_empty {
            flags.push("no empty");
        }
        if f.hide_full {
            flags.push("no full");
        }
        if !flags.is_empty() {
            parts.push(flags.join(", "));
        }
        if !f.search.is_empty() {
            parts.push(format!("search: {}", f.search));
        }
        printable(&parts.join("  |  "))
    }

    fn status_line(&self) -> String {
        let mut asking = 0;
        let mut ok = 0;
        let mut failed = Vec::new();
        for (label, state) in self.model.masters() {
            match state {
                MasterState::Asking => asking += 1,
                MasterState::Listed(_) => ok += 1,
                MasterState::Failed(e) => failed.push(format!("{label}: {e}")),
            }
        }
        let mut parts = vec![format!("masters: {ok} ok")];
        if asking > 0 {
            parts.push(format!("{asking} asking"));
        }
        if !failed.is_empty() {
            parts.push(format!("{} unreachable", failed.len()));
        }
        let friends: Vec<String> = self
            .model
            .friends_online()
            .into_iter()
            .map(|(f, server, _)| format!("{f} @ {server}"))
            .collect();
        if !friends.is_empty() {
            parts.push(format!("friends: {}", friends.join(", ")));
        }
        // Why masters failed comes last: it is the longest and the least urgent.
        if !failed.is_empty() {
            parts.push(format!("({})", failed.join("; ")));
        }
        printable(&parts.join("  "))
    }

    fn draw_table(&mut self, frame: &mut Frame<'_>, area: Rect) {
        let cols = Columns::for_width(area.width.into());
        let view = self.model.view();
        self.shown = view.len();
        let rows_fit = usize::from(area.height).saturating_sub(1);
        let selected = self.current(&view);
        let at = selected
            .and_then(|k| view.iter().position(|r| r.key == k))
            .unwrap_or(0);
        if at < self.offset {
            self.offset = at;
        } else if rows_fit > 0 && at >= self.offset + rows_fit {
            self.offset = at + 1 - rows_fit;
        }
        self.offset = self.offset.min(view.len().saturating_sub(rows_fit.max(1)));
        let mut lines = vec![Line::styled(
            cols.header(),
            Style::default().add_modifier(Modifier::BOLD),
        )];
        let shown: Vec<&Row> = view
            .iter()
            .skip(self.offset)
            .take(rows_fit)
            .copied()
            .collect();
        for r in &shown {
            let text = cols.row(r, self.model.is_favourite(&r.key));
            let style = if Some(r.key) == selected {
                Style::default().add_modifier(Modifier::REVERSED)
            } else if r.down() {
                Style::default().add_modifier(Modifier::DIM)
            } else {
                Style::default()
            };
            lines.push(Line::styled(text, style));
        }
        self.on_screen = shown.iter().map(|r| r.key).collect();
        self.index = at;
        self.selected = selected;
        frame.render_widget(Paragraph::new(lines), area);
    }

    fn draw_games(&mut self, frame: &mut Frame<'_>, area: Rect, at: usize) {
        let w = usize::from(area.width);
        let chosen = &self.model.filters.games;
        let mut lines = vec![Line::styled(
            fit(
                if chosen.is_empty() {
                    "GAMES (none chosen: every game is shown)"
                } else {
                    "GAMES"
                },
                w,
            ),
            Style::default().add_modifier(Modifier::BOLD),
        )];
        let games = self.model.games();
        let room = usize::from(area.height).saturating_sub(1);
        let first = at.saturating_sub(room.saturating_sub(1));
        for (i, g) in games.iter().enumerate().skip(first).take(room) {
            let mark = if chosen.contains(g) { "[x]" } else { "[ ]" };
            let text = fit(&format!("{mark} {:<14} {}", g, game_name(g)), w);
            let style = if i == at {
                Style::default().add_modifier(Modifier::REVERSED)
            } else {
                Style::default()
            };
            lines.push(Line::styled(text, style));
        }
        frame.render_widget(Paragraph::new(lines), area);
    }

    fn draw_details(&mut self, frame: &mut Frame<'_>, area: Rect, key: Key) {
        self.on_screen = vec![key];
        let Some(row) = self.model.row(&key) else {
            frame.render_widget(Paragraph::new("the server is no longer listed"), area);
            return;
        };
        let w = usize::from(area.width);
        let j = join::join(key.1, row.game.as_deref(), row.join_address());
        let mut lines = vec![
            Line::styled(
                fit(&printable(&row.name()), w),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Line::raw(fit(
                &format!(
                    "{}  {}  {}{}",
                    key.0,
                    key.1,
                    row.game
                        .as_deref()
                        .map(muster_proto::games::name_or_key)
                        .unwrap_or("?"),
                    if row.down() { "  DOWN" } else { "" }
                ),
                w,
            )),
            Line::raw(fit(&format!("join: {}", j.best()), w)),
        ];
        let half = w / 2;
        let (players, rules) = match &row.info {
            Some(i) => (i.players.clone(), i.rules.clone()),
            None => (Vec::new(), Vec::new()),
        };
        let info = row.info.clone();
        if let Some(i) = &info {
            lines.push(Line::raw(fit(
                &format!(
                    "map {}  players {}/{}  ping {}",
                    printable(&i.map),
                    i.num_players,
                    i.max_players,
                    i.ping_us
                        .map_or("-".into(), |p| format!("{} ms", ping_text(p)))
                ),
                w,
            )));
        }
        lines.push(Line::styled(
            format!(
                "{}{}",
                fit("PLAYERS (p: friend)", half),
                fit("RULES", w - half)
            ),
            Style::default().add_modifier(Modifier::BOLD),
        ));
        let room = usize::from(area.height).saturating_sub(lines.len());
        let first = self.player.saturating_sub(room.saturating_sub(1));
        for n in 0..room {
            let p = players.get(first + n).map(|p| {
                let score = p.score.map(|s| s.to_string()).unwrap_or_default();
                let name_w = half.saturating_sub(8);
                format!(
                    "{}{} ",
                    fit(&printable(&p.name), name_w),
                    fit_right(&score, 6)
                )
            });
            let r = rules
                .get(n)
                .map(|(k, v)| format!("{} {}", printable(k), printable(v)));
            if p.is_none() && r.is_none() {
                break;
            }
            let left = fit(&p.unwrap_or_default(), half);
            let right = fit(&r.unwrap_or_default(), w - half);
            let selected = first + n == self.player && first + n < players.len();
            let mut line = Line::raw(format!("{left}{right}"));
            if selected {
                line = Line::from(vec![
                    ratatui::text::Span::styled(
                        left,
                        Style::default().add_modifier(Modifier::REVERSED),
                    ),
                    ratatui::text::Span::raw(right),
                ]);
            }
            lines.push(line);
        }
        frame.render_widget(Paragraph::new(lines), area);
    }
}

/// The name of the game `key`: the protocol crate's, else the directory's, else the key.
fn game_name(key: &str) -> &str {
    muster_proto::games::display_name(key)
        .or_else(|| super::directory::game(key).map(|g| g.name))
        .unwrap_or(key)
}

/// The table's column widths for a terminal `width` columns wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Columns {
    name: usize,
    game: usize,
    map: usize,
}

const MARK: usize = 2;
const PLAYERS: usize = 7;
const PING: usize = 6;
/// The country (or continent) column: `DE`, `EU`.
const COUNTRY: usize = 3;

impl Columns {
    pub(crate) fn for_width(width: usize) -> Self {
        let game = if width >= 100 { 18 } else { 12 };
        let map = if width >= 100 { 18 } else { 14 };
        let fixed = MARK + game + map + COUNTRY + PLAYERS + PING + 6;
        Self {
            name: width.saturating_sub(fixed).max(8),
            game,
            map,
        }
    }

    fn header(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}",
            fit("", MARK),
            fit("NAME", self.name),
            fit("GAME", self.game),
            fit("MAP", self.map),
            fit("CC", COUNTRY),
            fit_right("PLAYERS", PLAYERS),
            fit_right("PING", PING)
        )
    }

    fn row(&self, r: &Row, favourite: bool) -> String {
        let mark = format!(
            "{}{}",
            if favourite { '*' } else { ' ' },
            if r.friends.is_empty() { ' ' } else { '@' }
        );
        let game = r.game.as_deref().map(game_name).unwrap_or_default();
        let (map, ping) = match &r.info {
            Some(i) => (i.map.clone(), i.ping_us.map(ping_text).unwrap_or_default()),
            None => (String::new(), String::new()),
        };
        let players = r
            .counts()
            .map(|(n, max)| format!("{n}/{max}"))
            .unwrap_or_default();
        let ping = if r.down() {
            "down".to_owned()
        } else if r.info.is_none() {
            "…".to_owned()
        } else {
            ping
        };
        format!(
            "{} {} {} {} {} {} {}",
            mark,
            fit(&printable(&r.name()), self.name),
            fit(&printable(game), self.game),
            fit(&printable(&map), self.map),
            fit(&printable(&r.country().unwrap_or_default()), COUNTRY),
            fit_right(&players, PLAYERS),
            fit_right(&ping, PING)
        )
    }
}

/// Runs the interface on the terminal until `q`: updates from `rx`, the keys on screen
/// published to `on_screen` for the engine's refreshes.
pub(crate) fn run(
    mut app: App,
    mut rx: mpsc::Receiver<Update>,
    on_screen: &watch::Sender<Vec<Key>>,
) -> anyhow::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let result = (|| -> anyhow::Result<()> {
        let mut drawn = None;
        let mut size = terminal.size()?;
        loop {
            for _ in 0..UPDATES_PER_FRAME {
                match rx.try_recv() {
                    Ok(u) => app.apply(u),
                    Err(_) => break,
                }
            }
            let now_size = terminal.size()?;
            if drawn != Some(app.version()) || now_size != size {
                size = now_size;
                terminal.draw(|f| app.draw(f))?;
                drawn = Some(app.version());
                on_screen.send_if_modified(|keys| {
                    let changed = *keys != app.on_screen;
                    if changed {
                        keys.clone_from(&app.on_screen);
                    }
                    changed
                });
                if let Some(text) = app.clipboard.take() {
                    let mut out = std::io::stdout();
                    out.write_all(join::osc52(&text).as_bytes())?;
                    out.flush()?;
                }
            }
            if event::poll(Duration::from_millis(50))? {
                match event::read()? {
                    Event::Key(k) => app.key(k),
                    Event::Resize(..) => app.ui_generation += 1,
                    _ => {}
                }
            }
            if app.quit {
                return Ok(());
            }
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::net::SocketAddr;

    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use unicode_width::UnicodeWidthStr as _;

    use super::*;
    use crate::browse::model::{Filters, Listing, PlayerLine, Summary};

    fn key(port: u16) -> Key {
        (SocketAddr::from(([127, 0, 0, 1], port)), "teeworlds")
    }

    fn summary(name: &str, players: &[&str], max: u32) -> Summary {
        Summary {
            name: name.into(),
            map: "dm1".into(),
            game: Some("ddnet".into()),
            num_players: u32::try_from(players.len()).unwrap(),
            max_players: max,
            players: players
                .iter()
                .map(|p| PlayerLine {
                    name: (*p).into(),
                    ..PlayerLine::default()
                })
                .collect(),
            ping_us: Some(12_000),
            ..Summary::default()
        }
    }

    fn app() -> App {
        let mut app = App::new(
            Model::new(Filters::default(), BTreeSet::new(), &[]),
            Profile::default(),
            None,
        );
        app.apply(Update::Answered(
            key(1),
            Box::new(summary("Plain", &["ann"], 8)),
            1,
        ));
        app.apply(Update::Answered(
            key(2),
            Box::new(summary(
                "日本語のとても長いサーバー名前です本当に長い",
                &["bo", "cy"],
                8,
            )),
            1,
        ));
        app.apply(Update::Listed(vec![Listing {
            name: Some("Listed only".into()),
            location: Some("eu:de".into()),
            ..Listing::bare(key(3))
        }]));
        app
    }

    /// The screen as lines of text, a wide character once (its second cell skipped).
    fn screen(app: &mut App, width: u16, height: u16) -> Vec<String> {
        let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
        t.draw(|f| app.draw(f)).unwrap();
        let buf = t.backend().buffer().clone();
        (0..height)
            .map(|y| {
                let mut line = String::new();
                let mut skip = 0;
                for x in 0..width {
                    let s = buf[(x, y)].symbol();
                    if skip > 0 {
                        skip -= 1;
                        continue;
                    }
                    line.push_str(s);
                    skip = s.width().saturating_sub(1);
                }
                line
            })
            .collect()
    }

    fn press(app: &mut App, code: KeyCode) {
        app.key(KeyEvent::new(code, KeyModifiers::NONE));
    }

    #[test]
    fn columns_stay_aligned_with_wide_names_at_80_columns() {
        let mut app = app();
        let lines = screen(&mut app, 80, 24);
        let header = lines.iter().find(|l| l.contains("PLAYERS")).unwrap();
        let end = |l: &str, needle: &str| {
            let at = l.find(needle).unwrap();
            l[..at + needle.len()].width()
        };
        let column = end(header, "PLAYERS");
        let wide = lines.iter().find(|l| l.contains("日本語")).unwrap();
        assert_eq!(end(wide, "2/8"), column, "{lines:#?}");
        assert_eq!(
            end(lines.iter().find(|l| l.contains("Plain")).unwrap(), "1/8"),
            column
        );
        for l in &lines {
            assert_eq!(l.width(), 80, "{l:?}");
        }
        // The keys' line fits whole.
        assert!(lines[23].trim_end().ends_with("q quit"), "{}", lines[23]);
        // A server listed but not answered yet waits for its answer.
        assert!(
            lines
                .iter()
                .any(|l| l.contains("Listed only") && l.trim_end().ends_with('…'))
        );
        // The country the list gave, in its column under the header's.
        let cc = |l: &str, needle: &str| l[..l.find(needle).unwrap()].width();
        let listed = lines.iter().find(|l| l.contains("Listed only")).unwrap();
        assert_eq!(cc(listed, " DE "), cc(header, " CC "), "{lines:#?}");
    }

    #[test]
    fn redraws_are_asked_for_only_when_something_changed() {
        let mut app = app();
        let v = app.version();
        let _ = screen(&mut app, 80, 24);
        assert_eq!(app.version(), v);
        press(&mut app, KeyCode::Char('x'));
        assert_eq!(app.version(), v, "an unbound key changes nothing");
        press(&mut app, KeyCode::Char('s'));
        assert_ne!(app.version(), v);
    }

    #[test]
    fn c_copies_the_link_and_remembers_the_server() {
        let mut app = app();
        let _ = screen(&mut app, 80, 24);
        press(&mut app, KeyCode::Home);
        press(&mut app, KeyCode::Char('c'));
        // The top row is the fullest server, key(2), a DDNet one.
        assert_eq!(app.clipboard.as_deref(), Some("ddnet://127.0.0.1:2"));
        assert!(app.message.starts_with("join: ddnet://127.0.0.1:2"));
        assert_eq!(app.profile.recent, ["teeworlds 127.0.0.1:2"]);
    }

    #[test]
    fn c_joins_the_game_port_an_answer_reports() {
        let mut app = app();
        let query = (SocketAddr::from(([127, 0, 0, 1], 7778)), "gamespy1");
        let mut s = summary("UT", &["a", "b", "c"], 8);
        s.game = Some("ut".into());
        s.game_address = Some(SocketAddr::from(([127, 0, 0, 1], 7777)));
        app.apply(Update::Answered(query, Box::new(s), 1));
        let _ = screen(&mut app, 80, 24);
        press(&mut app, KeyCode::Home);
        press(&mut app, KeyCode::Char('c'));
        assert_eq!(app.clipboard.as_deref(), Some("unreal://127.0.0.1:7777"));
    }

    #[test]
    fn details_list_players_and_p_befriends_the_highlighted_one() {
        let mut app = app();
        let _ = screen(&mut app, 80, 24);
        press(&mut app, KeyCode::Home);
        press(&mut app, KeyCode::Enter);
        assert_eq!(app.mode, Mode::Details(key(2)));
        let lines = screen(&mut app, 80, 24);
        assert!(lines.iter().any(|l| l.starts_with("bo ")), "{lines:#?}");
        press(&mut app, KeyCode::Down);
        press(&mut app, KeyCode::Char('p'));
        assert_eq!(app.profile.friends, ["cy"]);
        assert_eq!(app.model.friends_online().len(), 1);
        press(&mut app, KeyCode::Esc);
        assert_eq!(app.mode, Mode::Table);
        assert_eq!(
            app.on_screen,
            vec![key(2)],
            "details query only their server"
        );
        let _ = screen(&mut app, 80, 24);
        assert_eq!(app.on_screen.len(), 3);
    }

    #[test]
    fn twenty_thousand_servers_draw_only_the_rows_on_screen() {
        let mut app = app();
        let rows = (0..20_000u16)
            .map(|i| Listing {
                game: Some("ddnet".to_owned()),
                name: Some(format!("S{i}")),
                ..Listing::bare(key(1000 + i))
            })
            .collect();
        app.apply(Update::Listed(rows));
        let lines = screen(&mut app, 80, 24);
        assert!(lines[0].contains("20003 servers"), "{}", lines[0]);
        // Header line, table header, 20 rows, status and keys.
        assert_eq!(app.on_screen.len(), 20);
        press(&mut app, KeyCode::End);
        let _ = screen(&mut app, 80, 24);
        assert_eq!(
            app.on_screen.last(),
            app.model.view().last().map(|r| &r.key)
        );
    }
}
