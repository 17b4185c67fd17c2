//! The face table: every socket face's [`FaceDescriptor`] in one list, [`FACES`], and the
//! settings the daemon gives them.
//!
//! A descriptor (see [`crate::face`]) says what the face is called (the `--NAME` flag, the
//! `[listen]` key, the `listening NAME …` line and the metrics label), which contract drives
//! it, which port it takes by default, how one configured address is bound, and how its bound
//! sockets are served. The daemon (`muster serve`) and the tests build every face through it,
//! with the same [`FaceSettings`] (each face's settings mapped from the shared limits next to
//! the face) and the same runners; only [`Placement`] differs: the daemon gives each UDP face
//! a thread of its own, a test keeps it on its runtime so that a paused clock drives it.

use muster_core::config::LimitsConfig;

pub use crate::face::{
    BoundSocket, Contract, FaceDescriptor, FaceSettings, FaceStart, Placement, Serving, Socket,
};
use crate::runtime::udp::Budgets;
use crate::{gameagent, gamespy, mgmt, quake3, teeworlds, valve};

/// Every socket face, in the order the daemon starts them and prints their addresses.
pub const FACES: &[&FaceDescriptor] = &[
    &gameagent::FACE,
    &gamespy::UDP_FACE,
    &gamespy::TCP_FACE,
    &mgmt::FACE,
    &teeworlds::FACE07,
    &teeworlds::FACE06,
    &quake3::FACE,
    &valve::FACE,
];

/// The face called `name` (as in `--NAME`), if there is one.
#[must_use]
pub fn find(name: &str) -> Option<&'static FaceDescriptor> {
    FACES.iter().copied().find(|f| f.name == name)
}

/// Every face's settings from the shared limits and the faces' own config sections.
#[must_use]
pub fn settings(
    limits: &LimitsConfig,
    quake3: &quake3::Quake3Config,
    valve: &valve::ValveConfig,
) -> FaceSettings {
    let mut s = FaceSettings::default();
    s.set(Budgets::from_limits(limits));
    s.set(gameagent::GameAgentSettings::from_limits(limits));
    s.set(gamespy::GameSpySettings::from_limits(limits));
    s.set(mgmt::MgmtSettings::from_limits(limits));
    s.set(teeworlds::TeeworldsSettings::from_limits(limits));
    s.set(quake3::Quake3Settings::new(quake3, limits));
    s.set(valve::ValveSettings::new(valve, limits));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_face_gets_what_was_set_else_its_default() {
        let mut all = FaceSettings::default();
        assert_eq!(all.get::<Budgets>(), Budgets::default());
        let q = quake3::Quake3Settings {
            max_servers: 7,
            ..Default::default()
        };
        all.set(q.clone());
        assert_eq!(all.get::<quake3::Quake3Settings>(), q);
    }

    #[test]
    fn names_and_default_ports_are_unique() {
        let mut names: Vec<_> = FACES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FACES.len(), "a name is used twice");
        for f in FACES {
            assert_eq!(find(f.name).map(|d| d.name), Some(f.name));
            assert!(f.default_port > 0, "{}", f.name);
        }
        assert!(find("nope").is_none());
        let hint = (find("quake3").unwrap().register_hint)("127.0.0.1:27950".parse().unwrap());
        assert!(hint.contains("sv_master1 \"127.0.0.1:27950\""), "{hint}");
        assert!(hint.contains("allow_loopback"), "{hint}");
    }

    #[tokio::test]
    async fn every_face_binds_loopback_port_zero_with_its_own_transport() {
        for f in FACES {
            let bound = (f.bind)("127.0.0.1:0".parse().unwrap()).unwrap();
            assert!(!bound.is_empty(), "{}", f.name);
            assert_eq!(bound[0].label, f.name);
            let want = match f.contract {
                Contract::Datagrams => "udp",
                Contract::Conversations => "tcp",
            };
            for b in &bound {
                assert_eq!(b.socket.transport(), want, "{}", f.name);
                assert_ne!(b.socket.local_addr().unwrap().port(), 0, "{}", f.name);
            }
        }
    }
}
