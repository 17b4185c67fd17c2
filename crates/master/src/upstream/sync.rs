//! Pulling a 333networks-style master's whole list with one `\sync\` (`gamespy-master.md` §7).
//!
//! ```text
//! M -> us: \basic\\secure\XYZABC[\final\]           (Perl masters append \final\)
//! us -> M: \gamename\333networks\location\0\validate\<gsmsalg(C, 333NWX)>\final\
//!          \sync\all\msid\<our id>\final\            (Qt5 form with \final\ added, §14)
//! M -> us: \ut\1.2.3.4:7778 \unreal\5.6.7.8:7777 \final\   then close
//! ```
//!
//! A master that closes without a reply ending in `\final\` does not sync (a plain GameSpy
//! master, or one that does not trust us); one that answers `\echo\…` refused us. Both are
//! [`SyncError::NotSupported`], so the caller can fall back to asking game by game.
//! Decoding is muster-proto's; this module only moves the bytes, within one deadline and
//! [`MAX_LIST_BYTES`].

use std::net::SocketAddr;
use std::time::Duration;

use muster_proto::DecodeError;
use muster_proto::gamespy_master::packet::GREETING_LEN;
use muster_proto::gamespy_master::{
    ClientAuth, Enctype, Greeting, Key, MAX_LIST_BYTES, SyncGames, SyncReply, SyncRequest, Token,
    game_keys, validate_string,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The gamename masters authenticate as with each other (its key is public, §4.5).
pub const MESH_GAMENAME: &str = "333networks";
/// Length of a master id (a UUID in text form, as the Qt5 master's `\msid\`).
pub const MSID_LEN: usize = 36;
const FINAL: &[u8] = b"\\final\\";

/// Why a sync gave no list.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// No connection.
    #[error("cannot connect")]
    Connect(#[source] std::io::Error),
    /// The connection failed on the way.
    #[error("connection failed")]
    Io(#[source] std::io::Error),
    /// The deadline passed.
    #[error("timed out")]
    Timeout,
    /// The master does not answer `\sync\` (for us): `\echo\` refusal, or a close without a
    /// reply.
    #[error("the master does not sync with us: {0}")]
    NotSupported(&'static str),
    /// Bytes that are no greeting or sync reply.
    #[error("bad reply")]
    Decode(#[source] DecodeError),
}

/// A fresh master id in the form of a random (version 4) UUID, 36 characters.
#[must_use]
pub fn new_msid() -> String {
    let mut b: [u8; 16] = rand::random();
    if let Some(x) = b.get_mut(6) {
        *x = (*x & 0x0f) | 0x40;
    }
    if let Some(x) = b.get_mut(8) {
        *x = (*x & 0x3f) | 0x80;
    }
    let h = hex::encode(b);
    let part = |r: std::ops::Range<usize>| h.get(r).unwrap_or_default();
    format!(
        "{}-{}-{}-{}-{}",
        part(0..8),
        part(8..12),
        part(12..16),
        part(16..20),
        part(20..32)
    )
}

/// What we write after the greeting: the authentication as `333networks` and the sync
/// request.
#[must_use]
pub fn request(greeting: &Greeting, games: &SyncGames, msid: &str) -> Vec<u8> {
    let key = game_keys(MESH_GAMENAME.as_bytes())
        .first()
        .map(|k| k.as_bytes())
        .unwrap_or_default();
    let validate = validate_string(&greeting.challenge, key, Enctype::Zero).unwrap_or_default();
    let mut out = Vec::with_capacity(128);
    if let (Ok(g), Ok(l), Ok(v)) = (
        Key::new(MESH_GAMENAME),
        Token::new("0"),
        Token::new(validate.into_bytes()),
    ) {
        ClientAuth::ubrowser(g, l, v).encode(&mut out);
    }
    let msid = Token::new(msid.as_bytes().to_vec()).ok();
    if let Ok(r) = SyncRequest::new(games.clone(), msid, true) {
        r.encode(&mut out);
    }
    out
}

/// The sync reply in what the master sent after the greeting and its optional `\final\`
/// (`rest`); trailing line ends and NULs are tolerated.
pub fn reply(rest: &[u8]) -> Result<SyncReply, SyncError> {
    let end = rest
        .iter()
        .rposition(|b| !matches!(b, b'\0' | b'\r' | b'\n' | b' '))
        .map_or(0, |p| p + 1);
    let body = rest.get(..end).unwrap_or_default();
    if body.is_empty() {
        return Err(SyncError::NotSupported("closed without a reply"));
    }
    if body.starts_with(b"\\echo\\") {
        return Err(SyncError::NotSupported("refused (\\echo\\)"));
    }
    if !body.ends_with(FINAL) {
        return Err(SyncError::NotSupported("reply without \\final\\"));
    }
    // A reply that is only `\final\`: the master has nothing, or we synced with ourselves.
    if body == FINAL {
        return Ok(SyncReply { games: Vec::new() });
    }
    SyncReply::decode(body).map_err(SyncError::Decode)
}

/// Asks the master at `addr` for `games` with one `\sync\`, within `timeout`.
pub async fn pull(
    addr: SocketAddr,
    games: &SyncGames,
    msid: &str,
    timeout: Duration,
) -> Result<SyncReply, SyncError> {
    let run = async {
        let mut stream = TcpStream::connect(addr).await.map_err(SyncError::Connect)?;
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = vec![0u8; 16 * 1024];
        while buf.len() < GREETING_LEN {
            let n = stream.read(&mut chunk).await.map_err(SyncError::Io)?;
            if n == 0 {
                return Err(SyncError::Decode(DecodeError::Incomplete("greeting")));
            }
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
        let greeting = Greeting::decode(buf.get(..GREETING_LEN).unwrap_or_default())
            .map_err(SyncError::Decode)?;
        // A Perl master writes `\final\` with its greeting (§12 quirk 1); it comes before we
        // ask anything, so whatever follows our request is the reply.
        while buf.len() < GREETING_LEN + FINAL.len()
            && buf.len() > GREETING_LEN
            && FINAL.starts_with(buf.get(GREETING_LEN..).unwrap_or_default())
        {
            let n = stream.read(&mut chunk).await.map_err(SyncError::Io)?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
        let mut start = GREETING_LEN;
        if buf
            .get(GREETING_LEN..)
            .is_some_and(|r| r.starts_with(FINAL))
        {
            start += FINAL.len();
        }
        stream
            .write_all(&request(&greeting, games, msid))
            .await
            .map_err(SyncError::Io)?;
        loop {
            let n = stream.read(&mut chunk).await.map_err(SyncError::Io)?;
            if n == 0 {
                break;
            }
            if buf.len() + n > MAX_LIST_BYTES + start {
                return Err(SyncError::Decode(DecodeError::TooLarge("sync reply")));
            }
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
        reply(buf.get(start..).unwrap_or_default())
    };
    tokio::time::timeout(timeout, run)
        .await
        .unwrap_or(Err(SyncError::Timeout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_proto::gamespy_master::Challenge;

    #[test]
    fn request_is_the_perl_authentication_and_the_qt5_sync_with_final() {
        let g = Greeting {
            challenge: Challenge::new(b"HRFFBK").unwrap(),
        };
        let msid = "01234567-89ab-4def-8123-456789abcdef";
        let out = request(&g, &SyncGames::All, msid);
        // The validate of the captured exchange in the Perl master's ORIGIN notes.
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "\\gamename\\333networks\\location\\0\\validate\\l8+5+J1v\\final\\\\sync\\all\\msid\\{msid}\\final\\"
            )
        );
    }

    #[test]
    fn replies_of_perl_qt5_and_refusals() {
        let perl = reply(b"\\ut\\127.1.0.2:7778 \\final\\").unwrap();
        assert_eq!(perl.games.len(), 1);
        assert_eq!(perl.games[0].1[0].to_string(), "127.1.0.2:7778");
        let qt5 = reply(b"\\ut\\1.2.3.4:7778 5.6.7.8:7778 \\unreal\\\\final\\\r\n").unwrap();
        assert_eq!(qt5.games.len(), 2);
        assert!(qt5.games[1].1.is_empty());
        assert!(reply(b"\\final\\").unwrap().games.is_empty());
        for (bytes, why) in [
            (&b""[..], "closed"),
            (b"\\echo\\You failed to authenticate.\\final\\", "refused"),
            (b"\\ut\\1.2.3.4:7778 ", "without"),
        ] {
            match reply(bytes) {
                Err(SyncError::NotSupported(w)) => assert!(w.contains(why), "{w}"),
                other => panic!("{bytes:?}: {other:?}"),
            }
        }
        assert!(matches!(
            reply(b"\\ut\\not-an-address \\final\\"),
            Err(SyncError::Decode(_))
        ));
    }

    #[test]
    fn master_ids_look_like_uuids() {
        let a = new_msid();
        assert_eq!(a.len(), MSID_LEN);
        assert_eq!(a.matches('-').count(), 4);
        assert_eq!(a.as_bytes()[14], b'4');
        assert_ne!(a, new_msid());
    }
}
