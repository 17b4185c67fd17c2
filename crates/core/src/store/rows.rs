//! The stored form of the registry's values in PostgreSQL (and in SQLite files of schema 4
//! and older, read when they are migrated): serde-derived rows, read and written only here.
//!
//! The JSON layout of [`InfoRow`] is the one earlier builds wrote by hand (players and rules as
//! two-element arrays), so old files read unchanged.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::registry::{
    DdnetData, DdnetSecret, DdnetStream, GameAddr, MAX_DDNET_INFO, MAX_SOURCES, Origin, PollFields,
    PollInfo, PollPlayer, Rules, ShortText, Source, Timestamp,
};

/// [`PollInfo`] as stored in the `info` column.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct InfoRow {
    /// Server name.
    pub name: ShortText,
    /// Map.
    pub map: ShortText,
    /// Game type.
    pub game_type: ShortText,
    /// Players.
    pub num_players: u32,
    /// Slots.
    pub max_players: u32,
    /// Password needed.
    pub password: Option<bool>,
    /// Per player: `[name, score]` (the layout of earlier builds) or an object.
    pub players: Vec<PlayerRow>,
    /// `[key, value]` per rule.
    pub rules: Vec<(ShortText, ShortText)>,
    /// The game port the poll reported.
    pub game_port: Option<u16>,
}

impl From<&PollInfo> for InfoRow {
    fn from(i: &PollInfo) -> Self {
        let [name, map, game_type] = i.texts();
        Self {
            name: name.into(),
            map: map.into(),
            game_type: game_type.into(),
            num_players: i.num_players,
            max_players: i.max_players,
            password: i.password,
            players: i
                .players()
                .iter()
                .map(|p| PlayerRow::Full {
                    name: p.name.clone(),
                    score: p.score().map(i64::from),
                    ping_ms: p.ping_ms().map(u32::from),
                    team: p.team().map(i32::from),
                    spectator: p.spectator(),
                    bot: p.bot(),
                })
                .collect(),
            rules: i
                .rules()
                .iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            game_port: i.game_port,
        }
    }
}

impl From<InfoRow> for PollInfo {
    fn from(r: InfoRow) -> Self {
        Self::from(PollFields {
            name: r.name,
            map: r.map,
            game_type: r.game_type,
            num_players: r.num_players,
            max_players: r.max_players,
            password: r.password,
            players: r
                .players
                .into_iter()
                .map(|p| match p {
                    PlayerRow::Pair(name, score) => {
                        PollPlayer::new(name).with_score(score.map(PollPlayer::score_of))
                    }
                    PlayerRow::Full {
                        name,
                        score,
                        ping_ms,
                        team,
                        spectator,
                        bot,
                    } => PollPlayer::new(name)
                        .with_score(score.map(PollPlayer::score_of))
                        .with_ping_ms(ping_ms.map(PollPlayer::ping_of))
                        .with_team(team.map(PollPlayer::team_of))
                        .with_spectator(spectator)
                        .with_bot(bot),
                })
                .collect(),
            rules: Rules::new(r.rules),
            game_port: r.game_port,
        })
    }
}

/// One player as stored: the two-element array earlier builds wrote, or an object with
/// every field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PlayerRow {
    /// `{"name": …, "score": …, "ping_ms": …, "team": …, "spectator": …, "bot": …}`.
    Full {
        /// Name.
        name: ShortText,
        /// Score.
        #[serde(default)]
        score: Option<i64>,
        /// Ping.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ping_ms: Option<u32>,
        /// Team.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        team: Option<i32>,
        /// Spectator.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spectator: Option<bool>,
        /// Bot (absent in rows of earlier builds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bot: Option<bool>,
    },
    /// `[name, score]`.
    Pair(ShortText, Option<i64>),
}

/// [`DdnetData`] as stored in the `ddnet` column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DdnetRow {
    /// `Secret`.
    pub secret: String,
    /// `Info-Serial`.
    pub serial: i64,
    /// The info object as registered (compact JSON text).
    pub info: String,
    /// `[url, last POST in unix ms]` per stream.
    pub streams: Vec<(String, u64)>,
}

/// The `ddnet` column of `d`, the DDNet data of the record at `addr`: a [`DdnetRow`] as JSON.
/// An error is the registry's info file's read error.
pub fn ddnet_column(d: &DdnetData, addr: &GameAddr) -> std::io::Result<String> {
    let row = DdnetRow::of(d, addr)?;
    serde_json::to_string(&row).map_err(std::io::Error::other)
}

impl DdnetRow {
    /// The row of `d`, the DDNet data of the record at `addr`; its info is read from the
    /// registry's info file.
    pub fn of(d: &DdnetData, addr: &GameAddr) -> std::io::Result<Self> {
        Ok(Self {
            secret: d.secret.to_string(),
            serial: d.serial,
            // The info's own buffer becomes the string (it is JSON, so UTF-8): no second copy.
            info: String::from_utf8(Vec::from(d.info.bytes()?))
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            streams: d
                .streams
                .iter()
                .map(|s| (s.url(addr).into_owned(), s.last.0))
                .collect(),
        })
    }

    /// The data of the record at `addr`, or why it cannot be used (an info over the cap, or
    /// not a JSON object).
    pub fn into_data(self, addr: &GameAddr) -> Result<DdnetData, &'static str> {
        if self.info.len() > MAX_DDNET_INFO {
            return Err("ddnet info over the size cap");
        }
        if !self.info.starts_with('{') {
            return Err("ddnet info is not a JSON object");
        }
        Ok(DdnetData {
            secret: DdnetSecret::from(self.secret.as_str()),
            serial: self.serial,
            info: bytes::Bytes::from(self.info).into(),
            streams: self
                .streams
                .into_iter()
                .map(|(url, last)| DdnetStream::new(&url, addr, Timestamp(last)))
                .collect(),
        })
    }
}

/// One [`Source`] as stored in the `sources` column (a JSON array of these): `upstream` is
/// absent for a direct registration. Rows written before sources existed have no column
/// value: their record is direct.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRow {
    /// The upstream's name; `None`: a direct registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// When it last saw the server, unix ms.
    #[serde(default)]
    pub last_seen: u64,
}

impl From<&Source> for SourceRow {
    fn from(s: &Source) -> Self {
        Self {
            upstream: s.origin.upstream().map(str::to_owned),
            last_seen: s.last_seen.0,
        }
    }
}

/// The `sources` column of a record: `None` (NULL) when its only source is a direct
/// registration last seen at its last heartbeat, stored as before sources existed and read
/// back the same; otherwise a JSON array of [`SourceRow`].
#[must_use]
pub fn sources_column(r: &crate::registry::Record) -> Option<String> {
    let direct_only = r.sources().is_empty()
        || matches!(r.sources(), [s] if s.origin == Origin::Direct
            && s.last_seen == r.last_heartbeat);
    (!direct_only).then(|| {
        let rows: Vec<SourceRow> = r.sources().iter().map(SourceRow::from).collect();
        serde_json::to_string(&rows).unwrap_or_default()
    })
}

/// The sources of a stored record, at most [`MAX_SOURCES`], in the registry's order.
#[must_use]
pub fn sources_from_rows(rows: Vec<SourceRow>) -> Vec<Source> {
    let mut out: Vec<Source> = rows
        .into_iter()
        .take(MAX_SOURCES)
        .map(|r| Source {
            origin: r
                .upstream
                .map_or(Origin::Direct, |u| Origin::Upstream(Arc::from(u))),
            last_seen: Timestamp(r.last_seen),
        })
        .collect();
    out.sort_by(|a, b| a.origin.cmp(&b.origin));
    out.dedup_by(|a, b| a.origin == b.origin);
    out
}

/// What schema version 2 kept for a DDNet record in its `face_data` column.
#[derive(Debug, Deserialize)]
pub struct FaceDataV2 {
    /// `Secret`.
    pub secret: String,
    /// `Info-Serial`.
    pub serial: i64,
    /// Stream URLs at the record's address.
    pub urls: Vec<String>,
    /// The info object.
    pub info: serde_json::Value,
}

impl FaceDataV2 {
    /// The same data in today's form, every stream last seen at `last`.
    pub fn into_row(self, last: Timestamp) -> DdnetRow {
        DdnetRow {
            secret: self.secret,
            serial: self.serial,
            info: self.info.to_string(),
            streams: self.urls.into_iter().map(|u| (u, last.0)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_rows_read_the_hand_written_layout() {
        let old = r#"{"name":"x","map":"m","game_type":"dm","num_players":1,"max_players":8,
            "password":null,"players":[["p",3],["q",null]],"rules":[["k","v"]],"game_port":7777}"#;
        let row: InfoRow = serde_json::from_str(old).unwrap();
        let info = PollInfo::from(row.clone());
        assert_eq!(info.players().len(), 2);
        assert_eq!(info.players().get(1).unwrap().score(), None);
        assert_eq!(info.game_port, Some(7777));
        let again: InfoRow = serde_json::from_str(&serde_json::to_string(&row).unwrap()).unwrap();
        assert_eq!(again, row);
        let empty: InfoRow = serde_json::from_str("{}").unwrap();
        assert_eq!(PollInfo::from(empty), PollInfo::default());
    }

    #[test]
    fn source_rows_round_trip_and_default() {
        let sources = vec![
            Source {
                origin: Origin::Direct,
                last_seen: Timestamp(5),
            },
            Source {
                origin: Origin::Upstream(Arc::from("peer")),
                last_seen: Timestamp(7),
            },
        ];
        let rows: Vec<SourceRow> = sources.iter().map(SourceRow::from).collect();
        let json = serde_json::to_string(&rows).unwrap();
        assert_eq!(
            json,
            r#"[{"last_seen":5},{"upstream":"peer","last_seen":7}]"#
        );
        let back: Vec<SourceRow> = serde_json::from_str(&json).unwrap();
        assert_eq!(sources_from_rows(back), sources);
        let sparse: Vec<SourceRow> = serde_json::from_str(r#"[{"upstream":"b"},{}]"#).unwrap();
        let s = sources_from_rows(sparse);
        assert_eq!(s[0].origin, Origin::Direct, "direct first");
        assert_eq!(s[1].last_seen, Timestamp(0));
    }

    #[test]
    fn bot_flags_round_trip_and_old_rows_have_none() {
        let old = r#"{"players":[{"name":"a","score":1,"spectator":false}]}"#;
        let info = PollInfo::from(serde_json::from_str::<InfoRow>(old).unwrap());
        assert_eq!(info.players().get(0).unwrap().bot(), None);
        let mut players: Vec<PollPlayer> = info.players().iter().collect();
        players[0].set_bot(Some(true));
        let mut fields = info.to_fields();
        fields.players = players.into();
        let with = PollInfo::from(fields);
        let json = serde_json::to_string(&InfoRow::from(&with)).unwrap();
        assert!(json.contains(r#""bot":true"#), "{json}");
        let back = PollInfo::from(serde_json::from_str::<InfoRow>(&json).unwrap());
        assert_eq!(back, with);
        let json = serde_json::to_string(&InfoRow::from(&info)).unwrap();
        assert!(!json.contains("bot"), "unknown is not written: {json}");
    }

    #[test]
    fn ddnet_rows_are_checked() {
        let row = DdnetRow {
            secret: "s".into(),
            serial: 1,
            info: "[]".into(),
            streams: vec![],
        };
        let addr = GameAddr::Ip("192.0.2.1:8303".parse().unwrap());
        assert!(row.into_data(&addr).is_err());
        let big = DdnetRow {
            secret: "s".into(),
            serial: 1,
            info: format!("{{\"a\":\"{}\"}}", "x".repeat(MAX_DDNET_INFO)),
            streams: vec![],
        };
        assert!(big.into_data(&addr).is_err());
    }
}
