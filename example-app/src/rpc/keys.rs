//! The silos' RPC keys: one Standard Webhooks secret (`whsec_…`) per silo,
//! two during a rotation.
//!
//! A silo signs its calls with its own key; the silo it calls verifies them
//! with the caller's key, which names the caller. Control knows every
//! region's key, a region knows Control's (and not the other regions').

use std::collections::BTreeMap;

use base64::Engine;
use outbox_core::sink::webhook::{InvalidSecret, WebhookKeys, WebhookSecret, SECRET_PREFIX};

/// The shortest RPC key a silo starts with: 32 bytes (after base64).
pub const MIN_KEY_LEN: usize = 32;

/// The name of the control silo, as keys and callers name it.
pub const CONTROL: &str = "control";

/// The name under which [`parse_keys`] reads the public API's token key
/// (`crate::api_auth`), shared by every silo.
pub const API_TOKENS: &str = "api";

/// The command-line flag and environment variable of a silo's key.
fn flag(silo: &str) -> (String, String) {
    if silo == API_TOKENS {
        return ("--api-token-key".to_owned(), "API_TOKEN_KEY".to_owned());
    }
    (
        format!("--{silo}-rpc-key"),
        format!("{}_RPC_KEY", silo.to_uppercase()),
    )
}

/// An RPC key that cannot be used. Never holds the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A silo this one calls or is called by has no key.
    #[error(
        "no RPC key for silo {silo:?}: give {} (or {}), `whsec_` followed by 32 random bytes \
         in base64 (`echo whsec_$(openssl rand -base64 32)`)",
        flag(silo).0,
        flag(silo).1
    )]
    Missing {
        /// The silo.
        silo: String,
    },
    /// A key is not `whsec_` and base64.
    #[error("an RPC key of silo {silo:?} ({}) is unusable: {source}", flag(silo).1)]
    Malformed {
        /// The silo.
        silo: String,
        /// Why.
        source: InvalidSecret,
    },
    /// A key is too short to keep other callers out.
    #[error(
        "an RPC key of silo {silo:?} ({}) is {length} bytes long: it must have at least \
         {MIN_KEY_LEN} (generate one: `echo whsec_$(openssl rand -base64 32)`)",
        flag(silo).1
    )]
    Weak {
        /// The silo.
        silo: String,
        /// Its length in bytes.
        length: usize,
    },
}

/// Parses one silo's keys: `whsec_<base64>` (the prefix is required, as
/// for every webhook secret: see `outbox_core::sink::webhook::WebhookSecret`), or
/// two or more separated by commas during a rotation (the silo signs with
/// each, the others accept any). Each must have [`MIN_KEY_LEN`] bytes.
///
/// # Errors
///
/// [`KeyError`], naming the silo and never the key.
pub fn parse_keys(silo: &str, text: &str) -> Result<WebhookKeys, KeyError> {
    let mut keys: Option<WebhookKeys> = None;
    for secret in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|secret| !secret.is_empty())
    {
        let malformed = |source| KeyError::Malformed {
            silo: silo.to_owned(),
            source,
        };
        let encoded = secret
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| malformed(InvalidSecret::NoPrefix))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| malformed(InvalidSecret::NotBase64))?;
        if bytes.len() < MIN_KEY_LEN {
            return Err(KeyError::Weak {
                silo: silo.to_owned(),
                length: bytes.len(),
            });
        }
        let secret = WebhookSecret::from_bytes(bytes).map_err(malformed)?;
        keys = Some(match keys {
            None => WebhookKeys::new(secret),
            Some(keys) => keys.with_key(secret),
        });
    }
    keys.ok_or_else(|| KeyError::Missing {
        silo: silo.to_owned(),
    })
}

/// The keys one silo needs, parsed and checked: its own, to sign, and its
/// peers', to verify (and name) who calls.
#[derive(Clone, Debug)]
pub struct RpcKeys {
    /// This silo's keys.
    pub own: WebhookKeys,
    /// The silos that may call this one, by name, with their keys.
    pub peers: BTreeMap<String, WebhookKeys>,
}

impl RpcKeys {
    /// The keys of silo `me` and of `peers`, from `given` (silo name → its
    /// keys' text, as [`parse_keys`] reads it). Keys of other silos are
    /// not kept.
    ///
    /// # Errors
    ///
    /// [`KeyError`] for a missing, malformed or short key.
    pub fn for_silo<'a>(
        me: &str,
        peers: impl IntoIterator<Item = &'a str>,
        given: &BTreeMap<String, String>,
    ) -> Result<Self, KeyError> {
        let keys_of = |silo: &str| match given.get(silo) {
            Some(text) => parse_keys(silo, text),
            None => Err(KeyError::Missing {
                silo: silo.to_owned(),
            }),
        };
        let own = keys_of(me)?;
        let peers = peers
            .into_iter()
            .map(|peer| Ok((peer.to_owned(), keys_of(peer)?)))
            .collect::<Result<_, KeyError>>()?;
        Ok(Self { own, peers })
    }
}

/// A new random key for `silo`'s RPC, as `whsec_<base64>` (what a silo
/// running all three in one process uses when none is given).
pub fn generate() -> String {
    WebhookSecret::generate().expose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fill: u8, len: usize) -> String {
        WebhookSecret::from_bytes(vec![fill; len]).unwrap().expose()
    }

    fn long_key_without_prefix() -> String {
        key(b'k', MIN_KEY_LEN)[SECRET_PREFIX.len()..].to_owned()
    }

    #[test]
    fn a_short_empty_or_malformed_key_is_refused_without_being_shown() {
        let short = key(b'k', MIN_KEY_LEN - 1);
        assert_eq!(
            parse_keys("us", &short).unwrap_err(),
            KeyError::Weak {
                silo: "us".into(),
                length: 31
            }
        );
        let message = parse_keys("us", &short).unwrap_err().to_string();
        assert!(
            message.contains("US_RPC_KEY") && message.contains("at least 32"),
            "{message}"
        );
        assert!(!message.contains(&short), "{message}");
        assert!(matches!(
            parse_keys("us", "").unwrap_err(),
            KeyError::Missing { .. }
        ));
        assert!(matches!(
            parse_keys("us", "whsec_not base64!").unwrap_err(),
            KeyError::Malformed { .. }
        ));
        // Base64 of 32 bytes, without its prefix.
        let bare = long_key_without_prefix();
        assert_eq!(
            parse_keys("us", &bare).unwrap_err(),
            KeyError::Malformed {
                silo: "us".into(),
                source: InvalidSecret::NoPrefix
            }
        );
        // A rotation: every key must be long enough.
        let long = key(b'l', MIN_KEY_LEN);
        assert!(parse_keys("us", &format!("{long},{short}")).is_err());
        assert_eq!(
            parse_keys("us", &format!("{long}, {}", key(b'm', 64)))
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_silo_gets_its_own_key_and_its_peers_only() {
        let given = BTreeMap::from([
            ("control".to_owned(), key(b'c', 32)),
            ("us".to_owned(), key(b'u', 32)),
            ("de".to_owned(), key(b'd', 32)),
        ]);
        let keys = RpcKeys::for_silo("us", [CONTROL], &given).unwrap();
        assert_eq!(keys.peers.keys().collect::<Vec<_>>(), ["control"]);
        let error = RpcKeys::for_silo("control", ["us", "eu"], &given).unwrap_err();
        assert_eq!(error, KeyError::Missing { silo: "eu".into() });
        assert!(error.to_string().contains("--eu-rpc-key"), "{error}");
    }
}
