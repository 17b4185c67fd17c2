//! Registry tests on explicit timestamps.

use super::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use muster_proto::Protocol;
use proptest::prelude::*;

use crate::views::list::{ListQuery, SortKey, list};
use crate::views::{Publisher, Snapshot};

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
        Face::Quake3 => Some(Protocol::Quake3),
        Face::Valve => Some(Protocol::A2s),
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
    PollInfo::from(PollFields {
        name: name.into(),
        map: format!("map-{name}").into(),
        game_type: "dm".into(),
        num_players: num,
        max_players: max,
        password: Some(name.contains("pw")),
        players: players
            .iter()
            .map(|p| PollPlayer::new(*p).with_score(Some(1)))
            .collect(),
        rules: Rules::default(),
        game_port: None,
    })
}

/// Registers `r` at `t` (a proven registration lists at once).
fn listed(reg_: &mut Registry, r: Registration, t: Timestamp) -> ServerKey {
    let key = r.key.clone();
    assert_eq!(reg_.register(r, t), Outcome::Added);
    key
}

fn snapshot(r: &mut Registry) -> Snapshot {
    let mut p = Publisher::new(Duration::from_secs(30));
    let changes = r
        .iter_shared()
        .map(|rec| Change {
            id: rec.id,
            order: rec.order_key(),
            record: Some(Arc::clone(rec)),
            structural: true,
        })
        .collect();
    p.apply(changes, r.version());
    r.take_changes();
    p.build(T0)
}

fn addrs(s: &Snapshot) -> Vec<String> {
    s.listed().iter().map(|r| r.key.addr.to_string()).collect()
}

#[test]
fn register_lists_at_once_and_counts() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = reg("serioussamse", v4(1, 25600), Face::GameAgent);
    let key = a.key.clone();
    assert_eq!(r.register(a.clone(), T0), Outcome::Added);
    assert_eq!(r.register(a, at(1)), Outcome::Refreshed);
    assert_eq!(r.verify(&key, at(3)), VerifyOutcome::AlreadyVerified);
    let rec = r.get(&key).unwrap();
    assert_eq!(rec.first_seen, T0);
    assert_eq!((rec.last_heartbeat, rec.last_proof), (at(3), at(3)));
    let s = snapshot(&mut r);
    assert_eq!(addrs(&s), ["10.0.0.1:25600"]);
    assert_eq!(s.count(Face::GameAgent), 1);
}

#[test]
fn register_replacing_keeps_one_record_per_address_and_face() {
    let mut r = Registry::new(RegistryConfig::default());
    let addr = v4(1, 27015);
    let other_face = reg("q3", addr, Face::Quake3);
    assert_eq!(r.register(other_face.clone(), T0), Outcome::Added);
    let hl = reg("valve", addr, Face::Valve);
    assert_eq!(r.register_replacing(hl.clone(), T0), Outcome::Added);
    // The same address under another game replaces the face's record, not the other face's.
    let cs = reg("cstrike", addr, Face::Valve);
    assert_eq!(r.register_replacing(cs.clone(), at(1)), Outcome::Added);
    assert!(r.get(&hl.key).is_none());
    assert!(r.get(&cs.key).is_some());
    assert!(r.get(&other_face.key).is_some());
    assert_eq!(r.register_replacing(cs, at(2)), Outcome::Refreshed);
}

#[test]
fn game_names_are_lower_cased_in_keys() {
    let k = ServerKey::new("UT2", GameAddr::Ip(v4(1, 7777)));
    assert_eq!(k.game, "ut2");
}

#[test]
fn heartbeats_never_create_records() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = reg("ut2", v4(1, 7778), Face::GameSpy);
    let key = a.key.clone();
    assert_eq!(r.heartbeat(&key, T0), HeartbeatOutcome::Unknown);
    assert!(r.is_empty(), "an unproven source never takes a slot");
    listed(&mut r, a.clone(), at(1));
    assert_eq!(r.heartbeat(&key, at(20)), HeartbeatOutcome::Refreshed);
    assert_eq!(r.get(&key).unwrap().last_heartbeat, at(20));
    assert_eq!(r.delist(&key), DelistOutcome::Delisted);
    assert_eq!(r.delist(&key), DelistOutcome::NotListed);
    assert_eq!(r.heartbeat(&key, at(30)), HeartbeatOutcome::NotListed);
    assert!(
        !r.get(&key).unwrap().is_listed(),
        "a heartbeat does not list again"
    );
    assert_eq!(r.register(a, at(40)), Outcome::Relisted);
    assert_eq!(
        r.get(&key).unwrap().first_seen,
        at(1),
        "re-verification keeps the list position"
    );
    assert_eq!(
        r.delist(&ServerKey::new("x", GameAddr::Ip(v4(9, 1)))),
        DelistOutcome::Unknown
    );
}

#[test]
fn reverification_progress_lives_in_the_record() {
    let mut r = Registry::new(RegistryConfig::default());
    let key = listed(&mut r, reg("serioussam", v4(1, 25600), Face::GameAgent), T0);
    assert_eq!(r.challenge_sent(&key, at(600)), Some(1));
    assert_eq!(r.challenge_sent(&key, at(610)), Some(2));
    assert_eq!(r.get(&key).unwrap().last_challenge(), at(610));
    assert_eq!(r.verify(&key, at(611)), VerifyOutcome::AlreadyVerified);
    let rec = r.get(&key).unwrap();
    assert_eq!((rec.challenges_unanswered(), rec.last_proof), (0, at(611)));
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

    assert!(r.prune_before(at(29)).is_empty());
    assert_eq!(r.prune_before(at(30)), vec![dd.clone()], "DDNet 30 s");
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
fn pruning_part_by_part_removes_what_one_pass_does_each_once() {
    let mut one_pass = Registry::new(RegistryConfig::default());
    // Records of 200 addresses, half of them on a face that expires sooner.
    for i in 0..200u16 {
        let a = v4((i % 250) as u8, 20_000 + i);
        let face = if i % 2 == 0 {
            Face::GameAgent
        } else {
            Face::DdnetHttp
        };
        listed(&mut one_pass, reg("g", a, face), T0);
    }
    let mut by_parts = one_pass.clone();
    let want = one_pass.prune_before(at(30));
    assert_eq!(want.len(), 100, "the DDNet half expired");
    let mut got = Vec::new();
    let mut parts_with_some = 0;
    for part in 0..PRUNE_PARTS {
        let dead = by_parts.prune_part(part, at(30));
        parts_with_some += usize::from(!dead.is_empty());
        got.extend(dead);
    }
    assert!(
        by_parts.prune_part(PRUNE_PARTS, at(30)).is_empty(),
        "no part past the last"
    );
    assert!(parts_with_some > 1, "the records are spread over the parts");
    got.sort();
    assert_eq!(got, want, "the same records, each once");
    assert_eq!(by_parts.len(), one_pass.len());
}

#[test]
fn heartbeat_and_poll_extend_life() {
    let mut r = Registry::new(RegistryConfig::default());
    let key = listed(&mut r, reg("ut2", v4(1, 7778), Face::GameSpy), T0);
    r.heartbeat(&key, at(200));
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
fn cap_per_source() {
    let cfg = RegistryConfig {
        max_per_source: 3,
        ..RegistryConfig::default()
    };
    let mut r = Registry::new(cfg);
    for p in 1000..1003 {
        listed(&mut r, reg("ut2", v4(1, p), Face::GameSpy), T0);
    }
    assert_eq!(
        r.register(reg("ut2", v4(1, 1003), Face::GameSpy), T0),
        Outcome::Rejected(Reject::SourceCap)
    );
    assert_eq!(
        r.register(reg("ut2", v4(2, 1003), Face::GameSpy), T0),
        Outcome::Added,
        "other source"
    );
    assert_eq!(
        r.register(reg("ut2", v4(1, 1002), Face::GameSpy), at(1)),
        Outcome::Refreshed,
        "known key"
    );
    r.remove(&ServerKey::new("ut2", GameAddr::Ip(v4(1, 1000))));
    assert_eq!(
        r.register(reg("ut2", v4(1, 1003), Face::GameSpy), at(2)),
        Outcome::Added
    );
}

#[test]
fn cap_per_ipv6_slash_64_and_in_total() {
    let cfg = RegistryConfig {
        max_per_source: 2,
        max_records: 3,
        ..RegistryConfig::default()
    };
    let mut r = Registry::new(cfg);
    let ip = |net: u16, low: u16| {
        SocketAddr::new(
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, net, 0, 0, 0, low)),
            8303,
        )
    };
    assert_eq!(
        r.register(reg("ddnet", ip(1, 1), Face::DdnetHttp), T0),
        Outcome::Added
    );
    assert_eq!(
        r.register(reg("ddnet", ip(1, 2), Face::DdnetHttp), T0),
        Outcome::Added
    );
    assert_eq!(
        r.register(reg("ddnet", ip(1, 3), Face::DdnetHttp), T0),
        Outcome::Rejected(Reject::SourceCap)
    );
    assert_eq!(
        r.register(reg("ddnet", ip(2, 1), Face::DdnetHttp), T0),
        Outcome::Added
    );
    assert_eq!(
        r.register(reg("ddnet", ip(3, 1), Face::DdnetHttp), T0),
        Outcome::Rejected(Reject::RecordCap)
    );
}

#[test]
fn rejects_bad_game_host_and_port() {
    let mut r = Registry::new(RegistryConfig::default());
    for g in ["", "has space", &"x".repeat(MAX_GAME_LEN + 1)] {
        assert_eq!(
            r.register(reg(g, v4(1, 1), Face::GameSpy), T0),
            Outcome::Rejected(Reject::BadGame),
            "{g:?}"
        );
    }
    let mut m = reg("bomberman", v4(1, 1), Face::Mgmt);
    m.key.addr = GameAddr::Host {
        host: "h".repeat(MAX_HOST_LEN + 1).into(),
        port: 1,
    };
    assert_eq!(r.register(m, T0), Outcome::Rejected(Reject::BadAddress));
    assert_eq!(
        r.register(reg("ddnet", v4(1, 0), Face::DdnetHttp), T0),
        Outcome::Rejected(Reject::BadAddress),
        "port 0 is no address"
    );
    assert!(r.is_empty());
}

#[test]
fn stable_order_is_first_registration() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = reg("ut2", v4(3, 1), Face::GameSpy);
    let b = reg("ut2", v4(1, 1), Face::GameSpy);
    let c = reg("ut2", v4(2, 1), Face::GameSpy);
    r.register(b.clone(), at(5));
    r.register(c, at(5));
    r.register(a, at(9));
    assert_eq!(
        addrs(&snapshot(&mut r)),
        ["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"]
    );
    // Heartbeats and re-registration do not move anything.
    r.heartbeat(&b.key, at(20));
    r.register(b, at(21));
    assert_eq!(
        addrs(&snapshot(&mut r)),
        ["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"]
    );
}

#[test]
fn mgmt_instances_are_separate_records() {
    let mut r = Registry::new(RegistryConfig::default());
    let host = GameAddr::Host {
        host: "Game.Example.".into(),
        port: 2000,
    };
    for conn in [1, 2] {
        let mut m = reg("bomberman", v4(1, 1), Face::Mgmt);
        m.key = ServerKey::new("bomberman", host.clone()).with_instance(conn);
        listed(&mut r, m, T0);
    }
    let s = snapshot(&mut r);
    assert_eq!(s.count(Face::Mgmt), 2);
    assert_eq!(s.find_by_addr(&host).len(), 2);
    assert_eq!(host.to_string(), "Game.Example.:2000");
}

#[test]
fn a_ddnet_refresh_that_moves_only_times_says_so() {
    let mut r = Registry::new(RegistryConfig::default());
    let d = |serial: i64, info: &'static [u8], url: &str| DdnetRegister {
        addr: v4(1, 8303),
        secret: DdnetSecret::from("s"),
        serial,
        info: Some(bytes::Bytes::from_static(info)),
        poll_info: None,
        url: Arc::from(url),
    };
    let dr = || reg("ddnet", v4(1, 8303), Face::DdnetHttp);
    let u6 = "tw-0.6+udp://10.0.0.1:8303";
    let t1 = at(15);
    assert_eq!(
        r.ddnet_register(d(1, b"{}", u6), dr(), T0),
        DdnetOutcome::Success
    );
    r.take_dirty();
    // The same POST 15 s later: only the stream's time moves, and the store still hears of it.
    assert_eq!(
        r.ddnet_register(d(1, b"{}", u6), dr(), t1),
        DdnetOutcome::Refreshed
    );
    assert!(!r.has_structural_dirty());
    assert_eq!(
        r.take_dirty().len(),
        1,
        "written with the next periodic flush"
    );
    let key = dr().key;
    let streams = &r.get(&key).unwrap().ddnet().unwrap().streams;
    assert_eq!(streams[0].last, t1);
    // A newer info, a new stream, another face: each a change to store before `success`.
    assert_eq!(
        r.ddnet_register(d(2, b"{\"n\":2}", u6), dr(), t1),
        DdnetOutcome::Success
    );
    let u7 = "tw-0.7+udp://10.0.0.1:8303";
    assert_eq!(
        r.ddnet_register(d(2, b"{}", u7), dr(), t1),
        DdnetOutcome::Success
    );
    let mut other_face = dr();
    other_face.face = Face::Teeworlds06;
    assert_eq!(
        r.ddnet_register(d(2, b"{}", u7), other_face, t1),
        DdnetOutcome::Success
    );
}

#[test]
fn the_registry_keeps_ddnet_infos_in_its_file_and_frees_what_it_lets_go() {
    let dir = crate::testdir::TempDir::new("registry-infos");
    std::fs::create_dir_all(&dir.0).unwrap();
    let mut r = Registry::new(RegistryConfig {
        info_dir: Some(dir.0.clone()),
        ..RegistryConfig::default()
    });
    let d = |serial: i64, info: &'static [u8]| DdnetRegister {
        addr: v4(1, 8303),
        secret: DdnetSecret::from("s"),
        serial,
        info: Some(bytes::Bytes::from_static(info)),
        poll_info: None,
        url: Arc::from("tw-0.6+udp://10.0.0.1:8303"),
    };
    let dr = || reg("ddnet", v4(1, 8303), Face::DdnetHttp);
    let stats = |r: &Registry| r.info_file().unwrap().stats();
    r.ddnet_register(d(1, b"{\"n\":1}"), dr(), T0);
    let info = |r: &Registry| r.get(&dr().key).unwrap().ddnet().unwrap().info.clone();
    assert!(info(&r).is_kept());
    assert_eq!((stats(&r).infos, stats(&r).live), (1, 7));
    // A refresh with the same serial writes nothing; a newer serial frees the old slot.
    r.ddnet_register(d(1, b"{\"n\":1}"), dr(), at(15));
    assert_eq!(stats(&r).end, 7);
    r.ddnet_register(d(2, b"{\"n\":22}"), dr(), at(15));
    // The view log holds the records it reports until the publisher takes it.
    r.take_changes();
    assert_eq!((stats(&r).infos, stats(&r).live, stats(&r).end), (1, 8, 15));
    assert_eq!(&info(&r).bytes().unwrap()[..], b"{\"n\":22}");
    // Another instance's copy of the same record: the same bytes keep the same slot.
    let mut remote = r.get(&dr().key).unwrap().clone();
    let mut data = (**remote.ddnet().unwrap()).clone();
    data.info = bytes::Bytes::from_static(b"{\"n\":22}").into();
    remote.set_ddnet(Some(Arc::new(data.clone())));
    remote.last_heartbeat = at(20);
    r.take_dirty();
    assert!(r.apply_remote(remote.clone()));
    assert_eq!(stats(&r).end, 15, "nothing written");
    // A record loaded from the store comes with its info in memory and goes into the file.
    let mut fresh = Registry::new(RegistryConfig {
        info_dir: Some(dir.0.clone()),
        ..RegistryConfig::default()
    });
    fresh.restore(remote);
    assert!(info(&fresh).is_kept());
    assert_eq!(&info(&fresh).bytes().unwrap()[..], b"{\"n\":22}");
    // A POST the caps refuse leaves nothing in the file.
    let mut capped = Registry::new(RegistryConfig {
        info_dir: Some(dir.0.clone()),
        max_per_source: 1,
        ..RegistryConfig::default()
    });
    capped.ddnet_register(d(1, b"{\"n\":1}"), dr(), T0);
    let other = DdnetRegister {
        addr: v4(1, 8304),
        secret: DdnetSecret::from("t"),
        ..d(1, b"{\"other\":1}")
    };
    let refused = capped.ddnet_register(other, reg("ddnet", v4(1, 8304), Face::DdnetHttp), T0);
    assert!(matches!(refused, DdnetOutcome::Rejected(_)), "{refused:?}");
    assert_eq!(stats(&capped).end, 7);
    // Gone from the registry (and from every clone): the slot is free.
    r.remove(&dr().key);
    r.take_changes();
    assert_eq!((stats(&r).infos, stats(&r).live), (0, 0));
    // The file is never linked into the directory.
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
}

#[test]
fn ddnet_info_is_per_secret_and_only_newer_serials_replace_it() {
    let mut r = Registry::new(RegistryConfig::default());
    let d = |addr: SocketAddr, serial: i64, info: Option<&'static [u8]>, url: &str| DdnetRegister {
        addr,
        secret: DdnetSecret::from("s"),
        serial,
        info: info.map(bytes::Bytes::from_static),
        poll_info: None,
        url: Arc::from(url),
    };
    let a4 = v4(1, 8303);
    let u6 = "tw-0.6+udp://10.0.0.1:8303";
    let u7 = "tw-0.7+udp://10.0.0.1:8303";
    let dr = |a| reg("ddnet", a, Face::DdnetHttp);
    assert_eq!(
        r.ddnet_register(d(a4, 1, None, u6), dr(a4), T0),
        DdnetOutcome::NeedInfo
    );
    assert!(r.is_empty());
    assert_eq!(
        r.ddnet_register(d(a4, 1, Some(b"{\"n\":1}"), u6), dr(a4), T0),
        DdnetOutcome::Success
    );
    // A second stream without a body: the info of that serial is known (quirk 7).
    assert_eq!(
        r.ddnet_register(d(a4, 1, None, u7), dr(a4), T0),
        DdnetOutcome::Success
    );
    assert_eq!(
        r.ddnet_info(&DdnetSecret::from("s")).map(|(s, _)| s),
        Some(1)
    );
    // An older or the same serial does not replace the info; a newer one does.
    r.ddnet_register(d(a4, 0, Some(b"{\"n\":0}"), u6), dr(a4), T0);
    assert_eq!(
        &r.ddnet_info(&DdnetSecret::from("s"))
            .unwrap()
            .1
            .bytes()
            .unwrap()[..],
        b"{\"n\":1}"
    );
    r.ddnet_register(d(a4, 1, Some(b"{\"n\":9}"), u6), dr(a4), T0);
    assert_eq!(
        &r.ddnet_info(&DdnetSecret::from("s"))
            .unwrap()
            .1
            .bytes()
            .unwrap()[..],
        b"{\"n\":1}"
    );
    let a6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 8303);
    r.ddnet_register(
        d(a6, 2, Some(b"{\"n\":2}"), "tw-0.6+udp://[::1]:8303"),
        dr(a6),
        T0,
    );
    let key4 = dr(a4).key;
    assert_eq!(
        &r.get(&key4).unwrap().ddnet().unwrap().info.bytes().unwrap()[..],
        b"{\"n\":2}",
        "every address of the server shows the newest info"
    );
    assert_eq!(r.get(&key4).unwrap().ddnet().unwrap().streams.len(), 2);
    // Deleting streams: the record goes with its last one.
    assert_eq!(r.ddnet_delete("s", u6), Some(true));
    assert_eq!(r.ddnet_delete("s", u6), None);
    assert_eq!(r.ddnet_delete("s", u7), Some(false));
    assert!(r.get(&key4).is_none());
}

#[test]
fn ddnet_streams_expire_one_by_one() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = v4(1, 8303);
    let mk = |url: &str| DdnetRegister {
        addr: a,
        secret: DdnetSecret::from("s"),
        serial: 1,
        info: Some(bytes::Bytes::from_static(b"{}")),
        poll_info: None,
        url: Arc::from(url),
    };
    let dr = reg("ddnet", a, Face::DdnetHttp);
    r.ddnet_register(mk("tw-0.6+udp://10.0.0.1:8303"), dr.clone(), T0);
    r.ddnet_register(mk("tw-0.7+udp://10.0.0.1:8303"), dr.clone(), at(20));
    assert!(r.prune_before(at(30)).is_empty(), "refreshed at 20 s");
    let d = r.get(&dr.key).unwrap().ddnet().cloned().unwrap();
    assert_eq!(d.streams.len(), 1, "the 0.6 stream expired");
    assert_eq!(r.prune_before(at(50)), vec![dr.key]);
}

fn filter_fixture() -> (Registry, Snapshot) {
    let mut r = Registry::new(RegistryConfig::default());
    let rows: [(&str, SocketAddr, Face, Option<PollInfo>); 5] = [
        (
            "ut2",
            v4(1, 7778),
            Face::GameSpy,
            Some(info("Alpha", 2, 16, &["Ann", "Bob"])),
        ),
        (
            "ut2",
            v4(2, 7778),
            Face::GameSpy,
            Some(info("beta pw", 0, 16, &[])),
        ),
        (
            "serioussamse",
            v4(3, 25600),
            Face::GameAgent,
            Some(info("Gamma", 8, 8, &["Zed"])),
        ),
        (
            "teeworlds",
            v4(4, 8303),
            Face::Teeworlds07,
            Some(info("delta", 1, 4, &["ann-marie"])),
        ),
        ("ddnet", v4(5, 8303), Face::DdnetHttp, None),
    ];
    for (i, (g, a, f, inf)) in rows.into_iter().enumerate() {
        let k = listed(&mut r, reg(g, a, f), at(i as u64));
        if let Some(inf) = inf {
            r.update_poll(&k, Some(inf), at(i as u64));
        }
    }
    let s = snapshot(&mut r);
    (r, s)
}

fn check_list(s: &Snapshot, q: ListQuery, expect: &[&str], total: usize) {
    let page = list(s, &q);
    let got: Vec<String> = page
        .records
        .iter()
        .map(|r| r.key.addr.to_string())
        .collect();
    assert_eq!(got, expect, "{q:?}");
    assert_eq!(page.total, total, "{q:?}");
}

#[test]
fn list_filters() {
    let (_r, s) = filter_fixture();
    let all = [
        "10.0.0.1:7778",
        "10.0.0.2:7778",
        "10.0.0.3:25600",
        "10.0.0.4:8303",
        "10.0.0.5:8303",
    ];
    check_list(&s, ListQuery::default(), &all, 5);
    let q = |f: fn(&mut ListQuery)| {
        let mut q = ListQuery::default();
        f(&mut q);
        q
    };
    check_list(
        &s,
        q(|q| q.game = Some("UT2".into())),
        &["10.0.0.1:7778", "10.0.0.2:7778"],
        2,
    );
    check_list(
        &s,
        q(|q| q.protocol = Some("teeworlds".into())),
        &["10.0.0.4:8303", "10.0.0.5:8303"],
        2,
    );
    check_list(
        &s,
        q(|q| q.protocol = Some("gamespy1".into())),
        &["10.0.0.1:7778", "10.0.0.2:7778"],
        2,
    );
    check_list(
        &s,
        q(|q| q.non_empty = true),
        &["10.0.0.1:7778", "10.0.0.3:25600", "10.0.0.4:8303"],
        3,
    );
    check_list(
        &s,
        q(|q| q.not_full = true),
        &[
            "10.0.0.1:7778",
            "10.0.0.2:7778",
            "10.0.0.4:8303",
            "10.0.0.5:8303",
        ],
        4,
    );
    check_list(&s, q(|q| q.password = Some(true)), &["10.0.0.2:7778"], 1);
    check_list(
        &s,
        q(|q| q.text = Some("ANN".into())),
        &["10.0.0.1:7778", "10.0.0.4:8303"],
        2,
    );
}

#[test]
fn list_sorts_and_pages() {
    let (_r, s) = filter_fixture();
    let q = |sort, descending, page, per_page| ListQuery {
        sort,
        descending,
        page,
        per_page,
        ..ListQuery::default()
    };
    check_list(
        &s,
        q(SortKey::Name, false, 1, 0),
        &[
            "10.0.0.5:8303",
            "10.0.0.1:7778",
            "10.0.0.2:7778",
            "10.0.0.4:8303",
            "10.0.0.3:25600",
        ],
        5,
    );
    check_list(
        &s,
        q(SortKey::Players, true, 1, 2),
        &["10.0.0.3:25600", "10.0.0.1:7778"],
        5,
    );
    check_list(
        &s,
        q(SortKey::Players, true, 2, 2),
        &["10.0.0.4:8303", "10.0.0.5:8303"],
        5,
    );
    check_list(&s, q(SortKey::Order, false, 9, 2), &[], 5);
    assert_eq!(q(SortKey::Order, false, 1, 10_000).page_size(), 500);
}

#[test]
fn poll_info_is_bounded_and_learns_game_port() {
    let mut r = Registry::new(RegistryConfig::default());
    let k = listed(&mut r, reg("ut2", v4(1, 7778), Face::GameSpy), T0);
    let mut f = info(&"n".repeat(MAX_POLL_TEXT + 10), 1, 2, &[]).to_fields();
    f.players = vec![PollPlayer::default(); MAX_POLL_PLAYERS + 5].into();
    let mut i = PollInfo::from(f);
    i.game_port = Some(7777);
    r.update_poll(&k, Some(i), T0);
    let rec = r.get(&k).unwrap();
    let got = rec.info.as_ref().unwrap();
    assert_eq!(got.name().chars().count(), MAX_POLL_TEXT);
    assert_eq!(got.players().len(), MAX_POLL_PLAYERS);
    assert_eq!(rec.game_port, Some(7777));
    assert_eq!(rec.game_addr(), GameAddr::parse("10.0.0.1:7777"));
}

#[test]
fn game_addr_parse_round_trips() {
    for s in ["1.2.3.4:5", "[2001:db8::1]:8303", "host.example:2000"] {
        assert_eq!(GameAddr::parse(s).unwrap().to_string(), s);
    }
    for bad in ["", "nohost", ":1", "a:b", "[::1]", "a:b:1"] {
        assert_eq!(GameAddr::parse(bad), None, "{bad}");
    }
}

#[test]
fn restore_rebuilds_counters() {
    let mut r = Registry::new(RegistryConfig::default());
    let rec = Record::new(0, reg("ut2", v4(1, 1), Face::GameSpy), T0);
    r.restore(rec.clone());
    r.restore(rec);
    assert_eq!(r.len(), 1);
    assert_eq!(r.count_of_source(SourceKey::of(v4(1, 1).ip())), 1);
    assert!(
        r.take_changes().is_empty(),
        "restoring changes nothing to write"
    );
}

#[test]
fn changes_feed_the_views_and_the_store() {
    let mut r = Registry::new(RegistryConfig::default());
    let k = listed(&mut r, reg("ut2", v4(1, 1), Face::GameSpy), T0);
    r.heartbeat(&k, at(1));
    let structural =
        |r: &mut Registry| -> Vec<bool> { r.take_changes().iter().map(|c| c.structural).collect() };
    assert_eq!(structural(&mut r), [true, false]);
    r.update_poll(&k, Some(info("a", 1, 2, &[])), at(2));
    assert_eq!(structural(&mut r), [true]);
    r.update_poll(&k, Some(info("a", 1, 2, &[])), at(3));
    assert_eq!(
        structural(&mut r),
        [false],
        "an unchanged poll is no structural change"
    );
    assert!(r.has_structural_dirty());
    assert_eq!(r.take_dirty().len(), 1, "one key, written once");
    assert!(!r.has_structural_dirty());
    r.remove(&k);
    let c = r.take_changes();
    assert!(c[0].record.is_none());
    assert!(r.take_dirty().contains(&k), "a removal is a write too");
}

proptest! {
    #[test]
    fn counters_stay_consistent(ops in proptest::collection::vec((0u8..7, 0u8..4, 0u8..3, 0u64..200), 0..200)) {
        let mut r = Registry::new(RegistryConfig { max_per_source: 3, ..RegistryConfig::default() });
        for (op, host, port, t) in ops {
            let a = reg("ut2", v4(host, 1000 + u16::from(port)), Face::GameSpy);
            let k = a.key.clone();
            match op {
                0 => { r.register(a, at(t)); }
                1 => { r.heartbeat(&k, at(t)); }
                2 => { r.verify(&k, at(t)); }
                3 => { r.delist(&k); }
                4 => { r.remove(&k); }
                5 => { r.challenge_sent(&k, at(t)); }
                _ => { r.prune_before(at(t)); }
            }
            for h in 0..4u8 {
                let n = r.iter().filter(|x| x.source() == SourceKey::of(v4(h, 0).ip())).count();
                prop_assert_eq!(r.count_of_source(SourceKey::of(v4(h, 0).ip())), n);
                prop_assert!(n <= 3);
            }
        }
    }

    #[test]
    fn game_addr_parse_never_panics(s in ".{0,40}") {
        let _ = GameAddr::parse(&s);
    }
}

/// One step of the sort-order property test.
#[derive(Debug, Clone)]
enum Step {
    Add(u8, String, u32),
    Poll(u8, String, u32),
    Beat(u8, u64),
    Remove(u8),
}

fn step() -> impl Strategy<Value = Step> {
    let name = prop::sample::select(vec![
        "alpha",
        "Beta",
        "beta",
        "ÄRGER",
        "ärger",
        "",
        "Σίσυφος",
        "zeta",
    ])
    .prop_map(str::to_owned);
    prop_oneof![
        (0u8..24, name.clone(), 0u32..5).prop_map(|(a, n, p)| Step::Add(a, n, p)),
        (0u8..24, name, 0u32..5).prop_map(|(a, n, p)| Step::Poll(a, n, p)),
        (0u8..24, 1u64..100).prop_map(|(a, s)| Step::Beat(a, s)),
        (0u8..24).prop_map(Step::Remove),
    ]
}

proptest! {
    /// The publisher's snapshot lists what the registry lists, in list order, and its patched
    /// orders equal a sort from scratch after any changes, for every column, with changes
    /// across several publishes.
    #[test]
    fn patched_orders_equal_a_full_sort(batches in prop::collection::vec(prop::collection::vec(step(), 0..12), 1..8)) {
        use crate::views::orders::{full, SortKey as K};
        let mut r = Registry::new(RegistryConfig::default());
        let mut p = Publisher::new(Duration::from_secs(30));
        // Every column wanted from the start.
        let first = p.build(T0);
        for k in K::INDEXED {
            let _ = first.order(k);
        }
        let mut t = 1;
        for batch in batches {
            let half = batch.len() / 2;
            for (i, s) in batch.into_iter().enumerate() {
                if i == half {
                    // Two view logs applied before one build.
                    let v = r.version();
                    let _ = p.apply(r.take_changes(), v);
                }
                t += 1;
                let key = |a: u8| ServerKey::new("ut2", GameAddr::Ip(v4(a, 7777)));
                match s {
                    Step::Add(a, name, n) => {
                        let _ = r.register(reg("ut2", v4(a, 7777), Face::GameAgent), at(t));
                        r.update_poll(&key(a), Some(info(&name, n, 8, &[])), at(t));
                    }
                    Step::Poll(a, name, n) => {
                        r.update_poll(&key(a), Some(info(&name, n, 8, &[])), at(t));
                    }
                    Step::Beat(a, secs) => {
                        let _ = r.heartbeat(&key(a), at(t + secs));
                    }
                    Step::Remove(a) => {
                        let _ = r.remove(&key(a));
                    }
                }
            }
            let v = r.version();
            let _ = p.apply(r.take_changes(), v);
            let snap = p.build(at(t));
            let mut want: Vec<&Record> = r.iter().filter(|x| x.is_listed()).collect();
            want.sort_by_key(|x| x.order_key());
            let got: Vec<&Record> = snap.listed().iter().map(|x| &**x).collect();
            prop_assert_eq!(got, want, "the snapshot lists what the registry lists, in list order");
            for k in K::INDEXED {
                let kept = snap.order(k);
                prop_assert_eq!(&*kept, &full(snap.listed(), k), "column {:?}", k);
            }
        }
    }
}

fn upstream(name: &str) -> Arc<str> {
    Arc::from(name)
}

#[test]
fn learned_records_carry_their_upstream_and_become_direct_when_proven() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = upstream("a");
    let k = reg("ut", v4(1, 7778), Face::GameSpy).key;
    assert_eq!(
        r.learn(reg("ut", v4(1, 7778), Face::GameSpy), &a, at(0)),
        Outcome::Added
    );
    let rec = r.get(&k).unwrap();
    assert!(rec.is_listed() && !rec.is_direct());
    assert_eq!(rec.seen_by("a"), Some(at(0)));
    assert_eq!(
        r.count_of_source(SourceKey::of(v4(1, 0).ip())),
        1,
        "capped like any"
    );
    // Learned again from another upstream: one more source, same record.
    let b = upstream("b");
    assert_eq!(
        r.learn(reg("ut", v4(1, 7778), Face::GameSpy), &b, at(5)),
        Outcome::Refreshed
    );
    assert_eq!(r.get(&k).unwrap().sources().len(), 2);
    // A heartbeat alone proves nothing new; a registration through the face does.
    r.heartbeat(&k, at(6));
    assert!(!r.get(&k).unwrap().is_direct());
    assert_eq!(
        r.register(reg("ut", v4(1, 7778), Face::GameSpy), at(7)),
        Outcome::Refreshed
    );
    let rec = r.get(&k).unwrap();
    assert!(rec.is_direct());
    let origins: Vec<Option<&str>> = rec.sources().iter().map(|s| s.origin.upstream()).collect();
    assert_eq!(origins, [None, Some("a"), Some("b")], "direct first");
    // A direct record learned later keeps its face's data.
    let d = listed(
        &mut r,
        reg("teeworlds", v4(2, 8303), Face::Teeworlds07),
        at(0),
    );
    let mut other = reg("teeworlds", v4(2, 8303), Face::Teeworlds06);
    other.query_addr = None;
    assert_eq!(r.learn(other, &a, at(1)), Outcome::Refreshed);
    let rec = r.get(&d).unwrap();
    assert_eq!(
        (rec.face, rec.query_addr().is_some()),
        (Face::Teeworlds07, true)
    );
    assert!(rec.is_direct() && rec.seen_by("a").is_some());
}

#[test]
fn a_pull_refreshes_what_it_lists_and_drops_the_rest_when_complete() {
    let mut r = Registry::new(RegistryConfig::default());
    let a = upstream("a");
    let k1 = reg("ut", v4(1, 7778), Face::GameSpy).key;
    let k2 = reg("ut", v4(2, 7778), Face::GameSpy).key;
    r.learn(reg("ut", v4(1, 7778), Face::GameSpy), &a, at(0));
    r.learn(reg("ut", v4(2, 7778), Face::GameSpy), &a, at(0));
    let direct = listed(&mut r, reg("ut", v4(3, 7778), Face::GameSpy), at(0));
    r.learn(reg("ut", v4(3, 7778), Face::GameSpy), &a, at(0));
    r.take_changes();
    // Incomplete: k1 refreshed, nothing taken away.
    let only_k1: HashSet<ServerKey> = [k1.clone()].into();
    let p = r.upstream_pull(&a, &only_k1, at(10), false);
    assert_eq!((p.seen, p.dropped, p.removed), (1, 0, 0));
    assert_eq!(r.get(&k1).unwrap().seen_by("a"), Some(at(10)));
    assert_eq!(r.get(&k2).unwrap().seen_by("a"), Some(at(0)));
    // Complete: k2 (only this source) goes, the direct record loses the source and stays.
    let p = r.upstream_pull(&a, &only_k1, at(20), true);
    assert_eq!((p.seen, p.dropped, p.removed), (1, 2, 1));
    assert!(r.get(&k2).is_none());
    let d = r.get(&direct).unwrap();
    assert!(d.is_direct() && d.seen_by("a").is_none());
    // Keys the registry does not have are ignored; an unchanged list refreshes every source.
    let stranger: HashSet<ServerKey> = [k2.clone(), k1.clone()].into();
    assert_eq!(r.upstream_pull(&a, &stranger, at(30), true).seen, 1);
    assert_eq!(r.upstream_unchanged("a", at(40)), 1);
    assert_eq!(r.get(&k1).unwrap().seen_by("a"), Some(at(40)));
    let removed = r
        .take_changes()
        .iter()
        .filter(|c| c.record.is_none())
        .count();
    assert_eq!(removed, 1);
}

#[test]
fn learned_records_live_by_their_upstreams_and_leave_when_polls_fail() {
    let config = RegistryConfig {
        learned_lifetime: Duration::from_secs(1000),
        ..RegistryConfig::default()
    };
    let mut r = Registry::new(config);
    let a = upstream("a");
    let k = reg("ut", v4(1, 7778), Face::GameSpy).key;
    r.learn(reg("ut", v4(1, 7778), Face::GameSpy), &a, at(0));
    // Polls do not keep it: its upstream does.
    r.update_poll(&k, Some(info("x", 0, 8, &[])), at(900));
    assert_eq!(r.expires_at(r.get(&k).unwrap()), Some(at(1000)));
    assert!(r.prune_before(at(999)).is_empty());
    assert_eq!(r.prune_before(at(1000)), std::slice::from_ref(&k));
    // A direct record with an upstream source lives by the later of both, and loses the
    // stale source.
    let d = listed(&mut r, reg("ut", v4(2, 7778), Face::GameSpy), at(0));
    r.learn(reg("ut", v4(2, 7778), Face::GameSpy), &a, at(0));
    assert_eq!(r.expires_at(r.get(&d).unwrap()), Some(at(1000)));
    r.heartbeat(&d, at(900));
    assert!(r.prune_before(at(1000)).is_empty());
    let rec = r.get(&d).unwrap();
    assert!(rec.seen_by("a").is_none(), "stale source dropped");
    assert_eq!(r.expires_at(rec), Some(at(1200)), "the face's 300 s again");
    // Failing polls de-list a direct record but remove a learned one.
    r.learn(reg("ut", v4(4, 7778), Face::GameSpy), &a, at(2000));
    let l = reg("ut", v4(4, 7778), Face::GameSpy).key;
    assert_eq!(r.delist(&l), DelistOutcome::Delisted);
    assert!(r.get(&l).is_none());
    assert_eq!(r.delist(&d), DelistOutcome::Delisted);
    assert!(r.get(&d).is_some());
}

#[test]
fn remote_changes_reach_the_view_but_not_the_persister() {
    let mut here = Registry::new(RegistryConfig::default());
    let mut there = Registry::new(RegistryConfig::default());
    let key = listed(&mut there, reg("ut2", v4(1, 7778), Face::GameSpy), at(0));
    let rec = there.get(&key).unwrap().clone();
    let v = here.version();
    assert!(here.apply_remote(rec.clone()));
    assert!(here.version() > v, "logged for the publisher");
    assert_eq!(here.dirty_len(), 0, "never written back");
    assert_eq!(here.count_of_source(rec.source()), 1);
    let changes = here.take_changes();
    assert_eq!(changes.len(), 1);
    assert!(changes[0].structural);
    let id = here.get(&key).unwrap().id;
    assert!(
        !here.apply_remote(rec.clone()),
        "the same record changes nothing"
    );

    // A newer version keeps the local id; a heartbeat alone is not structural.
    there.heartbeat(&key, at(10));
    assert!(here.apply_remote(there.get(&key).unwrap().clone()));
    assert_eq!(here.get(&key).unwrap().id, id);
    assert_eq!(here.get(&key).unwrap().last_heartbeat, at(10));
    assert!(!here.take_changes()[0].structural);
    assert_eq!(here.count_of_source(rec.source()), 1, "counted once");

    // A local change waiting for the persister wins over a remote one.
    here.heartbeat(&key, at(20));
    assert!(!here.apply_remote(rec.clone()));
    assert!(!here.remove_remote(&key));
    assert_eq!(here.get(&key).unwrap().last_heartbeat, at(20));
    here.take_dirty();

    assert!(here.remove_remote(&key));
    assert!(here.get(&key).is_none());
    assert_eq!(here.dirty_len(), 0);
    assert_eq!(here.count_of_source(rec.source()), 0);
    assert!(here.take_changes().iter().any(|c| c.record.is_none()));
    assert!(!here.remove_remote(&key), "already gone");
}

#[test]
fn rules_keep_pairs_in_order_and_find_keys_without_case() {
    let r = Rules::new([("Version", "1.05"), ("product", "SeriousSam"), ("", "")]);
    assert_eq!(
        r.iter().collect::<Vec<_>>(),
        [("Version", "1.05"), ("product", "SeriousSam"), ("", "")]
    );
    assert_eq!(r.len(), 3);
    assert_eq!(r.get("version"), Some("1.05"));
    assert_eq!(r.get("mutator"), None);
    assert!(Rules::default().is_empty());
    assert_eq!(Rules::default().iter().count(), 0);
    // An empty pair is a pair: not the same as no rules.
    assert_ne!(Rules::new([("", "")]), Rules::default());
    assert_eq!(
        format!("{r:?}"),
        r#"[("Version", "1.05"), ("product", "SeriousSam"), ("", "")]"#
    );
}

#[test]
fn rules_drop_nuls_and_clip_to_the_limits() {
    let long = "é".repeat(MAX_POLL_TEXT + 5);
    let r = Rules::new([("a\0b", long.as_str())]);
    let (k, v) = r.iter().next().unwrap();
    assert_eq!(k, "ab");
    assert_eq!(v.chars().count(), MAX_POLL_TEXT);
    let many = Rules::new((0..MAX_POLL_RULES + 3).map(|i| (i.to_string(), "v")));
    assert_eq!(many.len(), MAX_POLL_RULES);
}

#[test]
fn common_rule_keys_are_packed_as_codes_and_read_as_their_text() {
    let q3 = Rules::new([
        ("protocol", "68"),
        ("gametype", "0"),
        ("gamename", "Quake3Arena"),
    ]);
    assert_eq!(
        q3.iter().collect::<Vec<_>>(),
        [
            ("protocol", "68"),
            ("gametype", "0"),
            ("gamename", "Quake3Arena")
        ]
    );
    assert_eq!(q3.get("GameName"), Some("Quake3Arena"));
    // Three bytes per key (its code and the NUL), the values as they are.
    assert_eq!(q3.packed_len(), 3 * 3 + "68 0 Quake3Arena ".len());
    // Keys that look like codes are kept as themselves.
    let odd = Rules::new([
        ("\u{1}A", "x"),
        ("\u{1}\u{1}", "y"),
        ("\u{1}", "z"),
        ("protocols", "w"),
    ]);
    assert_eq!(
        odd.iter().collect::<Vec<_>>(),
        [
            ("\u{1}A", "x"),
            ("\u{1}\u{1}", "y"),
            ("\u{1}", "z"),
            ("protocols", "w")
        ]
    );
}

proptest! {
    #[test]
    fn rules_give_back_what_they_were_given(pairs in proptest::collection::vec(("[^\0]{0,8}|protocol|gametype|hostport|\u{1}[A-F]?", "[^\0]{0,8}"), 0..12)) {
        let r = Rules::new(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let back: Vec<(String, String)> = r.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        prop_assert_eq!(&back, &pairs);
        prop_assert_eq!(r.len(), pairs.len());
        prop_assert_eq!(Rules::new(back), r);
    }
}

fn fields(name: &str, map: &str, players: &[&str], rules: &[(&str, &str)]) -> PollFields {
    PollFields {
        name: name.into(),
        map: map.into(),
        game_type: "ctf".into(),
        num_players: 3,
        max_players: 16,
        password: Some(false),
        players: players.iter().map(|&n| PollPlayer::new(n)).collect(),
        rules: Rules::new(rules.iter().copied()),
        game_port: Some(27960),
    }
}

#[test]
fn poll_infos_share_their_map_game_type_and_rules_and_keep_their_own_name_and_players() {
    let rules = [("protocol", "68"), ("gamename", "shared-texts-test")];
    let a = PollInfo::from(fields("alpha", "q3dm17", &["x", "y"], &rules));
    // Made on another thread, so that the per-thread cache is not what makes them one.
    let b =
        std::thread::spawn(move || PollInfo::from(fields("beta ^1server", "q3dm17", &[], &rules)))
            .join()
            .unwrap();
    assert!(a.shares_texts_with(&b));
    assert_eq!(a.texts(), ["alpha", "q3dm17", "ctf"]);
    assert_eq!(b.texts(), ["beta ^1server", "q3dm17", "ctf"]);
    assert_eq!(a.players().names().collect::<Vec<_>>(), ["x", "y"]);
    assert!(b.players().is_empty());
    assert_eq!(a.rule("GAMENAME"), Some("shared-texts-test"));
    assert_eq!(b.rules().len(), 2);
    // Equal texts compare equal whether or not they are one copy; a field apart, not.
    assert_eq!(PollInfo::from(a.to_fields()), a);
    assert_ne!(
        PollInfo::from(fields("alpha", "q3dm6", &["x", "y"], &rules)),
        a
    );
    let c = PollInfo::from(fields("gamma", "q3dm6", &[], &rules));
    assert!(!a.shares_texts_with(&c));
    // Nothing but the name: no shared text at all.
    let bare = PollInfo::from(PollFields {
        name: "only a name".into(),
        ..PollFields::default()
    });
    assert_eq!(bare.texts(), ["only a name", "", ""]);
    assert!(bare.rules().is_empty());
    assert_eq!(PollInfo::default().texts(), ["", "", ""]);
}

#[test]
fn shared_poll_texts_no_info_holds_are_forgotten() {
    let kept = PollInfo::from(fields("k", "kept-map", &[], &[]));
    for i in 0..5_000 {
        drop(PollInfo::from(fields(
            "f",
            &format!("forged-map-{i}"),
            &[],
            &[],
        )));
    }
    // Other tests of this binary hold a few at once; far below 5,000.
    assert!(
        PollInfo::shared_texts_held() < 1_000,
        "{} held",
        PollInfo::shared_texts_held()
    );
    let again = PollInfo::from(fields("k2", "kept-map", &["p"], &[]));
    assert!(again.shares_texts_with(&kept));
}

proptest! {
    #[test]
    fn poll_infos_give_back_what_they_were_given(
        name in "[^\0]{0,300}",
        map in "[^\0]{0,20}",
        game_type in "[^\0]{0,20}",
        players in proptest::collection::vec(any_player(), 0..5),
        rules in proptest::collection::vec(("[^\0]{1,8}", "[^\0]{0,8}"), 0..5),
    ) {
        let f = PollFields {
            name: name.as_str().into(),
            map: map.as_str().into(),
            game_type: game_type.as_str().into(),
            num_players: 1,
            max_players: 2,
            password: None,
            players: PollPlayers::new(players),
            rules: Rules::new(rules),
            game_port: None,
        };
        let info = PollInfo::from(f.clone());
        let want = short(&name);
        prop_assert_eq!(info.name(), want.as_str());
        prop_assert_eq!(info.map(), map.as_str());
        prop_assert_eq!(info.game_type(), game_type.as_str());
        prop_assert_eq!(info.players().to_players(), f.players.clone());
        prop_assert_eq!(info.rules().to_rules(), f.rules.clone());
        prop_assert_eq!(PollInfo::from(info.to_fields()), info);
    }
}

#[test]
fn player_numbers_beyond_their_kept_width_are_clamped() {
    assert_eq!(PollPlayer::score_of(-9999), -9999);
    assert_eq!(PollPlayer::score_of(i64::MAX), i32::MAX);
    assert_eq!(PollPlayer::score_of(i64::MIN), i32::MIN + 1);
    assert_eq!(PollPlayer::score_of(i64::from(i32::MIN)), i32::MIN + 1);
    assert_eq!(PollPlayer::ping_of(999), 999);
    assert_eq!(PollPlayer::ping_of(100_000), u16::MAX - 1);
    assert_eq!(PollPlayer::ping_of(u32::from(u16::MAX)), u16::MAX - 1);
    assert_eq!(PollPlayer::team_of(-70_000), -2047);
    assert_eq!(PollPlayer::team_of(70_000), 2047);
    assert_eq!(PollPlayer::team_of(-2048), -2047);
    assert_eq!(PollPlayer::team_of(1), 1);
}

fn any_player() -> impl Strategy<Value = PollPlayer> {
    (
        // Up to 300 chars of any width, so names cross the 128-byte length and the clip.
        proptest::collection::vec(any::<char>(), 0..300),
        proptest::option::of(any::<i32>()),
        proptest::option::of(any::<u16>()),
        proptest::option::of(any::<i16>()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(name, score, ping, team, spectator, bot)| {
            PollPlayer::new(name.into_iter().collect::<String>())
                .with_score(score)
                .with_ping_ms(ping)
                .with_team(team)
                .with_spectator(spectator)
                .with_bot(bot)
        })
}

proptest! {
    #[test]
    fn packed_players_read_back_as_given_up_to_the_limits(
        players in proptest::collection::vec(any_player(), 0..300),
    ) {
        let packed = PollPlayers::new(players.clone());
        let want: Vec<PollPlayer> = players
            .into_iter()
            .take(MAX_POLL_PLAYERS)
            .map(|mut p| {
                p.name = short(&p.name);
                p
            })
            .collect();
        let got: Vec<PollPlayer> = packed.iter().collect();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(packed.len(), want.len());
        prop_assert_eq!(packed.is_empty(), want.is_empty());
        let names: Vec<&str> = packed.names().collect();
        let want_names: Vec<&str> = want.iter().map(|p| p.name.as_str()).collect();
        prop_assert_eq!(names, want_names);
        prop_assert_eq!(PollPlayers::new(got), packed);
    }
}

#[test]
fn packed_players_take_their_size_and_name_lengths_of_two_bytes() {
    let five: PollPlayers = (0..5)
        .map(|p| PollPlayer::new(format!("tee12345-{p}")).with_score(Some(p)))
        .collect();
    // 8 bytes of numbers, 1 of length and 10 of name each.
    assert_eq!(format!("{five:?}").matches("PollPlayer").count(), 5);
    assert_eq!(five.packed_len(), 5 * 19);
    let long = "é".repeat(100); // 200 bytes: a two-byte length
    let p = PollPlayers::new([PollPlayer::new(long.as_str()), PollPlayer::new("x")]);
    assert_eq!(p.packed_len(), 8 + 2 + 200 + 8 + 1 + 1);
    assert_eq!(p.names().collect::<Vec<_>>(), [long.as_str(), "x"]);
    assert_eq!(p.get(1), Some(PollPlayer::new("x")));
    assert_eq!(p.get(2), None);
    assert!(PollPlayers::default().is_empty());
}

#[test]
fn a_poll_player_is_32_bytes_and_knows_nothing_by_default() {
    assert_eq!(size_of::<PollPlayer>(), 32);
    let p = PollPlayer::default();
    assert_eq!(p, PollPlayer::new(""));
    assert_eq!(
        (p.score(), p.ping_ms(), p.team(), p.spectator(), p.bot()),
        (None, None, None, None, None)
    );
    let shown = format!("{:?}", PollPlayer::new("a").with_team(Some(-1)));
    assert_eq!(
        shown,
        r#"PollPlayer { name: "a", score: None, ping_ms: None, team: Some(-1), spectator: None, bot: None }"#
    );
}

#[test]
fn poll_player_numbers_read_back() {
    let p = || PollPlayer::new("p");
    for (v, want) in [
        (None, None),
        (Some(i32::MIN + 1), Some(i32::MIN + 1)),
        (Some(i32::MAX), Some(i32::MAX)),
        (Some(-1), Some(-1)),
        (Some(0), Some(0)),
        (Some(1234), Some(1234)),
        (Some(i32::MIN), Some(i32::MIN + 1)),
    ] {
        assert_eq!(p().with_score(v).score(), want, "{v:?}");
    }
    for (v, want) in [
        (None, None),
        (Some(0), Some(0)),
        (Some(65_534), Some(65_534)),
        (Some(80), Some(80)),
        (Some(u16::MAX), Some(65_534)),
    ] {
        assert_eq!(p().with_ping_ms(v).ping_ms(), want, "{v:?}");
    }
    for (v, want) in [
        (None, None),
        (Some(-2047), Some(-2047)),
        (Some(-1), Some(-1)),
        (Some(0), Some(0)),
        (Some(1), Some(1)),
        (Some(255), Some(255)),
        (Some(2047), Some(2047)),
        (Some(-2048), Some(-2047)),
        (Some(2048), Some(2047)),
        (Some(i16::MIN), Some(-2047)),
        (Some(i16::MAX), Some(2047)),
    ] {
        assert_eq!(p().with_team(v).team(), want, "{v:?}");
    }
    for (v, want) in [(-40_000, -2047), (40_000, 2047)] {
        let team = Some(PollPlayer::team_of(v));
        assert_eq!(p().with_team(team).team(), Some(want), "{v}");
    }
}

#[test]
fn poll_player_flags_read_back_in_every_combination() {
    let flags = [None, Some(false), Some(true)];
    for spectator in flags {
        for bot in flags {
            for team in [None, Some(-2047), Some(-1), Some(0), Some(2047)] {
                let p = PollPlayer::new("p")
                    .with_score(Some(-1))
                    .with_ping_ms(Some(65_534))
                    .with_team(team)
                    .with_spectator(spectator)
                    .with_bot(bot);
                let got = (p.team(), p.spectator(), p.bot(), p.score(), p.ping_ms());
                assert_eq!(got, (team, spectator, bot, Some(-1), Some(65_534)));
                // Setting one field again leaves the others alone.
                let mut q = p.clone();
                q.set_spectator(bot);
                q.set_bot(spectator);
                q.set_team(None);
                assert_eq!((q.team(), q.spectator(), q.bot()), (None, bot, spectator));
                q.set_team(team);
                q.set_spectator(spectator);
                q.set_bot(bot);
                assert_eq!(q, p);
            }
        }
    }
}

proptest! {
    #[test]
    fn poll_player_fields_read_back_clamped(
        score in any::<Option<i32>>(),
        ping in any::<Option<u16>>(),
        team in any::<Option<i16>>(),
        spectator in any::<Option<bool>>(),
        bot in any::<Option<bool>>(),
    ) {
        let p = PollPlayer::new("p")
            .with_score(score)
            .with_ping_ms(ping)
            .with_team(team)
            .with_spectator(spectator)
            .with_bot(bot);
        prop_assert_eq!(p.score(), score.map(|s| s.max(i32::MIN + 1)));
        prop_assert_eq!(p.ping_ms(), ping.map(|v| v.min(u16::MAX - 1)));
        prop_assert_eq!(p.team(), team.map(|t| t.clamp(-2047, 2047)));
        prop_assert_eq!(p.spectator(), spectator);
        prop_assert_eq!(p.bot(), bot);
        // The builders' order does not matter.
        let q = PollPlayer::new("p")
            .with_bot(bot)
            .with_spectator(spectator)
            .with_team(team)
            .with_ping_ms(ping)
            .with_score(score);
        prop_assert_eq!(q, p);
    }
}

#[test]
fn a_registration_with_its_info_is_the_two_calls_in_one() {
    let k = reg("ut2", v4(1, 1), Face::Quake3).key;
    let (mut one, mut two) = (
        Registry::new(RegistryConfig::default()),
        Registry::new(RegistryConfig::default()),
    );
    // New, then refreshed with another info (kept only while never polled), then under
    // another game at the same address (the old game's record goes).
    for (game, name) in [("ut2", "a"), ("ut2", "b"), ("ut3", "c")] {
        let x = reg(game, v4(1, 1), Face::Quake3);
        let a = one.register_replacing_with_info(x.clone(), T0, info(name, 1, 2, &[]));
        let key = x.key.clone();
        let b = two.register_replacing(x, T0);
        two.registration_info(&key, info(name, 1, 2, &[]));
        assert_eq!(a, b, "{game} {name}");
        assert_eq!(one.len(), two.len());
        let (ra, rb) = (one.get(&key).unwrap(), two.get(&key).unwrap());
        assert_eq!(ra.info, rb.info);
        assert_eq!(ra.info.as_ref().unwrap().name(), name);
        assert_eq!(one.take_changes().len(), two.take_changes().len());
    }
    assert!(one.get(&k).is_none(), "replaced by the other game");
    // A refused registration stores nothing.
    let mut full = Registry::new(RegistryConfig {
        max_records: 0,
        ..RegistryConfig::default()
    });
    let x = reg("ut2", v4(1, 2), Face::Quake3);
    assert_eq!(
        full.register_replacing_with_info(x, T0, info("a", 1, 2, &[])),
        Outcome::Rejected(Reject::RecordCap)
    );
    assert_eq!(full.len(), 0);
}

#[test]
fn a_registration_and_its_info_are_one_change_made_in_place() {
    let mut r = Registry::new(RegistryConfig::default());
    let k = listed(&mut r, reg("ut2", v4(1, 1), Face::GameAgent), T0);
    let first: *const Record = r.get(&k).unwrap();
    assert!(r.registration_info(&k, info("a", 1, 2, &[])));
    assert!(
        std::ptr::eq(r.get(&k).unwrap(), first),
        "changed in place, not on a copy"
    );
    let c = r.take_changes();
    assert_eq!(c.len(), 1, "one change");
    assert!(c[0].structural);
    let logged = c[0].record.as_ref().unwrap();
    assert_eq!(logged.info.as_ref().unwrap().name(), "a");
    // Once a snapshot holds the record, a change goes to a copy: the snapshot keeps its own.
    let mut p = Publisher::new(Duration::from_secs(30));
    let v = r.version();
    let _ = p.apply(c, v);
    let snap = p.build(at(1));
    assert!(r.registration_info(&k, info("b", 1, 2, &[])));
    assert_eq!(snap.listed()[0].info.as_ref().unwrap().name(), "a");
    assert_eq!(r.get(&k).unwrap().info.as_ref().unwrap().name(), "b");
    let v = r.version();
    let _ = p.apply(r.take_changes(), v);
    assert_eq!(
        p.build(at(2)).listed()[0].info.as_ref().unwrap().name(),
        "b"
    );
}

/// A query result converted for the registry is within every limit: the conversion clips as
/// it copies.
#[test]
fn converted_query_results_are_already_bounded() {
    use muster_proto::model::{Player, Rule, ServerInfo, Text};
    let long = "é".repeat(MAX_POLL_TEXT + 40);
    let text = |s: &str| Text {
        plain: s.to_owned(),
        ..Text::default()
    };
    let mut info = ServerInfo::new(Protocol::GameSpy1);
    info.name = text(&long);
    info.map = text(&long);
    info.game_type = text(&long);
    info.players = (0..MAX_POLL_PLAYERS + 10)
        .map(|_| Player {
            name: text(&long),
            ..Player::default()
        })
        .collect();
    info.rules = vec![Rule {
        key: text("hostport"),
        value: text("7777"),
    }];
    let p = PollInfo::from_server_info(&info);
    assert_eq!(p.name().chars().count(), MAX_POLL_TEXT);
    assert_eq!(p.players().len(), MAX_POLL_PLAYERS);
    assert!(
        p.players()
            .names()
            .all(|n| n.chars().count() == MAX_POLL_TEXT)
    );
    assert_eq!(p.game_port, Some(7777));
    assert_eq!(p.map().chars().count(), MAX_POLL_TEXT);
    assert_eq!(p.game_type().chars().count(), MAX_POLL_TEXT);
    assert_eq!(p.rule("hostport"), Some("7777"));
}

/// A poll info packs its texts and rules in one string: each text reads back as given
/// (clipped, without NULs), empty texts and rules included, and its fields build it again.
#[test]
fn a_poll_info_keeps_its_texts_and_rules_apart() {
    let fields = PollFields {
        name: "a\0b".into(),
        map: ShortText::default(),
        game_type: "ctf".into(),
        num_players: 3,
        max_players: 8,
        password: Some(true),
        players: PollPlayers::new([PollPlayer::new(ShortText::from("p"))]),
        rules: Rules::new([("Version", "1.05"), ("", "x"), ("k", "")]),
        game_port: Some(7777),
    };
    let p = PollInfo::from(fields.clone());
    assert_eq!((p.name(), p.map(), p.game_type()), ("ab", "", "ctf"));
    assert_eq!(p.texts(), ["ab", "", "ctf"]);
    let rules: Vec<_> = p.rules().iter().collect();
    assert_eq!(rules, [("Version", "1.05"), ("", "x"), ("k", "")]);
    assert_eq!(p.rules().len(), 3);
    assert_eq!(p.rule("version"), Some("1.05"));
    assert_eq!(PollInfo::from(p.to_fields()), p);
    assert_eq!(p.to_fields().name, "ab");
    assert_eq!(
        PollInfo::from(PollFields {
            name: "ab".into(),
            ..fields
        }),
        p
    );

    // Nothing to keep: no allocation, and every text and the rules read as empty.
    let empty = PollInfo::from(PollFields::default());
    assert_eq!(empty, PollInfo::default());
    assert_eq!((empty.name(), empty.map(), empty.game_type()), ("", "", ""));
    assert_eq!(empty.texts(), ["", "", ""]);
    assert!(empty.rules().is_empty());
    // Rules alone.
    let only_rules = PollInfo::from(PollFields {
        rules: Rules::new([("a", "b")]),
        ..PollFields::default()
    });
    assert_eq!(only_rules.name(), "");
    assert_eq!(only_rules.rule("a"), Some("b"));
    // A name alone has no rules.
    let only_name = PollInfo::from(PollFields {
        name: "n".into(),
        ..PollFields::default()
    });
    assert!(only_name.rules().is_empty());
    assert_eq!(only_name.name(), "n");
}

#[test]
fn a_ddnet_stream_at_its_records_address_keeps_only_its_scheme() {
    let v4a = GameAddr::Ip("192.0.2.7:8303".parse().unwrap());
    let v6a = GameAddr::Ip("[2001:db8::7]:8303".parse().unwrap());
    for (url, addr) in [
        ("tw-0.6+udp://192.0.2.7:8303", &v4a),
        ("tw-0.7+udp://192.0.2.7:8303", &v4a),
        ("tw-0.5+udp://[2001:db8::7]:8303", &v6a),
    ] {
        let s = DdnetStream::new(url, addr, at(1));
        assert!(matches!(s.url(addr), std::borrow::Cow::Owned(_)), "{url}");
        assert_eq!(s.url(addr), url);
        assert!(s.is(url, addr));
        assert!(!s.is("tw-0.6+udp://192.0.2.8:8303", addr));
    }
    // Another address, an unknown scheme, another spelling: kept as given.
    for url in [
        "tw-0.6+udp://192.0.2.8:8303",
        "ddper-0.6+udp://192.0.2.7:8303",
        "tw-0.6+udp://192.0.2.007:8303",
        "tw-0.6+udp:192.0.2.7:8303",
        "",
    ] {
        let s = DdnetStream::new(url, &v4a, at(1));
        assert!(
            matches!(s.url(&v4a), std::borrow::Cow::Borrowed(_)),
            "{url}"
        );
        assert_eq!(s.url(&v4a), url);
        assert!(s.is(url, &v4a));
    }
    // Equal streams compare equal, whatever the URL's form.
    assert_eq!(
        DdnetStream::new("tw-0.6+udp://192.0.2.7:8303", &v4a, at(1)),
        DdnetStream::new("tw-0.6+udp://192.0.2.7:8303", &v4a, at(1))
    );
}

#[test]
fn a_ddnet_secret_that_is_a_uuid_is_kept_as_its_bytes_and_spelled_back_the_same() {
    for s in [
        "4ae14cf1-eb35-4068-89eb-7967b754451e",
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
    ] {
        let secret = DdnetSecret::from(s);
        assert!(matches!(secret, DdnetSecret::Uuid(_)), "{s}");
        assert_eq!(secret.to_string(), s);
        assert_eq!(secret, DdnetSecret::from(s));
    }
    // Anything else is kept as given, and spelled back the same too.
    for s in [
        "4AE14CF1-EB35-4068-89EB-7967B754451E",
        "4ae14cf1eb35406889eb7967b754451e",
        "4ae14cf1-eb35-4068-89eb-7967b754451",
        "4ae14cf1-eb35-4068-89eb-7967b754451e0",
        "4ae14cf1_eb35-4068-89eb-7967b754451e",
        "4ae14cf1-eb35-4068-89eb-7967b754451g",
        "s",
        "",
        "ü4e14cf1-eb35-4068-89eb-7967b75445",
    ] {
        let secret = DdnetSecret::from(s);
        assert!(matches!(secret, DdnetSecret::Text(_)), "{s}");
        assert_eq!(secret.to_string(), s);
    }
    assert_ne!(
        DdnetSecret::from("4ae14cf1-eb35-4068-89eb-7967b754451e"),
        DdnetSecret::from("4ae14cf1-eb35-4068-89eb-7967b754451f")
    );
}

proptest! {
    #[test]
    fn every_ddnet_secret_is_spelled_back_as_given(s in "\\PC{0,40}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}") {
        prop_assert_eq!(DdnetSecret::from(s.as_str()).to_string(), s);
    }
}

#[test]
fn the_newest_serial_of_a_secret_answers_whatever_the_order_its_records_came_in() {
    let secret = DdnetSecret::from("4ae14cf1-eb35-4068-89eb-7967b754451e");
    let restored = |port: u16, serial: i64, body: &'static [u8]| {
        let mut rec = Record::new(0, reg("ddnet", v4(9, port), Face::DdnetHttp), at(1));
        rec.set_ddnet(Some(Arc::new(DdnetData {
            secret: secret.clone(),
            serial,
            info: DdnetInfo::from(body),
            streams: Box::default(),
        })));
        rec
    };
    for order in [[0, 1], [1, 0]] {
        let recs = [
            restored(8303, 3, br#"{"v":3}"#),
            restored(8304, 5, br#"{"v":5}"#),
        ];
        let mut r = Registry::new(RegistryConfig::default());
        for i in order {
            r.restore(recs[i].clone());
        }
        let (serial, info) = r.ddnet_info(&secret).unwrap();
        assert_eq!(serial, 5, "order {order:?}");
        assert_eq!(&info.bytes().unwrap()[..], br#"{"v":5}"#);
    }
}

proptest! {
    /// Addresses are written as the standard library writes them, IPv4 digit by digit.
    #[test]
    fn addresses_are_written_as_std_writes_them(ip in any::<u32>(), port in any::<u16>(), v6 in any::<u128>()) {
        for a in [
            SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::from(v6)), port),
        ] {
            prop_assert_eq!(addr_text(&a), a.to_string());
            prop_assert_eq!(GameAddr::Ip(a).to_string(), a.to_string());
            // Widths and alignment still apply.
            prop_assert_eq!(format!("{:>48}", GameAddr::Ip(a)), format!("{a:>48}"));
        }
    }
}
