//! How a player joins a server: the game's link where it registers one (Steam's
//! `steam://connect/`, DDNet's `ddnet://`, the Unreal games' `unreal://`), else the console
//! command the game takes. Only printed or copied; never opened without the player asking.

use std::net::SocketAddr;

/// A server's join link and console command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Join {
    /// The URL the game registers, where it has one.
    pub link: Option<String>,
    /// What to type in the game's console.
    pub command: String,
}

impl Join {
    /// What `c` copies: the link where there is one, else the command.
    pub(crate) fn best(&self) -> &str {
        self.link.as_deref().unwrap_or(&self.command)
    }
}

/// The join link and command of the server at game address `address`, queried with
/// `protocol` (a `muster_proto::model::Protocol` name), of game `game` (key) where known.
pub(crate) fn join(protocol: &str, game: Option<&str>, address: SocketAddr) -> Join {
    let command = format!("connect {address}");
    let link = match (protocol, game) {
        ("a2s", _) => Some(format!("steam://connect/{address}")),
        ("teeworlds", Some("ddnet")) => Some(format!("ddnet://{address}")),
        // The Unreal engine games register `unreal://`; Serious Sam has no link.
        ("unreal2", _) => Some(format!("unreal://{address}")),
        ("gamespy1", Some(g)) if g.starts_with("ut") || g == "unreal" => {
            Some(format!("unreal://{address}"))
        }
        _ => None,
    };
    let command = match protocol {
        // Quake III engines take the command line's `+connect`; typed in the console it is
        // the same `connect`.
        "quake3" => format!("+connect {address}"),
        "unreal2" | "gamespy1" if link.is_some() => format!("open {address}"),
        _ => command,
    };
    Join { link, command }
}

/// The OSC 52 sequence that asks the terminal (also over SSH, through tmux with
/// `set-clipboard on`) to put `text` on the clipboard.
pub(crate) fn osc52(text: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
    format!("\x1b]52;c;{encoded}\x07")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "192.0.2.1:8303".parse().unwrap()
    }

    #[test]
    fn each_family_gets_its_link() {
        assert_eq!(
            join("a2s", Some("tf"), addr()).link.as_deref(),
            Some("steam://connect/192.0.2.1:8303")
        );
        assert_eq!(
            join("teeworlds", Some("ddnet"), addr()).best(),
            "ddnet://192.0.2.1:8303"
        );
        assert_eq!(
            join("gamespy1", Some("ut"), addr()).best(),
            "unreal://192.0.2.1:8303"
        );
        // Vanilla Teeworlds and Serious Sam have no link: the command is copied.
        assert_eq!(
            join("teeworlds", Some("teeworlds"), addr()).best(),
            "connect 192.0.2.1:8303"
        );
        assert_eq!(join("gameagent", None, addr()).link, None);
        assert_eq!(
            join("quake3", Some("xonotic"), addr()).command,
            "+connect 192.0.2.1:8303"
        );
    }

    #[test]
    fn osc52_carries_the_text_in_base64() {
        assert_eq!(osc52("hi"), "\x1b]52;c;aGk=\x07");
    }
}
