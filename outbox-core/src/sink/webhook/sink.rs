//! The sink: one signed POST per message.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Url};

use super::error::{
    parse_retry_after, redacted, to_handler_error, WebhookError, WebhookSetupError,
    MAX_BODY_IN_ERROR,
};
use super::signature::{
    unix_now, WebhookKeys, DELIVERY_SIGNATURE_HEADER, ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER,
};
use crate::delivery_headers::for_delivery;
use crate::message::{CurrentDelivery, Message};
use crate::receiver::HandlerFuture;
use crate::registry::Category;
use crate::sink::cloudevents::{CloudEvents, ContentMode, STRUCTURED_CONTENT_TYPE};
use crate::trace::TraceParent;

/// How long a delivery waits for the endpoint's answer, by default
/// ([`WebhookSink::with_timeout`]): 5 s, below the drain's delivery
/// timeout (10 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Header: the W3C trace context of the delivery (see [`crate::trace`]).
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// Delivers messages to one HTTP endpoint, signed (see [the module
/// documentation](super)).
///
/// Cheap to clone: clones share the client (its connection pool) and the
/// keys.
#[derive(Clone)]
pub struct WebhookSink {
    client: Client,
    url: Arc<Url>,
    /// `url` as errors and logs show it.
    endpoint: Arc<str>,
    keys: WebhookKeys,
    sender: Arc<str>,
    timeout: Duration,
    cloudevents: Option<CloudEvents>,
}

impl std::fmt::Debug for WebhookSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSink")
            .field("endpoint", &self.endpoint)
            .field("keys", &self.keys.len())
            .field("sender", &self.sender)
            .field("timeout", &self.timeout)
            .field("cloudevents", &self.cloudevents)
            .finish_non_exhaustive()
    }
}

/// What is sent for a message: its body and headers.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SignedRequest {
    /// The headers: `content-type`, the three `webhook-*` ones, the
    /// delivery headers and their signature, `traceparent` when there is
    /// one; with [CloudEvents](WebhookSink::with_cloudevents) in binary
    /// mode, the `ce-*` ones too.
    pub headers: HeaderMap,
    /// The body: the payload's JSON text (`null` without a payload); with
    /// CloudEvents, empty without a payload in binary mode, the event's
    /// JSON in structured mode.
    pub body: Vec<u8>,
}

impl WebhookSink {
    /// A sink POSTing to `url` (`http://` or `https://`), signing with
    /// `keys`, through a client of its own that follows no redirects, with
    /// a timeout of [`DEFAULT_TIMEOUT`].
    ///
    /// The client speaks TLS when `reqwest` is built with a TLS feature
    /// (the application's own dependency on it, e.g. `reqwest = { version
    /// = "0.13", features = ["rustls"] }`, turns it on here too), or pass
    /// one of your own with [`with_client`](Self::with_client).
    ///
    /// # Errors
    ///
    /// [`WebhookSetupError`] when the URL does not parse or is not HTTP, or
    /// the client cannot be built.
    pub fn new(url: &str, keys: WebhookKeys) -> Result<Self, WebhookSetupError> {
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| WebhookSetupError::Client(error.without_url()))?;
        let url = parse_url(url)?;
        Ok(Self {
            client,
            endpoint: Arc::from(redacted(&url)),
            url: Arc::new(url),
            keys,
            sender: Arc::from(""),
            timeout: DEFAULT_TIMEOUT,
            cloudevents: None,
        })
    }

    /// The same sink through `client` (a TLS configuration, a proxy, a
    /// pool shared with the rest of the application). A client that
    /// follows redirects may turn a refused delivery into a `GET` of
    /// another page.
    pub fn with_client(self, client: Client) -> Self {
        Self { client, ..self }
    }

    /// The same sink (client, keys, sender) to another URL: one sink per
    /// endpoint, for categories that go to different places.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_url(&self, url: &str) -> Result<Self, WebhookSetupError> {
        let url = parse_url(url)?;
        Ok(Self {
            endpoint: Arc::from(redacted(&url)),
            url: Arc::new(url),
            ..self.clone()
        })
    }

    /// The name of this service, sent as `outbox-sender` with the claim's
    /// fencing token, shard and category, so that the endpoint's
    /// `outbox_axum::apply_once` refuses a delivery superseded by a newer
    /// claim. The same for all processes of the service, distinct from
    /// every other sender of the endpoint. Default: none (the message id
    /// is sent, the fencing headers are not).
    pub fn with_sender(self, sender: impl Into<Arc<str>>) -> Self {
        Self {
            sender: sender.into(),
            ..self
        }
    }

    /// How long a delivery waits for the endpoint's whole answer. Keep it
    /// below the drain's delivery timeout (10 s). Default:
    /// [`DEFAULT_TIMEOUT`] (5 s).
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }

    /// The same sink sending each message as a CloudEvent (see
    /// [`crate::sink::cloudevents`]): in binary mode (the default) the
    /// body is the payload (empty without one) and the attributes are
    /// `ce-*` headers; in [structured](CloudEvents::structured) mode the
    /// body is the event's JSON, sent as `application/cloudevents+json`.
    /// The signatures cover the body as sent, and every other header is
    /// sent as without it. Default: none (the body is the payload, `null`
    /// without one).
    pub fn with_cloudevents(self, cloudevents: CloudEvents) -> Self {
        Self {
            cloudevents: Some(cloudevents),
            ..self
        }
    }

    /// The CloudEvents the sink sends, if it does
    /// ([`with_cloudevents`](Self::with_cloudevents)).
    pub fn cloudevents(&self) -> Option<&CloudEvents> {
        self.cloudevents.as_ref()
    }

    /// The endpoint, without credentials, query or fragment.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The keys the sink signs with.
    pub fn keys(&self) -> &WebhookKeys {
        &self.keys
    }

    /// What [`deliver`](Self::deliver) sends for `message` when it signs at
    /// `timestamp` (Unix seconds).
    pub fn signed_request<C: Category>(
        &self,
        message: &Message<C>,
        timestamp: i64,
    ) -> SignedRequest {
        let id = message.message_id.to_string();
        let mut headers = HeaderMap::new();
        let body = self.body(message, &mut headers);
        let mut put = |name: &'static str, value: &str| {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        };
        put(ID_HEADER, &id);
        put(TIMESTAMP_HEADER, &timestamp.to_string());
        put(SIGNATURE_HEADER, &self.keys.sign(&id, timestamp, &body));
        let delivery = CurrentDelivery {
            message_id: message.message_id,
            shard: message.shard.clone(),
            fence: message.fence,
            category: message.category.name(),
        };
        let delivery = for_delivery(&delivery, &self.sender);
        for (name, value) in &delivery {
            put(name, value);
        }
        let signed: Vec<(&str, &str)> = delivery
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        put(
            DELIVERY_SIGNATURE_HEADER,
            &self.keys.sign_delivery_headers(&id, timestamp, &signed),
        );
        if let Some(traceparent) = TraceParent::current().or(message.traceparent) {
            put(TRACEPARENT_HEADER, &traceparent.to_string());
        }
        SignedRequest { headers, body }
    }

    /// The body of `message`, with the headers that describe it:
    /// `content-type`, and the `ce-*` ones of a binary CloudEvent.
    fn body<C: Category>(&self, message: &Message<C>, headers: &mut HeaderMap) -> Vec<u8> {
        let json = HeaderValue::from_static("application/json");
        let Some(cloudevents) = &self.cloudevents else {
            headers.insert(CONTENT_TYPE, json);
            return match &message.payload {
                Some(payload) => payload.as_bytes().to_vec(),
                None => b"null".to_vec(),
            };
        };
        let attributes = cloudevents.attributes(message);
        match cloudevents.mode() {
            ContentMode::Structured => {
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static(STRUCTURED_CONTENT_TYPE),
                );
                attributes.structured(message.payload.as_ref())
            }
            ContentMode::Binary => {
                for (name, value) in attributes.headers() {
                    // Percent-encoded: always a valid header value.
                    if let Ok(value) = HeaderValue::try_from(value) {
                        headers.insert(HeaderName::from_static(name), value);
                    }
                }
                match &message.payload {
                    Some(payload) => {
                        headers.insert(CONTENT_TYPE, json);
                        payload.as_bytes().to_vec()
                    }
                    // No data: no body, no `datacontenttype`.
                    None => Vec::new(),
                }
            }
        }
    }

    /// POSTs `message`, signed now, and waits for the endpoint's answer:
    /// `Ok` for a `2xx`.
    ///
    /// For receivers that deliver and do more; [`receiver`](Self::receiver)
    /// is this call as a receiver.
    ///
    /// # Errors
    ///
    /// [`WebhookError`]; [`WebhookError::is_permanent`] says whether a
    /// retry can help.
    #[tracing::instrument(
        name = "outbox.webhook.deliver",
        skip_all,
        fields(
            otel.kind = "client",
            http.request.method = "POST",
            url.full = %self.endpoint,
            messaging.message.id = %message.message_id,
            http.response.status_code = tracing::field::Empty,
        ),
        // DEBUG: the drain logs a failed delivery itself, at WARN.
        err(level = "debug")
    )]
    pub async fn deliver<C: Category>(&self, message: &Message<C>) -> Result<(), WebhookError> {
        if message
            .payload
            .as_ref()
            .is_some_and(|payload| !payload.is_json())
        {
            return Err(WebhookError::PayloadNotJson {
                endpoint: self.endpoint.to_string(),
                message_id: message.message_id,
            });
        }
        let SignedRequest { headers, body } = self.signed_request(message, unix_now());
        let message_id = message.message_id;
        let client_error =
            |error| WebhookError::from_client(&self.endpoint, message_id, self.timeout, error);
        let mut response = self
            .client
            .post(Url::clone(&self.url))
            .headers(headers)
            .body(body)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(client_error)?;
        let status = response.status();
        tracing::Span::current().record("http.response.status_code", status.as_u16());
        if status.is_success() {
            return Ok(());
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, chrono::Utc::now()));
        let mut start = Vec::new();
        // The start of the body, for the operator; a body that breaks off
        // keeps what came.
        while start.len() < MAX_BODY_IN_ERROR {
            match response.chunk().await {
                Ok(Some(chunk)) => start.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        start.truncate(MAX_BODY_IN_ERROR);
        Err(WebhookError::Status {
            endpoint: self.endpoint.to_string(),
            message_id,
            status,
            retry_after,
            body: String::from_utf8_lossy(&start).into_owned(),
        })
    }

    /// The sink as a receiver, for [`Receivers::on`](crate::Receivers::on):
    /// it [`deliver`](Self::deliver)s each message and fails the delivery
    /// when the endpoint does not accept it: as a permanent error when
    /// [`WebhookError::is_permanent`], with the endpoint's `Retry-After` as
    /// the least backoff otherwise.
    pub fn receiver<C: Category>(
        &self,
    ) -> impl Fn(Message<C>) -> HandlerFuture + Clone + Send + Sync + 'static {
        let sink = self.clone();
        move |message: Message<C>| {
            let sink = sink.clone();
            Box::pin(async move { sink.deliver(&message).await.map_err(to_handler_error) })
        }
    }
}

fn parse_url(url: &str) -> Result<Url, WebhookSetupError> {
    let url = Url::parse(url).map_err(|error| WebhookSetupError::InvalidUrl {
        reason: error.to_string(),
    })?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        scheme => Err(WebhookSetupError::UnsupportedScheme {
            scheme: scheme.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FencingToken, Payload, ShardKey};

    crate::registry! {
        ShopScope = 0 {
            PriceChanged = 1,
        }
    }

    #[tokio::test]
    async fn a_stored_payload_that_is_not_json_is_refused_before_any_request() {
        // Port 9 (discard): a request would fail to connect, a transient
        // error; the refusal comes first, and is permanent.
        let keys = WebhookKeys::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sink = WebhookSink::new("http://127.0.0.1:9/hook", keys).unwrap();
        let now = chrono::Utc::now();
        let message = Message {
            id: 1,
            message_id: uuid::Uuid::nil(),
            first_id: 1,
            coalesced: 1,
            shard: ShardKey::region(OutboxScope::ShopScope, 42),
            fence: FencingToken::new(1),
            category: OutboxCategory::PriceChanged,
            object_identifier: 7,
            payload: Some(Payload::from_stored("{not json".to_owned())),
            date_added: now,
            scheduled_for: now,
            scheduled_from: now,
            synchronous: false,
            traceparent: None,
            payload_version: None,
        };
        let error = sink.deliver(&message).await.unwrap_err();
        assert!(
            matches!(error, WebhookError::PayloadNotJson { .. }),
            "{error}"
        );
        assert!(error.is_permanent());
    }
}
