//! `muster list -p valve --steam-key`: Steam's Web API server list, read from a local HTTP
//! server on 127.0.0.1 that answers `IGameServersService/GetServerList/v1` in the API's
//! documented JSON form (`{"response":{"servers":[…]}}`). The server records each request, so
//! the tests check the path, key, filter and limit Muster sent; the error cases check the
//! exit code (1) and that stderr names the cause without ever showing the key.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;

const KEY: &str = "K3Y-THAT-MUST-NOT-SHOW";

/// What the fake API answers.
#[derive(Clone)]
enum Answer {
    /// A status and a body (sent with its length).
    Fixed(u16, &'static [u8]),
    /// A 200 reply of `n` bytes sent in 1 MiB chunks, no length announced.
    Chunked(usize),
    /// A 200 reply of `n` bytes with its length.
    Sized(usize),
}

/// The requests the fake API got: path and query parameters.
type Asked = Arc<Mutex<Vec<(String, HashMap<String, String>)>>>;

#[derive(Clone)]
struct Api {
    answer: Answer,
    asked: Asked,
}

async fn handle(
    State(api): State<Api>,
    uri: Uri,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    api.asked
        .lock()
        .unwrap()
        .push((uri.path().to_owned(), params));
    let (status, body) = match api.answer {
        Answer::Fixed(status, body) => (status, Body::from(body)),
        Answer::Sized(n) => (200, Body::from(vec![b' '; n])),
        Answer::Chunked(n) => {
            let chunks = (0..n.div_ceil(1 << 20)).map(move |i| {
                let len = (n - i * (1 << 20)).min(1 << 20);
                Ok::<_, std::convert::Infallible>(Bytes::from(vec![b' '; len]))
            });
            (200, Body::from_stream(futures_util::stream::iter(chunks)))
        }
    };
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json")
        .body(body)
        .unwrap()
}

/// The fake API on 127.0.0.1 (its own thread and runtime, for the test's lifetime): its base
/// URL and the requests it gets.
fn fake_api(answer: Answer) -> (String, Asked) {
    let asked: Asked = Arc::default();
    let api = Api {
        answer,
        asked: asked.clone(),
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let app = Router::new().fallback(handle).with_state(api);
            axum::serve(listener, app).await.unwrap();
        });
    });
    (format!("http://{addr}"), asked)
}

fn muster(args: &[&str], env_key: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_muster"));
    cmd.args(args).env_remove("MUSTER_STEAM_KEY");
    if let Some(k) = env_key {
        cmd.env("MUSTER_STEAM_KEY", k);
    }
    cmd.output().unwrap()
}

const REPLY: &[u8] = br#"{"response":{"servers":[
 {"addr":"127.0.3.1:27016","gameport":27015,"steamid":"90071992547409921","name":"Dust all day",
  "appid":10,"gamedir":"cstrike","version":"1.1.2.7/Stdio","product":"cstrike","region":255,
  "players":5,"max_players":20,"bots":2,"map":"de_dust2","secure":true,"dedicated":true,
  "os":"l","gametype":"alltalk,friendlyfire"},
 {"addr":"127.0.3.2:27015","gameport":27015,"steamid":"90071992547409922","name":"Second",
  "appid":10,"gamedir":"cstrike","players":0,"max_players":32,"bots":0,"map":"de_dust2"}
]}}"#;

#[test]
fn steam_web_api_list_asks_with_key_filter_and_limit_and_prints_its_facts() {
    let (base, asked) = fake_api(Answer::Fixed(200, REPLY));
    // The key from the environment, no MASTER: the Web API needs none.
    let out = muster(
        &[
            "list",
            "-p",
            "valve",
            "-g",
            "cstrike",
            "--master-filter",
            "\\map\\de_dust2",
            "--steam-api",
            &base,
            "--limit",
            "7",
            "-f",
            "json",
        ],
        Some(KEY),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains(KEY), "{stderr}");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "one request");
    let (path, params) = &asked[0];
    assert_eq!(path, "/IGameServersService/GetServerList/v1/");
    assert_eq!(params["key"], KEY);
    assert_eq!(params["filter"], "\\gamedir\\cstrike\\map\\de_dust2");
    assert_eq!(params["limit"], "7");

    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let r = &rows[0];
    assert_eq!(r["address"], "127.0.3.1:27015", "the game port");
    assert_eq!(
        r["query_address"], "127.0.3.1:27016",
        "addr is the query address"
    );
    assert_eq!(r["master_protocol"], "valve");
    assert_eq!(r["name"], "Dust all day");
    assert_eq!(r["map"], "de_dust2");
    assert_eq!(r["num_players"], 5);
    assert_eq!(r["max_players"], 20);
    assert_eq!(r["bots"], 2);
    assert_eq!(r["steamid"], "90071992547409921");
    assert_eq!(r["appid"], 10);
    assert_eq!(r["gamedir"], "cstrike");
    assert_eq!(r["secure"], true);
    assert_eq!(r["os"], "l");
    assert_eq!(r["gametype"], "alltalk,friendlyfire");
    assert_eq!(rows[1]["query_address"], rows[1]["address"]);

    // The table shows the map and name; `--filter` reads the players the API gave.
    let (base, _) = fake_api(Answer::Fixed(200, REPLY));
    let out = muster(
        &[
            "list",
            "-p",
            "valve",
            "hl2master.invalid",
            "--steam-key",
            KEY,
            "--steam-api",
            &base,
            "--filter",
            "players>0",
        ],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("MAP") && stdout.contains("de_dust2"),
        "{stdout}"
    );
    assert!(stdout.contains("Dust all day"), "{stdout}");
    assert!(!stdout.contains("Second"), "filtered out: {stdout}");
    // MASTER is not asked (hl2master.invalid would not even resolve), and stderr says so.
    assert!(String::from_utf8_lossy(&out.stderr).contains("not the master hl2master.invalid"));
}

/// Runs a list against an API answering `answer`: exit code 1, the key nowhere, and stderr
/// containing `cause`.
fn fails_naming(answer: Answer, cause: &str) {
    let (base, asked) = fake_api(answer);
    let out = muster(
        &[
            "list",
            "-p",
            "valve",
            "--steam-key",
            KEY,
            "--steam-api",
            &base,
            // Every log line, the HTTP client's included: the key shows in none.
            "-vvv",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{cause}: {stderr}");
    assert!(stderr.contains(cause), "want {cause:?} in: {stderr}");
    assert!(!stderr.contains(KEY) && !stdout.contains(KEY), "{stderr}");
    assert_eq!(asked.lock().unwrap().len(), 1);
}

#[test]
fn steam_web_api_errors_name_their_cause_and_never_the_key() {
    fails_naming(
        Answer::Fixed(403, b"<html>Forbidden</html>"),
        "refused the key (HTTP 403)",
    );
    fails_naming(Answer::Fixed(429, b""), "HTTP 429 Too Many Requests");
    fails_naming(Answer::Fixed(503, b""), "failed on its side (HTTP 503)");
    fails_naming(
        Answer::Fixed(200, br#"{"response":{"servers":[{"addr":1}"#),
        "not the expected JSON",
    );
    fails_naming(Answer::Fixed(200, b"[]"), "not the expected JSON");
    // 16 MiB is the reply cap: a bigger body, announced or not, is refused.
    fails_naming(Answer::Sized((16 << 20) + 1), "reply exceeds");
    fails_naming(Answer::Chunked((16 << 20) + 1), "reply exceeds");
}

#[test]
fn steam_web_api_flags_are_checked_and_documented() {
    let out = muster(
        &[
            "list",
            "-p",
            "valve",
            "--steam-key",
            KEY,
            "--steam-api",
            "ftp://127.0.0.1/",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let out = muster(
        &[
            "list",
            "-p",
            "valve",
            "--steam-key",
            KEY,
            "--max-pages",
            "2",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    // The key given in the environment is not shown by --help.
    let out = muster(&["list", "--help"], Some(KEY));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--steam-key") && help.contains("MUSTER_STEAM_KEY"));
    // The Valve paragraph says how paging, resuming and the Web API work.
    for words in [
        "Valve masters (-p valve",
        "--resume FILE keeps the",
        "--max-pages N stops",
        "IGameServersService/GetServerList",
    ] {
        assert!(help.contains(words), "{words:?} in {help}");
    }
    assert!(!help.contains(KEY), "{help}");
}
