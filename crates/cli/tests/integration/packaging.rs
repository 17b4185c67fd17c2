//! The container image and the systemd unit stay in step with the daemon's defaults.

use muster_master::config::ports;

fn read(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap()
}

#[test]
fn the_image_exposes_every_default_port() {
    let dockerfile = read("Dockerfile");
    let exposed: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(str::split_whitespace)
        .collect();
    let mut want = vec![
        format!("{}/tcp", ports::HTTP),
        format!("{}/tcp", ports::GAMESPY_TCP),
        format!("{}/tcp", ports::MGMT),
        format!("{}/udp", ports::GAMEAGENT),
        format!("{}/udp", ports::GAMESPY_UDP),
        format!("{}/udp", ports::TEEWORLDS07),
        // The 0.7 master's firewall checker.
        format!("{}/udp", ports::TEEWORLDS07 + 1),
        format!("{}/udp", ports::TEEWORLDS06),
    ];
    let mut got: Vec<String> = exposed.iter().map(ToString::to_string).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    assert!(dockerfile.contains("\nUSER muster"), "runs as its own user");
    assert!(dockerfile.contains("VOLUME [\"/var/lib/muster\"]"));
    assert!(dockerfile.contains("CMD [\"serve\", \"--data-dir\", \"/var/lib/muster\"]"));
}

#[test]
fn the_unit_keeps_its_state_in_its_state_directory_and_is_hardened() {
    let unit = read("packaging/muster.service");
    for line in [
        "ExecStart=/usr/local/bin/muster serve --data-dir /var/lib/muster",
        "DynamicUser=yes",
        "StateDirectory=muster",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "KillSignal=SIGTERM",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
}
