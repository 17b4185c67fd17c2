//! A probe's answers as Prometheus metrics, in a `prometheus-client` registry: one registry
//! per request, encoded once.
//!
//! Label values come from servers, so each is the plain text (colour codes and control
//! characters removed), cut to [`MAX_LABEL_CHARS`] characters, and a server's players are
//! exported up to [`MAX_PLAYER_SERIES`] of them.

use std::time::Duration;

use muster_proto::{RawValue, ServerInfo};
use muster_query::MasterEntry;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Longest label value, in characters; longer names and maps are cut.
pub const MAX_LABEL_CHARS: usize = 64;

/// Most players of one server with a score series; the rest are counted in
/// `muster_server_players_omitted`.
pub const MAX_PLAYER_SERIES: usize = 64;

/// The content type of [`Probed::encode`]'s text (OpenMetrics, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// The metrics of one probe.
#[derive(Debug)]
pub struct Probed {
    registry: Registry,
    success: Family<Labels, Gauge>,
    duration: FloatGauge,
    players: Family<Labels, Gauge>,
    max_players: Family<Labels, Gauge>,
    bots: Family<Labels, Gauge>,
    ping: Family<Labels, FloatGauge>,
    info: Family<Labels, Gauge>,
    score: Family<Labels, Gauge>,
    players_omitted: Family<Labels, Gauge>,
    list_success: Gauge,
    listed: Gauge,
    omitted: Gauge,
}

impl Default for Probed {
    fn default() -> Self {
        Self::new()
    }
}

/// `s` fit for a label value: its plain text without control characters, cut to
/// [`MAX_LABEL_CHARS`] characters.
#[must_use]
pub fn label_value(plain: &str) -> String {
    plain
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_LABEL_CHARS)
        .collect()
}

fn labels(base: &[(&str, &str)], more: &[(&str, String)]) -> Labels {
    base.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .chain(more.iter().map(|(k, v)| ((*k).to_owned(), v.clone())))
        .collect()
}

fn saturating_i64(n: u32) -> i64 {
    i64::from(n)
}

/// Bots, where the answer says: A2S counts them in INFO; Teeworlds 0.7 flags each one.
fn bots(info: &ServerInfo) -> Option<i64> {
    if let Some(RawValue::Int(n)) = info.raw_field("bots") {
        return Some(*n);
    }
    let flagged = info
        .players
        .iter()
        .filter(|p| {
            p.raw
                .iter()
                .any(|(k, v)| k == "bot" && *v == RawValue::Bool(true))
        })
        .count();
    (flagged > 0).then(|| i64::try_from(flagged).unwrap_or(i64::MAX))
}

impl Probed {
    /// An empty registry with every metric registered.
    #[must_use]
    pub fn new() -> Self {
        let mut r = Registry::default();
        let p = Self {
            success: Family::default(),
            duration: FloatGauge::default(),
            players: Family::default(),
            max_players: Family::default(),
            bots: Family::default(),
            ping: Family::default(),
            info: Family::default(),
            score: Family::default(),
            players_omitted: Family::default(),
            list_success: Gauge::default(),
            listed: Gauge::default(),
            omitted: Gauge::default(),
            registry: Registry::default(),
        };
        r.register(
            "muster_probe_success",
            "1 when the server answered the probe, 0 when it did not",
            p.success.clone(),
        );
        r.register(
            "muster_probe_duration_seconds",
            "Time the whole probe took",
            p.duration.clone(),
        );
        r.register(
            "muster_server_players",
            "Players on the server, as it counts them",
            p.players.clone(),
        );
        r.register(
            "muster_server_max_players",
            "Player slots",
            p.max_players.clone(),
        );
        r.register(
            "muster_server_bots",
            "Bots among the players, where the protocol says",
            p.bots.clone(),
        );
        r.register(
            "muster_server_ping_seconds",
            "Round-trip time of the query's first exchange",
            p.ping.clone(),
        );
        r.register(
            "muster_server_info",
            "Always 1; the server's name, map, game type and game as labels",
            p.info.clone(),
        );
        r.register(
            "muster_player_score",
            "Score of each listed player, where the protocol has one",
            p.score.clone(),
        );
        r.register(
            "muster_server_players_omitted",
            "Listed players left out of muster_player_score by the per-server cap",
            p.players_omitted.clone(),
        );
        Self { registry: r, ..p }
    }

    /// The metrics of one server, under `base` labels (none for `?target=`; the listed
    /// address for `?master=`), from its answer (`None`: it did not answer). `players`: export
    /// each player's score.
    pub fn server(&mut self, base: &[(&str, &str)], info: Option<&ServerInfo>, players: bool) {
        let key = labels(base, &[]);
        let Some(info) = info else {
            self.success.get_or_create(&key).set(0);
            return;
        };
        self.success.get_or_create(&key).set(1);
        self.players
            .get_or_create(&key)
            .set(saturating_i64(info.num_players));
        self.max_players
            .get_or_create(&key)
            .set(saturating_i64(info.max_players));
        if let Some(n) = bots(info) {
            self.bots.get_or_create(&key).set(n);
        }
        if let Some(ping) = info.ping {
            self.ping.get_or_create(&key).set(ping.as_secs_f64());
        }
        let game = muster_proto::games::key_of_answer(info).unwrap_or_default();
        self.info
            .get_or_create(&labels(
                base,
                &[
                    ("name", label_value(&info.name.plain)),
                    ("map", label_value(&info.map.plain)),
                    ("game_type", label_value(&info.game_type.plain)),
                    ("game", label_value(&game)),
                    ("protocol", info.protocol.name().to_owned()),
                ],
            ))
            .set(1);
        if !players {
            return;
        }
        let mut seen: Vec<String> = Vec::new();
        let mut omitted = 0i64;
        for p in &info.players {
            let Some(score) = p.score else { continue };
            if seen.len() >= MAX_PLAYER_SERIES {
                omitted = omitted.saturating_add(1);
                continue;
            }
            // Two players of one name get one series each.
            let plain = label_value(&p.name.plain);
            let mut name = plain.clone();
            let mut n = 1;
            while seen.contains(&name) {
                n += 1;
                name = format!("{plain} ({n})");
            }
            self.score
                .get_or_create(&labels(base, &[("player", name.clone())]))
                .set(score);
            seen.push(name);
        }
        self.players_omitted.get_or_create(&key).set(omitted);
    }

    /// A management-server entry: the list says its players and slots itself.
    pub fn listed_entry(&mut self, e: &MasterEntry) {
        let server = e.address.to_string();
        let key = labels(&[("server", &server)], &[]);
        self.success.get_or_create(&key).set(1);
        if let Some(n) = e.num_players {
            self.players.get_or_create(&key).set(saturating_i64(n));
        }
        if let Some(n) = e.max_players {
            self.max_players.get_or_create(&key).set(saturating_i64(n));
        }
        if let Some(name) = &e.name {
            self.info
                .get_or_create(&labels(
                    &[("server", &server)],
                    &[("name", label_value(name))],
                ))
                .set(1);
        }
    }

    /// What the master's list gave: whether it answered, how many servers it listed, how
    /// many of them the series cap left out. Registers the master's metrics.
    pub fn master_list(&mut self, answered: bool, listed: usize, omitted: usize) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.list_success.set(i64::from(answered));
        self.listed.set(count(listed));
        self.omitted.set(count(omitted));
        self.registry.register(
            "muster_master_success",
            "1 when the master answered with a list, 0 when it did not",
            self.list_success.clone(),
        );
        self.registry.register(
            "muster_master_servers",
            "Servers the master listed",
            self.listed.clone(),
        );
        self.registry.register(
            "muster_master_servers_omitted",
            "Listed servers not asked, beyond the exporter's series cap",
            self.omitted.clone(),
        );
    }

    /// The probe's whole time.
    pub fn duration(&mut self, d: Duration) {
        self.duration.set(d.as_secs_f64());
    }

    /// The registry as OpenMetrics text (see [`CONTENT_TYPE`]).
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_proto::model::{Player, Protocol, Text};

    fn text(s: &str) -> Text {
        Text {
            raw: s.as_bytes().to_vec(),
            text: s.to_owned(),
            plain: s.to_owned(),
            lossy: false,
        }
    }

    fn player(name: &str, score: i64) -> Player {
        Player {
            name: text(name),
            score: Some(score),
            ..Player::default()
        }
    }

    #[test]
    fn an_answer_becomes_gauges_and_one_info_series() {
        let mut info = ServerInfo::new(Protocol::A2s);
        info.name = Text {
            plain: format!("Big\tServer {}", "x".repeat(100)),
            ..text("^1Big")
        };
        info.map = text("de_dust2");
        info.num_players = 3;
        info.max_players = 16;
        info.ping = Some(Duration::from_millis(25));
        info.raw.push(("bots".into(), RawValue::Int(1)));
        info.players = vec![player("a", 5), player("a", 7), player("b", -2)];
        let mut p = Probed::new();
        p.server(&[], Some(&info), true);
        p.duration(Duration::from_millis(40));
        let t = p.encode();
        for line in [
            "muster_probe_success 1\n",
            "muster_server_players 3\n",
            "muster_server_max_players 16\n",
            "muster_server_bots 1\n",
            "muster_server_ping_seconds 0.025\n",
            "muster_probe_duration_seconds 0.04\n",
            "muster_player_score{player=\"a\"} 5\n",
            "muster_player_score{player=\"a (2)\"} 7\n",
            "muster_player_score{player=\"b\"} -2\n",
            "muster_server_players_omitted 0\n",
        ] {
            assert!(t.contains(line), "{line:?} missing from\n{t}");
        }
        let name = format!("BigServer {}", "x".repeat(MAX_LABEL_CHARS - 10));
        assert!(
            t.contains(&format!(
                "muster_server_info{{name=\"{name}\",map=\"de_dust2\""
            )),
            "{t}"
        );
        assert!(t.ends_with("# EOF\n"), "{t}");
    }

    #[test]
    fn players_beyond_the_cap_are_counted_not_exported() {
        let mut info = ServerInfo::new(Protocol::Quake3);
        info.players = (0..MAX_PLAYER_SERIES + 3)
            .map(|i| player(&format!("p{i}"), 1))
            .collect();
        let mut p = Probed::new();
        p.server(&[], Some(&info), true);
        let t = p.encode();
        assert_eq!(t.matches("muster_player_score{").count(), MAX_PLAYER_SERIES);
        assert!(t.contains("muster_server_players_omitted 3\n"), "{t}");
        assert!(!t.contains("muster_server_bots"), "no bots known: {t}");
    }

    #[test]
    fn a_silent_server_is_success_0_and_nothing_else() {
        let mut p = Probed::new();
        p.server(&[("server", "127.0.0.1:1")], None, false);
        let t = p.encode();
        assert!(
            t.contains("muster_probe_success{server=\"127.0.0.1:1\"} 0\n"),
            "{t}"
        );
        assert!(!t.contains("muster_server_players{"), "{t}");
    }

    #[test]
    fn a_master_says_its_list_size_and_what_the_cap_left_out() {
        let mut p = Probed::new();
        p.master_list(true, 1200, 200);
        let t = p.encode();
        assert!(t.contains("muster_master_success 1\n"), "{t}");
        assert!(t.contains("muster_master_servers 1200\n"), "{t}");
        assert!(t.contains("muster_master_servers_omitted 200\n"), "{t}");
    }
}
