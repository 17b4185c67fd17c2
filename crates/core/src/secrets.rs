//! Stateless challenges: HMAC-SHA256 over what a challenge is bound to, keyed with a secret
//! drawn once per process and mixed with a time epoch, so the key effectively rotates every
//! epoch and an answer is accepted in the epoch it was issued and the next one.
//!
//! A face that challenges with [`Secrets::mac`] keeps nothing per source: the answer proves
//! itself. A forged source that never receives the challenge must guess it.

use std::time::Duration;

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use crate::registry::Timestamp;

/// A per-process secret and the epoch length it rotates with.
#[derive(Clone)]
pub struct Secrets {
    key: [u8; 32],
    period_ms: u64,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("period_ms", &self.period_ms)
            .finish_non_exhaustive()
    }
}

impl Secrets {
    /// A fresh random key (from the OS generator, through `rand`) rotating every `period`.
    #[must_use]
    pub fn random(period: Duration) -> Self {
        Self::with_key(rand::random(), period)
    }

    /// A fixed key (tests).
    #[must_use]
    pub fn with_key(key: [u8; 32], period: Duration) -> Self {
        Self {
            key,
            period_ms: u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1),
        }
    }

    /// The epoch `now` falls in.
    #[must_use]
    pub fn epoch(&self, now: Timestamp) -> u64 {
        now.0 / self.period_ms
    }

    /// The epochs an answer received at `now` may come from: this one and the previous one.
    #[must_use]
    pub fn valid_epochs(&self, now: Timestamp) -> [u64; 2] {
        let e = self.epoch(now);
        [e, e.saturating_sub(1)]
    }

    /// HMAC-SHA256 of `parts` in `epoch`, for the purpose `domain` (each face its own, so a
    /// MAC from one face is useless on another).
    #[must_use]
    pub fn mac(&self, domain: &[u8], epoch: u64, parts: &[&[u8]]) -> [u8; 32] {
        // Cannot fail: HMAC takes keys of any length.
        let Ok(mut m) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return [0; 32];
        };
        m.update(&u64::try_from(domain.len()).unwrap_or(0).to_le_bytes());
        m.update(domain);
        m.update(&epoch.to_le_bytes());
        for p in parts {
            m.update(&u64::try_from(p.len()).unwrap_or(0).to_le_bytes());
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_depend_on_key_domain_epoch_and_parts() {
        let s = Secrets::with_key([7; 32], Duration::from_secs(60));
        let base = s.mac(b"d", 1, &[b"a", b"b"]);
        assert_eq!(base, s.mac(b"d", 1, &[b"a", b"b"]));
        assert_ne!(base, s.mac(b"e", 1, &[b"a", b"b"]));
        assert_ne!(base, s.mac(b"d", 2, &[b"a", b"b"]));
        assert_ne!(base, s.mac(b"d", 1, &[b"ab"]), "parts are length-prefixed");
        let other = Secrets::with_key([8; 32], Duration::from_secs(60));
        assert_ne!(base, other.mac(b"d", 1, &[b"a", b"b"]));
    }

    #[test]
    fn epochs_rotate_and_the_previous_one_stays_valid() {
        let s = Secrets::with_key([1; 32], Duration::from_secs(60));
        let t = Timestamp::from_secs(600);
        assert_eq!(s.epoch(t), 10);
        assert_eq!(s.valid_epochs(t), [10, 9]);
        assert_eq!(s.epoch(Timestamp::from_secs(659)), 10);
        assert_eq!(s.epoch(Timestamp::from_secs(660)), 11);
    }
}
