//! English display names for the property (rule) keys servers send, for tables and detail
//! views: `AdminEMail` reads "Admin E-Mail", `friendlyfire` "Friendly Fire".
//!
//! The UT2003 article the project grew from (seed 002) gave its server class a static
//! `Prop2En(key)` that turned property names into English for a list view, and passed unknown
//! names through unchanged; [`property_name`] does the same for the keys of every protocol
//! Muster reads: the GameSpy v1 vocabulary (`gamespy1.md` §8.3, Serious Sam's misspellings
//! included), the UE2 native rules (`unreal2.md` §6) and the GameAgent status keys. Lookup
//! ignores ASCII case, as the protocols do.
//!
//! Display only: output keeps the keys as sent (JSON, filters, `raw`), so nothing that
//! matches on a key depends on this table.

/// Key (compared without regard to ASCII case) and its English name.
const NAMES: &[(&str, &str)] = &[
    // GameSpy v1 vocabulary (gamespy1.md §8.3).
    ("gamename", "Game"),
    ("gamever", "Game Version"),
    ("gamesubver", "Game Sub-Version"),
    ("gamerevision", "Game Revision"),
    ("minnetver", "Minimum Network Version"),
    ("mingamever", "Minimum Game Version"),
    ("location", "Location"),
    ("hostname", "Server Name"),
    ("shortname", "Short Name"),
    ("hostport", "Game Port"),
    ("maptitle", "Map Title"),
    ("mapname", "Map"),
    ("gametype", "Game Type"),
    ("gameclass", "Game Class"),
    ("numplayers", "Players"),
    ("maxplayers", "Maximum Players"),
    ("gamemode", "Game Mode"),
    ("activemod", "Active Mod"),
    ("difficulty", "Difficulty"),
    ("friendlyfire", "Friendly Fire"),
    ("weaponsstay", "Weapons Stay"),
    // Serious Sam's spelling next to the retail one (gamespy1.md §12 item 14).
    ("ammosstay", "Ammo Stays"),
    ("ammostays", "Ammo Stays"),
    ("healthandarmorstays", "Health and Armor Stay"),
    ("allowhealth", "Health Allowed"),
    ("allowarmor", "Armor Allowed"),
    // Serious Sam sends infinite ammo under this name (gamespy1.md §12 item 14).
    ("infinitearmor", "Infinite Ammo"),
    ("infiniteammo", "Infinite Ammo"),
    ("respawninplace", "Respawn in Place"),
    ("password", "Password"),
    ("vipplayers", "VIP Players"),
    ("timelimit", "Time Limit"),
    ("fraglimit", "Frag Limit"),
    ("goalteamscore", "Goal Team Score"),
    ("minplayers", "Minimum Players"),
    ("changelevels", "Change Levels"),
    ("tournament", "Tournament"),
    ("gamestyle", "Game Style"),
    ("botskill", "Bot Skill"),
    ("mutators", "Mutators"),
    ("mutator", "Mutator"),
    ("adminname", "Admin Name"),
    ("adminemail", "Admin E-Mail"),
    ("mapfilename", "Map File"),
    ("os", "Operating System"),
    ("lanserver", "LAN Server"),
    ("servurl", "Server URL"),
    ("worldlog", "World Log"),
    ("wantworldlog", "Wants World Log"),
    // UE2 native rules (unreal2.md §6; UT2004 `GetServerDetails`).
    ("servermode", "Server Mode"),
    ("serverversion", "Server Version"),
    ("gamestats", "Game Stats"),
    ("maxspectators", "Maximum Spectators"),
    ("goalscore", "Goal Score"),
    ("maxlives", "Maximum Lives"),
    ("weaponstay", "Weapons Stay"),
    ("translocator", "Translocator"),
    ("gamespeed", "Game Speed"),
    ("gamepassword", "Password Required"),
    ("balanceteams", "Balance Teams"),
    ("playersbalanceteams", "Players Balance Teams"),
    // GameAgent status keys (gameagent.md §3).
    ("sessionname", "Server Name"),
    ("level", "Map"),
    ("players", "Players"),
    ("version", "Version"),
];

/// The English display name of property `key` when it is a known one, like the seed's
/// `Prop2En`: `AdminEMail` gives `Some("Admin E-Mail")`. ASCII case is ignored.
#[must_use]
pub fn known_property_name(key: &str) -> Option<&'static str> {
    NAMES
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, name)| *name)
}

/// [`known_property_name`], or `key` itself when the key is not a known one (a mod's own
/// rule is shown as sent).
#[must_use]
pub fn property_name(key: &str) -> &str {
    known_property_name(key).unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_get_english_names_whatever_their_case() {
        assert_eq!(property_name("AdminEMail"), "Admin E-Mail");
        assert_eq!(property_name("adminemail"), "Admin E-Mail");
        assert_eq!(property_name("AdminEmail"), "Admin E-Mail");
        assert_eq!(property_name("friendlyfire"), "Friendly Fire");
        assert_eq!(property_name("GamePassword"), "Password Required");
        assert_eq!(property_name("infinitearmor"), "Infinite Ammo");
        assert_eq!(property_name("Mutator"), "Mutator");
    }

    #[test]
    fn unknown_keys_pass_through() {
        assert_eq!(property_name("Num trader weapons"), "Num trader weapons");
        assert_eq!(known_property_name("Num trader weapons"), None);
        assert_eq!(property_name(""), "");
    }

    #[test]
    fn every_key_is_listed_once() {
        for (i, (k, name)) in NAMES.iter().enumerate() {
            assert_eq!(*k, k.to_ascii_lowercase(), "keys are written lower case");
            assert!(!name.is_empty());
            assert!(
                NAMES.iter().skip(i + 1).all(|(o, _)| o != k),
                "{k} listed twice"
            );
        }
    }

    #[test]
    fn the_whole_gamespy_vocabulary_has_names() {
        // The vocabulary keys of gamespy1.md §8.3 (every one a server may send as a rule).
        for key in crate::gamespy1::VOCABULARY_KEYS {
            assert!(known_property_name(key).is_some(), "{key}");
        }
    }
}
