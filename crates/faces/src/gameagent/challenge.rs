//! The face's stateless challenges (rule 4): a 32-bit value bound to the address and port it
//! is sent to, keyed by the process's secret and the epoch. Its top half carries the port
//! masked with a MAC of the address, so an echo tells which port it was issued to (a server
//! answering from another port is told apart from a forger).

use std::net::{Ipv4Addr, SocketAddrV4};

use muster_core::registry::Timestamp;
use muster_core::secrets::Secrets;
use muster_proto::gameagent::packet::Challenge;

const DOMAIN: &[u8] = b"muster gameagent challenge";

/// Issues and checks challenges; keeps nothing per source.
#[derive(Debug, Clone)]
pub(crate) struct Challenges {
    secrets: Secrets,
}

impl Challenges {
    pub(crate) fn new(secrets: Secrets) -> Self {
        Self { secrets }
    }

    /// The challenge (A, P) gets at `wall`.
    pub(crate) fn issue(&self, a: SocketAddrV4, wall: Timestamp) -> Challenge {
        let epoch = self.secrets.epoch(wall);
        let ip = a.ip().octets();
        let mac = self
            .secrets
            .mac(DOMAIN, epoch, &[&ip, &a.port().to_le_bytes()]);
        let mask = self.secrets.mac(DOMAIN, epoch, &[&ip]);
        challenge_of(mac, mask, a.port())
    }

    /// The port an echo from address `ip` was issued to, if its MAC is valid at `wall` (this
    /// epoch or the previous one; either byte order).
    pub(crate) fn port_of_echo(&self, ip: Ipv4Addr, echo: i32, wall: Timestamp) -> Option<u16> {
        let octets = ip.octets();
        for epoch in self.secrets.valid_epochs(wall) {
            let mask = self.secrets.mac(DOMAIN, epoch, &[&octets]);
            for bytes in [echo.to_le_bytes(), echo.to_be_bytes()] {
                let port = u16::from_le_bytes([bytes[2], bytes[3]])
                    ^ u16::from_le_bytes([mask[0], mask[1]]);
                let mac = self
                    .secrets
                    .mac(DOMAIN, epoch, &[&octets, &port.to_le_bytes()]);
                if challenge_of(mac, mask, port).matches_echo(echo) {
                    return Some(port);
                }
            }
        }
        None
    }
}

/// The challenge from its two MACs: two bytes of the address-and-port MAC, then the port
/// masked with the address MAC. Echo 0 means "no challenge"; such a draw is never issued.
fn challenge_of(mac: [u8; 32], mask: [u8; 32], port: u16) -> Challenge {
    let [p0, p1] = (port ^ u16::from_le_bytes([mask[0], mask[1]])).to_le_bytes();
    let c = i32::from_le_bytes([mac[0], mac[1], p0, p1]);
    Challenge(if c == 0 { 1 } else { c })
}
