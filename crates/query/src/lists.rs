//! Fetching master lists that do not go over UDP: the GameSpy TCP list, the management
//! server's `msQueryGameServers`, and HTTP documents (DDNet's `servers.json`, the UT2003 text
//! list). UDP master lists (GameAgent, Teeworlds) are query machines and run through
//! [`crate::spawn`] like any query.
//!
//! Every function here is bounded: a connect timeout, an overall deadline and a byte cap.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use muster_proto::gamespy_master::conversation::{ListClient, ListClientConfig};
use muster_proto::mgmt::client::{ClientConnection, ClientEvent, encode_query};
use muster_proto::mgmt::messages::ServerListAnswer;
use muster_proto::model::ServerList;
use muster_proto::query::{Event, QueryError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::Failure;

/// The most bytes an HTTP list document may have (DDNet's full `servers.json` is a few MiB).
pub const MAX_HTTP_BODY: usize = 32 << 20;
/// Read buffer of the TCP conversations.
const READ_CHUNK: usize = 16 << 10;

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

async fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, Failure> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(Failure::Connect(e.kind())),
        Err(_) => Err(Failure::Query(QueryError::Timeout)),
    }
}

/// The GameSpy master's TCP list (greeting, `\validate\`, `\list\`), as `config` asks for it.
/// The whole conversation is bounded by `config.timeout`.
pub async fn gamespy_list(
    addr: SocketAddr,
    config: ListClientConfig,
) -> Result<ServerList, Failure> {
    let deadline = tokio::time::Instant::now() + config.timeout;
    let mut client = ListClient::new(config, now());
    let mut stream = connect(addr, deadline - tokio::time::Instant::now()).await?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        while client.poll_write(&mut out) {
            stream
                .write_all(&out)
                .await
                .map_err(|e| Failure::Io(e.kind()))?;
            out.clear();
        }
        if let Some(event) = client.poll_event() {
            return match event {
                Event::Done(list) => Ok(list),
                Event::Failed(e) => Err(Failure::Query(e)),
            };
        }
        let wake = client.poll_timeout().map_or(deadline, |t| {
            tokio::time::Instant::from_std(t).min(deadline)
        });
        tokio::select! {
            r = stream.read(&mut buf) => match r {
                Ok(0) => client.handle_eof(now()),
                Ok(n) => client.handle_data(now(), buf.get(..n).unwrap_or_default()),
                Err(e) => return Err(Failure::Io(e.kind())),
            },
            () = tokio::time::sleep_until(wake) => {
                if tokio::time::Instant::now() >= deadline {
                    client.abort(now());
                } else {
                    client.handle_timeout(now());
                }
            }
        }
    }
}

/// The management server's list of game servers (`msQueryGameServers` →
/// `msRQueryGameServers`), within `timeout`.
pub async fn mgmt_list(addr: SocketAddr, timeout: Duration) -> Result<ServerListAnswer, Failure> {
    let run = async {
        let mut stream = connect(addr, timeout).await?;
        let mut frame = Vec::new();
        encode_query(&mut frame);
        stream
            .write_all(&frame)
            .await
            .map_err(|e| Failure::Io(e.kind()))?;
        let mut conn = ClientConnection::new();
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let n = stream
                .read(&mut buf)
                .await
                .map_err(|e| Failure::Io(e.kind()))?;
            if n == 0 {
                return Err(Failure::Query(QueryError::Decode(
                    muster_proto::DecodeError::Incomplete("msRQueryGameServers"),
                )));
            }
            conn.handle_input(buf.get(..n).unwrap_or_default());
            while let Some(event) = conn.poll_event() {
                match event {
                    ClientEvent::Answer(answer) => return Ok(answer),
                    ClientEvent::Closed(e) => return Err(Failure::Query(QueryError::Decode(e))),
                    // Other messages are not for us; keep reading.
                    ClientEvent::Discarded(_) | ClientEvent::Unexpected(_) => {}
                }
            }
        }
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Query(QueryError::Timeout)),
    }
}

/// GET `url` (http or https), at most [`MAX_HTTP_BODY`] bytes, within `timeout`.
pub async fn http_get(url: &str, timeout: Duration) -> Result<Vec<u8>, Failure> {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!("muster/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|_| Failure::Http(0))?;
    let mut response = client.get(url).send().await.map_err(|e| {
        if e.is_timeout() {
            Failure::Query(QueryError::Timeout)
        } else if e.is_connect() {
            Failure::Connect(std::io::ErrorKind::ConnectionRefused)
        } else {
            Failure::Http(0)
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(Failure::Http(status.as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_HTTP_BODY as u64)
    {
        return Err(Failure::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        if e.is_timeout() {
            Failure::Query(QueryError::Timeout)
        } else {
            Failure::Http(status.as_u16())
        }
    })? {
        if body.len() + chunk.len() > MAX_HTTP_BODY {
            return Err(Failure::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
