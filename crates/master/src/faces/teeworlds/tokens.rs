//! Unguessable, self-validating tokens: the 0.7 connless token the master issues to each peer
//! IP, and the DDNet HTTP challenge token for each server address.
//!
//! A token is a keyed hash of the subject (an IP, or an address URL) and the current seed
//! period; the key comes from the caller (the face passes a randomly keyed
//! [`std::hash::RandomState`], tests a fixed hasher). Nothing is stored per peer, so a flood of
//! token requests costs no memory. A token of the current or the previous period is valid
//! (teeworlds `network_token.cpp`: seed lifetime 16 s, previous seed accepted; the DDNet master:
//! hourly seed, previous accepted).
//!
//! Pure: time is an argument ([`Timestamp`]).

use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::time::Duration;

use muster_proto::limit::SourceKey;
use muster_proto::teeworlds_master::Token;

use crate::registry::Timestamp;

/// Seed lifetime of the 0.7 connless token (`teeworlds-master.md` §2.6).
pub const CONNLESS_SEED_PERIOD: Duration = Duration::from_secs(16);
/// Seed lifetime of the DDNet challenge token (the reference master: one hour).
pub const CHALLENGE_SEED_PERIOD: Duration = Duration::from_secs(3600);

/// Keyed tokens with a rotating seed period.
#[derive(Debug, Clone)]
pub struct Tokens<S> {
    key: S,
    period_ms: u64,
}

impl<S: BuildHasher> Tokens<S> {
    /// Tokens keyed by `key`, the seed changing every `period` (at least 1 ms).
    pub fn new(key: S, period: Duration) -> Self {
        let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
        Self { key, period_ms }
    }

    fn epoch(&self, now: Timestamp) -> u64 {
        now.0 / self.period_ms
    }

    fn hash128(&self, subject: &impl Hash, epoch: u64) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (lane, chunk) in out.chunks_exact_mut(8).enumerate() {
            let mut h = self.key.build_hasher();
            (lane as u8).hash(&mut h);
            epoch.hash(&mut h);
            subject.hash(&mut h);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
        out
    }

    /// The 0.7 connless token issued to `ip` at `now`. Bound to the IP (IPv6 /64), not the
    /// port, as teeworlds binds it, so the checker socket and the master socket agree. Never
    /// [`Token::NONE`].
    pub fn connless(&self, ip: IpAddr, now: Timestamp) -> Token {
        self.connless_at(SourceKey::of(ip), self.epoch(now))
    }

    fn connless_at(&self, who: SourceKey, epoch: u64) -> Token {
        let h = self.hash128(&who, epoch);
        let mut t = [0u8; 4];
        t.copy_from_slice(h.get(..4).unwrap_or(&[0; 4]));
        if Token(t) == Token::NONE {
            t[0] = 0;
        }
        Token(t)
    }

    /// Whether `token` was issued to `ip` in the current or the previous period.
    pub fn connless_valid(&self, ip: IpAddr, token: Token, now: Timestamp) -> bool {
        let e = self.epoch(now);
        let who = SourceKey::of(ip);
        self.connless_at(who, e) == token || (e > 0 && self.connless_at(who, e - 1) == token)
    }

    /// The DDNet challenge token for `address` (the listed URL, `tw-0.6+udp://1.2.3.4:8303`)
    /// at `now`: 32 lower-case hex digits.
    pub fn challenge(&self, address: &str, now: Timestamp) -> String {
        self.challenge_at(address, self.epoch(now))
    }

    fn challenge_at(&self, address: &str, epoch: u64) -> String {
        self.hash128(&address, epoch)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// How `token` stands for `address` at `now`.
    pub fn check_challenge(&self, address: &str, token: &str, now: Timestamp) -> ChallengeCheck {
        let e = self.epoch(now);
        if self.challenge_at(address, e) == token {
            ChallengeCheck::Current
        } else if e > 0 && self.challenge_at(address, e - 1) == token {
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
    use std::hash::BuildHasherDefault;

    type Fixed = BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn connless_token_rotates_and_previous_is_accepted() {
        let t = Tokens::new(Fixed::default(), CONNLESS_SEED_PERIOD);
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
        let t = Tokens::new(Fixed::default(), CHALLENGE_SEED_PERIOD);
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
