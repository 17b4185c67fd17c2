//! The UT2003 text list over HTTP (`ut2003-list.md`): the GameSpy face's axum route.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU16;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_proto::Protocol;
use muster_proto::ut2003_list::{Entry, ListFile};

use muster_core::MasterHandle;
use muster_core::registry::UT2003_LIST_GAMES;

/// The UT2003 text list over HTTP (`ut2003-list.md` §4, §6): `GET`/`HEAD`
/// `/serverlist/full-all.txt` (`ut2` and `ut2004`), `/serverlist/demo-all.txt` (`ut2d` and
/// `ut2004d`, Epic's historical split) and `/serverlist/<gamename>.txt` for each of the four.
pub fn router(handle: MasterHandle) -> axum::Router {
    axum::Router::new()
        .route("/serverlist/{file}", axum::routing::get(ut2003_list))
        .with_state(handle)
}

/// The gamenames a list file name covers.
fn ut2003_games(file: &str) -> Option<&'static [&'static str]> {
    const FULL: &[&str] = &["ut2", "ut2004"];
    const DEMO: &[&str] = &["ut2d", "ut2004d"];
    match file {
        "full-all.txt" => Some(FULL),
        "demo-all.txt" => Some(DEMO),
        _ => {
            let name = file.strip_suffix(".txt")?;
            let i = UT2003_LIST_GAMES.iter().position(|g| *g == name)?;
            UT2003_LIST_GAMES.get(i..=i)
        }
    }
}

async fn ut2003_list(State(handle): State<MasterHandle>, Path(file): Path<String>) -> Response {
    let Some(games) = ut2003_games(&file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    handle.metrics().count_list_request("ut2003");
    let body = handle
        .snapshot()
        .cached(("ut2003", file.as_str().into()), |s| {
            let entries: Vec<Entry> = s
                .listed()
                .iter()
                .filter(|rec| {
                    games.contains(&rec.key.game.as_str())
                        && rec.query_protocol == Some(Protocol::GameSpy1)
                })
                .filter_map(|rec| {
                    let IpAddr::V4(ip) = rec.key.addr.ip()? else {
                        return None;
                    };
                    let SocketAddr::V4(q) = rec.query_addr()? else {
                        return None;
                    };
                    Some(Entry {
                        ip,
                        game_port: NonZeroU16::new(rec.game_port?)?,
                        query_port: NonZeroU16::new(q.port())?,
                    })
                })
                .collect();
            let mut body = Vec::new();
            ListFile::from_entries(entries).encode(&mut body);
            bytes::Bytes::from(body)
        });
    let body = (*body).clone();
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=us-ascii"),
            (header::CACHE_CONTROL, "max-age=20"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ut2003_file_names() {
        assert_eq!(ut2003_games("full-all.txt"), Some(&["ut2", "ut2004"][..]));
        assert_eq!(ut2003_games("demo-all.txt"), Some(&["ut2d", "ut2004d"][..]));
        assert_eq!(ut2003_games("ut2004d.txt"), Some(&["ut2004d"][..]));
        assert_eq!(ut2003_games("ut.txt"), None);
        assert_eq!(ut2003_games("ut2"), None);
    }
}
