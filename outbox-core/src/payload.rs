//! A message's payload as the store returned it: JSON text, parsed only
//! when a receiver asks for it.
//!
//! A drain reads thousands of rows a claim. Parsing every payload into a
//! [`serde_json::Value`] (a tree of maps and strings) and dropping it after
//! a receiver that needed a typed struct, or a sink that needed bytes,
//! cost the drain about a fifth of its own time per message; coalesced
//! rows were parsed only to be dropped. A [`Payload`] keeps the text
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
pub struct Payload(Box<RawValue>);

impl Payload {
    /// The payload of `text`, checked to be one JSON value (surrounding
    /// whitespace is kept as part of the text).
    ///
    /// # Errors
    ///
    /// When `text` is not JSON.
    pub fn from_json(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(Self)
    }

    /// The payload of `value`, as `serde_json` prints it.
    pub fn from_value(value: &Value) -> Self {
        // A `Value` always serializes (its map keys are strings).
        Self(serde_json::value::to_raw_value(value).unwrap_or_else(|_| null()))
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The JSON text's bytes, as a sink publishes them.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.get().as_bytes()
    }

    /// Parses the payload into `T`, from the text (no intermediate `Value`).
    ///
    /// # Errors
    ///
    /// When the JSON does not have `T`'s shape.
    pub fn deserialize<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The payload as a [`Value`] (parsed anew on each call).
    pub fn to_value(&self) -> Value {
        // Checked to be JSON when built: parsing it again does not fail.
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }

    /// The raw JSON value, for code that embeds it in a larger document.
    pub fn as_raw(&self) -> &RawValue {
        &self.0
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
        Self(raw)
    }
}

impl From<Payload> for Value {
    fn from(payload: Payload) -> Self {
        payload.to_value()
    }
}

impl PartialEq for Payload {
    /// The same JSON value, whatever the text's spacing and key order.
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str() || self.to_value() == other.to_value()
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        self.to_value() == *other
    }
}

impl PartialEq<Payload> for Value {
    fn eq(&self, other: &Payload) -> bool {
        *self == other.to_value()
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Payload").field(&self.as_str()).finish()
    }
}

impl fmt::Display for Payload {
    /// The JSON text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Payload {
    /// As the JSON it holds (embedded as is by `serde_json`).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Payload {
    /// Any one JSON value, kept as its text (with `serde_json`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Self)
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
        assert_eq!(payload.to_value(), json!({ "n": 7 }));
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
