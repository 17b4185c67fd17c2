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
        format!("{}/udp", ports::QUAKE3),
        format!("{}/udp", ports::VALVE),
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

/// The settings of a unit file: its non-comment lines with a `=`.
fn settings(unit: &str) -> Vec<&str> {
    unit.lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .collect()
}

#[test]
fn the_debian_unit_is_the_hardened_unit_with_a_user_the_package_makes() {
    let plain = read("packaging/muster.service");
    let deb = read("packaging/debian/muster.service");
    let deb_settings = settings(&deb);
    // Everything but the user and the path of the binary is the same.
    for line in settings(&plain) {
        let key = line.split('=').next().unwrap_or("");
        if ["ExecStart", "DynamicUser"].contains(&key) {
            continue;
        }
        assert!(deb_settings.contains(&line), "the Debian unit lacks {line}");
    }
    for line in [
        "User=muster",
        "Group=muster",
        "StateDirectory=muster",
        "ExecStart=/usr/bin/muster serve --config /etc/muster/muster.toml --data-dir /var/lib/muster",
    ] {
        assert!(deb_settings.contains(&line), "the Debian unit lacks {line}");
    }
    assert!(
        !deb.contains("DynamicUser"),
        "a static user, made by postinst"
    );
    // postinst makes that user and the state directory as systemd would; purge removes both.
    let postinst = read("packaging/debian/postinst");
    assert!(postinst.contains("adduser --system --group"), "{postinst}");
    assert!(
        postinst.contains("install -d -o muster -g muster -m 0750 /var/lib/muster"),
        "{postinst}"
    );
    let postrm = read("packaging/debian/postrm");
    assert!(postrm.contains("rm -rf /var/lib/muster") && postrm.contains("deluser"));
    // The package installs this unit and the config the unit reads.
    let script = read("scripts/deb.sh");
    for needle in [
        "packaging/debian/muster.service",
        "lib/systemd/system/muster.service",
        "etc/muster/muster.toml",
    ] {
        assert!(script.contains(needle), "scripts/deb.sh lacks {needle}");
    }
}
