//! [CloudEvents 1.0](https://github.com/cloudevents/spec) from the sinks
//! (feature `webhook` or `nats`): each message described as an event that
//! any CloudEvents SDK reads, opt-in per sink.
//!
//! [`CloudEvents`] names the event source (the silo or service) and, if
//! you like, a prefix for the event types; hand it to a sink with
//! `WebhookSink::with_cloudevents` or `JetStreamSink::with_cloudevents`.
//! A sink without it sends what it always sent.
//!
//! ```
//! # outbox_core::registry! { ShopScope = 0 { PriceChanged = 1 } }
//! use outbox_core::sink::cloudevents::{CloudEvents, CloudEventsError};
//! use outbox_core::sink::webhook::{WebhookKeys, WebhookSecret, WebhookSink};
//! use outbox_core::{Drainer, HandlerError, MemoryStore, Message, Receivers, ShardKey};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let events = CloudEvents::new("https://shop.example.com")?.with_type_prefix("com.example.")?;
//! assert_eq!(events.event_type(OutboxCategory::PriceChanged, Some(2)), "com.example.PriceChanged.v2");
//! assert_eq!(events.event_type(OutboxCategory::PriceChanged, None), "com.example.PriceChanged");
//! // A source is required: refused here, not at the first delivery.
//! assert!(matches!(CloudEvents::new(""), Err(CloudEventsError::EmptySource)));
//!
//! // Binary mode (the default): the body is the payload, the attributes `ce-*` headers.
//! let keys = WebhookKeys::new(WebhookSecret::generate());
//! let sink = WebhookSink::new("https://hooks.example.com/prices", keys)?.with_cloudevents(events);
//! let store = MemoryStore::new();
//! let shop = ShardKey::region(OutboxScope::ShopScope, 42);
//! let id = store.write(&shop, OutboxCategory::PriceChanged, 7, Some(serde_json::json!({ "cents": 990 })));
//! let (sent, mut requests) = tokio::sync::mpsc::unbounded_channel();
//! let receivers = Receivers::new().on(OutboxCategory::PriceChanged, move |message: Message<OutboxCategory>| {
//!     // What the sink would POST for this message.
//!     let request = sink.signed_request(&message, chrono::Utc::now().timestamp());
//!     let _ = sent.send((message.message_id, request));
//!     async { Ok::<_, HandlerError>(()) }
//! });
//! Drainer::new(store, receivers).drain_shard(&shop, Some(id)).await?;
//! let (message_id, request) = requests.recv().await.ok_or("not delivered")?;
//! let header = |name: &str| request.headers.get(name).and_then(|value| value.to_str().ok());
//! assert_eq!(header("ce-specversion"), Some("1.0"));
//! assert_eq!(header("ce-id"), Some(message_id.to_string().as_str()));
//! assert_eq!(header("ce-source"), Some("https://shop.example.com"));
//! assert_eq!(header("ce-type"), Some("com.example.PriceChanged")); // untyped: no version
//! assert_eq!(header("ce-subject"), Some("7"));
//! assert!(header("ce-time").is_some()); // when the row was written
//! assert_eq!(header("content-type"), Some("application/json"));
//! assert_eq!(request.body, br#"{"cents":990}"#); // the payload, as without CloudEvents
//! assert!(header("webhook-signature").is_some()); // signed as ever
//! # Ok(()) }
//! ```
//!
//! # Attributes
//!
//! | attribute | value |
//! |---|---|
//! | `specversion` | `1.0` |
//! | `id` | the message id ([`Message::message_id`](crate::Message::message_id)), a UUID v7, the same on every attempt: with `source`, the event's identity, by which a consumer drops a redelivery |
//! | `source` | the URI-reference given to [`CloudEvents::new`]: the silo or service that wrote the message |
//! | `type` | the type prefix, the category's name, and `.v{version}` when the message has a [payload version](crate::Message::payload_version) (a typed category, see [`crate::registry::contract`]): `com.example.PriceChanged.v2`, after the prefix the name [`crate::asyncapi`] gives the message; an untyped message (a row of a typed category written before it was typed too) has no suffix: `com.example.PriceChanged` |
//! | `subject` | the object identifier, in decimal: `7` |
//! | `time` | when the message was written ([`Message::date_added`](crate::Message::date_added)), RFC 3339 in UTC; for a coalesced group, when its *oldest* row was written (the `id` is the newest row's) |
//! | `datacontenttype` | `application/json`, when the message has a payload |
//! | `data` | the payload's JSON, as stored; none without a payload |
//!
//! # Content modes
//!
//! - **Binary** ([`ContentMode::Binary`], the default): the body is the
//!   payload's JSON text, empty without a payload (a webhook then sends no
//!   `content-type`, where without CloudEvents it sends `null`); the
//!   attributes go in `ce-*` headers ([`Attributes::headers`]).
//!   `datacontenttype` is the HTTP `content-type` of a webhook and the
//!   `ce-datacontenttype` header of a NATS message, as each protocol
//!   binding says.
//! - **Structured** ([`CloudEvents::structured`]): the body is the event in
//!   the JSON event format ([`Attributes::structured`]), the payload
//!   verbatim as its `data`, with `content-type: application/cloudevents+json`
//!   (`Content-Type` on NATS).
//!
//! Header values are percent-encoded as the HTTP and NATS bindings say
//! (space, `"`, `%` and anything outside printable ASCII): only a source
//! with `%` or a type prefix with such characters is changed by it.
//!
//! The sinks keep their own headers (`webhook-*`, `outbox-*`,
//! `Nats-Msg-Id`, `Outbox-*`, `traceparent`): a webhook's Standard
//! Webhooks signature covers the body as sent, the structured event
//! included.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::message::Message;
use crate::payload::Payload;
use crate::registry::Category;

/// The CloudEvents version the sinks speak: `1.0` (`specversion`).
pub const SPEC_VERSION: &str = "1.0";
/// The `datacontenttype` of a message with a payload: `application/json`.
pub const DATA_CONTENT_TYPE: &str = "application/json";
/// The content type of a structured event: `application/cloudevents+json`.
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";

/// Header (binary mode): `specversion`.
pub const SPECVERSION_HEADER: &str = "ce-specversion";
/// Header (binary mode): `id`.
pub const ID_HEADER: &str = "ce-id";
/// Header (binary mode): `source`.
pub const SOURCE_HEADER: &str = "ce-source";
/// Header (binary mode): `type`.
pub const TYPE_HEADER: &str = "ce-type";
/// Header (binary mode): `subject`.
pub const SUBJECT_HEADER: &str = "ce-subject";
/// Header (binary mode): `time`.
pub const TIME_HEADER: &str = "ce-time";
/// Header (binary mode, NATS only): `datacontenttype`; over HTTP it is the
/// `content-type`.
pub const DATACONTENTTYPE_HEADER: &str = "ce-datacontenttype";

/// How a sink carries an event: see [the module documentation](self#content-modes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ContentMode {
    /// The payload as the body, the attributes in `ce-*` headers.
    #[default]
    Binary,
    /// The whole event, payload included, as a JSON body.
    Structured,
}

/// The CloudEvents a sink sends: the source, a type prefix and the content
/// mode (see [the module documentation](self)).
///
/// Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CloudEvents {
    source: Arc<str>,
    type_prefix: Arc<str>,
    mode: ContentMode,
}

impl CloudEvents {
    /// Events from `source`, a URI-reference naming the silo or service
    /// that writes the messages (`https://shop.example.com`, `/region/us`,
    /// `urn:example:shop`), without a type prefix, in binary mode.
    ///
    /// # Errors
    ///
    /// [`CloudEventsError::EmptySource`] for an empty source, and
    /// [`CloudEventsError::InvalidSource`] for one a URI-reference cannot
    /// be (whitespace, characters outside ASCII, `%` not followed by two
    /// hexadecimal digits, characters RFC 3986 does not allow).
    pub fn new(source: impl Into<String>) -> Result<Self, CloudEventsError> {
        let source = source.into();
        check_source(&source)?;
        Ok(Self {
            source: Arc::from(source),
            type_prefix: Arc::from(""),
            mode: ContentMode::Binary,
        })
    }

    /// The same events with `prefix` before each type, as written: with
    /// `com.example.`, `PriceChanged` becomes `com.example.PriceChanged`.
    /// Default: none.
    ///
    /// # Errors
    ///
    /// [`CloudEventsError::InvalidTypePrefix`] when the prefix holds
    /// whitespace or a control character.
    pub fn with_type_prefix(self, prefix: impl Into<String>) -> Result<Self, CloudEventsError> {
        let prefix = prefix.into();
        if let Some(reason) = prefix.chars().find_map(|c| {
            if c.is_control() {
                Some("a control character")
            } else if c.is_whitespace() {
                Some("whitespace")
            } else {
                None
            }
        }) {
            return Err(CloudEventsError::InvalidTypePrefix { prefix, reason });
        }
        Ok(Self {
            type_prefix: Arc::from(prefix),
            ..self
        })
    }

    /// The same events in structured mode: the body is the event as JSON.
    pub fn structured(self) -> Self {
        Self {
            mode: ContentMode::Structured,
            ..self
        }
    }

    /// The same events in binary mode (the default): the body is the
    /// payload, the attributes are headers.
    pub fn binary(self) -> Self {
        Self {
            mode: ContentMode::Binary,
            ..self
        }
    }

    /// The source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The type prefix (empty without one).
    pub fn type_prefix(&self) -> &str {
        &self.type_prefix
    }

    /// The content mode.
    pub fn mode(&self) -> ContentMode {
        self.mode
    }

    /// The `type` of a message of `category` with payload version
    /// `version`: the prefix, the category's name, then `.v{version}` when
    /// there is a version. What a consumer filters on.
    pub fn event_type<C: Category>(&self, category: C, version: Option<u32>) -> String {
        let mut event_type = format!("{}{}", self.type_prefix, category.name());
        if let Some(version) = version {
            // Writing to a `String` cannot fail.
            let _ = write!(event_type, ".v{version}");
        }
        event_type
    }

    /// The attributes of `message`'s event.
    pub fn attributes<C: Category>(&self, message: &Message<C>) -> Attributes {
        Attributes {
            id: message.message_id,
            source: self.source.clone(),
            event_type: self.event_type(message.category, message.payload_version),
            subject: message.object_identifier.to_string(),
            time: message.date_added,
            datacontenttype: message.payload.as_ref().map(|_| DATA_CONTENT_TYPE),
        }
    }
}

/// The attributes of one message's event (see [the module
/// documentation](self#attributes)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attributes {
    /// `id`: the message id.
    pub id: Uuid,
    /// `source`.
    pub source: Arc<str>,
    /// `type`.
    pub event_type: String,
    /// `subject`: the object identifier.
    pub subject: String,
    /// `time`: when the message (for a coalesced group, its oldest row) was
    /// written.
    pub time: DateTime<Utc>,
    /// `datacontenttype`: `application/json` when there is a payload.
    pub datacontenttype: Option<&'static str>,
}

impl Attributes {
    /// `time` as sent: RFC 3339 in UTC, with as many fractional digits as
    /// it needs.
    pub fn time_text(&self) -> String {
        self.time.to_rfc3339_opts(SecondsFormat::AutoSi, true)
    }

    /// The binary mode's headers, values percent-encoded as the protocol
    /// bindings say: `ce-specversion`, `ce-id`, `ce-source`, `ce-type`,
    /// `ce-subject`, `ce-time`. Not `datacontenttype`, which each binding
    /// carries its own way (see [the module documentation](self#content-modes)).
    pub fn headers(&self) -> [(&'static str, String); 6] {
        [
            (SPECVERSION_HEADER, SPEC_VERSION.to_owned()),
            (ID_HEADER, self.id.to_string()),
            (SOURCE_HEADER, header_value(&self.source).into_owned()),
            (TYPE_HEADER, header_value(&self.event_type).into_owned()),
            (SUBJECT_HEADER, self.subject.clone()),
            (TIME_HEADER, self.time_text()),
        ]
    }

    /// The structured mode's body: the event in the JSON event format, with
    /// `payload` verbatim as its `data` (none without a payload; a stored
    /// text that is not JSON, which the sinks refuse before they get here,
    /// as a JSON string).
    pub fn structured(&self, payload: Option<&Payload>) -> Vec<u8> {
        let time = self.time_text();
        let event = Structured {
            specversion: SPEC_VERSION,
            id: self.id,
            source: &self.source,
            event_type: &self.event_type,
            subject: &self.subject,
            time: &time,
            datacontenttype: self.datacontenttype,
            data: payload.map(|payload| match payload.as_raw() {
                Some(raw) => Data::Json(raw),
                None => Data::Text(payload.as_str()),
            }),
        };
        // Strings, a UUID and raw JSON always serialize.
        serde_json::to_vec(&event).unwrap_or_default()
    }
}

/// The JSON event format, attributes in the order the specification lists
/// them.
#[derive(Serialize)]
struct Structured<'a> {
    specversion: &'static str,
    id: Uuid,
    source: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    subject: &'a str,
    time: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    datacontenttype: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Data<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Data<'a> {
    Json(&'a RawValue),
    Text(&'a str),
}

/// A [`CloudEvents`] that cannot be made.
#[derive(thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloudEventsError {
    /// The source is empty; CloudEvents requires one.
    #[error(
        "the CloudEvents source is empty: give a URI-reference naming the silo or service that \
         writes the messages (`https://shop.example.com`, `/region/us`, `urn:example:shop`)"
    )]
    EmptySource,
    /// The source cannot be a URI-reference (RFC 3986).
    #[error(
        "the CloudEvents source `{value}` is not a URI-reference: {reason}; percent-encode \
         other characters (RFC 3986), e.g. `/shops/caf%C3%A9` for `/shops/café`"
    )]
    InvalidSource {
        /// The source given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The type prefix holds a character an event type should not.
    #[error(
        "the CloudEvents type prefix `{}` holds {reason}: use a reverse-DNS name such as \
         `com.example.`",
        prefix.escape_debug()
    )]
    InvalidTypePrefix {
        /// The prefix given.
        prefix: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

crate::error_debug::debug_with_message!(CloudEventsError {
    EmptySource,
    InvalidSource,
    InvalidTypePrefix
});

/// Checks that `source` is a non-empty URI-reference: only the characters
/// RFC 3986 allows, `%` only before two hexadecimal digits.
fn check_source(source: &str) -> Result<(), CloudEventsError> {
    if source.is_empty() {
        return Err(CloudEventsError::EmptySource);
    }
    let invalid = |reason| CloudEventsError::InvalidSource {
        value: source.escape_debug().to_string(),
        reason,
    };
    let bytes = source.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let hex = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(at + 1) && hex(at + 2)) {
                    return Err(invalid("`%` not followed by two hexadecimal digits"));
                }
                at += 3;
                continue;
            }
            b if b.is_ascii_alphanumeric() => {}
            // Unreserved, then reserved (gen-delims and sub-delims).
            b'-' | b'.' | b'_' | b'~' | b':' | b'/' | b'?' | b'#' | b'[' | b']' | b'@' | b'!'
            | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => {}
            b if b.is_ascii_whitespace() => return Err(invalid("it contains whitespace")),
            b if b.is_ascii_control() => return Err(invalid("it contains a control character")),
            b if !b.is_ascii() => return Err(invalid("it contains a character outside ASCII")),
            _ => return Err(invalid("it contains a character RFC 3986 does not allow")),
        }
        at += 1;
    }
    Ok(())
}

/// `value` as a header value of the HTTP and NATS bindings: space, `"`,
/// `%` and every byte outside printable ASCII percent-encoded (upper-case
/// hexadecimal digits).
fn header_value(value: &str) -> Cow<'_, str> {
    let plain = |b: u8| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%';
    if value.bytes().all(plain) {
        return Cow::Borrowed(value);
    }
    let mut encoded = String::with_capacity(value.len() + 8);
    for b in value.bytes() {
        if plain(b) {
            encoded.push(char::from(b));
        } else {
            // Writing to a `String` cannot fail.
            let _ = write!(encoded, "%{b:02X}");
        }
    }
    Cow::Owned(encoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FencingToken, ShardKey};

    crate::registry! {
        ShopScope = 0 {
            PriceChanged = 1,
        }
    }

    fn message(payload: Option<&str>, version: Option<u32>) -> Message<OutboxCategory> {
        let added = DateTime::parse_from_rfc3339("2026-11-24T09:00:00.123456789Z")
            .map(|t| t.to_utc())
            .unwrap_or_default();
        Message {
            id: 12,
            message_id: Uuid::nil(),
            first_id: 10,
            coalesced: 3,
            shard: ShardKey::region(OutboxScope::ShopScope, 42),
            fence: FencingToken::new(9),
            category: OutboxCategory::PriceChanged,
            object_identifier: -7,
            payload: payload.map(|text| Payload::from_stored(text.to_owned())),
            date_added: added,
            scheduled_for: added,
            scheduled_from: added,
            synchronous: false,
            traceparent: None,
            payload_version: version,
        }
    }

    fn events() -> CloudEvents {
        CloudEvents::new("https://shop.example.com/region/us")
            .and_then(|events| events.with_type_prefix("com.example."))
            .unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn the_attributes_describe_the_message() {
        let attributes = events().attributes(&message(Some(r#"{"cents": 990}"#), Some(2)));
        assert_eq!(
            attributes.headers(),
            [
                ("ce-specversion", "1.0".to_owned()),
                ("ce-id", "00000000-0000-0000-0000-000000000000".to_owned()),
                ("ce-source", "https://shop.example.com/region/us".to_owned()),
                ("ce-type", "com.example.PriceChanged.v2".to_owned()),
                ("ce-subject", "-7".to_owned()),
                ("ce-time", "2026-11-24T09:00:00.123456789Z".to_owned()),
            ]
        );
        assert_eq!(attributes.datacontenttype, Some("application/json"));
        let untyped = events().attributes(&message(None, None));
        assert_eq!(untyped.event_type, "com.example.PriceChanged");
        assert_eq!(untyped.datacontenttype, None);
    }

    #[test]
    fn the_structured_event_holds_the_payload_verbatim_and_no_data_without_one() {
        let message = message(Some(r#"{"cents": 990, "z": [1, 2]}"#), Some(2));
        let attributes = events().attributes(&message);
        assert_eq!(
            String::from_utf8(attributes.structured(message.payload.as_ref())).unwrap_or_default(),
            concat!(
                r#"{"specversion":"1.0","id":"00000000-0000-0000-0000-000000000000","#,
                r#""source":"https://shop.example.com/region/us","#,
                r#""type":"com.example.PriceChanged.v2","subject":"-7","#,
                r#""time":"2026-11-24T09:00:00.123456789Z","#,
                r#""datacontenttype":"application/json","data":{"cents": 990, "z": [1, 2]}}"#
            )
        );
        let without = events().attributes(&self::message(None, None));
        let event: serde_json::Value =
            serde_json::from_slice(&without.structured(None)).unwrap_or_default();
        assert_eq!(event["type"], "com.example.PriceChanged");
        assert!(event.get("data").is_none() && event.get("datacontenttype").is_none());
    }

    #[test]
    fn header_values_are_percent_encoded_as_the_bindings_say() {
        assert_eq!(header_value("com.example.Price"), "com.example.Price");
        assert_eq!(
            header_value("/shops/caf%C3%A9 \"x\""),
            "/shops/caf%25C3%25A9%20%22x%22"
        );
        assert_eq!(header_value("€"), "%E2%82%AC");
        let events = CloudEvents::new("/shops/caf%C3%A9")
            .and_then(|events| events.with_type_prefix("état."))
            .unwrap_or_else(|error| panic!("{error}"));
        let headers = events.attributes(&message(None, None)).headers();
        assert_eq!(headers[2].1, "/shops/caf%25C3%25A9");
        assert_eq!(headers[3].1, "%C3%A9tat.PriceChanged");
    }

    #[test]
    fn a_source_that_is_not_a_uri_reference_is_refused_when_made() {
        for good in [
            "https://shop.example.com",
            "/region/us",
            "urn:example:shop",
            "shop-service",
            "mailto:ops@example.com",
            "/caf%c3%A9?x=1#frag",
        ] {
            assert!(CloudEvents::new(good).is_ok(), "{good}");
        }
        assert_eq!(CloudEvents::new(""), Err(CloudEventsError::EmptySource));
        for (bad, reason) in [
            ("shop service", "whitespace"),
            ("shop\u{7}", "control character"),
            ("/café", "outside ASCII"),
            ("/50%", "`%` not followed"),
            ("/a%zz", "`%` not followed"),
            ("/a{b}", "does not allow"),
            ("\"quoted\"", "does not allow"),
        ] {
            let error = CloudEvents::new(bad).unwrap_err();
            assert!(
                matches!(error, CloudEventsError::InvalidSource { .. })
                    && error.to_string().contains(reason),
                "{bad}: {error}"
            );
        }
        let error = events().with_type_prefix("com example.").unwrap_err();
        assert!(
            matches!(error, CloudEventsError::InvalidTypePrefix { .. }),
            "{error}"
        );
        assert!(events().with_type_prefix("com.\nexample.").is_err());
        let debug = format!("{:?}", CloudEventsError::EmptySource);
        assert!(
            debug.starts_with("CloudEventsError::EmptySource: ") && debug.contains("URI-reference"),
            "{debug}"
        );
    }

    #[test]
    fn the_mode_is_binary_unless_asked() {
        assert_eq!(events().mode(), ContentMode::Binary);
        assert_eq!(events().structured().mode(), ContentMode::Structured);
        assert_eq!(events().structured().binary().mode(), ContentMode::Binary);
        assert_eq!(events().source(), "https://shop.example.com/region/us");
        assert_eq!(events().type_prefix(), "com.example.");
    }
}
