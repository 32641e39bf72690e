//! A message's payload as the store returned it: JSON text, parsed only
//! when a receiver asks for it.
//!
//! A drain reads thousands of rows a claim. Parsing every payload into a
//! [`serde_json::Value`] (a tree of maps and strings) and dropping it after
//! a receiver that needed a typed struct, or a sink that needed bytes,
//! is a large part of the drain's own time per message (measured: `cargo
//! bench -p outbox-seaorm --bench drain`), and coalesced rows would be
//! parsed only to be dropped. A [`Payload`] keeps the text
//! (checked to be JSON once, when read) and parses it into what the
//! receiver asks for: [`Payload::deserialize`] (or
//! [`Message::payload_as`](crate::Message::payload_as)) goes from the text
//! straight to the receiver's type, [`Payload::as_str`] hands a sink the
//! bytes it publishes, and [`Payload::to_value`] builds a `Value` for code
//! that wants one.
//!
//! The text is the store's: PostgreSQL's `jsonb` prints its own spacing and
//! key order (`{"a": 1, "b": 2}`), so two payloads are equal
//! ([`PartialEq`]) when they hold the same JSON value, whatever their text.
//!
//! ```
//! use outbox_core::Payload;
//! use serde_json::json;
//!
//! let stored = Payload::from_json(r#"{"name": "acme", "seats": 3}"#.to_owned()).unwrap();
//! #[derive(serde::Deserialize)]
//! struct Org { name: String, seats: u32 }
//! let org: Org = stored.deserialize().unwrap();
//! assert_eq!((org.name.as_str(), org.seats), ("acme", 3));
//! assert_eq!(stored, json!({ "seats": 3, "name": "acme" }));
//! assert!(Payload::from_json("{not json".to_owned()).is_err());
//! ```

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// A message's JSON payload, kept as text until a receiver parses it (see
/// the [module](self)).
#[derive(Clone)]
pub struct Payload(Repr);

#[derive(Clone)]
enum Repr {
    /// Checked to be one JSON value.
    Json(Box<RawValue>),
    /// A stored text that is not JSON ([`Payload::from_stored`]).
    NotJson(Box<str>),
}

impl Payload {
    /// The payload of `text`, checked to be one JSON value (surrounding
    /// whitespace is kept as part of the text).
    ///
    /// # Errors
    ///
    /// When `text` is not JSON.
    pub fn from_json(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(|raw| Self(Repr::Json(raw)))
    }

    /// The payload of a stored text, as a store reads it: JSON when it
    /// parses, and kept as it is otherwise (SQLite's `json` column is text,
    /// so a row written by hand may hold anything). A payload that is not
    /// JSON is still delivered: the receiver's
    /// [`payload_as`](crate::Message::payload_as) then fails with
    /// [`PayloadError::Malformed`](crate::PayloadError::Malformed), which
    /// backs off that row's shard alone (an operator sets the row aside),
    /// instead of failing every claim that reads it.
    pub fn from_stored(text: String) -> Self {
        // Checked without taking the text, so that it is kept when it is not
        // JSON (`RawValue::from_string` drops it with its error).
        if serde_json::from_str::<&RawValue>(&text).is_err() {
            return Self(Repr::NotJson(text.into_boxed_str()));
        }
        match RawValue::from_string(text) {
            Ok(raw) => Self(Repr::Json(raw)),
            // Not reached: the text was checked just above.
            Err(_) => Self(Repr::NotJson(Box::default())),
        }
    }

    /// The payload of `value`, as `serde_json` prints it.
    pub fn from_value(value: &Value) -> Self {
        // A `Value` always serializes (its map keys are strings).
        Self(Repr::Json(
            serde_json::value::to_raw_value(value).unwrap_or_else(|_| null()),
        ))
    }

    /// Whether the payload is JSON: always, except for a stored text that
    /// is not ([`from_stored`](Self::from_stored)).
    pub fn is_json(&self) -> bool {
        matches!(self.0, Repr::Json(_))
    }

    /// The text, as stored: JSON unless [`is_json`](Self::is_json) says not.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Json(raw) => raw.get(),
            Repr::NotJson(text) => text,
        }
    }

    /// The text's bytes, as a sink sends them.
    pub fn as_bytes(&self) -> &[u8] {
        self.as_str().as_bytes()
    }

    /// Parses the payload into `T`, from the text (no intermediate `Value`).
    ///
    /// # Errors
    ///
    /// When the JSON does not have `T`'s shape, or the text is not JSON.
    pub fn deserialize<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.as_str())
    }

    /// The payload as a [`Value`] (parsed anew on each call).
    ///
    /// # Errors
    ///
    /// When the stored text is not JSON.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        self.deserialize()
    }

    /// What a view shows (the admin API, the CLI, test recorders): the
    /// payload's [`Value`], or the stored text as a JSON string when it is
    /// not JSON. Not for a receiver's logic, which should fail on such a
    /// payload ([`deserialize`](Self::deserialize)).
    pub fn to_value_or_text(&self) -> Value {
        self.to_value()
            .unwrap_or_else(|_| Value::String(self.as_str().to_owned()))
    }

    /// The raw JSON value, for code that embeds it in a larger document;
    /// `None` when the stored text is not JSON.
    pub fn as_raw(&self) -> Option<&RawValue> {
        match &self.0 {
            Repr::Json(raw) => Some(raw),
            Repr::NotJson(_) => None,
        }
    }
}

/// A `null` raw value: what [`Payload::from_value`] would fall back to if a
/// `Value` ever failed to serialize.
fn null() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable!("null is JSON"))
}

impl From<Value> for Payload {
    fn from(value: Value) -> Self {
        Self::from_value(&value)
    }
}

impl From<&Value> for Payload {
    fn from(value: &Value) -> Self {
        Self::from_value(value)
    }
}

impl From<Box<RawValue>> for Payload {
    fn from(raw: Box<RawValue>) -> Self {
        Self(Repr::Json(raw))
    }
}

impl PartialEq for Payload {
    /// The same JSON value, whatever the text's spacing and key order; a
    /// stored text that is not JSON equals only the same text.
    fn eq(&self, other: &Self) -> bool {
        if self.as_str() == other.as_str() {
            return true;
        }
        match (self.to_value(), other.to_value()) {
            (Ok(one), Ok(two)) => one == two,
            _ => false,
        }
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        self.to_value().is_ok_and(|value| value == *other)
    }
}

impl PartialEq<Payload> for Value {
    fn eq(&self, other: &Payload) -> bool {
        other == self
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.is_json() {
            "Payload"
        } else {
            "Payload::NotJson"
        };
        f.debug_tuple(name).field(&self.as_str()).finish()
    }
}

impl fmt::Display for Payload {
    /// The text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Payload {
    /// As the JSON it holds (embedded as is by `serde_json`); a stored text
    /// that is not JSON as a string.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::Json(raw) => raw.serialize(serializer),
            Repr::NotJson(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for Payload {
    /// Any one JSON value, kept as its text (with `serde_json`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(|raw| Self(Repr::Json(raw)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_values_compare_equal_whatever_their_text() {
        let postgres = Payload::from_json(r#"{"a": 1, "b": [true, null]}"#.to_owned()).unwrap();
        let written = Payload::from_value(&json!({ "b": [true, null], "a": 1 }));
        assert_eq!(postgres, written);
        assert_eq!(postgres, json!({ "a": 1, "b": [true, null] }));
        assert_ne!(
            postgres,
            Payload::from_value(&json!({ "a": 2, "b": [true, null] }))
        );
    }

    #[test]
    fn parses_into_the_asked_type_and_reports_a_wrong_shape() {
        let payload = Payload::from_value(&json!({ "n": 7 }));
        #[derive(Deserialize)]
        struct N {
            n: u8,
        }
        assert_eq!(payload.deserialize::<N>().unwrap().n, 7);
        assert!(payload.deserialize::<Vec<u8>>().is_err());
        assert_eq!(payload.to_value().unwrap(), json!({ "n": 7 }));
    }

    #[test]
    fn a_stored_text_that_is_not_json_is_kept_and_fails_to_parse() {
        let stored = Payload::from_stored("{not json".to_owned());
        assert!(!stored.is_json());
        assert_eq!(stored.as_str(), "{not json");
        assert!(stored.deserialize::<Value>().is_err());
        assert!(stored.to_value().is_err());
        assert!(stored.as_raw().is_none());
        assert_eq!(stored.to_value_or_text(), json!("{not json"));
        assert_eq!(stored, Payload::from_stored("{not json".to_owned()));
        assert_ne!(stored, json!("{not json"));
        assert_eq!(serde_json::to_string(&stored).unwrap(), r#""{not json""#);
        assert_eq!(format!("{stored:?}"), r#"Payload::NotJson("{not json")"#);
        let json = Payload::from_stored(r#"{"a": 1}"#.to_owned());
        assert!(json.is_json());
        assert_eq!(json, json!({ "a": 1 }));
    }

    #[test]
    fn serializes_as_the_json_it_holds() {
        let payload = Payload::from_json(r#"{"n": 7}"#.to_owned()).unwrap();
        let document = serde_json::to_value(json!({ "payload": payload })).unwrap();
        assert_eq!(document, json!({ "payload": { "n": 7 } }));
        let back: Payload = serde_json::from_str(r#" [1, 2] "#).unwrap();
        assert_eq!(back, json!([1, 2]));
        assert!(Payload::from_json("{".to_owned()).is_err());
        assert_eq!(format!("{payload}"), r#"{"n": 7}"#);
        assert_eq!(format!("{payload:?}"), r#"Payload("{\"n\": 7}")"#);
    }
}
