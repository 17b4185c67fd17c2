//! The player's profile: favourites, friends, recent servers and the last filters, in one
//! JSON file under `$XDG_STATE_HOME/muster/` (else `~/.local/state/muster/`) or `--profile
//! DIR`. Written whole to a temporary file and renamed over the old one, so a crash leaves
//! the old or the new profile, never half of one; a file that does not parse is moved aside
//! (`profile.json.broken-<unix seconds>`) and reported, never silently lost.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::model::Filters;

/// Recent servers kept.
pub(crate) const RECENT_MAX: usize = 50;
/// Largest profile file read (a profile is a few KiB; a bigger file is not ours).
const MAX_FILE: u64 = 4 << 20;

/// What the profile holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Profile {
    /// Favourite servers, as `PROTOCOL ADDRESS`.
    pub favourites: BTreeSet<String>,
    /// Friends' player names.
    pub friends: Vec<String>,
    /// Servers whose join command was taken, newest first.
    pub recent: Vec<String>,
    /// The filters when the browser last quit.
    pub filters: Filters,
}

impl Profile {
    /// Puts `server` first in the recent list.
    pub(crate) fn used(&mut self, server: &str) {
        self.recent.retain(|s| s != server);
        self.recent.insert(0, server.to_owned());
        self.recent.truncate(RECENT_MAX);
    }

    /// Adds `name` to the friends unless there (case-insensitive).
    pub(crate) fn befriend(&mut self, name: &str) {
        let name = name.trim();
        if !name.is_empty() && !self.friends.iter().any(|f| f.eq_ignore_ascii_case(name)) {
            self.friends.push(name.to_owned());
        }
    }
}

/// The default profile directory for these environment values.
pub(crate) fn default_dir(xdg_state_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    match (xdg_state_home, home) {
        // The spec wants an absolute path; a relative one is ignored.
        (Some(x), _) if Path::new(x).is_absolute() => Some(Path::new(x).join("muster")),
        (_, Some(h)) if !h.is_empty() => Some(Path::new(h).join(".local/state/muster")),
        _ => None,
    }
}

/// The profile file in `dir`.
pub(crate) fn file(dir: &Path) -> PathBuf {
    dir.join("profile.json")
}

/// Loads the profile in `dir`: an empty one when there is none; when the file is unreadable
/// or broken, an empty one and a note saying where the broken file was moved.
pub(crate) fn load(dir: &Path, now_secs: u64) -> (Profile, Option<String>) {
    let path = file(dir);
    let text = match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Profile::default(), None),
        Err(e) => {
            return (
                Profile::default(),
                Some(format!("profile {}: {e}", path.display())),
            );
        }
        Ok(m) if m.len() > MAX_FILE => Err(format!("larger than {MAX_FILE} bytes")),
        Ok(_) => std::fs::read_to_string(&path).map_err(|e| e.to_string()),
    };
    let parsed = text.and_then(|t| serde_json::from_str::<Profile>(&t).map_err(|e| e.to_string()));
    match parsed {
        Ok(p) => (p, None),
        Err(why) => {
            let aside = dir.join(format!("profile.json.broken-{now_secs}"));
            let moved = std::fs::rename(&path, &aside);
            let note = match moved {
                Ok(()) => format!(
                    "profile {}: {why}; kept as {} and started afresh",
                    path.display(),
                    aside.display()
                ),
                Err(e) => format!(
                    "profile {}: {why}; could not move it aside ({e}), it will not be overwritten",
                    path.display()
                ),
            };
            (Profile::default(), Some(note))
        }
    }
}

/// Writes `profile` into `dir` atomically (temporary file, sync, rename).
pub(crate) fn save(dir: &Path, profile: &Profile) -> std::io::Result<()> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("profile.json.tmp-{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    let text = serde_json::to_vec_pretty(profile).map_err(std::io::Error::other)?;
    f.write_all(&text)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, file(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "muster-profile-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_default_dir_follows_xdg_then_home() {
        assert_eq!(
            default_dir(Some("/s"), Some("/h")),
            Some(PathBuf::from("/s/muster"))
        );
        assert_eq!(
            default_dir(Some("rel"), Some("/h")),
            Some(PathBuf::from("/h/.local/state/muster"))
        );
        assert_eq!(default_dir(None, None), None);
    }

    #[test]
    fn a_saved_profile_loads_back() {
        let dir = tmp("roundtrip");
        let mut p = Profile::default();
        p.favourites.insert("teeworlds 127.0.0.1:8303".into());
        p.befriend("Bob");
        p.befriend("bob");
        p.used("a");
        p.used("b");
        p.used("a");
        p.filters.hide_empty = true;
        save(&dir, &p).unwrap();
        let (back, note) = load(&dir, 1);
        assert_eq!(note, None);
        assert_eq!(back, p);
        assert_eq!(back.friends, ["Bob"]);
        assert_eq!(back.recent, ["a", "b"]);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["profile.json"]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_missing_profile_is_empty_without_a_note() {
        let dir = tmp("missing");
        assert_eq!(load(&dir, 1), (Profile::default(), None));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_broken_profile_is_kept_aside_and_reported() {
        let dir = tmp("broken");
        std::fs::write(file(&dir), b"{\"favourites\": [").unwrap();
        let (p, note) = load(&dir, 77);
        assert_eq!(p, Profile::default());
        let note = note.unwrap();
        assert!(note.contains("profile.json.broken-77"), "{note}");
        assert_eq!(
            std::fs::read(dir.join("profile.json.broken-77")).unwrap(),
            b"{\"favourites\": ["
        );
        assert!(!file(&dir).exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn unknown_fields_and_missing_ones_are_tolerated() {
        let dir = tmp("tolerant");
        std::fs::write(file(&dir), br#"{"friends": ["Ann"], "future": 1}"#).unwrap();
        let (p, note) = load(&dir, 1);
        assert_eq!(note, None);
        assert_eq!(p.friends, ["Ann"]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
