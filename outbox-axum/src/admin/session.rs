//! The dashboard's browser session: what its cookie holds instead of the
//! token. Signed (HMAC-SHA256 with a key derived from the principal's
//! token, so that every process with the same tokens accepts it and a
//! rotated token ends its sessions), expiring, and revocable (logout).
//!
//! A logout revokes only a session that checks: signed for a principal
//! this process knows, not expired. A forged or expired cookie changes
//! nothing. A revocation is kept until the session would have expired,
//! but never longer than the lifetime this process issues (whatever the
//! cookie claims), at most [`MAX_REVOKED`] of them, and ended ones leave
//! as new ones come, the soonest to expire first.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use outbox_core::clock::{Clock, SystemClock};

use super::auth::{Principal, Role};

/// How long a session lasts by default: 12 hours.
pub const DEFAULT_SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// How far another process's clock may run ahead of this one's: a session
/// it issued may expire up to this much later than one issued here.
const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// Revoked sessions kept at most: past it, the one that expires soonest
/// makes room. Only a principal's own sessions can be revoked, so reaching
/// it takes that many logins with a valid token.
pub(crate) const MAX_REVOKED: usize = 100_000;

/// The sessions a [`BearerToken`](super::BearerToken) issues and checks.
#[derive(Clone)]
pub(crate) struct Sessions {
    lifetime: Duration,
    clock: Arc<dyn Clock>,
    /// Sessions ended by a logout: this process refuses them until they
    /// expire.
    revoked: Arc<Mutex<Revoked>>,
}

/// The nonces of revoked sessions, and when each leaves (unix seconds).
#[derive(Debug, Default)]
struct Revoked {
    nonces: HashSet<u128>,
    by_expiry: BinaryHeap<Reverse<(i64, u128)>>,
}

impl Revoked {
    /// Revokes `nonce` until `expires`, after dropping the revocations that
    /// ended by `now` (and, at the ceiling, the soonest to end).
    fn insert(&mut self, nonce: u128, expires: i64, now: i64) {
        while let Some(&Reverse((ends, oldest))) = self.by_expiry.peek() {
            if ends > now && self.nonces.len() < MAX_REVOKED {
                break;
            }
            self.by_expiry.pop();
            self.nonces.remove(&oldest);
        }
        if self.nonces.insert(nonce) {
            self.by_expiry.push(Reverse((expires, nonce)));
        }
    }
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            lifetime: DEFAULT_SESSION_LIFETIME,
            clock: Arc::new(SystemClock),
            revoked: Arc::default(),
        }
    }
}

/// One session's fields, as the cookie carries them.
struct Claims<'a> {
    expires: i64,
    nonce: u128,
    role: Role,
    name: String,
    signed: &'a str,
    mac: &'a str,
}

fn key(token: &[u8]) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(b"outbox-admin-session\0");
    digest.update(token);
    digest.finalize().into()
}

fn mac(token: &[u8], signed: &str) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key(token))
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(signed.as_bytes());
    mac
}

impl Sessions {
    pub(crate) fn lifetime(&self) -> Duration {
        self.lifetime
    }

    pub(crate) fn set_lifetime(&mut self, lifetime: Duration) {
        self.lifetime = lifetime;
    }

    pub(crate) fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// A session of `principal`, who logged in with `token`: the cookie's
    /// value (`expires.nonce.role.name.mac`, all cookie-safe characters).
    pub(crate) fn issue(&self, principal: &Principal, token: &[u8]) -> String {
        let lifetime = chrono::Duration::from_std(self.lifetime).unwrap_or(chrono::Duration::MAX);
        let expires = self
            .now()
            .checked_add_signed(lifetime)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
            .timestamp();
        let nonce = format!("{:032x}", rand::random::<u128>());
        let name = URL_SAFE_NO_PAD.encode(principal.name());
        let signed = format!("{expires}.{nonce}.{}.{name}", principal.role().as_str());
        let tag = URL_SAFE_NO_PAD.encode(mac(token, &signed).finalize().into_bytes());
        format!("{signed}.{tag}")
    }

    fn parse(value: &str) -> Option<Claims<'_>> {
        let (signed, tag) = value.rsplit_once('.')?;
        let mut parts = signed.splitn(4, '.');
        let expires = parts.next()?.parse().ok()?;
        let nonce = parts.next()?;
        if nonce.len() != 32 {
            return None;
        }
        let nonce = u128::from_str_radix(nonce, 16).ok()?;
        let role = match parts.next()? {
            "viewer" => Role::Viewer,
            "operator" => Role::Operator,
            _ => return None,
        };
        let name = String::from_utf8(URL_SAFE_NO_PAD.decode(parts.next()?).ok()?).ok()?;
        Some(Claims {
            expires,
            nonce,
            role,
            name,
            signed,
            mac: tag,
        })
    }

    fn revoked(&self) -> std::sync::MutexGuard<'_, Revoked> {
        self.revoked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The latest expiry a session issued by a process with this lifetime
    /// can have at `now` (allowing for another process's clock).
    fn latest_expiry(&self, now: i64) -> i64 {
        let longest = self.lifetime.saturating_add(CLOCK_SKEW).as_secs();
        now.saturating_add(i64::try_from(longest).unwrap_or(i64::MAX))
    }

    /// The claims of `value` and its principal, if it was signed with the
    /// token of a principal of that name and role among `known`, has not
    /// expired and does not claim to last longer than this process issues
    /// sessions for (revoked or not).
    fn verify<'v, 'a>(
        &self,
        value: &'v str,
        known: impl Iterator<Item = (&'a [u8], &'a Principal)>,
    ) -> Option<(Claims<'v>, Principal)> {
        let claims = Self::parse(value)?;
        let now = self.now().timestamp();
        if claims.expires <= now || claims.expires > self.latest_expiry(now) {
            return None;
        }
        let tag = URL_SAFE_NO_PAD.decode(claims.mac).ok()?;
        let mut found = None;
        for (token, principal) in known {
            if principal.name() == claims.name
                && principal.role() == claims.role
                && mac(token, claims.signed).verify_slice(&tag).is_ok()
            {
                found = Some(principal.clone());
            }
        }
        found.map(|principal| (claims, principal))
    }

    /// The principal of the session `value`, if it was signed with the
    /// token of a principal of that name and role among `known`, has not
    /// expired and was not ended by a logout.
    pub(crate) fn check<'a>(
        &self,
        value: &str,
        known: impl Iterator<Item = (&'a [u8], &'a Principal)>,
    ) -> Option<Principal> {
        let (claims, principal) = self.verify(value, known)?;
        if self.revoked().nonces.contains(&claims.nonce) {
            return None;
        }
        Some(principal)
    }

    /// Ends the session `value` in this process (a logout), if it is one
    /// that [`check`](Self::check) accepts; whether it did.
    pub(crate) fn revoke<'a>(
        &self,
        value: &str,
        known: impl Iterator<Item = (&'a [u8], &'a Principal)>,
    ) -> bool {
        let Some((claims, _)) = self.verify(value, known) else {
            return false;
        };
        // `verify` refused any that claims to expire later.
        let now = self.now().timestamp();
        self.revoked().insert(claims.nonce, claims.expires, now);
        true
    }

    /// How many revocations this process keeps.
    #[cfg(test)]
    pub(crate) fn revoked_len(&self) -> usize {
        let revoked = self.revoked();
        debug_assert_eq!(revoked.nonces.len(), revoked.by_expiry.len());
        revoked.nonces.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::clock::ManualClock;

    fn sessions(clock: &ManualClock) -> Sessions {
        let mut sessions = Sessions::default();
        sessions.set_clock(Arc::new(clock.clone()));
        sessions
    }

    #[test]
    fn a_session_holds_for_its_principal_until_it_expires_or_is_revoked() {
        let clock = ManualClock::starting_now();
        let sessions = sessions(&clock);
        let ann = Principal::viewer("ann. o'neil");
        let token: &[u8] = b"ann's token";
        let known = || [(token, &ann)].into_iter();
        let value = sessions.issue(&ann, token);
        assert!(!value.contains(std::str::from_utf8(token).unwrap()));
        assert!(value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_'));
        assert_eq!(sessions.check(&value, known()), Some(ann.clone()));

        // Signed with another token (a rotation), or tampered: refused.
        let rotated: &[u8] = b"ann's new token";
        assert_eq!(sessions.check(&value, [(rotated, &ann)].into_iter()), None);
        let as_operator = value.replacen(".viewer.", ".operator.", 1);
        let operator = Principal::operator("ann. o'neil");
        assert_eq!(
            sessions.check(&as_operator, [(token, &operator)].into_iter()),
            None
        );
        let later = value.replacen(&value[..value.find('.').unwrap()], "99999999999", 1);
        assert_eq!(sessions.check(&later, known()), None);

        // Expired after its lifetime.
        clock.advance(DEFAULT_SESSION_LIFETIME - Duration::from_secs(1));
        assert!(sessions.check(&value, known()).is_some());
        clock.advance(Duration::from_secs(1));
        assert_eq!(sessions.check(&value, known()), None);

        // Revoked by a logout.
        let fresh = sessions.issue(&ann, token);
        assert!(sessions.revoke(&fresh, known()));
        assert_eq!(sessions.check(&fresh, known()), None);
        assert_eq!(sessions.check("garbage", known()), None);
        assert_eq!(sessions.check("1.2.viewer.@@.x", known()), None);
    }

    #[test]
    fn a_forged_or_expired_session_revokes_nothing() {
        let clock = ManualClock::starting_now();
        let sessions = sessions(&clock);
        let ann = Principal::viewer("ann");
        let token: &[u8] = b"ann's token";
        let known = || [(token, &ann)].into_iter();
        let far = i64::MAX;
        let name = URL_SAFE_NO_PAD.encode("ann");
        for i in 0..20_000u128 {
            // A garbage MAC, a nonce of its own, an expiry far away.
            let forged = format!("{far}.{i:032x}.viewer.{name}.x");
            assert!(!sessions.revoke(&forged, known()));
        }
        // Signed with a token this process does not know.
        let other = sessions.issue(&ann, b"another token");
        assert!(!sessions.revoke(&other, known()));
        // Expired.
        let old = sessions.issue(&ann, token);
        clock.advance(DEFAULT_SESSION_LIFETIME);
        assert!(!sessions.revoke(&old, known()));
        assert_eq!(sessions.revoked_len(), 0);
    }

    #[test]
    fn revocations_end_with_their_sessions() {
        let clock = ManualClock::starting_now();
        let sessions = sessions(&clock);
        let ann = Principal::operator("ann");
        let token: &[u8] = b"ann's token";
        let known = || [(token, &ann)].into_iter();
        for _ in 0..10 {
            let value = sessions.issue(&ann, token);
            assert!(sessions.revoke(&value, known()));
        }
        assert_eq!(sessions.revoked_len(), 10);
        // One lifetime later they have all ended: the next logout drops
        // them.
        clock.advance(DEFAULT_SESSION_LIFETIME);
        let next = sessions.issue(&ann, token);
        assert!(sessions.revoke(&next, known()));
        assert_eq!(sessions.revoked_len(), 1);
    }

    #[test]
    fn a_session_claiming_a_longer_life_than_issued_here_is_refused() {
        let clock = ManualClock::starting_now();
        let sessions = sessions(&clock);
        let ann = Principal::operator("ann");
        let token: &[u8] = b"ann's token";
        let known = || [(token, &ann)].into_iter();
        // Signed with the token by a process issuing far longer sessions:
        // neither accepted nor kept as a revocation here.
        let mut long_lived = sessions.clone();
        long_lived.set_lifetime(DEFAULT_SESSION_LIFETIME * 1_000);
        let far = long_lived.issue(&ann, token);
        assert_eq!(sessions.check(&far, known()), None);
        assert!(!sessions.revoke(&far, known()));
        // One whose clock runs a minute ahead: accepted.
        let mut ahead = sessions.clone();
        ahead.set_clock(Arc::new(ManualClock::new(
            clock.now() + chrono::Duration::minutes(1),
        )));
        let skewed = ahead.issue(&ann, token);
        assert_eq!(sessions.check(&skewed, known()), Some(ann.clone()));
        assert_eq!(sessions.revoked_len(), 0);
    }

    #[test]
    fn the_revoked_set_has_a_ceiling_and_keeps_the_latest() {
        let mut revoked = Revoked::default();
        let now = 1_000;
        for nonce in 0..(MAX_REVOKED as u128 + 10) {
            revoked.insert(nonce, now + 1 + nonce as i64, now);
        }
        assert_eq!(revoked.nonces.len(), MAX_REVOKED);
        assert!(revoked.nonces.contains(&(MAX_REVOKED as u128 + 9)));
        assert!(!revoked.nonces.contains(&0));
    }
}
