//! The probe exporter: `GET /probe?target=ADDR&protocol=P` asks one game server once and
//! answers its state as Prometheus metrics; `GET /probe?master=KIND:ADDR` asks a master for
//! its list and then every listed server, in the manner of Prometheus' blackbox exporter (one
//! `scrape_config` with relabelling covers every server). `muster exporter` serves it alone,
//! `muster serve` beside its API ([`route`]).
//!
//! [`params`] reads the request, [`run`] asks the servers with the library API of
//! `muster-query`, [`metrics`] turns answers into a `prometheus-client` registry. Nothing here
//! keeps state between requests: every scrape asks again.

pub mod metrics;
pub mod params;
pub mod route;

use std::time::Duration;

use futures_util::StreamExt as _;
use muster_query::{
    ListedAddress, MasterEntry, Options, QueryProtocol, Target, list_one, query_many, query_one,
};

pub use metrics::Probed;
pub use params::{MasterKind, ParamError, ProbeRequest, parse_query};
pub use route::{ProbeSettings, router, serve};

/// Most listed servers one `?master=` probe asks and exports; the rest are counted in
/// `muster_master_servers_omitted`.
pub const MAX_MASTER_SERIES: usize = 1000;

/// Packets per second a `?master=` probe sends to the listed servers (the CLI's default
/// `--rate`): a thousand servers take a second to ask, not one burst.
pub const MASTER_PROBE_RATE: u32 = 1000;

/// Time a probe takes when Prometheus does not say its scrape timeout.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Subtracted from Prometheus' `X-Prometheus-Scrape-Timeout-Seconds`, so the answer is
/// written before Prometheus gives up on it.
pub const SCRAPE_TIMEOUT_MARGIN: Duration = Duration::from_millis(500);

/// The shortest time a probe is given, whatever the header says.
pub const MIN_PROBE_TIMEOUT: Duration = Duration::from_millis(100);

/// Longest wait of one attempt before a re-send (shorter when the probe's time is short).
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);

/// The header Prometheus sends with every scrape.
pub const SCRAPE_TIMEOUT_HEADER: &str = "x-prometheus-scrape-timeout-seconds";

/// The time a probe may take: Prometheus' scrape timeout less [`SCRAPE_TIMEOUT_MARGIN`],
/// [`DEFAULT_PROBE_TIMEOUT`] without the header (or with one that is not a number), never
/// more than `max` nor less than [`MIN_PROBE_TIMEOUT`].
#[must_use]
pub fn probe_timeout(header: Option<&str>, max: Duration) -> Duration {
    let asked = header
        .and_then(|h| h.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .map_or(DEFAULT_PROBE_TIMEOUT, |d| {
            d.saturating_sub(SCRAPE_TIMEOUT_MARGIN)
        });
    asked.min(max).max(MIN_PROBE_TIMEOUT)
}

/// Query-engine options for a probe that must end within `timeout`: the deadline, and
/// attempts short enough that three re-sends fit.
fn options(timeout: Duration) -> Options {
    Options {
        attempt_timeout: ATTEMPT_TIMEOUT.min(timeout / 4).max(MIN_PROBE_TIMEOUT / 4),
        retries: 3,
        deadline: Some(timeout),
        ..Options::default()
    }
}

/// Run `request` within `timeout` and build its metrics.
pub async fn run(request: &ProbeRequest, timeout: Duration) -> Probed {
    let started = tokio::time::Instant::now();
    match request {
        ProbeRequest::Server(target) => {
            let answer = query_one(target.clone(), options(timeout)).await.ok();
            let mut p = Probed::new();
            p.server(&[], answer.as_ref().map(|a| &a.info), true);
            p.duration(started.elapsed());
            p
        }
        ProbeRequest::Master(master) => {
            let mut p = Probed::new();
            // The list gets half the time at most; its servers the rest.
            let list =
                tokio::time::timeout(timeout / 2, list_one(&master.source, &options(timeout / 2)))
                    .await
                    .ok()
                    .and_then(Result::ok);
            let Some(list) = list else {
                p.master_list(false, 0, 0);
                p.duration(started.elapsed());
                return p;
            };
            let left = timeout.saturating_sub(started.elapsed());
            let omitted = list.len().saturating_sub(MAX_MASTER_SERIES);
            p.master_list(true, list.len(), omitted);
            let kept: Vec<&MasterEntry> = list.iter().take(MAX_MASTER_SERIES).collect();
            match master.kind.query_protocol() {
                // The management server's list says players and slots itself.
                None => {
                    for e in kept {
                        p.listed_entry(e);
                    }
                }
                Some(protocol) => {
                    let targets: Vec<Target> = kept
                        .iter()
                        .filter_map(|e| {
                            listed_target(master.kind, protocol, &e.address, e.query_address)
                        })
                        .collect();
                    let options = Options {
                        rate: Some(MASTER_PROBE_RATE),
                        ..options(left.max(MIN_PROBE_TIMEOUT))
                    };
                    let mut done = query_many(targets, options);
                    while let Some(outcome) = done.next().await {
                        let server = outcome.tag.address.to_string();
                        let info = outcome.outcome.as_ref().ok().map(|a| &a.info);
                        p.server(&[("server", &server)], info, false);
                    }
                }
            }
            p.duration(started.elapsed());
            p
        }
    }
}

/// The target that asks a server `kind`'s master listed (`None` for a host name: the list
/// is exported as listed, and host names are not resolved for a scrape).
fn listed_target(
    kind: MasterKind,
    protocol: QueryProtocol,
    listed: &ListedAddress,
    query_address: Option<std::net::SocketAddr>,
) -> Option<Target> {
    let ListedAddress::Ip(address) = *listed else {
        return None;
    };
    let mut t = Target::new(address, protocol);
    match kind {
        // GameSpy lists give the query address itself.
        MasterKind::Gamespy => t = t.given_port_only(),
        // The UT2003 list says where GameSpy answers.
        MasterKind::Ut2003Text => t.gamespy_address = query_address,
        _ => {}
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scrape_timeout_header_less_the_margin_bounds_the_probe() {
        let max = Duration::from_secs(30);
        assert_eq!(probe_timeout(None, max), DEFAULT_PROBE_TIMEOUT);
        assert_eq!(probe_timeout(Some("10"), max), Duration::from_millis(9500));
        assert_eq!(probe_timeout(Some(" 2.5 "), max), Duration::from_secs(2));
        assert_eq!(probe_timeout(Some("120"), max), max);
        assert_eq!(probe_timeout(Some("0.2"), max), MIN_PROBE_TIMEOUT);
        for bad in ["", "x", "-1", "NaN", "inf", "1e400"] {
            assert_eq!(
                probe_timeout(Some(bad), max),
                DEFAULT_PROBE_TIMEOUT,
                "{bad}"
            );
        }
    }

    fn ip(a: &str) -> ListedAddress {
        ListedAddress::Ip(a.parse().unwrap())
    }

    #[test]
    fn listed_servers_are_asked_where_their_list_says() {
        let gs = ip("127.0.0.1:7788");
        let q = Some("127.0.0.1:7788".parse().unwrap());
        let t = listed_target(MasterKind::Gamespy, QueryProtocol::Gamespy1, &gs, q).unwrap();
        assert!(
            t.given_port_only,
            "GameSpy lists give the query port itself"
        );
        assert_eq!(t.query_address(), "127.0.0.1:7788".parse().unwrap());
        let ut = ip("127.0.0.1:7777");
        let q = Some("127.0.0.1:7787".parse().unwrap());
        let t = listed_target(MasterKind::Ut2003Text, QueryProtocol::Unreal2, &ut, q).unwrap();
        assert_eq!(t.gamespy_address, Some("127.0.0.1:7787".parse().unwrap()));
        assert_eq!(t.query_address(), "127.0.0.1:7778".parse().unwrap());
        let q3 = ip("127.0.0.1:27960");
        let t = listed_target(MasterKind::Quake3, QueryProtocol::Quake3, &q3, None).unwrap();
        assert_eq!(
            t,
            Target::new("127.0.0.1:27960".parse().unwrap(), QueryProtocol::Quake3)
        );
        let host = ListedAddress::Host {
            host: "example.invalid".into(),
            port: 1,
        };
        assert_eq!(
            listed_target(MasterKind::Quake3, QueryProtocol::Quake3, &host, None),
            None
        );
    }

    #[test]
    fn a_short_probe_gets_short_attempts_within_its_deadline() {
        let o = options(Duration::from_secs(2));
        assert_eq!(o.deadline, Some(Duration::from_secs(2)));
        assert_eq!(o.attempt_timeout, Duration::from_millis(500));
        assert_eq!(
            options(Duration::from_secs(60)).attempt_timeout,
            ATTEMPT_TIMEOUT
        );
    }
}
