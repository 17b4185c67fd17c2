//! `muster list -p valve --resume FILE`: where a paged Valve master query stands, kept in a
//! small JSON file so that a run cut short (Ctrl-C, a master that stops answering,
//! `--max-pages`) can be continued by the next run with the same FILE.
//!
//! The file records the query (filter and region: a resume point means nothing for another
//! query), the last address received (the seed of the next page), the pages read so far and
//! whether the list is complete. It is rewritten after every page, atomically: the new text
//! goes to a temporary file beside it, which is then renamed over it.

use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::query::UsageError;

/// The `format` every state file carries.
pub(crate) const FORMAT: &str = "muster-valve-resume/1";

/// A state file is a few hundred bytes; anything bigger is not one.
pub(crate) const MAX_STATE_LEN: u64 = 64 << 10;

/// The contents of a resume file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ResumeState {
    /// Always [`FORMAT`].
    pub format: String,
    /// The master last asked (informative: a list may be resumed at another of its masters).
    pub master: String,
    /// The region byte asked for.
    pub region: u8,
    /// The filter string asked with.
    pub filter: String,
    /// The last address received: the next page is asked after it.
    pub last: SocketAddr,
    /// Pages read, over every run.
    pub pages: u64,
    /// Whether a page closed the list: the next run starts again from the zero seed.
    pub complete: bool,
}

/// The state in `path`; `None` when there is no such file.
pub(crate) fn load(path: &Path) -> Result<Option<ResumeState>, UsageError> {
    let shown = path.display();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(UsageError(format!("--resume {shown}: {e}"))),
    };
    let mut text = Vec::new();
    file.take(MAX_STATE_LEN + 1)
        .read_to_end(&mut text)
        .map_err(|e| UsageError(format!("--resume {shown}: {e}")))?;
    if text.len() as u64 > MAX_STATE_LEN {
        return Err(UsageError(format!(
            "--resume {shown}: not a resume file (over {MAX_STATE_LEN} bytes)"
        )));
    }
    let state: ResumeState = serde_json::from_slice(&text)
        .map_err(|e| UsageError(format!("--resume {shown}: not a resume file ({e})")))?;
    if state.format != FORMAT {
        return Err(UsageError(format!(
            "--resume {shown}: format {:?}, not {FORMAT:?}",
            state.format
        )));
    }
    Ok(Some(state))
}

/// Writes `state` to `path` atomically (a temporary file beside it, then a rename).
pub(crate) fn save(path: &Path, state: &ResumeState) -> std::io::Result<()> {
    let mut tmp = PathBuf::from(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    tmp.set_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let mut text = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
    text.push(b'\n');
    let written = (|| {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ResumeState {
        ResumeState {
            format: FORMAT.into(),
            master: "127.0.0.1:27010".into(),
            region: 255,
            filter: "\\gamedir\\valve".into(),
            last: "192.0.2.1:27015".parse().unwrap(),
            pages: 3,
            complete: false,
        }
    }

    #[test]
    fn states_round_trip_and_leave_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("muster-resume-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("valve.json");
        assert_eq!(load(&path).unwrap(), None, "no file: a fresh start");
        save(&path, &state()).unwrap();
        let mut next = state();
        next.pages = 4;
        save(&path, &next).unwrap();
        assert_eq!(load(&path).unwrap(), Some(next));
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        std::fs::write(&path, b"{\"format\":\"other\"}").unwrap();
        assert!(load(&path).is_err());
        std::fs::write(&path, vec![b' '; (MAX_STATE_LEN + 1) as usize]).unwrap();
        assert!(load(&path).unwrap_err().0.contains("over"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
