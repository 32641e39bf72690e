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

/// The shortest secret accepted: 24 bytes, Standard Webhooks' minimum.
pub const MIN_SECRET_LEN: usize = 24;

pub(super) type HmacSha256 = Hmac<Sha256>;

/// A symmetric signing secret (HMAC-SHA256), shared by a sender and the
/// endpoint it delivers to.
///
/// Written as `whsec_` followed by the key in base64, and parsed only in
/// that form: the prefix says how the rest is encoded, so that a hex token
/// or a password pasted where a secret belongs (many of which are valid
/// base64 too) is refused at start instead of becoming a key the other
/// side does not have. A key has [`MIN_SECRET_LEN`] bytes or more. Its
/// `Debug` shows no key, and it has no `Display`: [`expose`](Self::expose)
/// is the one way to read it back, to hand it to the other side.
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
    /// [`InvalidSecret::Empty`] for no bytes, [`InvalidSecret::TooShort`]
    /// for fewer than [`MIN_SECRET_LEN`].
    pub fn from_bytes(key: impl Into<Vec<u8>>) -> Result<Self, InvalidSecret> {
        let key = key.into();
        if key.is_empty() {
            return Err(InvalidSecret::Empty);
        }
        if key.len() < MIN_SECRET_LEN {
            return Err(InvalidSecret::TooShort { len: key.len() });
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

    /// Parses `whsec_<base64>`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.is_empty() {
            return Err(InvalidSecret::Empty);
        }
        let encoded = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or(InvalidSecret::NoPrefix)?;
        let key = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| InvalidSecret::NotBase64)?;
        Self::from_bytes(key)
    }
}

/// A secret that cannot be used. The message never holds the secret.
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
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
    /// Does not start with `whsec_`, the form Standard Webhooks writes
    /// secrets in.
    #[error(
        "the webhook secret does not start with `whsec_`: give `whsec_` followed by the key in \
         base64 (generate one with `WebhookSecret::generate().expose()`, or \
         `echo whsec_$(openssl rand -base64 32)`)"
    )]
    NoPrefix,
    /// Fewer than [`MIN_SECRET_LEN`] key bytes: guessable.
    #[error(
        "the webhook secret's key has {len} bytes, Standard Webhooks asks for at least 24: \
         generate one with `WebhookSecret::generate().expose()`, or \
         `echo whsec_$(openssl rand -base64 32)`"
    )]
    TooShort {
        /// The key's length in bytes.
        len: usize,
    },
}

crate::error_debug::debug_with_message!(InvalidSecret {
    Empty,
    NotBase64,
    NoPrefix,
    TooShort
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_reads_back_from_its_whsec_form_and_shows_no_key() {
        let with: WebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
        assert_eq!(with.expose(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert_eq!(format!("{with:?}"), "WebhookSecret(<redacted>)");
    }

    #[test]
    fn a_secret_without_its_prefix_or_under_24_bytes_is_refused_with_how_to_make_one() {
        // Valid base64 of 24 bytes, but not in the whsec_ form.
        assert_eq!(
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse::<WebhookSecret>(),
            Err(InvalidSecret::NoPrefix)
        );
        // `nope` is base64 for 3 bytes.
        assert_eq!(
            "whsec_nope".parse::<WebhookSecret>(),
            Err(InvalidSecret::TooShort { len: 3 })
        );
        assert_eq!(
            WebhookSecret::from_bytes(vec![7; MIN_SECRET_LEN - 1]),
            Err(InvalidSecret::TooShort { len: 23 })
        );
        assert!(WebhookSecret::from_bytes(vec![7; MIN_SECRET_LEN]).is_ok());
        for error in [InvalidSecret::NoPrefix, InvalidSecret::TooShort { len: 3 }] {
            let message = error.to_string();
            assert!(message.contains("WebhookSecret::generate()"), "{message}");
            assert!(message.contains("openssl rand"), "{message}");
        }
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
