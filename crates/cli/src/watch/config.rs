//! `muster watch --config FILE`: several watches in one TOML file, each with its servers,
//! protocol, interval, friends, conditions and notifiers, run side by side.
//!
//! ```toml
//! [[watch]]
//! servers = ["play.example:7777"]
//! protocol = "gameagent"
//! interval = "30s"
//! when = ["players>=8", "server_down"]
//! notify = ["discord:https://discord.com/api/webhooks/ID/TOKEN"]
//! status_message = true
//! ```
//!
//! Every value is checked by the same parser as its command-line flag; a wrong one is
//! reported as `FILE:LINE:COLUMN: watch[N].KEY: what is wrong`. Relative paths
//! (`servers_file`, `state_file`) are relative to the file's directory.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use clap::Parser as _;
use serde::Deserialize;
use toml::Spanned;

use super::WatchArgs;

/// Largest configuration file read.
const FILE_MAX: u64 = 1024 * 1024;
/// Most watches in one file.
const WATCHES_MAX: usize = 256;

/// The file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    watch: Vec<Spanned<Watch>>,
}

type Text = Spanned<String>;

/// One `[[watch]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Watch {
    #[serde(default)]
    servers: Vec<Text>,
    servers_file: Option<Text>,
    #[serde(default)]
    masters: Vec<Text>,
    protocol: Option<Text>,
    given_port_only: Option<bool>,
    interval: Option<Text>,
    #[serde(default)]
    friends: Vec<Text>,
    #[serde(default)]
    filters: Vec<Text>,
    #[serde(default)]
    when: Vec<Text>,
    #[serde(default)]
    notify: Vec<Text>,
    status_message: Option<bool>,
    state_file: Option<Text>,
    exec: Option<Text>,
    webhook: Option<Text>,
    format: Option<Text>,
    timeout: Option<Text>,
    retries: Option<Spanned<u32>>,
    rate: Option<Spanned<u32>>,
    deadline: Option<Text>,
}

/// What is wrong with a watch configuration, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigError {
    pub file: PathBuf,
    /// Line and column, from 1, when known.
    pub at: Option<(usize, usize)>,
    /// `watch[N].key`, when known.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((l, c)) = self.at {
            write!(f, ":{l}:{c}")?;
        }
        f.write_str(": ")?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Line and column (from 1, columns in characters) of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before.get(start..).map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// `command` parsed as `muster watch` would parse it.
#[derive(Debug, clap::Parser)]
#[command(name = "watch", no_binary_name = true)]
struct One {
    #[command(flatten)]
    args: WatchArgs,
}

struct Reader<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Reader<'_> {
    fn error(
        &self,
        span: Option<Range<usize>>,
        key: Option<String>,
        message: String,
    ) -> ConfigError {
        ConfigError {
            file: self.path.to_owned(),
            at: span.map(|s| line_col(self.text, s.start)),
            key,
            message,
        }
    }

    /// Check `value` with `check` (a flag's value parser); a located error if it fails.
    fn check<T, E: fmt::Display>(
        &self,
        index: usize,
        key: &str,
        value: &Text,
        check: impl Fn(&str) -> Result<T, E>,
    ) -> Result<(), ConfigError> {
        check(value.get_ref()).map(drop).map_err(|e| {
            self.error(
                Some(value.span()),
                Some(format!("watch[{index}].{key}")),
                e.to_string(),
            )
        })
    }

    /// A path as the file gives it, relative to the file's directory.
    fn path(&self, p: &str) -> String {
        let p = Path::new(p);
        if p.is_absolute() {
            return p.display().to_string();
        }
        self.path
            .parent()
            .unwrap_or(Path::new("."))
            .join(p)
            .display()
            .to_string()
    }

    /// The command line one watch stands for, every value checked on the way.
    fn watch(&self, index: usize, w: &Spanned<Watch>) -> Result<WatchArgs, ConfigError> {
        let span = w.span();
        let w = w.get_ref();
        let mut argv: Vec<String> = Vec::new();
        let mut flag = |name: &str, v: &str| {
            argv.push(format!("--{name}"));
            argv.push(v.to_owned());
        };
        for m in &w.masters {
            flag("master", m.get_ref());
        }
        if let Some(p) = &w.protocol {
            self.check(index, "protocol", p, |s| {
                <crate::protocols::ProtocolArg as clap::ValueEnum>::from_str(s, true)
            })?;
            flag("protocol", p.get_ref());
        }
        if let Some(i) = &w.interval {
            self.check(index, "interval", i, super::interval)?;
            flag("interval", i.get_ref());
        }
        for f in &w.friends {
            flag("friend", f.get_ref());
        }
        for f in &w.filters {
            self.check(index, "filters", f, crate::output::Filter::parse)?;
            flag("filter", f.get_ref());
        }
        for e in &w.when {
            self.check(index, "when", e, super::when::parse)?;
            flag("when", e.get_ref());
        }
        for n in &w.notify {
            self.check(index, "notify", n, super::notify::parse)?;
            flag("notify", n.get_ref());
        }
        if let Some(f) = &w.servers_file {
            flag("servers", &self.path(f.get_ref()));
        }
        if let Some(f) = &w.state_file {
            flag("state-file", &self.path(f.get_ref()));
        }
        if let Some(e) = &w.exec {
            flag("exec", e.get_ref());
        }
        if let Some(u) = &w.webhook {
            self.check(index, "webhook", u, super::webhook_url)?;
            flag("webhook", u.get_ref());
        }
        if let Some(f) = &w.format {
            self.check(index, "format", f, |s| {
                <super::sinks::EventFormat as clap::ValueEnum>::from_str(s, true)
            })?;
            flag("format", f.get_ref());
        }
        for (key, v) in [("timeout", &w.timeout), ("deadline", &w.deadline)] {
            if let Some(v) = v {
                self.check(index, key, v, crate::timing::duration)?;
                flag(key, v.get_ref());
            }
        }
        for (key, v) in [("retries", &w.retries), ("rate", &w.rate)] {
            if let Some(v) = v {
                flag(key, &v.get_ref().to_string());
            }
        }
        if w.given_port_only == Some(true) {
            argv.push("--given-port-only".into());
        }
        if w.status_message == Some(true) {
            argv.push("--status-message".into());
        }
        // Addresses last, after `--`: an address is never taken for a flag.
        argv.push("--".into());
        argv.extend(w.servers.iter().map(|s| s.get_ref().clone()));
        if w.servers.is_empty() && w.servers_file.is_none() && w.masters.is_empty() {
            return Err(self.error(
                Some(span),
                Some(format!("watch[{index}]")),
                "nothing to watch: give servers, servers_file and/or masters".into(),
            ));
        }
        One::try_parse_from(&argv).map(|o| o.args).map_err(|e| {
            // Every value was checked above; what is left is how values go together.
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            self.error(
                Some(span),
                Some(format!("watch[{index}]")),
                first.to_owned(),
            )
        })
    }
}

/// Read `path`: the arguments of each watch it holds.
pub(crate) fn load(path: &Path) -> Result<Vec<WatchArgs>, ConfigError> {
    let plain = |message: String| ConfigError {
        file: path.to_owned(),
        at: None,
        key: None,
        message,
    };
    let size = std::fs::metadata(path)
        .map_err(|e| plain(format!("cannot read: {e}")))?
        .len();
    if size > FILE_MAX {
        return Err(plain(format!("larger than {FILE_MAX} bytes")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| plain(format!("cannot read: {e}")))?;
    parse(path, &text)
}

/// The watches `text` (the contents of `path`) holds.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Vec<WatchArgs>, ConfigError> {
    let r = Reader { path, text };
    let file: File = toml::from_str(text)
        .map_err(|e| r.error(e.span(), None, e.message().trim_end().to_owned()))?;
    if file.watch.is_empty() {
        return Err(r.error(None, None, "no [[watch]] in the file".into()));
    }
    if file.watch.len() > WATCHES_MAX {
        return Err(r.error(None, None, format!("more than {WATCHES_MAX} watches")));
    }
    file.watch
        .iter()
        .enumerate()
        .map(|(i, w)| r.watch(i, w))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Vec<WatchArgs>, String> {
        parse(Path::new("/etc/muster/watch.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn several_watches_with_their_notifiers_and_conditions() {
        let got = parse_text(
            r#"
[[watch]]
servers = ["127.0.0.1:7777", "127.0.0.1:7787"]
protocol = "gameagent"
interval = "10s"
friends = ["bob"]
when = ["players>=8", "server_down"]
notify = ["discord:http://127.0.0.1:9/api/webhooks/1/t", "ntfy:http://127.0.0.1:9/alerts"]
status_message = true
state_file = "status.json"
timeout = "2s"
retries = 1

[[watch]]
masters = ["teeworlds:127.0.0.1:8300"]
servers_file = "/srv/list.txt"
filters = ["players>0"]
"#,
        )
        .unwrap();
        assert_eq!(got.len(), 2);
        let a = &got[0];
        assert_eq!(a.addresses, ["127.0.0.1:7777", "127.0.0.1:7787"]);
        assert_eq!(a.interval, std::time::Duration::from_secs(10));
        assert_eq!(a.when.len(), 2);
        assert_eq!(a.notify.len(), 2);
        assert!(a.status_message);
        assert_eq!(
            a.state_file.as_deref(),
            Some(Path::new("/etc/muster/status.json"))
        );
        assert_eq!(a.timing.retries, 1);
        assert_eq!(a.friends, ["bob"]);
        let b = &got[1];
        assert_eq!(b.masters, ["teeworlds:127.0.0.1:8300"]);
        assert_eq!(b.servers_file.as_deref(), Some(Path::new("/srv/list.txt")));
        assert_eq!(
            b.interval,
            std::time::Duration::from_secs(30),
            "the flag's default"
        );
        assert!(b.notify.is_empty());
    }

    #[test]
    fn errors_say_file_line_column_and_key() {
        for (text, want) in [
            (
                "[[watch]]\nservers = [\"a:1\"]\nwhen = [\"server_down\", \"players>=\"]\n",
                "/etc/muster/watch.toml:3:24: watch[0].when: at column 10: expected a number",
            ),
            (
                "[[watch]]\nservers = [\"a:1\"]\n\n[[watch]]\nservers = [\"b:1\"]\nnotify = [\"teams:http://x/\"]\n",
                "/etc/muster/watch.toml:6:11: watch[1].notify: unknown notifier",
            ),
            (
                "[[watch]]\nservers = [\"a:1\"]\ninterval = \"0s\"\n",
                "/etc/muster/watch.toml:3:12: watch[0].interval: the interval must be longer than zero",
            ),
            (
                "[[watch]]\nservers = [\"a:1\"]\nprotocol = \"quake9\"\n",
                "/etc/muster/watch.toml:3:12: watch[0].protocol: ",
            ),
            (
                "[[watch]]\nserver = [\"a:1\"]\n",
                "/etc/muster/watch.toml:2:1: unknown field `server`",
            ),
            (
                "[[watch]]\nservers = \"a:1\"\n",
                "/etc/muster/watch.toml:2:11: invalid type",
            ),
            (
                "[[watch]]\nprotocol = \"auto\"\n",
                "/etc/muster/watch.toml:1:1: watch[0]: nothing to watch",
            ),
            (
                "[[watch]]\nservers = [\"a:1\"]\nstate_file = \"s.json\"\n",
                "/etc/muster/watch.toml:1:1: watch[0]: ",
            ),
            (
                "# nothing\n",
                "/etc/muster/watch.toml: no [[watch]] in the file",
            ),
        ] {
            let e = parse_text(text).unwrap_err();
            assert!(e.starts_with(want), "{text:?}:\n got {e}\nwant {want}");
        }
    }
}
