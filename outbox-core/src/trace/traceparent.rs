//! [`TraceParent`]: the W3C `traceparent` an outbox row stores.

use std::fmt;
use std::str::FromStr;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The trace context of the span that wrote an outbox row, in the W3C Trace
/// Context `traceparent` format: `00-<trace id>-<span id>-<flags>`, 55
/// characters of lowercase hex and dashes.
///
/// A `TraceParent` is always valid: its trace id and span id are not all
/// zeros. Only the `traceparent` travels; `tracestate` and baggage do not.
///
/// ```
/// use outbox_core::trace::TraceParent;
///
/// let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// let parent: TraceParent = text.parse().unwrap();
/// assert!(parent.is_sampled());
/// assert_eq!(parent.to_string(), text);
/// assert!("00-00000000000000000000000000000000-00f067aa0ba902b7-01"
///     .parse::<TraceParent>()
///     .is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: TraceId,
    span_id: SpanId,
    flags: TraceFlags,
}

/// A text that is not a W3C `traceparent`. The stores never return it: a
/// stored value that does not parse is ignored (the row is delivered without
/// a parent).
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not a W3C traceparent (expected `00-<32 lowercase hex>-<16 lowercase hex>-<2 lowercase hex>`): {reason}"
)]
pub struct InvalidTraceParent {
    reason: &'static str,
}

crate::error_debug::debug_with_message!(InvalidTraceParent);

impl InvalidTraceParent {
    fn new(reason: &'static str) -> Self {
        Self { reason }
    }
}

/// Length of a version-00 `traceparent`.
pub const TRACEPARENT_LEN: usize = 55;

impl TraceParent {
    /// The trace context of the current `tracing` span, as a
    /// `tracing-opentelemetry` layer sees it; failing that, the current
    /// OpenTelemetry context. `None` when neither is a valid span context
    /// (no OpenTelemetry layer, or no span).
    pub fn current() -> Option<Self> {
        Self::from_context(&tracing::Span::current().context())
            .or_else(|| Self::from_context(&Context::current()))
    }

    /// The span context of `context`, if valid.
    pub fn from_context(context: &Context) -> Option<Self> {
        Self::from_span_context(context.span().span_context())
    }

    /// `span_context`, if valid (trace id and span id not all zeros).
    pub fn from_span_context(span_context: &SpanContext) -> Option<Self> {
        span_context.is_valid().then(|| Self {
            trace_id: span_context.trace_id(),
            span_id: span_context.span_id(),
            flags: span_context.trace_flags(),
        })
    }

    /// The trace id.
    pub fn trace_id(&self) -> TraceId {
        self.trace_id
    }

    /// The span id of the span that wrote the row.
    pub fn span_id(&self) -> SpanId {
        self.span_id
    }

    /// The trace flags.
    pub fn flags(&self) -> TraceFlags {
        self.flags
    }

    /// Whether the writing span was sampled.
    pub fn is_sampled(&self) -> bool {
        self.flags.is_sampled()
    }

    /// As a remote span context (it comes from another process, or from the
    /// past), to link to.
    pub fn span_context(&self) -> SpanContext {
        SpanContext::new(
            self.trace_id,
            self.span_id,
            self.flags,
            true,
            TraceState::default(),
        )
    }

    /// As a context whose span is the remote writer: a parent to continue.
    pub fn context(&self) -> Context {
        Context::new().with_remote_span_context(self.span_context())
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{:032x}-{:016x}-{:02x}",
            u128::from_be_bytes(self.trace_id.to_bytes()),
            u64::from_be_bytes(self.span_id.to_bytes()),
            self.flags.to_u8()
        )
    }
}

/// The value of a lowercase hex digit.
fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

/// Bytes of a lowercase hex field; `None` on any other character or an odd
/// length.
fn hex_bytes<const N: usize>(field: &[u8]) -> Option<[u8; N]> {
    if field.len() != 2 * N {
        return None;
    }
    let mut bytes = [0u8; N];
    for (byte, pair) in bytes.iter_mut().zip(field.chunks_exact(2)) {
        *byte = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
    }
    Some(bytes)
}

impl FromStr for TraceParent {
    type Err = InvalidTraceParent;

    /// Parses a W3C `traceparent`. Strict, as the specification asks:
    /// lowercase hex only, version `ff` refused, trace id and span id not all
    /// zeros. A version above `00` is read as `00` when its first 55
    /// characters are (later versions only append fields).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bytes = text.as_bytes();
        if bytes.len() < TRACEPARENT_LEN {
            return Err(InvalidTraceParent::new("too short"));
        }
        let version = hex_bytes::<1>(&bytes[0..2]).ok_or(InvalidTraceParent::new(
            "the version is not two lowercase hex digits",
        ))?[0];
        if version == 0xff {
            return Err(InvalidTraceParent::new("version ff is invalid"));
        }
        if bytes.len() > TRACEPARENT_LEN && (version == 0 || bytes[TRACEPARENT_LEN] != b'-') {
            return Err(InvalidTraceParent::new("too long"));
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return Err(InvalidTraceParent::new(
                "fields are not separated by dashes",
            ));
        }
        let trace_id = hex_bytes::<16>(&bytes[3..35]).ok_or(InvalidTraceParent::new(
            "the trace id is not 32 lowercase hex digits",
        ))?;
        let span_id = hex_bytes::<8>(&bytes[36..52]).ok_or(InvalidTraceParent::new(
            "the span id is not 16 lowercase hex digits",
        ))?;
        let flags = hex_bytes::<1>(&bytes[53..55]).ok_or(InvalidTraceParent::new(
            "the flags are not two lowercase hex digits",
        ))?;
        let parent = Self {
            trace_id: TraceId::from_bytes(trace_id),
            span_id: SpanId::from_bytes(span_id),
            flags: TraceFlags::new(flags[0]),
        };
        if parent.trace_id == TraceId::INVALID {
            return Err(InvalidTraceParent::new("the trace id is all zeros"));
        }
        if parent.span_id == SpanId::INVALID {
            return Err(InvalidTraceParent::new("the span id is all zeros"));
        }
        Ok(parent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips() {
        let parent: TraceParent = SAMPLE.parse().unwrap();
        assert_eq!(parent.to_string(), SAMPLE);
        assert_eq!(parent.to_string().len(), TRACEPARENT_LEN);
        assert_eq!(
            parent.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(
            parent.span_id(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        assert!(parent.is_sampled());
        let unsampled: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
            .parse()
            .unwrap();
        assert!(!unsampled.is_sampled());
    }

    #[test]
    fn a_span_context_round_trips_and_is_remote() {
        let parent: TraceParent = SAMPLE.parse().unwrap();
        let span_context = parent.span_context();
        assert!(span_context.is_valid() && span_context.is_remote());
        assert_eq!(TraceParent::from_span_context(&span_context), Some(parent));
        assert_eq!(TraceParent::from_context(&parent.context()), Some(parent));
        assert_eq!(
            TraceParent::from_span_context(&SpanContext::empty_context()),
            None
        );
    }

    #[test]
    fn ids_keep_their_leading_zeros() {
        let text = "00-00000000000000000000000000000001-0000000000000001-00";
        let parent: TraceParent = text.parse().unwrap();
        assert_eq!(parent.to_string(), text);
    }

    #[test]
    fn invalid_texts_are_refused() {
        for text in [
            "",
            "garbage",
            // All-zero ids.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // Uppercase hex, which `u128::from_str_radix` would take.
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            // A sign, which `from_str_radix` would take too.
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // Version ff, a bad version, wrong separators, wrong lengths.
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            // Version 01 with a longer tail not separated by a dash.
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            // Multi-byte characters where hex digits belong.
            "00-4bf92f3577b34da6a3ce929d0e0e47é-00f067aa0ba902b7-01",
        ] {
            assert!(text.parse::<TraceParent>().is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn a_later_version_is_read_as_version_00() {
        let text = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future";
        let parent: TraceParent = text.parse().unwrap();
        assert_eq!(parent.to_string(), SAMPLE);
    }

    #[test]
    fn errors_say_what_is_expected() {
        let error = "nope".parse::<TraceParent>().unwrap_err();
        assert!(
            error.to_string().contains("00-<32 lowercase hex>"),
            "{error}"
        );
    }

    proptest! {
        #[test]
        fn parsing_never_panics(text in "\\PC{0,80}") {
            let _ = text.parse::<TraceParent>();
        }

        #[test]
        fn near_traceparents_never_panic(text in "[0-9a-fA-F\\-é]{50,60}") {
            if let Ok(parent) = text.parse::<TraceParent>() {
                prop_assert_eq!(parent.to_string().len(), TRACEPARENT_LEN);
            }
        }

        #[test]
        fn every_valid_context_round_trips(trace in 1u128.., span in 1u64.., flags: u8) {
            let parent = TraceParent::from_span_context(&SpanContext::new(
                TraceId::from(trace),
                SpanId::from(span),
                TraceFlags::new(flags),
                false,
                TraceState::default(),
            ))
            .unwrap();
            prop_assert_eq!(parent.to_string().parse::<TraceParent>(), Ok(parent));
        }
    }
}
