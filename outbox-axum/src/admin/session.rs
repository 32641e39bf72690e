//! The dashboard's browser session: what its cookie holds instead of the
//! token. Signed (HMAC-SHA256 with a key derived from the principal's
//! token, so that every process with the same tokens accepts it and a
//! rotated token ends its sessions), expiring, and revocable (logout).

use std::collections::HashMap;
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

/// The sessions a [`BearerToken`](super::BearerToken) issues and checks.
#[derive(Clone)]
pub(crate) struct Sessions {
    lifetime: Duration,
    clock: Arc<dyn Clock>,
    /// Nonces of sessions ended by a logout, with their expiry (unix
    /// seconds): this process refuses them until then.
    revoked: Arc<Mutex<HashMap<String, i64>>>,
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
    nonce: &'a str,
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

    /// The principal of the session `value`, if it was signed with the
    /// token of a principal of that name and role among `known`, has not
    /// expired and was not ended by a logout.
    pub(crate) fn check<'a>(
        &self,
        value: &str,
        known: impl Iterator<Item = (&'a [u8], &'a Principal)>,
    ) -> Option<Principal> {
        let claims = Self::parse(value)?;
        if claims.expires <= self.now().timestamp() {
            return None;
        }
        if self
            .revoked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(claims.nonce)
        {
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
        found
    }

    /// Ends the session `value` in this process (a logout).
    pub(crate) fn revoke(&self, value: &str) {
        let Some(claims) = Self::parse(value) else {
            return;
        };
        let now = self.now().timestamp();
        let mut revoked = self
            .revoked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        revoked.retain(|_, expires| *expires > now);
        revoked.insert(claims.nonce.to_owned(), claims.expires);
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
        sessions.revoke(&fresh);
        assert_eq!(sessions.check(&fresh, known()), None);
        assert_eq!(sessions.check("garbage", known()), None);
        assert_eq!(sessions.check("1.2.viewer.@@.x", known()), None);
    }
}
