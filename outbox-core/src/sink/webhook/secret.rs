//! Signing secrets: `whsec_` and base64, as Standard Webhooks serialises
//! them.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The prefix of a serialised secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// The length of a secret made by [`WebhookSecret::generate`]: 32 bytes
/// (Standard Webhooks asks for 24 to 64).
pub const GENERATED_SECRET_LEN: usize = 32;

pub(super) type HmacSha256 = Hmac<Sha256>;

/// A symmetric signing secret (HMAC-SHA256), shared by a sender and the
/// endpoint it delivers to.
///
/// Written as `whsec_` followed by the key in base64 (the prefix is
/// optional when parsing). Its `Debug` shows no key, and it has no
/// `Display`: [`expose`](Self::expose) is the one way to read it back, to
/// hand it to the other side.
#[derive(Clone)]
pub struct WebhookSecret {
    key: Box<[u8]>,
    /// The HMAC keyed with it, cloned for each signature.
    mac: HmacSha256,
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

impl PartialEq for WebhookSecret {
    fn eq(&self, other: &Self) -> bool {
        use subtle::ConstantTimeEq;
        bool::from(self.key.ct_eq(&other.key))
    }
}

impl Eq for WebhookSecret {}

impl WebhookSecret {
    /// A secret of these bytes.
    ///
    /// # Errors
    ///
    /// [`InvalidSecret::Empty`] for no bytes.
    pub fn from_bytes(key: impl Into<Vec<u8>>) -> Result<Self, InvalidSecret> {
        let key = key.into();
        if key.is_empty() {
            return Err(InvalidSecret::Empty);
        }
        // HMAC takes keys of any length: this cannot fail.
        let mac = HmacSha256::new_from_slice(&key).map_err(|_| InvalidSecret::Empty)?;
        Ok(Self {
            key: key.into_boxed_slice(),
            mac,
        })
    }

    /// A new random secret of [`GENERATED_SECRET_LEN`] bytes, from `rand`'s
    /// thread generator (a cryptographically secure generator seeded by the
    /// operating system).
    pub fn generate() -> Self {
        let key: [u8; GENERATED_SECRET_LEN] = rand::random();
        Self {
            key: Box::new(key),
            // HMAC takes keys of any length.
            mac: match HmacSha256::new_from_slice(&key) {
                Ok(mac) => mac,
                Err(_) => unreachable!("HMAC-SHA256 takes a key of any length"),
            },
        }
    }

    /// The secret as `whsec_<base64>`, to configure the other side with.
    /// Keep it out of logs.
    pub fn expose(&self) -> String {
        format!(
            "{SECRET_PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(&self.key)
        )
    }

    /// HMAC-SHA256 of `parts`, one after the other.
    pub(super) fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }
}

impl FromStr for WebhookSecret {
    type Err = InvalidSecret;

    /// Parses `whsec_<base64>`, or the base64 alone.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let encoded = text.strip_prefix(SECRET_PREFIX).unwrap_or(text);
        let key = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| InvalidSecret::NotBase64)?;
        Self::from_bytes(key)
    }
}

/// A secret that cannot be used. The message never holds the secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidSecret {
    /// No key bytes (`""` or `whsec_` alone).
    #[error(
        "the webhook secret is empty: give `whsec_` followed by the key in base64 (e.g. one \
         made by `WebhookSecret::generate().expose()`)"
    )]
    Empty,
    /// What follows `whsec_` is not standard base64 (with padding).
    #[error(
        "the webhook secret is not `whsec_` followed by standard base64 (with `=` padding); \
         check that it was copied whole"
    )]
    NotBase64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_reads_with_or_without_its_prefix_and_shows_no_key() {
        let with: WebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
        let without: WebhookSecret = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
        assert_eq!(with, without);
        assert_eq!(with.expose(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert_eq!(format!("{with:?}"), "WebhookSecret(<redacted>)");
    }

    #[test]
    fn empty_and_malformed_secrets_are_refused() {
        assert_eq!("".parse::<WebhookSecret>(), Err(InvalidSecret::Empty));
        assert_eq!("whsec_".parse::<WebhookSecret>(), Err(InvalidSecret::Empty));
        assert_eq!(
            "whsec_not base64!".parse::<WebhookSecret>(),
            Err(InvalidSecret::NotBase64)
        );
        assert_eq!(
            WebhookSecret::from_bytes(Vec::new()),
            Err(InvalidSecret::Empty)
        );
    }

    #[test]
    fn generated_secrets_differ_and_read_back() {
        let a = WebhookSecret::generate();
        let b = WebhookSecret::generate();
        assert_ne!(a, b);
        assert_eq!(a.expose().parse::<WebhookSecret>().unwrap(), a);
        assert_eq!(a.key.len(), GENERATED_SECRET_LEN);
    }
}
