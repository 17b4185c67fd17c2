//! `muster watch`: poll servers at an interval and report what changed, one event per line,
//! to stdout, a command and a webhook.
//!
//! - [`machine`]: the pure event machine (previous state + poll outcome → events).
//! - [`driver`]: the polling loop over the query engine, master lists re-fetched each round.
//! - [`sinks`]: stdout, `--exec` and `--webhook`, none of which may hold up polling.

mod config;
mod driver;
mod machine;
mod notify;
mod sinks;
mod when;

use std::path::PathBuf;
use std::time::Duration;

use crate::output::Filter;
use crate::protocols::ProtocolArg;
use crate::timing::{TimingArgs, duration};

/// `muster watch`: the watch the flags describe, or every watch of `--config`.
pub(crate) async fn run(args: WatchArgs) -> anyhow::Result<u8> {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;

    let Some(path) = &args.config else {
        return driver::run(args).await;
    };
    let watches = config::load(path).map_err(|e| crate::query::UsageError(e.to_string()))?;
    type Run = Pin<Box<dyn Future<Output = anyhow::Result<u8>>>>;
    let mut runs: Vec<Run> = watches
        .into_iter()
        .map(|a| Box::pin(driver::run(a)) as Run)
        .collect();
    // Side by side on this task; the first that fails ends them all.
    std::future::poll_fn(|cx| {
        let mut i = 0;
        while let Some(r) = runs.get_mut(i) {
            match r.as_mut().poll(cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(_)) => {
                    drop(runs.swap_remove(i));
                }
                Poll::Pending => i += 1,
            }
        }
        if runs.is_empty() {
            Poll::Ready(Ok(crate::exit::OK))
        } else {
            Poll::Pending
        }
    })
    .await
}

const AFTER_HELP: &str = "\
Events (`event` in JSON; every event also has `address`, as given or as the master listed
it, and `time`, RFC 3339 UTC; and, when known, the server's `name`, `map`, `players`,
`max_players`):
  server_up       first answer, or answering again after server_down
  server_down     stopped answering (after the retries); `error` says why
  player_joined   `player` is on the server now
  player_left     `player` is not on the server any more
  map_changed     `map` is the new map, `previous` the old one
  name_changed    `name` is the new server name, `previous` the old one
  server_full     the player count reached the slots
  slot_free       the player count fell below the slots again
  friend_online   a --friend (`player`) is on the server: at its first answer too
  friend_offline  a --friend left the server, or the server went down

Players present at a server's first answer give no player_joined; server_full and slot_free
only report a change. Players are matched by their name without colour codes; two players of
one name count twice; where the protocol numbers players (unreal2), a rename is no event.
A --friend matches a whole name in any case; --friend '~TEXT' matches every name that
contains TEXT (any case), and one player may be several friends.
An answer whose player list is incomplete says nothing about players. A server that goes
down, or that its master stops listing, is forgotten: its next answer is a first answer.

--exec runs `sh -c CMD` once per event, with the event's JSON on stdin and MUSTER_EVENT and
MUSTER_ADDRESS set; its stdout goes to stderr. At most 4 run at once, 256 more wait; when
the wait queue is full its oldest event is dropped (logged). A command that fails is logged;
one running for 60 s is killed. --webhook POSTs the JSON (application/json), one event at a
time in order; a failure (no answer, 5xx, 408, 429) is retried 4 times, waiting 0.5, 1, 2
then 4 s; 256 events may wait, then the oldest is dropped (logged). On SIGINT or SIGTERM
watching stops, deliveries get 2 s to finish, and the exit code is 0 (2: bad command line).
The timing flags apply to each poll (--deadline bounds one poll of every server).

--notify KIND:URL sends each event to discord, slack, telegram, ntfy or json (one worker
each: in order, within the service's rate limits, a 429's wait honoured, failures retried
0.5, 1, 2, 4 s; 256 may wait, then the oldest is dropped). --status-message keeps one
message per server edited in place (discord, telegram); --state-file keeps their ids across
restarts. --when EXPR reports only matching events (`players>=8`, `server_down or
friend_online`, `not player_left`). --config FILE runs the [[watch]] tables of a TOML file.
See docs/watch.md.

Examples:
  muster watch -p teeworlds 127.0.0.1:8303 --friend '~nameless' --interval 10s -f text
  muster watch --master teeworlds:master.example:8300 --filter players>0 -f ndjson
  muster watch -p gameagent 10.0.0.5:7777 --when 'players>=8 or server_down' \\
    --notify 'telegram:https://api.telegram.org/bot<TOKEN>?chat_id=<ID>' --status-message
  muster watch --servers list.txt --exec 'notify-send \"$MUSTER_EVENT\" \"$MUSTER_ADDRESS\"'";

/// Flags of `muster watch`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct WatchArgs {
    /// Run the watches of this TOML file (`[[watch]]` tables: servers, masters, protocol,
    /// interval, friends, filters, when, notify, status_message, …) instead of one from
    /// the flags.
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "addresses", "servers_file", "masters", "notify", "when", "status_message",
        "state_file", "exec", "webhook", "friends", "filters", "protocol", "interval",
        "given_port_only", "format", "timeout", "retries", "rate", "deadline",
    ])]
    pub config: Option<PathBuf>,
    /// Game addresses to watch: host:port, a.b.c.d:port or `[v6]:port`.
    #[arg(value_name = "HOST:PORT")]
    pub addresses: Vec<String>,
    /// The query protocol of the addresses given and of file lines that name none; `auto`
    /// probes the conventional ports of every protocol.
    #[arg(long, short, value_enum, default_value = "auto")]
    pub protocol: ProtocolArg,
    /// Query exactly the ports given on the command line instead of deriving the query port
    /// from the game port.
    #[arg(long)]
    pub given_port_only: bool,
    /// A file of servers, one per line: `host:port` or `PROTOCOL host:port` (# starts a
    /// comment). Read once, at the start.
    #[arg(long = "servers", value_name = "FILE")]
    pub servers_file: Option<PathBuf>,
    /// A master whose servers to watch, as PROTOCOL:SOURCE: `teeworlds:HOST:PORT`,
    /// `gameagent:HOST:PORT`, `ddnet:URL-or-FILE`, `ut2003-text:URL-or-FILE`,
    /// `quake3:HOST:PORT` (dpmaster's `getservers 68`: Quake III Arena's IPv4 servers; for
    /// another game use `muster list -p quake3 --game` and --servers) (GameSpy lists need a
    /// game name: use `muster list` and --servers). Listed again at every interval; a
    /// master that fails keeps its last list. Repeatable.
    #[arg(long = "master", value_name = "PROTOCOL:SOURCE")]
    pub masters: Vec<String>,
    /// Report only servers matching EXPR (repeatable, all must hold): an event is printed
    /// when the server's answer before or after it matches. `players>0`, `players>=N`,
    /// `game=ut2`, `name~text`, `map=NAME`, `map~text`, `protocol=gamespy1`,
    /// `password=false`, `full=false`.
    #[arg(long = "filter", value_name = "EXPR", value_parser = Filter::parse)]
    pub filters: Vec<Filter>,
    /// Time from the start of one poll of every server to the start of the next (e.g. 10s,
    /// 1m). A poll that takes longer is followed by the next at once.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = interval)]
    pub interval: Duration,
    /// A player to report as friend_online/friend_offline: the whole name without colour
    /// codes, any case; `~TEXT` matches every name containing TEXT (`~nameless` matches
    /// `nameless tee`). Repeatable.
    #[arg(long = "friend", value_name = "NAME")]
    pub friends: Vec<String>,
    /// Run `sh -c CMD` for each event (its JSON on stdin; MUSTER_EVENT, MUSTER_ADDRESS set).
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
    /// POST each event's JSON to this http(s) URL, retrying failures.
    #[arg(long, value_name = "URL", value_parser = webhook_url)]
    pub webhook: Option<reqwest::Url>,
    /// Report only events matching EXPR (repeatable: any may match): an event kind
    /// (`server_down`, `friend_online`, `map_changed`, …) or a threshold on the server's
    /// count at that event (`players>=8`, `players<2`, `free_slots>0`, `max_players==16`),
    /// combined with `and`, `or`, `not` and parentheses.
    #[arg(long = "when", value_name = "EXPR", value_parser = when::parse)]
    pub when: Vec<when::When>,
    /// Send each event to a chat service, as KIND:URL (repeatable): `discord:WEBHOOK-URL`,
    /// `slack:WEBHOOK-URL`, `telegram:https://api.telegram.org/bot<TOKEN>?chat_id=<ID>`,
    /// `ntfy:https://ntfy.sh/<TOPIC>`, `json:URL` (the event's JSON, as --webhook).
    #[arg(long = "notify", value_name = "KIND:URL", value_parser = notify::parse)]
    pub notify: Vec<notify::Notifier>,
    /// Keep one message per server, edited in place as it changes (a live status board),
    /// instead of one message per event: Discord and Telegram notifiers.
    #[arg(long)]
    pub status_message: bool,
    /// Where --status-message keeps the ids of its messages (JSON), so that a restart edits
    /// them instead of posting new ones.
    #[arg(long, value_name = "FILE", requires = "status_message")]
    pub state_file: Option<PathBuf>,
    /// Output format: one JSON object or one readable line per event.
    #[arg(long, short, value_enum, default_value = "text")]
    pub format: sinks::EventFormat,
    #[command(flatten)]
    pub timing: TimingArgs,
}

fn interval(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err("the interval must be longer than zero".into());
    }
    Ok(d)
}

fn webhook_url(s: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(s).map_err(|e| format!("{e}"))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(format!("only http and https URLs, not {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_event_kind() {
        for kind in machine::EventKind::ALL {
            assert!(
                AFTER_HELP.contains(&format!("  {}  ", kind.name())),
                "{}",
                kind.name()
            );
        }
    }

    #[test]
    fn interval_and_url_checks() {
        assert_eq!(interval("250ms"), Ok(Duration::from_millis(250)));
        assert!(interval("0s").is_err());
        assert!(webhook_url("http://127.0.0.1:9/hook").is_ok());
        assert!(webhook_url("ftp://example.org/").is_err());
        assert!(webhook_url("not a url").is_err());
    }
}
