//! Signing and verifying: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`,
//! one signature per key, space-separated.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use subtle::ConstantTimeEq;

use super::secret::{InvalidSecret, WebhookSecret};

/// Header: the message id, the same on every attempt (`webhook-id`).
pub const ID_HEADER: &str = "webhook-id";
/// Header: when the attempt was signed, in Unix seconds
/// (`webhook-timestamp`).
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Header: the signatures, `v1,<base64>` each, space-separated
/// (`webhook-signature`).
pub const SIGNATURE_HEADER: &str = "webhook-signature";
/// Header: the signatures of the delivery headers (see [the module
/// documentation](super#the-delivery-headers-are-signed-too)), in the
/// form of [`SIGNATURE_HEADER`] (`outbox-signature`).
pub const DELIVERY_SIGNATURE_HEADER: &str = "outbox-signature";

/// How far a signature's timestamp may be from the receiver's clock, by
/// default ([`WebhookKeys::with_tolerance`]): 5 minutes, as Standard
/// Webhooks' own libraries.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The version tag of a symmetric signature.
const VERSION: &str = "v1";

/// What the signature of the delivery headers covers after
/// `{id}.{timestamp}.`: a tag that no JSON text starts with, so that it is
/// never the signature of a body.
const DELIVERY_TAG: &[u8] = b"outbox-delivery-headers-v1\n";

/// The keys of one endpoint: one, or during a rotation two (or more).
///
/// A sender signs with every key ([`sign`](Self::sign)); a receiver accepts
/// a signature made with any of its keys ([`verify`](Self::verify)). To
/// rotate without refusing anything: give the receiver the new key next to
/// the old one, then the sender both, then the sender the new one alone,
/// then the receiver the new one alone, which refuses the old one from then
/// on.
///
/// ```
/// use outbox_core::sink::webhook::{WebhookKeys, WebhookSecret};
///
/// let old = WebhookSecret::generate();
/// let new = WebhookSecret::generate();
/// let sender = WebhookKeys::new(new.clone()).with_key(old.clone());
/// let (id, now, body) = ("msg_1", 1_700_000_000, br#"{"cents":990}"#.as_slice());
/// let signatures = sender.sign(id, now, body);
/// assert_eq!(signatures.split(' ').count(), 2);
///
/// let during = WebhookKeys::new(old.clone());
/// assert!(during.verify_at(id, &now.to_string(), &signatures, body, now).is_ok());
/// let after = WebhookKeys::new(new);
/// let signed_with_old_only = WebhookKeys::new(old).sign(id, now, body);
/// assert!(after.verify_at(id, &now.to_string(), &signed_with_old_only, body, now).is_err());
/// ```
#[derive(Clone, Debug)]
pub struct WebhookKeys {
    keys: Arc<[WebhookSecret]>,
    tolerance: Duration,
}

impl WebhookKeys {
    /// One key, and a tolerance of [`DEFAULT_TOLERANCE`].
    pub fn new(key: WebhookSecret) -> Self {
        Self {
            keys: Arc::from([key]),
            tolerance: DEFAULT_TOLERANCE,
        }
    }

    /// The same keys and one more (a rotation's old or new key).
    pub fn with_key(self, key: WebhookSecret) -> Self {
        let mut keys = self.keys.to_vec();
        keys.push(key);
        Self {
            keys: Arc::from(keys),
            ..self
        }
    }

    /// Keys from their `whsec_` forms, separated by spaces or commas: what
    /// an environment variable holds (`WEBHOOK_SECRETS="whsec_new whsec_old"`).
    ///
    /// # Errors
    ///
    /// [`InvalidSecret`] for the first one that is not a secret, or
    /// [`InvalidSecret::Empty`] for no secret at all.
    pub fn parse(secrets: &str) -> Result<Self, InvalidSecret> {
        let mut keys = secrets
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|secret| !secret.is_empty())
            .map(str::parse::<WebhookSecret>);
        let first = keys.next().ok_or(InvalidSecret::Empty)??;
        keys.try_fold(Self::new(first), |keys, key| Ok(keys.with_key(key?)))
    }

    /// How far a signature's timestamp may be from the receiver's clock,
    /// either way: an older one may be a replay, a newer one comes from a
    /// clock that is off. Default: [`DEFAULT_TOLERANCE`] (5 minutes).
    pub fn with_tolerance(self, tolerance: Duration) -> Self {
        Self { tolerance, ..self }
    }

    /// The tolerance.
    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Always `false`: there is at least one key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The value of [`SIGNATURE_HEADER`] for `body` sent as message `id` at
    /// `timestamp` (Unix seconds): `v1,<base64>` with each key, in the
    /// order the keys were given, separated by spaces.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let timestamp = timestamp.to_string();
        self.signatures(&[id.as_bytes(), b".", timestamp.as_bytes(), b".", body])
    }

    /// The value of [`DELIVERY_SIGNATURE_HEADER`] for the delivery headers
    /// `headers` (name and value, as [`crate::delivery_headers::for_delivery`]
    /// makes them) of message `id` sent at `timestamp`.
    pub fn sign_delivery_headers(
        &self,
        id: &str,
        timestamp: i64,
        headers: &[(&str, &str)],
    ) -> String {
        let timestamp = timestamp.to_string();
        let canonical = canonical_delivery_headers(headers);
        self.signatures(&[
            id.as_bytes(),
            b".",
            timestamp.as_bytes(),
            b".",
            DELIVERY_TAG,
            canonical.as_bytes(),
        ])
    }

    fn signatures(&self, parts: &[&[u8]]) -> String {
        let engine = &base64::engine::general_purpose::STANDARD;
        let mut header = String::new();
        for key in self.keys.iter() {
            if !header.is_empty() {
                header.push(' ');
            }
            header.push_str(VERSION);
            header.push(',');
            engine.encode_string(key.mac(parts), &mut header);
        }
        header
    }

    /// Checks the headers of a request against its `body`, at `now` (Unix
    /// seconds): `id` ([`ID_HEADER`]) holds no `.`, `timestamp`
    /// ([`TIMESTAMP_HEADER`]) is a number of seconds within the
    /// [tolerance](Self::with_tolerance) of `now`, and one of the
    /// `signatures` ([`SIGNATURE_HEADER`]) was made with one of the keys.
    /// Signatures are compared in constant time; other versions than `v1`
    /// (`v1a`, asymmetric) are skipped.
    ///
    /// # Errors
    ///
    /// [`VerifyError`], saying which check failed.
    pub fn verify_at(
        &self,
        id: &str,
        timestamp: &str,
        signatures: &str,
        body: &[u8],
        now: i64,
    ) -> Result<i64, VerifyError> {
        let timestamp = self.check_id_and_time(id, timestamp, now)?;
        let text = timestamp.to_string();
        if self.any_matches(
            &[id.as_bytes(), b".", text.as_bytes(), b".", body],
            signatures,
        ) {
            Ok(timestamp)
        } else {
            Err(VerifyError::NoMatchingSignature)
        }
    }

    /// [`verify_at`](Self::verify_at) at the system clock's now.
    ///
    /// # Errors
    ///
    /// As [`verify_at`](Self::verify_at).
    pub fn verify(
        &self,
        id: &str,
        timestamp: &str,
        signatures: &str,
        body: &[u8],
    ) -> Result<i64, VerifyError> {
        self.verify_at(id, timestamp, signatures, body, unix_now())
    }

    /// Checks the signature of the delivery headers `headers` (name and
    /// value, in any order; missing ones count as empty) of message `id`
    /// sent at `timestamp`, once [`verify_at`](Self::verify_at) has checked
    /// the message.
    ///
    /// # Errors
    ///
    /// [`VerifyError::NoMatchingSignature`] when none of `signatures`
    /// ([`DELIVERY_SIGNATURE_HEADER`]) was made with one of the keys.
    pub fn verify_delivery_headers(
        &self,
        id: &str,
        timestamp: i64,
        headers: &[(&str, &str)],
        signatures: &str,
    ) -> Result<(), VerifyError> {
        let text = timestamp.to_string();
        let canonical = canonical_delivery_headers(headers);
        let parts: [&[u8]; 6] = [
            id.as_bytes(),
            b".",
            text.as_bytes(),
            b".",
            DELIVERY_TAG,
            canonical.as_bytes(),
        ];
        if self.any_matches(&parts, signatures) {
            Ok(())
        } else {
            Err(VerifyError::NoMatchingSignature)
        }
    }

    fn check_id_and_time(&self, id: &str, timestamp: &str, now: i64) -> Result<i64, VerifyError> {
        if id.is_empty() || id.contains('.') {
            return Err(VerifyError::MalformedId);
        }
        // Digits only: no sign, no fraction, no spaces.
        if timestamp.is_empty() || !timestamp.bytes().all(|b| b.is_ascii_digit()) {
            return Err(VerifyError::MalformedTimestamp);
        }
        let timestamp: i64 = timestamp
            .parse()
            .map_err(|_| VerifyError::MalformedTimestamp)?;
        let tolerance = i64::try_from(self.tolerance.as_secs()).unwrap_or(i64::MAX);
        if now.saturating_sub(timestamp) > tolerance {
            return Err(VerifyError::TooOld {
                age: Duration::from_secs(now.abs_diff(timestamp)),
                tolerance: self.tolerance,
            });
        }
        if timestamp.saturating_sub(now) > tolerance {
            return Err(VerifyError::InFuture {
                ahead: Duration::from_secs(now.abs_diff(timestamp)),
                tolerance: self.tolerance,
            });
        }
        Ok(timestamp)
    }

    /// Whether one of `signatures` is the MAC of `parts` with one of the
    /// keys. Every pair is compared, in constant time each.
    fn any_matches(&self, parts: &[&[u8]], signatures: &str) -> bool {
        let engine = &base64::engine::general_purpose::STANDARD;
        let expected: Vec<[u8; 32]> = self.keys.iter().map(|key| key.mac(parts)).collect();
        let mut matched = subtle::Choice::from(0);
        for signature in signatures.split(' ') {
            let Some((VERSION, encoded)) = signature.split_once(',') else {
                continue;
            };
            let Ok(given) = engine.decode(encoded) else {
                continue;
            };
            for expected in &expected {
                // `ct_eq` on slices of different lengths is false.
                matched |= expected.as_slice().ct_eq(&given);
            }
        }
        bool::from(matched)
    }
}

/// The delivery headers as signed: `name:value` lines in the order of
/// [`crate::delivery_headers::ALL`], a missing one with an empty value.
fn canonical_delivery_headers(headers: &[(&str, &str)]) -> String {
    let mut canonical = String::new();
    for name in crate::delivery_headers::ALL {
        let value = headers
            .iter()
            .find(|(given, _)| given.eq_ignore_ascii_case(name))
            .map_or("", |(_, value)| *value);
        canonical.push_str(name);
        canonical.push(':');
        canonical.push_str(value);
        canonical.push('\n');
    }
    canonical
}

/// The system clock in Unix seconds.
pub(super) fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Why a request's signature was not accepted.
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The message id is empty or holds a `.` (which would make what is
    /// signed ambiguous).
    #[error("the webhook id is empty or contains `.`")]
    MalformedId,
    /// The timestamp is not a number of seconds (digits only).
    #[error("the webhook timestamp is not a Unix time in seconds (digits only)")]
    MalformedTimestamp,
    /// The timestamp is older than the tolerance: a replay, or a request
    /// held up for that long.
    #[error(
        "the webhook timestamp is {age:?} old, more than the {tolerance:?} allowed: a replay, or \
         the sender's clock is behind"
    )]
    TooOld {
        /// How old.
        age: Duration,
        /// The tolerance.
        tolerance: Duration,
    },
    /// The timestamp is ahead of the receiver's clock by more than the
    /// tolerance.
    #[error(
        "the webhook timestamp is {ahead:?} in the future, more than the {tolerance:?} allowed: \
         the sender's clock is ahead"
    )]
    InFuture {
        /// How far ahead.
        ahead: Duration,
        /// The tolerance.
        tolerance: Duration,
    },
    /// No signature matches: the body or a signed header was changed, or it
    /// was signed with a key this endpoint does not have.
    #[error(
        "no webhook signature matches: the request was changed on the way, or signed with a key \
         this endpoint does not have"
    )]
    NoMatchingSignature,
}

crate::error_debug::debug_with_message!(VerifyError {
    MalformedId,
    MalformedTimestamp,
    TooOld,
    InFuture,
    NoMatchingSignature
});

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(secret: &str) -> WebhookKeys {
        WebhookKeys::new(secret.parse().unwrap())
    }

    /// The vector of the Standard Webhooks libraries' tests (Python,
    /// JavaScript, Go, Ruby, PHP, C#: `test_sign_function` and its
    /// translations, in `standard-webhooks/standard-webhooks`).
    #[test]
    fn signs_the_specifications_vector() {
        let signed = keys("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    /// The vector of the Rust library's tests (`test_sign`, in
    /// `libraries/rust/src/lib.rs` of the same repository).
    #[test]
    fn signs_the_rust_librarys_vector() {
        let signed = keys("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").sign(
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            br#"{"email":"test@example.com","username":"test_user"}"#,
        );
        assert_eq!(signed, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
    }

    #[test]
    fn verifies_the_specifications_vector_and_nothing_changed() {
        let keys = keys("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let (id, at, body) = (
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            "1614265330",
            br#"{"test": 2432232314}"#.as_slice(),
        );
        let signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let now = 1_614_265_330;
        assert_eq!(
            keys.verify_at(id, at, signature, body, now),
            Ok(1_614_265_330)
        );
        // Another body, id or time; a signature with a byte flipped, cut,
        // or under another version; nothing: refused.
        let refused = |id: &str, at: &str, signature: &str, body: &[u8]| {
            keys.verify_at(id, at, signature, body, now)
        };
        assert_eq!(
            refused(id, at, signature, br#"{"test": 2432232315}"#),
            Err(VerifyError::NoMatchingSignature)
        );
        assert_eq!(
            refused("msg_p5jXN8AQM9LWM0D4loKWxJeK", at, signature, body),
            Err(VerifyError::NoMatchingSignature)
        );
        assert_eq!(
            refused(id, "1614265331", signature, body),
            Err(VerifyError::NoMatchingSignature)
        );
        for bad in [
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=",
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1O",
            "v1,",
            "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "",
        ] {
            assert_eq!(
                refused(id, at, bad, body),
                Err(VerifyError::NoMatchingSignature),
                "{bad}"
            );
        }
        // One good signature among others is enough.
        let several = format!("v2,abc v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= {signature}");
        assert!(keys.verify_at(id, at, &several, body, now).is_ok());
    }

    #[test]
    fn a_timestamp_outside_the_tolerance_or_malformed_is_refused() {
        let keys = keys("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let body = b"{}";
        let at = 1_700_000_000;
        let signature = keys.sign("msg_1", at, body);
        let check = |now: i64| keys.verify_at("msg_1", &at.to_string(), &signature, body, now);
        assert!(check(at + 300).is_ok());
        assert!(check(at - 300).is_ok());
        assert!(matches!(check(at + 301), Err(VerifyError::TooOld { .. })));
        assert!(matches!(check(at - 301), Err(VerifyError::InFuture { .. })));
        let strict = keys.clone().with_tolerance(Duration::from_secs(10));
        assert!(matches!(
            strict.verify_at("msg_1", &at.to_string(), &signature, body, at + 11),
            Err(VerifyError::TooOld { .. })
        ));
        for malformed in [
            "",
            "+1700000000",
            "-5",
            "1700000000.0",
            " 1700000000",
            "soon",
        ] {
            assert_eq!(
                keys.verify_at("msg_1", malformed, &signature, body, at),
                Err(VerifyError::MalformedTimestamp),
                "{malformed:?}"
            );
        }
        for id in ["", "msg.1"] {
            assert_eq!(
                keys.verify_at(id, &at.to_string(), &signature, body, at),
                Err(VerifyError::MalformedId)
            );
        }
    }

    #[test]
    fn every_key_signs_and_any_key_verifies() {
        let old: WebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
        let new: WebhookSecret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".parse().unwrap();
        let both = WebhookKeys::new(new.clone()).with_key(old.clone());
        let signature = both.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        let (first, second) = signature.split_once(' ').unwrap();
        assert_eq!(second, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert_eq!(
            first,
            WebhookKeys::new(new.clone()).sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            )
        );
        let verify = |keys: &WebhookKeys, signature: &str| {
            keys.verify_at(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                "1614265330",
                signature,
                br#"{"test": 2432232314}"#,
                1_614_265_330,
            )
        };
        assert!(verify(&WebhookKeys::new(old.clone()), &signature).is_ok());
        assert!(verify(&WebhookKeys::new(new.clone()), &signature).is_ok());
        assert!(verify(&WebhookKeys::new(new.clone()), second).is_err());
        assert!(verify(&both, second).is_ok());
        let other: WebhookSecret = "whsec_c2lsbyBrZXkgb2YgYW5vdGhlciByZWdpb24="
            .parse()
            .unwrap();
        assert!(verify(&WebhookKeys::new(other), &signature).is_err());
    }

    #[test]
    fn keys_parse_from_one_variable() {
        let keys = WebhookKeys::parse(
            " whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD ",
        )
        .unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(WebhookKeys::parse(" ").unwrap_err(), InvalidSecret::Empty);
        assert_eq!(
            WebhookKeys::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw whsec_!").unwrap_err(),
            InvalidSecret::NotBase64
        );
        // What a mistyped variable holds: refused, not a 3-byte key.
        assert_eq!(
            WebhookKeys::parse("nope").unwrap_err(),
            InvalidSecret::NoPrefix
        );
        assert_eq!(
            WebhookKeys::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw whsec_nope").unwrap_err(),
            InvalidSecret::TooShort { len: 3 }
        );
    }

    #[test]
    fn the_delivery_headers_signature_covers_each_header() {
        let keys = keys("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let headers = [
            ("outbox-message-id", "0190f3a4-0000-7000-8000-000000000001"),
            ("outbox-fence", "12"),
            ("outbox-shard", "region:0/1"),
            ("outbox-category", "OrgUpdate"),
            ("outbox-sender", "control"),
        ];
        let signature = keys.sign_delivery_headers("msg_1", 1_700_000_000, &headers);
        assert!(keys
            .verify_delivery_headers("msg_1", 1_700_000_000, &headers, &signature)
            .is_ok());
        // In another order, and names in another case: the same.
        let mut reordered = headers;
        reordered.reverse();
        reordered[0].0 = "Outbox-Sender";
        assert!(keys
            .verify_delivery_headers("msg_1", 1_700_000_000, &reordered, &signature)
            .is_ok());
        for i in 0..headers.len() {
            let mut changed = headers;
            changed[i].1 = "13";
            assert!(
                keys.verify_delivery_headers("msg_1", 1_700_000_000, &changed, &signature)
                    .is_err(),
                "{}",
                headers[i].0
            );
            let removed: Vec<_> = headers
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, header)| *header)
                .collect();
            assert!(keys
                .verify_delivery_headers("msg_1", 1_700_000_000, &removed, &signature)
                .is_err());
        }
        assert!(keys
            .verify_delivery_headers("msg_2", 1_700_000_000, &headers, &signature)
            .is_err());
        // It is never a body's signature, nor the other way round.
        let body_signature = keys.sign("msg_1", 1_700_000_000, b"{}");
        assert!(keys
            .verify_delivery_headers("msg_1", 1_700_000_000, &headers, &body_signature)
            .is_err());
    }
}
