//! Unguessable, self-validating tokens: the 0.7 connless token the master issues to each peer
//! IP, and the DDNet HTTP challenge token for each server address.
//!
//! A token is an HMAC-SHA256 ([`muster_core::secrets::Secrets`]) of the subject (an IP, or an address
//! URL) and the current seed period. Nothing is stored per peer, so a flood of token requests
//! costs no memory. A token of the current or the previous period is valid (teeworlds
//! `network_token.cpp`: seed lifetime 16 s, previous seed accepted; the DDNet master: hourly
//! seed, previous accepted).
//!
//! Pure: time is an argument ([`Timestamp`]).

use std::net::IpAddr;
use std::time::Duration;

use muster_proto::limit::SourceKey;
use muster_proto::teeworlds_master::Token;

use muster_core::registry::Timestamp;
use muster_core::secrets::Secrets;

/// Seed lifetime of the 0.7 connless token (`teeworlds-master.md` §2.6).
pub const CONNLESS_SEED_PERIOD: Duration = Duration::from_secs(16);
/// Seed lifetime of the DDNet challenge token (the reference master: one hour).
pub const CHALLENGE_SEED_PERIOD: Duration = Duration::from_secs(3600);

const CONNLESS: &[u8] = b"muster teeworlds07 connless token";
const CHALLENGE: &[u8] = b"muster ddnet challenge token";

/// Keyed tokens with a rotating seed period.
#[derive(Debug, Clone)]
pub struct Tokens {
    secrets: Secrets,
}

fn source_bytes(who: SourceKey) -> [u8; 9] {
    let mut b = [0u8; 9];
    match who {
        SourceKey::V4(v) => {
            b[0] = 4;
            b[1..5].copy_from_slice(&v.to_be_bytes());
        }
        SourceKey::V6(p) => {
            b[0] = 6;
            b[1..9].copy_from_slice(&p.to_be_bytes());
        }
    }
    b
}

impl Tokens {
    /// Tokens from `secrets`, whose epoch is the seed period.
    #[must_use]
    pub fn new(secrets: Secrets) -> Self {
        Self { secrets }
    }

    /// Fresh random tokens with seed period `period`.
    #[must_use]
    pub fn random(period: Duration) -> Self {
        Self::new(Secrets::random(period))
    }

    /// The 0.7 connless token issued to `ip` at `now`. Bound to the IP (IPv6 /64), not the
    /// port, as teeworlds binds it, so the checker socket and the master socket agree. Never
    /// [`Token::NONE`].
    #[must_use]
    pub fn connless(&self, ip: IpAddr, now: Timestamp) -> Token {
        self.connless_at(SourceKey::of(ip), self.secrets.epoch(now))
    }

    fn connless_at(&self, who: SourceKey, epoch: u64) -> Token {
        let h = self.secrets.mac(CONNLESS, epoch, &[&source_bytes(who)]);
        let mut t = [h[0], h[1], h[2], h[3]];
        if Token(t) == Token::NONE {
            t[0] = 0;
        }
        Token(t)
    }

    /// Whether `token` was issued to `ip` in the current or the previous period.
    #[must_use]
    pub fn connless_valid(&self, ip: IpAddr, token: Token, now: Timestamp) -> bool {
        let who = SourceKey::of(ip);
        let [e, prev] = self.secrets.valid_epochs(now);
        self.connless_at(who, e) == token || (e > 0 && self.connless_at(who, prev) == token)
    }

    /// The DDNet challenge token for `address` (the listed URL, `tw-0.6+udp://1.2.3.4:8303`)
    /// at `now`: 32 lower-case hex digits.
    #[must_use]
    pub fn challenge(&self, address: &str, now: Timestamp) -> String {
        self.challenge_at(address, self.secrets.epoch(now))
    }

    fn challenge_at(&self, address: &str, epoch: u64) -> String {
        let h = self.secrets.mac(CHALLENGE, epoch, &[address.as_bytes()]);
        h.iter().take(16).map(|b| format!("{b:02x}")).collect()
    }

    /// How `token` stands for `address` at `now`.
    #[must_use]
    pub fn check_challenge(&self, address: &str, token: &str, now: Timestamp) -> ChallengeCheck {
        let [e, prev] = self.secrets.valid_epochs(now);
        if self.challenge_at(address, e) == token {
            ChallengeCheck::Current
        } else if e > 0 && self.challenge_at(address, prev) == token {
            ChallengeCheck::Previous
        } else {
            ChallengeCheck::Invalid
        }
    }
}

/// Result of [`Tokens::check_challenge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeCheck {
    /// The token of the current period: valid, no new challenge needed.
    Current,
    /// The token of the previous period: valid, but a new challenge is sent.
    Previous,
    /// Not a token this master issued for the address recently.
    Invalid,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(period: Duration) -> Tokens {
        Tokens::new(Secrets::with_key([9; 32], period))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn connless_token_rotates_and_previous_is_accepted() {
        let t = fixed(CONNLESS_SEED_PERIOD);
        let t0 = Timestamp(1_700_000_000_000 / 16_000 * 16_000);
        let a = t.connless(ip("127.0.0.1"), t0);
        assert_ne!(a, Token::NONE);
        assert_eq!(
            a,
            t.connless(ip("127.0.0.1"), t0.plus(Duration::from_secs(15)))
        );
        assert!(t.connless_valid(ip("127.0.0.1"), a, t0.plus(Duration::from_secs(20))));
        assert!(!t.connless_valid(ip("127.0.0.1"), a, t0.plus(Duration::from_secs(33))));
        assert!(!t.connless_valid(ip("127.0.0.2"), a, t0));
        // Bound to the /64, as the rate limits are.
        let b = t.connless(ip("2001:db8::1"), t0);
        assert!(t.connless_valid(ip("2001:db8::2"), b, t0));
    }

    #[test]
    fn challenge_token_current_previous_invalid() {
        let t = fixed(CHALLENGE_SEED_PERIOD);
        let t0 = Timestamp(3_600_000 * 500_000);
        let addr = "tw-0.6+udp://127.0.0.1:8303";
        let tok = t.challenge(addr, t0);
        assert_eq!(tok.len(), 32);
        assert_eq!(t.check_challenge(addr, &tok, t0), ChallengeCheck::Current);
        let later = t0.plus(Duration::from_secs(3600));
        assert_eq!(
            t.check_challenge(addr, &tok, later),
            ChallengeCheck::Previous
        );
        let much_later = t0.plus(Duration::from_secs(7200));
        assert_eq!(
            t.check_challenge(addr, &tok, much_later),
            ChallengeCheck::Invalid
        );
        assert_eq!(
            t.check_challenge("tw-0.6+udp://127.0.0.1:8304", &tok, t0),
            ChallengeCheck::Invalid
        );
    }
}
