//! Registry tests on explicit timestamps.

use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

const T0: Timestamp = Timestamp::from_secs(1_700_000_000);

fn at(secs: u64) -> Timestamp {
    T0.plus(Duration::from_secs(secs))
}

fn v4(a: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, a)), port)
}

fn reg(game: &str, addr: SocketAddr, face: Face) -> Registration {
    let qp = match face {
        Face::GameAgent => Some(Protocol::GameAgent),
        Face::GameSpy => Some(Protocol::GameSpy1),
        Face::Teeworlds06 | Face::Teeworlds07 | Face::DdnetHttp => Some(Protocol::Teeworlds),
        Face::Mgmt => None,
    };
    let game_port = (face != Face::GameSpy).then_some(addr.port());
    let query_addr = match face {
        Face::GameAgent => Some(SocketAddr::new(addr.ip(), addr.port() + 1)),
        Face::Mgmt => None,
        _ => Some(addr),
    };
    Registration {
        key: ServerKey::new(game, GameAddr::Ip(addr)),
        face,
        game_port,
        query_addr,
        query_protocol: qp,
        source: SourceKey::of(addr.ip()),
    }
}

fn info(name: &str, num: u32, max: u32, players: &[&str]) -> PollInfo {
    PollInfo {
        name: name.to_owned(),
        map: format!("map-{name}"),
        game_type: "dm".to_owned(),
        num_players: num,
        max_players: max,
        password: Some(name.contains("pw")),
        players: players
            .iter()
            .map(|p| PollPlayer {
                name: (*p).to_owned(),
                score: Some(1),
            })
            .collect(),
        rules: vec![],
        game_port: None,
    }
}

/// Adds and verifies `r` at `t`.
fn listed(reg_: &mut Registry, r: Registration, t: Timestamp) -> ServerKey {
    let key = r.key.clone();
    assert_eq!(reg_.add(r, t), Outcome::Added);
    assert_eq!(reg_.verify(&key, t), VerifyOutcome::Verified);
    key
}

fn addrs(v: &[&Record]) -> Vec<String> {
    v.iter().map(|r| r.key.addr.to_string()).collect()
}

#[test]
fn add_then_verify_lists_and_counts() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = reg("serioussamse", v4(1, 25600), Face::GameAgent);
    let key = a.key.clone();
    assert_eq!(r.add(a.clone(), T0), Outcome::Added);
    assert_eq!(r.pending(), 1);
    assert!(r.listed(View::Http).is_empty(), "pending is never listed");
    assert_eq!(r.add(a, at(1)), Outcome::Refreshed);
    assert_eq!(r.verify(&key, at(2)), VerifyOutcome::Verified);
    assert_eq!(r.verify(&key, at(3)), VerifyOutcome::AlreadyVerified);
    assert_eq!(r.pending(), 0);
    assert_eq!(addrs(&r.listed(View::Http)), ["10.0.0.1:25600"]);
    let rec = r.get(&key).unwrap();
    assert_eq!(rec.first_seen, T0);
    assert_eq!(rec.first_verified, Some(at(2)));
    assert_eq!(rec.last_heartbeat, at(3));
    assert_eq!(r.listed_per_face().get(&Face::GameAgent), Some(&1));
}

#[test]
fn game_names_are_lower_cased_in_keys() {
    let k = ServerKey::new("UT2", GameAddr::Ip(v4(1, 7777)));
    assert_eq!(k.game, "ut2");
}

#[test]
fn heartbeat_refreshes_only_verified() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = reg("ut2", v4(1, 7778), Face::GameSpy);
    let key = a.key.clone();
    assert_eq!(
        r.heartbeat(a.clone(), T0),
        Outcome::Added,
        "unknown re-registers"
    );
    assert_eq!(r.heartbeat(a.clone(), at(10)), Outcome::NotVerified);
    assert_eq!(
        r.get(&key).unwrap().last_heartbeat,
        T0,
        "pending not kept alive"
    );
    r.verify(&key, at(11));
    assert_eq!(r.heartbeat(a.clone(), at(20)), Outcome::Refreshed);
    assert_eq!(r.get(&key).unwrap().last_heartbeat, at(20));
    assert_eq!(r.delist(&key), DelistOutcome::Delisted);
    assert_eq!(r.delist(&key), DelistOutcome::NotListed);
    assert_eq!(r.heartbeat(a.clone(), at(30)), Outcome::NotVerified);
    assert_eq!(r.add(a, at(31)), Outcome::NotVerified);
    assert!(r.listed(View::Http).is_empty());
    assert_eq!(r.verify(&key, at(40)), VerifyOutcome::Verified);
    assert_eq!(
        r.get(&key).unwrap().first_verified,
        Some(at(11)),
        "re-verification keeps the list position"
    );
    assert_eq!(
        r.delist(&ServerKey::new("x", GameAddr::Ip(v4(9, 1)))),
        DelistOutcome::Unknown
    );
}

#[test]
fn expiry_per_face_and_game() {
    let mut r = Registry::new(RegistryConfig::default());
    let ga = listed(
        &mut r,
        reg("serioussamse", v4(1, 25600), Face::GameAgent),
        T0,
    );
    let gs = listed(&mut r, reg("ut2", v4(2, 7778), Face::GameSpy), T0);
    let sam_gs = listed(&mut r, reg("serioussamse", v4(7, 25601), Face::GameSpy), T0);
    let tw = listed(&mut r, reg("teeworlds", v4(3, 8303), Face::Teeworlds07), T0);
    let dd = listed(&mut r, reg("ddnet", v4(4, 8303), Face::DdnetHttp), T0);
    let mg = listed(&mut r, reg("bomberman", v4(5, 2000), Face::Mgmt), T0);
    let pending = reg("ut2", v4(6, 7778), Face::GameSpy);
    let pk = pending.key.clone();
    r.add(pending, T0);

    assert!(r.prune_before(at(29)).is_empty());
    assert_eq!(
        r.prune_before(at(30)),
        vec![dd.clone(), pk],
        "DDNet 30 s, pending 30 s"
    );
    assert!(r.prune_before(at(89)).is_empty());
    assert_eq!(r.prune_before(at(90)), vec![tw]);
    assert_eq!(
        r.prune_before(at(300)),
        vec![ga, gs],
        "GameAgent 300 s even for Serious Sam"
    );
    assert!(
        r.prune_before(at(569)).is_empty(),
        "Serious Sam by GameSpy: 570 s"
    );
    assert_eq!(r.prune_before(at(570)), vec![sam_gs]);
    assert!(
        r.prune_before(at(1_000_000)).is_empty(),
        "mgmt never expires by time"
    );
    assert!(r.get(&mg).is_some());
    assert_eq!(r.get(&dd), None);
}

#[test]
fn heartbeat_and_poll_extend_life() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = reg("ut2", v4(1, 7778), Face::GameSpy);
    let key = listed(&mut r, a.clone(), T0);
    r.heartbeat(a, at(200));
    assert!(r.prune_before(at(499)).is_empty());
    assert_eq!(
        r.update_poll(&key, Some(info("x", 0, 8, &[])), at(450)),
        PollOutcome::Updated
    );
    assert!(
        r.prune_before(at(749)).is_empty(),
        "a successful poll keeps it alive"
    );
    assert_eq!(r.update_poll(&key, None, at(760)), PollOutcome::Failed(1));
    assert_eq!(r.update_poll(&key, None, at(761)), PollOutcome::Failed(2));
    assert_eq!(r.prune_before(at(750)), vec![key.clone()]);
    assert_eq!(r.update_poll(&key, None, at(800)), PollOutcome::Unknown);
}

#[test]
fn pending_restarts_life_on_add_only() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = reg("serioussamse", v4(1, 25600), Face::GameAgent);
    r.add(a.clone(), T0);
    r.add(a, at(20));
    assert!(r.prune_before(at(49)).is_empty());
    assert_eq!(r.prune_before(at(50)).len(), 1);
    assert_eq!(r.pending(), 0);
    assert_eq!(r.count_of_source(SourceKey::of(v4(1, 0).ip())), 0);
}

#[test]
fn cap_per_source_counts_pending_and_verified() {
    let cfg = RegistryConfig {
        max_per_source: 3,
        ..RegistryConfig::default()
    };
    let mut r = Registry::new(cfg);
    listed(&mut r, reg("ut2", v4(1, 1000), Face::GameSpy), T0);
    r.add(reg("ut2", v4(1, 1001), Face::GameSpy), T0);
    r.add(reg("ut2", v4(1, 1002), Face::GameSpy), T0);
    assert_eq!(
        r.add(reg("ut2", v4(1, 1003), Face::GameSpy), T0),
        Outcome::Rejected(Reject::SourceCap)
    );
    assert_eq!(
        r.heartbeat(reg("ut2", v4(1, 1003), Face::GameSpy), T0),
        Outcome::Rejected(Reject::SourceCap)
    );
    assert_eq!(
        r.add(reg("ut2", v4(2, 1003), Face::GameSpy), T0),
        Outcome::Added,
        "other source"
    );
    assert_eq!(
        r.add(reg("ut2", v4(1, 1002), Face::GameSpy), at(1)),
        Outcome::Refreshed,
        "known key"
    );
    r.remove(&ServerKey::new("ut2", GameAddr::Ip(v4(1, 1000))));
    assert_eq!(
        r.add(reg("ut2", v4(1, 1003), Face::GameSpy), at(2)),
        Outcome::Added
    );
}

#[test]
fn cap_per_ipv6_slash_64() {
    let cfg = RegistryConfig {
        max_per_source: 2,
        ..RegistryConfig::default()
    };
    let mut r = Registry::new(cfg);
    let ip = |low: u16| {
        SocketAddr::new(
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, low)),
            8303,
        )
    };
    assert_eq!(
        r.add(reg("ddnet", ip(1), Face::DdnetHttp), T0),
        Outcome::Added
    );
    assert_eq!(
        r.add(reg("ddnet", ip(2), Face::DdnetHttp), T0),
        Outcome::Added
    );
    assert_eq!(
        r.add(reg("ddnet", ip(3), Face::DdnetHttp), T0),
        Outcome::Rejected(Reject::SourceCap)
    );
}

#[test]
fn cap_on_pending_total() {
    let cfg = RegistryConfig {
        max_pending: 2,
        ..RegistryConfig::default()
    };
    let mut r = Registry::new(cfg);
    let k1 = reg("ut2", v4(1, 1), Face::GameSpy).key;
    r.add(reg("ut2", v4(1, 1), Face::GameSpy), T0);
    r.add(reg("ut2", v4(2, 1), Face::GameSpy), T0);
    assert_eq!(
        r.add(reg("ut2", v4(3, 1), Face::GameSpy), T0),
        Outcome::Rejected(Reject::PendingCap)
    );
    r.verify(&k1, T0);
    assert_eq!(
        r.add(reg("ut2", v4(3, 1), Face::GameSpy), T0),
        Outcome::Added,
        "verified frees a slot"
    );
}

#[test]
fn rejects_bad_game_and_host() {
    let mut r = Registry::new(RegistryConfig::default());
    for g in ["", "has space", &"x".repeat(MAX_GAME_LEN + 1)] {
        assert_eq!(
            r.add(reg(g, v4(1, 1), Face::GameSpy), T0),
            Outcome::Rejected(Reject::BadGame),
            "{g:?}"
        );
    }
    let mut m = reg("bomberman", v4(1, 1), Face::Mgmt);
    m.key.addr = GameAddr::Host {
        host: "h".repeat(MAX_HOST_LEN + 1),
        port: 1,
    };
    assert_eq!(r.add(m, T0), Outcome::Rejected(Reject::BadAddress));
    assert!(r.is_empty());
}

#[test]
fn stable_order_is_first_verification() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = reg("ut2", v4(3, 1), Face::GameSpy);
    let b = reg("ut2", v4(1, 1), Face::GameSpy);
    let c = reg("ut2", v4(2, 1), Face::GameSpy);
    for x in [&a, &b, &c] {
        r.add(x.clone(), T0);
    }
    r.verify(&b.key, at(5));
    r.verify(&c.key, at(5));
    r.verify(&a.key, at(9));
    assert_eq!(
        addrs(&r.listed(View::Http)),
        ["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"]
    );
    // Heartbeats and re-registration do not move anything.
    r.heartbeat(b.clone(), at(20));
    r.add(b, at(21));
    assert_eq!(
        addrs(&r.listed(View::Http)),
        ["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"]
    );
}

#[test]
fn re_registration_after_expiry_starts_over() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = reg("teeworlds", v4(1, 8303), Face::Teeworlds07);
    let key = listed(&mut r, a.clone(), T0);
    assert_eq!(r.prune_before(at(90)), vec![key.clone()]);
    assert_eq!(r.heartbeat(a, at(100)), Outcome::Added);
    let rec = r.get(&key).unwrap();
    assert_eq!(rec.state, Verification::Pending);
    assert_eq!(rec.first_seen, at(100));
    assert_eq!(rec.first_verified, None);
}

#[test]
fn mgmt_instances_are_separate_records() {
    let mut r = Registry::new(RegistryConfig::default());
    let host = GameAddr::Host {
        host: "Game.Example.".to_owned(),
        port: 2000,
    };
    for conn in [1, 2] {
        let mut m = reg("bomberman", v4(1, 1), Face::Mgmt);
        m.key = ServerKey::new("bomberman", host.clone()).with_instance(conn);
        listed(&mut r, m, T0);
    }
    assert_eq!(r.listed(View::Mgmt).len(), 2);
    assert_eq!(r.find_by_addr(&host).len(), 2);
    assert_eq!(host.to_string(), "Game.Example.:2000");
    assert!(r.listed(View::GameAgent).is_empty());
}

fn check_view(view: View<'_>, expect: &[&str]) {
    let mut r = Registry::new(RegistryConfig::default());
    let mut ut2 = reg("ut2", v4(1, 7778), Face::GameSpy);
    ut2.game_port = None;
    let ut2_key = listed(&mut r, ut2, T0);
    let mut ut2_known = reg("ut2", v4(2, 7778), Face::GameSpy);
    ut2_known.game_port = None;
    let k2 = listed(&mut r, ut2_known, at(1));
    let mut i = info("b", 0, 8, &[]);
    i.game_port = Some(7777);
    r.update_poll(&k2, Some(i), at(1));
    listed(
        &mut r,
        reg("serioussamse", v4(3, 25600), Face::GameAgent),
        at(2),
    );
    listed(
        &mut r,
        reg("serioussamse", v4(4, 25600), Face::GameSpy),
        at(3),
    );
    listed(
        &mut r,
        reg("teeworlds", v4(5, 8303), Face::Teeworlds07),
        at(4),
    );
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 8303);
    listed(&mut r, reg("ddnet", v6, Face::DdnetHttp), at(5));
    let v6sam = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 25600);
    listed(&mut r, reg("serioussamse", v6sam, Face::GameAgent), at(6));
    listed(&mut r, reg("bomberman", v4(6, 2000), Face::Mgmt), at(7));
    r.add(reg("ut2", v4(7, 7778), Face::GameSpy), at(8)); // pending: nowhere
    let _ = ut2_key;
    let got: Vec<String> = r
        .listed(view)
        .iter()
        .map(|r| format!("{}/{}", r.key.game, r.key.addr))
        .collect();
    assert_eq!(got, expect, "{view:?}");
}

#[test]
fn views_represent_what_their_face_can() {
    check_view(
        View::GameSpy("UT2"),
        &["ut2/10.0.0.1:7778", "ut2/10.0.0.2:7778"],
    );
    check_view(View::Ut2003Text, &["ut2/10.0.0.2:7778"]);
    // The GameSpy-registered Serious Sam server has no known game port yet.
    check_view(View::GameAgent, &["serioussamse/10.0.0.3:25600"]);
    check_view(
        View::GameSpy("serioussamse"),
        &["serioussamse/10.0.0.4:25600"],
    );
    check_view(
        View::Teeworlds,
        &["teeworlds/10.0.0.5:8303", "ddnet/[::1]:8303"],
    );
    check_view(View::Mgmt, &["bomberman/10.0.0.6:2000"]);
    check_view(
        View::Http,
        &[
            "ut2/10.0.0.1:7778",
            "ut2/10.0.0.2:7778",
            "serioussamse/10.0.0.3:25600",
            "serioussamse/10.0.0.4:25600",
            "teeworlds/10.0.0.5:8303",
            "ddnet/[::1]:8303",
            "serioussamse/[::1]:25600",
            "bomberman/10.0.0.6:2000",
        ],
    );
}

fn filter_fixture() -> Registry {
    let mut r = Registry::new(RegistryConfig::default());
    let servers = [
        ("ut2", 1, Face::GameSpy, info("Alpha", 0, 8, &[])),
        (
            "ut2",
            2,
            Face::GameSpy,
            info("Bravo pw", 8, 8, &["Zed", "yolanda"]),
        ),
        (
            "teeworlds",
            3,
            Face::Teeworlds07,
            info("charlie", 3, 16, &["Xavier"]),
        ),
        (
            "serioussamse",
            4,
            Face::GameAgent,
            info("delta", 1, 0, &["w"]),
        ),
    ];
    for (i, (game, a, face, inf)) in servers.into_iter().enumerate() {
        let k = listed(&mut r, reg(game, v4(a, 1000), face), at(i as u64));
        r.update_poll(&k, Some(inf), at(i as u64));
    }
    r
}

fn check_list(q: ListQuery, expect: &[&str], total: usize) {
    let r = filter_fixture();
    let page = r.list(View::Http, &q);
    let names: Vec<&str> = page
        .records
        .iter()
        .map(|r| r.info.as_ref().unwrap().name.as_str())
        .collect();
    assert_eq!(names, expect, "{q:?}");
    assert_eq!(page.total, total, "{q:?}");
}

#[test]
fn list_filters() {
    let all = ["Alpha", "Bravo pw", "charlie", "delta"];
    check_list(ListQuery::default(), &all, 4);
    let q = |f: fn(&mut ListQuery)| {
        let mut q = ListQuery::default();
        f(&mut q);
        q
    };
    check_list(
        q(|q| q.game = Some("UT2".into())),
        &["Alpha", "Bravo pw"],
        2,
    );
    check_list(
        q(|q| q.protocol = Some("teeworlds".into())),
        &["charlie"],
        1,
    );
    check_list(
        q(|q| q.protocol = Some("teeworlds07".into())),
        &["charlie"],
        1,
    );
    check_list(
        q(|q| q.protocol = Some("gamespy1".into())),
        &["Alpha", "Bravo pw"],
        2,
    );
    check_list(q(|q| q.protocol = Some("nope".into())), &[], 0);
    check_list(
        q(|q| q.non_empty = true),
        &["Bravo pw", "charlie", "delta"],
        3,
    );
    check_list(q(|q| q.not_full = true), &["Alpha", "charlie", "delta"], 3);
    check_list(q(|q| q.password = Some(true)), &["Bravo pw"], 1);
    check_list(
        q(|q| q.password = Some(false)),
        &["Alpha", "charlie", "delta"],
        3,
    );
    check_list(q(|q| q.text = Some("ALP".into())), &["Alpha"], 1);
    check_list(q(|q| q.text = Some("xav".into())), &["charlie"], 1);
    check_list(q(|q| q.text = Some("YOLA".into())), &["Bravo pw"], 1);
    check_list(q(|q| q.text = Some(String::new())), &all, 4);
}

#[test]
fn list_sorts_and_pages() {
    let q = |sort: SortKey, descending: bool| ListQuery {
        sort,
        descending,
        ..ListQuery::default()
    };
    check_list(
        q(SortKey::Players, true),
        &["Bravo pw", "charlie", "delta", "Alpha"],
        4,
    );
    check_list(
        q(SortKey::Name, true),
        &["delta", "charlie", "Bravo pw", "Alpha"],
        4,
    );
    check_list(
        q(SortKey::MaxPlayers, false),
        &["delta", "Alpha", "Bravo pw", "charlie"],
        4,
    );
    check_list(
        q(SortKey::Game, false),
        &["delta", "charlie", "Alpha", "Bravo pw"],
        4,
    );
    check_list(
        q(SortKey::Order, true),
        &["delta", "charlie", "Bravo pw", "Alpha"],
        4,
    );
    check_list(
        q(SortKey::Address, false),
        &["Alpha", "Bravo pw", "charlie", "delta"],
        4,
    );
    let page = |page, per_page| ListQuery {
        page,
        per_page,
        ..ListQuery::default()
    };
    check_list(page(2, 3), &["delta"], 4);
    check_list(page(0, 3), &["Alpha", "Bravo pw", "charlie"], 4);
    check_list(page(9, 3), &[], 4);
    assert_eq!(page(1, 100_000).page_size(), MAX_PER_PAGE);
    assert_eq!(page(1, 0).page_size(), DEFAULT_PER_PAGE);
}

#[test]
fn poll_info_is_bounded_and_learns_game_port() {
    let mut r = Registry::new(RegistryConfig::default());
    let mut a = reg("ut2", v4(1, 7778), Face::GameSpy);
    a.game_port = None;
    let key = listed(&mut r, a, T0);
    let mut i = info(&"n".repeat(1000), 0, 0, &[]);
    i.players = vec![PollPlayer::default(); 1000];
    i.game_port = Some(7777);
    r.update_poll(&key, Some(i), T0);
    let rec = r.get(&key).unwrap();
    let got = rec.info.as_ref().unwrap();
    assert_eq!(got.name.chars().count(), MAX_POLL_TEXT);
    assert_eq!(got.players.len(), MAX_POLL_PLAYERS);
    assert_eq!(rec.game_addr(), Some(GameAddr::Ip(v4(1, 7777))));
    assert_eq!(r.find_by_addr(&GameAddr::Ip(v4(1, 7777))).len(), 1);
    assert_eq!(r.find_by_addr(&GameAddr::Ip(v4(1, 7778))).len(), 1);
}

#[test]
fn poll_info_from_server_info_reads_hostport() {
    let mut si = ServerInfo::new(Protocol::GameSpy1);
    si.name = muster_proto::Text::from_utf8_str("Srv");
    si.num_players = 2;
    si.rules.push(muster_proto::Rule {
        key: muster_proto::Text::from_utf8_str("hostport"),
        value: muster_proto::Text::from_utf8_str("7777"),
    });
    let p = PollInfo::from_server_info(&si);
    assert_eq!(p.name, "Srv");
    assert_eq!(p.num_players, 2);
    assert_eq!(p.game_port, Some(7777));
}

#[test]
fn game_addr_parse_round_trips() {
    for s in [
        "1.2.3.4:5",
        "[::1]:8303",
        "example.org:2000",
        "Game.Example.:1",
    ] {
        assert_eq!(GameAddr::parse(s).unwrap().to_string(), s);
    }
    for s in ["", "nohost", ":1", "a:b:c", "x:70000"] {
        assert_eq!(GameAddr::parse(s), None, "{s:?}");
    }
}

#[test]
fn restore_rebuilds_counters() {
    let mut r = Registry::new(RegistryConfig::default());
    let k = listed(&mut r, reg("ut2", v4(1, 1), Face::GameSpy), T0);
    r.add(reg("ut2", v4(1, 2), Face::GameSpy), T0);
    let mut copy = Registry::new(RegistryConfig::default());
    let mut recs: Vec<Record> = r.iter().cloned().collect();
    recs.sort_by_key(|x| x.first_verified.is_none());
    for rec in recs {
        copy.restore(rec);
    }
    assert_eq!(copy.pending(), 1);
    assert_eq!(copy.count_of_source(SourceKey::of(v4(1, 0).ip())), 2);
    assert_eq!(copy.get(&k).unwrap().state, Verification::Verified);
}

proptest! {
    #[test]
    fn counters_stay_consistent(ops in proptest::collection::vec((0u8..6, 0u8..4, 0u8..3, 0u64..200), 0..200)) {
        let cfg = RegistryConfig { max_per_source: 3, max_pending: 4, ..RegistryConfig::default() };
        let mut r = Registry::new(cfg);
        for (op, a, p, t) in ops {
            let x = reg("ut2", v4(a, u16::from(p)), Face::GameSpy);
            let now = at(t);
            match op {
                0 => { r.add(x, now); }
                1 => { r.heartbeat(x, now); }
                2 => { r.verify(&x.key, now); }
                3 => { r.delist(&x.key); }
                4 => { r.remove(&x.key); }
                _ => { r.prune_before(now); }
            }
            let pending = r.iter().filter(|x| x.state == Verification::Pending).count();
            prop_assert_eq!(pending, r.pending());
            prop_assert!(pending <= 4);
            for a in 0..4 {
                let src = SourceKey::of(v4(a, 0).ip());
                let n = r.iter().filter(|x| x.source == src).count();
                prop_assert_eq!(n, r.count_of_source(src));
                prop_assert!(n <= 3);
            }
        }
    }

    #[test]
    fn game_addr_parse_never_panics(s in ".{0,40}") {
        let _ = GameAddr::parse(&s);
    }
}
