//! The headers of a published message (see [the module
//! documentation](super#headers-and-body)).

use async_nats::header::HeaderMap;
use chrono::SecondsFormat;

use super::{
    CATEGORY_HEADER, COALESCED_HEADER, DATE_ADDED_HEADER, FENCE_HEADER, MESSAGE_ID_HEADER,
    OBJECT_HEADER, ROW_ID_HEADER, SHARD_HEADER, TRACEPARENT_HEADER,
};
use crate::message::Message;
use crate::registry::Category;
use crate::shard::ShardKey;
use crate::sink::cloudevents::{
    CloudEvents, ContentMode, DATACONTENTTYPE_HEADER, STRUCTURED_CONTENT_TYPE,
};
use crate::trace::TraceParent;

/// The shard and fencing token a message was published with
/// ([`SHARD_HEADER`], [`FENCE_HEADER`]), for a consumer that drops a
/// message published late by a worker that lost its claim: keep the
/// highest token applied per shard and skip a lower one (in memory with
/// [`FenceBook::apply_token`](crate::fence::FenceBook::apply_token), in a
/// database with `outbox_seaorm::inbox::Inbox::fence`). `None` when either
/// header is missing (published by a sink older than the tokens) or does
/// not parse.
///
/// ```
/// use outbox_core::fence::{FenceBook, Fenced};
/// use outbox_core::sink::jetstream::{async_nats::HeaderMap, fence_of, FENCE_HEADER, SHARD_HEADER};
///
/// let book = FenceBook::new("orders-consumer");
/// let mut late = HeaderMap::new();
/// late.insert(SHARD_HEADER, "region:0/42");
/// late.insert(FENCE_HEADER, "7");
/// let mut newer = late.clone();
/// newer.insert(FENCE_HEADER, "9");
/// for headers in [&newer, &late] {
///     let (shard, fence) = fence_of(headers).unwrap();
///     let applied = book.apply_token(&shard, fence, || { /* apply the message */ });
///     println!("{fence}: {}", if applied.is_superseded() { "dropped" } else { "applied" });
/// }
/// assert_eq!(book.highest(&"region:0/42".parse().unwrap()).unwrap().get(), 9);
/// ```
pub fn fence_of(headers: &HeaderMap) -> Option<(ShardKey, crate::FencingToken)> {
    let shard = headers.get(SHARD_HEADER)?.as_str().parse().ok()?;
    let fence = headers.get(FENCE_HEADER)?.as_str().parse().ok()?;
    Some((shard, fence))
}

/// The header names, parsed once (a name given as `&str` is validated
/// and copied on every insert).
mod names {
    use async_nats::HeaderName;

    pub(super) const MESSAGE_ID: HeaderName = HeaderName::from_static(super::MESSAGE_ID_HEADER);
    pub(super) const CATEGORY: HeaderName = HeaderName::from_static(super::CATEGORY_HEADER);
    pub(super) const OBJECT: HeaderName = HeaderName::from_static(super::OBJECT_HEADER);
    pub(super) const SHARD: HeaderName = HeaderName::from_static(super::SHARD_HEADER);
    pub(super) const ROW_ID: HeaderName = HeaderName::from_static(super::ROW_ID_HEADER);
    pub(super) const FENCE: HeaderName = HeaderName::from_static(super::FENCE_HEADER);
    pub(super) const COALESCED: HeaderName = HeaderName::from_static(super::COALESCED_HEADER);
    pub(super) const DATE_ADDED: HeaderName = HeaderName::from_static(super::DATE_ADDED_HEADER);
    pub(super) const TRACEPARENT: HeaderName = HeaderName::from_static(super::TRACEPARENT_HEADER);
    pub(super) const CONTENT_TYPE: HeaderName = HeaderName::from_static("Content-Type");
}

/// The headers of `message` (see the module documentation).
pub(super) fn headers<C: Category>(message: &Message<C>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(names::MESSAGE_ID, message.message_id.to_string());
    headers.insert(names::CATEGORY, message.category.name());
    headers.insert(names::OBJECT, message.object_identifier.to_string());
    // Region names with a line break never get here: the subject refused them.
    headers.insert(names::SHARD, message.shard.to_string());
    headers.insert(names::ROW_ID, message.id.to_string());
    headers.insert(names::FENCE, message.fence.to_string());
    headers.insert(names::COALESCED, message.coalesced.to_string());
    headers.insert(
        names::DATE_ADDED,
        message
            .date_added
            .to_rfc3339_opts(SecondsFormat::Micros, true),
    );
    if let Some(traceparent) = TraceParent::current().or(message.traceparent) {
        headers.insert(names::TRACEPARENT, traceparent.to_string());
    }
    headers
}

/// Adds `message`'s CloudEvent to `headers` (see [the module
/// documentation](super#cloudevents)): in binary mode its `ce-*` headers,
/// in structured mode `Content-Type`, then returns the structured body.
pub(super) fn cloudevent<C: Category>(
    cloudevents: &CloudEvents,
    message: &Message<C>,
    headers: &mut HeaderMap,
) -> Option<Vec<u8>> {
    let attributes = cloudevents.attributes(message);
    match cloudevents.mode() {
        ContentMode::Binary => {
            for (name, value) in attributes.headers() {
                headers.insert(name, value);
            }
            if let Some(content_type) = attributes.datacontenttype {
                headers.insert(DATACONTENTTYPE_HEADER, content_type);
            }
            None
        }
        ContentMode::Structured => {
            headers.insert(names::CONTENT_TYPE, STRUCTURED_CONTENT_TYPE);
            Some(attributes.structured(message.payload.as_ref()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    crate::registry! {
        ShopScope = 0 {
            PriceChanged = 1,
        }
    }

    fn message(traceparent: Option<TraceParent>) -> Message<OutboxCategory> {
        let added = chrono::DateTime::parse_from_rfc3339("2026-11-24T09:00:00.123456Z")
            .map(|t| t.to_utc())
            .unwrap_or_default();
        Message {
            id: 12,
            message_id: Uuid::nil(),
            first_id: 10,
            coalesced: 3,
            shard: ShardKey::control("us", OutboxScope::ShopScope, 42),
            fence: crate::FencingToken::new(9),
            category: OutboxCategory::PriceChanged,
            object_identifier: 7,
            payload: None,
            date_added: added,
            scheduled_for: added,
            scheduled_from: added,
            synchronous: false,
            traceparent,
            payload_version: None,
        }
    }

    fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
        headers.get(name).map(|value| value.as_str())
    }

    #[test]
    fn the_body_is_the_stored_json_and_a_text_that_is_not_json_is_refused() {
        let mut message = message(None);
        assert_eq!(super::super::body(&message).unwrap(), b"");
        message.payload = Some(crate::Payload::from_stored(r#"{"cents": 990}"#.to_owned()));
        assert_eq!(super::super::body(&message).unwrap(), br#"{"cents": 990}"#);
        message.payload = Some(crate::Payload::from_stored("{not json".to_owned()));
        let error = super::super::body(&message).unwrap_err();
        assert!(
            matches!(error, super::super::JetStreamError::PayloadNotJson { .. }),
            "{error}"
        );
        assert!(error.is_permanent());
    }

    #[test]
    fn headers_describe_the_message() {
        let headers = headers(&message(None));
        assert_eq!(
            text(&headers, MESSAGE_ID_HEADER),
            Some("00000000-0000-0000-0000-000000000000")
        );
        assert_eq!(text(&headers, CATEGORY_HEADER), Some("PriceChanged"));
        assert_eq!(text(&headers, OBJECT_HEADER), Some("7"));
        assert_eq!(text(&headers, SHARD_HEADER), Some("control[us]:0/42"));
        assert_eq!(text(&headers, ROW_ID_HEADER), Some("12"));
        assert_eq!(text(&headers, FENCE_HEADER), Some("9"));
        assert_eq!(
            fence_of(&headers),
            Some((
                ShardKey::control("us", OutboxScope::ShopScope, 42),
                crate::FencingToken::new(9)
            ))
        );
        let mut without = headers.clone();
        without.insert(FENCE_HEADER, "not a token");
        assert_eq!(fence_of(&without), None);
        assert_eq!(text(&headers, COALESCED_HEADER), Some("3"));
        assert_eq!(
            text(&headers, DATE_ADDED_HEADER),
            Some("2026-11-24T09:00:00.123456Z")
        );
    }

    #[test]
    fn without_a_span_the_traceparent_is_the_rows_or_none() {
        // No subscriber in unit tests: no current span context.
        assert_eq!(text(&headers(&message(None)), TRACEPARENT_HEADER), None);
        let stored: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            text(&headers(&message(Some(stored))), TRACEPARENT_HEADER),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
    }
}
