//! Round trip: a farm of emulated quake3 servers (both styles) run by muster-server, every one
//! read by muster-query's library API with names, players and bots intact.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use muster_proto::RawValue;
use muster_query::{Options, QueryProtocol, Target, query_many};
use muster_server::farm::FarmSpec;
use muster_server::{Limits, endpoints, run};
use tokio_stream::StreamExt as _;

/// Servers in the farm.
const SERVERS: usize = 60;

fn farm_toml() -> String {
    let mut toml = String::new();
    for i in 0..SERVERS {
        let style = if i % 2 == 0 { "ioquake3" } else { "darkplaces" };
        // Port 0: each server binds a free port; the farm says which.
        toml.push_str(&format!(
            "[[server]]\nprotocol = \"quake3\"\nstyle = \"{style}\"\nport = 0\n\
             name = \"^{c}Jérôme #{i}\"\nmap = \"q3dm{i}\"\nmax_players = 8\n\
             players = [{{ name = \"^1Ana\", score = {i}, ping = 30 }}, \
             {{ name = \"Sarge\", score = -1, ping = 0, bot = true }}]\n",
            c = i % 10,
        ));
    }
    toml
}

#[tokio::test]
async fn quake3_farm_servers_are_all_read_with_their_players() {
    let servers = FarmSpec::from_toml(&farm_toml()).unwrap().expand().unwrap();
    assert_eq!(servers.len(), SERVERS);
    let running = run::start(servers, Limits::unlimited(), None, endpoints::endpoint)
        .await
        .unwrap();
    let addrs: Vec<SocketAddr> = running.listening.iter().map(|l| l.addr).collect();
    assert_eq!(addrs.len(), SERVERS);
    let targets: Vec<Target> = addrs
        .iter()
        .map(|a| Target::new(*a, QueryProtocol::Quake3).given_port_only())
        .collect();
    let options = Options {
        attempt_timeout: Duration::from_millis(500),
        retries: 2,
        bind_v4: "127.0.0.1:0".parse().unwrap(),
        ..Options::default()
    };
    let mut seen: HashMap<SocketAddr, String> = HashMap::new();
    let mut results = query_many(targets, options);
    while let Some(done) = results.next().await {
        let answer = done.outcome.expect("every server answers");
        let info = answer.info;
        assert_eq!(info.protocol, muster_proto::Protocol::Quake3);
        let i: usize = info.name.plain.rsplit('#').next().unwrap().parse().unwrap();
        assert_eq!(info.name.plain, format!("Jérôme #{i}"));
        assert_eq!(info.map.text, format!("q3dm{i}"));
        assert_eq!((info.num_players, info.max_players), (2, 8));
        assert_eq!(info.players[0].name.plain, "Ana");
        assert_eq!(info.players[0].score, Some(i64::try_from(i).unwrap()));
        assert_eq!(info.players[1].name.text, "Sarge");
        assert_eq!(
            info.players[1].raw,
            vec![("bot".to_owned(), RawValue::Bool(true))]
        );
        let game = muster_proto::games::key_of_answer(&info).unwrap();
        assert_eq!(game, if i % 2 == 0 { "quake3arena" } else { "xonotic" });
        assert!(seen.insert(done.tag.address, info.name.plain).is_none());
    }
    assert_eq!(seen.len(), SERVERS);
    running.stop().await;
}

#[tokio::test]
async fn quake3_info_machine_reads_counts_without_players() {
    let servers = FarmSpec::from_toml(
        "[[server]]\nprotocol = \"quake3\"\nport = 0\nname = \"Info only\"\n\
         players = [{ name = \"A\" }, { name = \"B\", bot = true }]\n",
    )
    .unwrap()
    .expand()
    .unwrap();
    let running = run::start(servers, Limits::unlimited(), None, endpoints::endpoint)
        .await
        .unwrap();
    let addr = running.listening[0].addr;
    let jobs = [muster_query::Job {
        tag: (),
        build: move |cfg| muster_query::machines::quake3_info(addr, cfg),
    }];
    let mut rx = muster_query::spawn(
        jobs,
        Options {
            bind_v4: "127.0.0.1:0".parse().unwrap(),
            ..Options::default()
        },
    );
    let info = rx.recv().await.unwrap().outcome.expect("answered");
    assert_eq!(info.name.text, "Info only");
    assert_eq!(info.num_players, 2);
    assert!(info.players.is_empty());
    assert_eq!(info.raw_field("humans"), Some(&RawValue::Int(1)));
    running.stop().await;
}
