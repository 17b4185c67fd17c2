//! `GET /metrics`: every counter, gauge and per-server series of the daemon in the Prometheus
//! text format (0.0.4), assembled here and nowhere else. The counters live in
//! [`muster_core::metrics`]; the federation's rows in [`muster_core::board`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use muster_core::MasterHandle;
use muster_core::board::{Board, UpstreamStatus};
use muster_core::metrics::{LIMITED_SOURCE_WINDOW, Metrics};
use muster_core::registry::{Face, Timestamp};

/// The whole exposition of `h`: the counters, the listed servers per face, event streams, the
/// DDNet info file, the upstreams and the per-server series.
#[must_use]
pub fn exposition(h: &MasterHandle) -> String {
    let view = h.snapshot();
    let mut body = render(h.metrics(), &view.per_face());
    let _ = write!(
        body,
        "# HELP muster_event_streams Open event streams (GET /api/v1/events).\n\
         # TYPE muster_event_streams gauge\nmuster_event_streams {}\n",
        h.events().subscribers()
    );
    if let Some(f) = h.info_file() {
        let s = f.stats();
        let _ = write!(
            body,
            "# HELP muster_ddnet_infos DDNet infos in the registry's info file.\n\
             # TYPE muster_ddnet_infos gauge\nmuster_ddnet_infos {}\n\
             # HELP muster_ddnet_info_bytes Bytes of the DDNet info file: the infos in use, and \
             the file's length (replaced infos included until the next compaction).\n\
             # TYPE muster_ddnet_info_bytes gauge\nmuster_ddnet_info_bytes{{kind=\"live\"}} {}\n\
             muster_ddnet_info_bytes{{kind=\"file\"}} {}\n\
             # HELP muster_ddnet_info_compactions_total Compactions of the DDNet info file.\n\
             # TYPE muster_ddnet_info_compactions_total counter\n\
             muster_ddnet_info_compactions_total {}\n",
            s.infos, s.live, s.end, s.compactions
        );
    }
    let servers = view.listed().iter().map(|r| ServerSeries {
        address: r.shown_addr(),
        protocol: r.face.name(),
        game: &r.key.game,
        players: r.players(),
        up: r.poll_failures() == 0,
    });
    body.push_str(&render_servers(servers, h.metrics().server_series_max()));
    body
}

/// The Prometheus text exposition (format 0.0.4), with `listed` as the per-face gauge.
#[must_use]
pub fn render(m: &Metrics, listed: &BTreeMap<Face, usize>) -> String {
    let mut s = String::new();
    let counter = |s: &mut String, name: &str, help: &str, v: u64| {
        let _ = write!(
            s,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n"
        );
    };
    counter(
        &mut s,
        "muster_registrations_total",
        "Game servers newly registered.",
        m.registrations(),
    );
    counter(
        &mut s,
        "muster_verifications_failed_total",
        "Verification exchanges that failed.",
        m.verifications_failed(),
    );
    counter(
        &mut s,
        "muster_rate_limited_total",
        "Requests refused by a per-source token bucket.",
        m.rate_limited(),
    );
    let _ = write!(
        s,
        "# HELP muster_rate_limited_sources Sources (IPv4 addresses, IPv6 /64s) refused by a \
         per-source token bucket in the last {} s.\n# TYPE muster_rate_limited_sources gauge\n\
         muster_rate_limited_sources {}\n",
        LIMITED_SOURCE_WINDOW.as_secs(),
        m.rate_limited_sources()
    );
    let labelled = |s: &mut String, name: &str, help: &str, label: &str, m: BTreeMap<&str, u64>| {
        let _ = write!(s, "# HELP {name} {help}\n# TYPE {name} counter\n");
        for (k, v) in m {
            let _ = writeln!(s, "{name}{{{label}=\"{k}\"}} {v}");
        }
    };
    labelled(
        &mut s,
        "muster_list_requests_total",
        "List requests served, per face.",
        "face",
        m.list_requests(),
    );
    labelled(
        &mut s,
        "muster_limited_total",
        "Requests and connections refused by a per-source limit, per limit.",
        "limit",
        m.limited_counts(),
    );
    labelled(
        &mut s,
        "muster_drops_total",
        "Inputs dropped, per reason.",
        "reason",
        m.drop_counts(),
    );
    let _ = write!(
        s,
        "# HELP muster_servers Listed game servers, per registering face.\n# TYPE muster_servers gauge\n"
    );
    for (face, n) in listed {
        let _ = writeln!(s, "muster_servers{{protocol=\"{}\"}} {n}", face.name());
    }
    s.push_str(&render_board(m.upstreams()));
    s
}

/// One listed server's per-server gauges (see [`render_servers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSeries<'a> {
    /// The address the list shows.
    pub address: String,
    /// The registering face.
    pub protocol: &'static str,
    /// The game.
    pub game: &'a str,
    /// Players now.
    pub players: u32,
    /// Whether its polls succeed.
    pub up: bool,
}

/// A label value in the text format: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The per-server gauges `muster_server_players` and `muster_server_up` of the first `max`
/// of `servers` (list order, so the set is stable), and `muster_server_series_omitted`: how
/// many servers were left out to keep the number of series bounded.
#[must_use]
pub fn render_servers<'a>(
    servers: impl ExactSizeIterator<Item = ServerSeries<'a>>,
    max: usize,
) -> String {
    let total = servers.len();
    let shown: Vec<ServerSeries<'a>> = servers.take(max).collect();
    let mut s = String::new();
    let labels = |x: &ServerSeries<'_>| {
        format!(
            "address=\"{}\",protocol=\"{}\",game=\"{}\"",
            label(&x.address),
            x.protocol,
            label(x.game)
        )
    };
    let _ = write!(
        s,
        "# HELP muster_server_players Players on a listed server, from its last poll or report.\n\
         # TYPE muster_server_players gauge\n"
    );
    for x in &shown {
        let _ = writeln!(s, "muster_server_players{{{}}} {}", labels(x), x.players);
    }
    let _ = write!(
        s,
        "# HELP muster_server_up Whether a listed server answers its polls (0 while they fail).\n\
         # TYPE muster_server_up gauge\n"
    );
    for x in &shown {
        let _ = writeln!(s, "muster_server_up{{{}}} {}", labels(x), u8::from(x.up));
    }
    let _ = write!(
        s,
        "# HELP muster_server_series_omitted Listed servers without per-server series \
         (over http.server_metrics_max).\n# TYPE muster_server_series_omitted gauge\n\
         muster_server_series_omitted {}\n",
        total - shown.len()
    );
    s
}

/// The Prometheus text of every row (nothing when no upstream is configured).
#[must_use]
pub fn render_board(board: &Board) -> String {
    let rows = board.rows();
    let mut s = String::new();
    if rows.is_empty() {
        return s;
    }
    type Get = fn(&UpstreamStatus) -> u64;
    let series: [(&str, &str, &str, Get); 9] = [
        (
            "muster_upstream_last_success_seconds",
            "gauge",
            "Unix time of the upstream's last successful pull (0: never).",
            |r| r.last_success.map_or(0, Timestamp::as_secs),
        ),
        (
            "muster_upstream_failures_in_row",
            "gauge",
            "Pulls of the upstream failed in a row.",
            |r| u64::from(r.failures_in_row),
        ),
        (
            "muster_upstream_pulls_total",
            "counter",
            "Successful pulls of the upstream.",
            |r| r.pulls_ok,
        ),
        (
            "muster_upstream_pull_failures_total",
            "counter",
            "Failed pulls of the upstream.",
            |r| r.pulls_failed,
        ),
        (
            "muster_upstream_listed",
            "gauge",
            "Servers the upstream's last successful pull listed.",
            |r| r.listed as u64,
        ),
        (
            "muster_upstream_learned",
            "gauge",
            "Records the upstream is a source of.",
            |r| r.learned as u64,
        ),
        (
            "muster_upstream_verified_total",
            "counter",
            "Servers the upstream listed that answered this master's query and were listed.",
            |r| r.verified,
        ),
        (
            "muster_upstream_unanswered_total",
            "counter",
            "Servers the upstream listed that did not answer this master's query.",
            |r| r.unanswered,
        ),
        (
            "muster_upstream_unverified",
            "gauge",
            "Servers of the upstream waiting for verification.",
            |r| r.unverified as u64,
        ),
    ];
    for (name, kind, help, get) in series {
        let _ = write!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
        for r in &rows {
            let _ = writeln!(
                s,
                "{name}{{upstream=\"{}\",kind=\"{}\"}} {}",
                label(&r.name),
                r.kind,
                get(r)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::drops::DropReason;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.count_registration();
        m.count_registration();
        m.count_drop(DropReason::Malformed);
        m.count_list_request("http");
        m.count_rate_limited("192.0.2.1".parse().unwrap());
        m.count_rate_limited("192.0.2.1".parse().unwrap());
        m.count_rate_limited("2001:db8::1".parse().unwrap());
        m.count_rate_limited("2001:db8::2".parse().unwrap());
        m.count_verification_failed();
        m.count_limited("ddnet_register", "192.0.2.1".parse().unwrap());
        m.count_limited("ddnet_register", "192.0.2.1".parse().unwrap());
        m.count_limited("tcp_source_cap", "192.0.2.9".parse().unwrap());
        let listed = BTreeMap::from([(Face::GameSpy, 3), (Face::Mgmt, 0)]);
        let text = render(&m, &listed);
        let expect = "\
# HELP muster_registrations_total Game servers newly registered.
# TYPE muster_registrations_total counter
muster_registrations_total 2
# HELP muster_verifications_failed_total Verification exchanges that failed.
# TYPE muster_verifications_failed_total counter
muster_verifications_failed_total 1
# HELP muster_rate_limited_total Requests refused by a per-source token bucket.
# TYPE muster_rate_limited_total counter
muster_rate_limited_total 4
# HELP muster_rate_limited_sources Sources (IPv4 addresses, IPv6 /64s) refused by a per-source token bucket in the last 60 s.
# TYPE muster_rate_limited_sources gauge
muster_rate_limited_sources 2
# HELP muster_list_requests_total List requests served, per face.
# TYPE muster_list_requests_total counter
muster_list_requests_total{face=\"http\"} 1
# HELP muster_limited_total Requests and connections refused by a per-source limit, per limit.
# TYPE muster_limited_total counter
muster_limited_total{limit=\"ddnet_register\"} 2
muster_limited_total{limit=\"tcp_source_cap\"} 1
# HELP muster_drops_total Inputs dropped, per reason.
# TYPE muster_drops_total counter
muster_drops_total{reason=\"malformed\"} 1
# HELP muster_servers Listed game servers, per registering face.
# TYPE muster_servers gauge
muster_servers{protocol=\"gamespy\"} 3
muster_servers{protocol=\"mgmt\"} 0
";
        assert_eq!(text, expect);
        assert_eq!(m.drops("malformed"), 1);
    }

    #[test]
    fn per_server_series_are_escaped_and_capped() {
        let servers = vec![
            ServerSeries {
                address: "192.0.2.1:7777".into(),
                protocol: "gamespy",
                game: "ut",
                players: 5,
                up: true,
            },
            ServerSeries {
                address: "host\"x\\y\n:1".into(),
                protocol: "mgmt",
                game: "bomberman",
                players: 0,
                up: false,
            },
            ServerSeries {
                address: "192.0.2.3:7777".into(),
                protocol: "gamespy",
                game: "ut",
                players: 1,
                up: true,
            },
        ];
        let text = render_servers(servers.into_iter(), 2);
        assert!(text.contains(
            "muster_server_players{address=\"192.0.2.1:7777\",protocol=\"gamespy\",game=\"ut\"} 5\n"
        ), "{text}");
        assert!(text.contains(
            "muster_server_up{address=\"host\\\"x\\\\y\\n:1\",protocol=\"mgmt\",game=\"bomberman\"} 0\n"
        ), "{text}");
        assert!(!text.contains("192.0.2.3"), "capped at 2: {text}");
        assert!(text.contains("muster_server_series_omitted 1\n"), "{text}");
        assert_eq!(render_servers(Vec::new().into_iter(), 0).lines().count(), 7);
    }

    #[test]
    fn rows_render_one_series_per_upstream() {
        let b = Board::default();
        assert_eq!(render_board(&b), "");
        let i = b.register("a\"b", "gamespy");
        assert_eq!(b.register("a\"b", "gamespy"), i);
        let j = b.register("m", "muster");
        b.update(j, |r| {
            r.last_success = Some(Timestamp::from_secs(1_700_000_000));
            r.verified = 3;
            r.last_error = Some("x".repeat(1000));
        });
        let text = render_board(&b);
        assert!(text.contains(
            "muster_upstream_last_success_seconds{upstream=\"m\",kind=\"muster\"} 1700000000"
        ));
        assert!(
            text.contains("muster_upstream_verified_total{upstream=\"a\\\"b\",kind=\"gamespy\"} 0")
        );
        assert_eq!(
            b.get("m").unwrap().last_error.unwrap().len(),
            muster_core::board::MAX_ERROR_LEN
        );
        assert_eq!(text.matches("upstream=\"m\"").count(), 9);
    }
}
