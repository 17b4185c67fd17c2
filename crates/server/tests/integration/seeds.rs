//! The seed documents' examples, sent by emulated servers over loopback: each test starts a
//! farm from a TOML description (as `muster emulate --config` does), queries its socket with
//! the seed's request bytes and compares what comes back with the seed's example bytes.

use std::net::SocketAddr;
use std::time::Duration;

use muster_server::farm::{FarmProtocol, FarmServer, FarmSpec};
use muster_server::run::RunningFarm;
use muster_server::{Limits, endpoints, run};
use tokio::net::UdpSocket;

/// How long a test waits for a reply that must come (a hang guard, not a speed assertion).
const REPLY_GUARD: Duration = Duration::from_secs(10);

/// A free game port whose + `offset` is free too (small race accepted).
fn free_game_port(offset: u16) -> u16 {
    loop {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let Some(plus) = port.checked_add(offset) else {
            continue;
        };
        if std::net::UdpSocket::bind(("127.0.0.1", plus)).is_ok() {
            return port;
        }
    }
}

async fn farm(toml: &str) -> RunningFarm {
    farm_with(toml, |_| {}).await
}

/// [`farm`], with a last change to the expanded servers (rules in an order TOML cannot keep).
async fn farm_with(toml: &str, change: impl FnOnce(&mut [FarmServer])) -> RunningFarm {
    let mut servers = FarmSpec::from_toml(toml).unwrap().expand().unwrap();
    change(&mut servers);
    run::start(servers, Limits::unlimited(), None, endpoints::endpoint)
        .await
        .unwrap()
}

fn listening(running: &RunningFarm, protocol: FarmProtocol) -> SocketAddr {
    running
        .listening
        .iter()
        .find(|l| l.protocol == protocol)
        .map(|l| l.addr)
        .expect("a socket of that protocol")
}

async fn client() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.unwrap()
}

async fn recv(socket: &UdpSocket, from: SocketAddr) -> Vec<u8> {
    let mut buf = vec![0u8; 65_536];
    let (n, src) = tokio::time::timeout(REPLY_GUARD, socket.recv_from(&mut buf))
        .await
        .expect("a reply")
        .unwrap();
    assert_eq!(src, from, "replies come from the queried socket");
    buf.truncate(n);
    buf
}

/// Seed 001: a GameAgent server of the default style answers the players request (`03`)
/// with the seed's example: header `8`, `player_0` `Angelo` (as typed, not `^oAngelo^r`), 14
/// frags, ping 80; the other seven records follow the seed's per-player template.
#[tokio::test]
async fn seed_001_gameagent_default_style_sends_the_seed_player_example() {
    let port = free_game_port(1);
    let mut players = String::from("{ name = \"Angelo\", score = 14, ping = 80 }");
    for i in 1..8 {
        players.push_str(&format!(
            ", {{ name = \"Bot{i}\", score = {i}, ping = {} }}",
            20 + i
        ));
    }
    let running = farm(&format!(
        "[[server]]\nprotocol = \"gameagent\"\nport = {port}\nname = \"Awesome Server\"\n\
         map = \"Yodeller\"\ngame_type = \"Fragmatch\"\nmax_players = 16\nplayers = [{players}]\n"
    ))
    .await;
    let query = listening(&running, FarmProtocol::Gameagent);
    assert_eq!(
        query.port(),
        port + 1,
        "the enumeration port is server port + 1"
    );
    let socket = client().await;
    socket.send_to(&[0x03], query).await.unwrap();
    let got = recv(&socket, query).await;
    let mut want = b"\x01players\x028\x03".to_vec();
    want.extend_from_slice(b"player_0\x02Angelo\x03frags_0\x0214\x03ping_0\x0280\x03");
    for i in 1..8 {
        want.extend_from_slice(
            format!(
                "player_{i}\x02Bot{i}\x03frags_{i}\x02{i}\x03ping_{i}\x02{}\x03",
                20 + i
            )
            .as_bytes(),
        );
    }
    want.push(0x04);
    same_bytes(&got, &want);
    // The status example of the seed, from the same server.
    socket.send_to(&[0x02], query).await.unwrap();
    assert_eq!(
        recv(&socket, query).await,
        b"0;players;8;maxplayers;16;level;Yodeller;gametype;Fragmatch;version;1.10;gamename;serioussamse;sessionname;Awesome Server"
    );
    running.stop().await;
}

fn same_bytes(got: &[u8], want: &[u8]) {
    assert!(
        got == want,
        "got  {}\nwant {}",
        String::from_utf8_lossy(got),
        String::from_utf8_lossy(want)
    );
}

fn seed_002_fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../proto/tests/fixtures/gamespy1/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Seed 002: "UT2003 moved GameSpy to game port + 10", and its real demo reply carries
/// `Kee\/n` with the backslash. `--style ut2003demo` answers at + 10 with the seed's bytes;
/// the only difference is the packing (one datagram by the 1000-byte rule where the demo cut
/// after 756 bytes), so the `queryid` marks are compared apart from the text.
#[tokio::test]
async fn seed_002_ut2003_styles_answer_at_plus_10_and_ut2003demo_sends_the_seed_reply() {
    let port = free_game_port(10);
    let players = [
        ("Player", 1, 63, 0),
        ("Perdition", 0, 221, 1),
        ("Porter", 10, 143, 1),
        ("JoeDozer", 20, 289, 0),
        ("Kee\\\\/n", 38, 117, 0),
        ("Rekklih", 42, 166, 1),
        ("Hanover_Fist", 4, 196, 0),
        ("HELLAS-4774CK", 101, 107, 1),
        ("Psycho", 49, 105, 1),
        ("Levodopa", 45, 36, 0),
        ("Psy[Duck]", 49, 73, 0),
    ]
    .map(|(n, s, p, t)| format!("{{ name = \"{n}\", score = {s}, ping = {p}, team = {t} }}"))
    .join(", ");
    // The seed's server has game port 7777 (its `hostport`); its GameSpy socket goes where
    // this test found room, at the offset that lands there.
    let demo_offset = free_game_port(0)
        .checked_sub(7777)
        .expect("an ephemeral port above 7777");
    let running = farm_with(&format!(
        "[[server]]\nprotocol = \"gamespy1\"\nstyle = \"ut2003demo\"\nport = 7777\n\
         name = \"The Drunk Snipers UT2003 CTF Instagib (DEMO) #2\"\nmap = \"CTF-Citadel\"\n\
         game_type = \"xCTFGame\"\nmax_players = 16\nplayers = [{players}]\n\
         gamespy_offset = {demo_offset}\n\
         [[server]]\nprotocol = \"gamespy1\"\nstyle = \"ut2003\"\nport = {port}\nname = \"Retail\"\n"
    ), |servers| {
        servers[0].state.rules = [
            ("maptitle", "Citadel"),
            ("AdminName", "Sirius"),
            ("AdminEMail", "sirius@drunksnipers.com"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
    })
    .await;
    let ports: Vec<u16> = running.listening.iter().map(|l| l.addr.port()).collect();
    assert_eq!(
        ports[1],
        port + 10,
        "style ut2003: GameSpy at game port + 10"
    );
    let demo = running.listening[0].addr;
    let socket = client().await;
    socket.send_to(b"\\status\\", demo).await.unwrap();
    let got = recv(&socket, demo).await;
    let d1 = seed_002_fixture("ut2003demo-1077-status-1.bin");
    let d2 = seed_002_fixture("ut2003demo-1077-status-2.bin");
    let mut want = [
        d1.strip_suffix(b"\\queryid\\29.1").unwrap(),
        d2.strip_suffix(b"\\queryid\\29.2\\final\\").unwrap(),
    ]
    .concat();
    want.extend_from_slice(b"\\queryid\\1.1\\final\\");
    same_bytes(&got, &want);
    // The demo style on its own, without gamespy_offset, is at + 10 as well.
    running.stop().await;
    let port = free_game_port(10);
    let running = farm(&format!(
        "[[server]]\nprotocol = \"gamespy1\"\nstyle = \"ut2003demo\"\nport = {port}\n"
    ))
    .await;
    assert_eq!(running.listening[0].addr.port(), port + 10);
    running.stop().await;
}

/// Seed 003: "If the server does not recognize the magic_bytes, it should send back the
/// vanilla server info." DDNet, the real peer, decides the framing from byte 0 alone: `zz`
/// (0x7a: connless bit 0x20 set, not 0.7) is an unknown 0.6 header and gets exactly the
/// vanilla info; `AB` (0x41: connless bit clear, connection traffic) and `!!` (0x21: the
/// 0.7 framing, whose token is then wrong) get nothing from DDNet, and nothing from Muster.
#[tokio::test]
async fn seed_003_unknown_magic_gets_the_vanilla_info_where_ddnet_reads_a_06_header() {
    let port = free_game_port(0);
    let running = farm(&format!(
        "[[server]]\nprotocol = \"teeworlds\"\nport = {port}\nname = \"Seed three\"\n\
         map = \"dm1\"\nplayers = [{{ name = \"nameless tee\", score = 3 }}]\n"
    ))
    .await;
    let server = listening(&running, FarmProtocol::Teeworlds);
    let socket = client().await;
    let request = |magic: [u8; 2], token: u8| {
        let mut r = magic.to_vec();
        r.extend_from_slice(&[0x12, 0x34, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff]);
        r.extend_from_slice(b"gie3");
        r.push(token);
        r
    };
    // The vanilla answers, from the real 0.6 header, for the tokens used below.
    let mut vanilla = Vec::new();
    for token in [1u8, 4] {
        let mut r = vec![0xff; 10];
        r.extend_from_slice(b"gie3");
        r.push(token);
        socket.send_to(&r, server).await.unwrap();
        let reply = recv(&socket, server).await;
        assert!(reply.starts_with(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffinf3"));
        vanilla.push(reply);
    }
    // Unknown magic `zz`: the vanilla info, byte for byte.
    socket.send_to(&request(*b"zz", 1), server).await.unwrap();
    assert_eq!(recv(&socket, server).await, vanilla[0]);
    // `AB` and `!!` are ignored: the next reply is the one to the request sent after them.
    socket.send_to(&request(*b"AB", 2), server).await.unwrap();
    socket.send_to(&request(*b"!!", 3), server).await.unwrap();
    let mut r = vec![0xff; 10];
    r.extend_from_slice(b"gie3");
    r.push(4);
    socket.send_to(&r, server).await.unwrap();
    assert_eq!(recv(&socket, server).await, vanilla[1]);
    running.stop().await;
}
