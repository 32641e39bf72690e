//! Subjects that cannot be, and publishes that failed.

use std::fmt;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use uuid::Uuid;

/// Which part of a subject is not a valid token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubjectPart {
    /// The sink's prefix ([`JetStreamSink::with_prefix`](super::JetStreamSink::with_prefix)).
    Prefix,
    /// The category's name.
    Category,
    /// The region name of a control-outbox shard.
    Region,
}

impl fmt::Display for SubjectPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubjectPart::Prefix => "subject prefix",
            SubjectPart::Category => "category name",
            SubjectPart::Region => "region name",
        })
    }
}

/// A value that cannot be (part of) a NATS subject: a token is empty, or
/// holds `.` (within one token), `*`, `>`, whitespace or a control
/// character.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {part} {value:?} cannot be used in a NATS subject: {reason}; subject tokens must be \
     non-empty, without `.`, `*`, `>`, whitespace or control characters{fix}",
    fix = fix_for(.part)
)]
#[non_exhaustive]
pub struct InvalidSubject {
    /// The part of the subject.
    pub part: SubjectPart,
    /// The value that was refused.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

crate::error_debug::debug_with_message!(InvalidSubject);

/// What to do about an [`InvalidSubject`], by part.
fn fix_for(part: &SubjectPart) -> &'static str {
    match part {
        SubjectPart::Prefix => " (a prefix may join several tokens with `.`)",
        SubjectPart::Category => "",
        SubjectPart::Region => {
            ": rename the region, or publish this category with a receiver of your own (the \
             message is not retried: it is quarantined, or dead-lettered where its scope allows)"
        }
    }
}

/// Why `token` cannot be one subject token, if it cannot.
pub(super) fn check_token(part: SubjectPart, token: &str) -> Result<(), &'static str> {
    if token.is_empty() {
        return Err(match part {
            SubjectPart::Prefix => "it is empty or has an empty token",
            _ => "it is empty",
        });
    }
    for c in token.chars() {
        match c {
            '.' => return Err("it contains `.`, the token separator"),
            '*' | '>' => return Err("it contains a wildcard (`*` or `>`)"),
            c if c.is_whitespace() => return Err("it contains whitespace"),
            c if c.is_control() => return Err("it contains a control character"),
            _ => {}
        }
    }
    Ok(())
}

/// A message the sink could not publish.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum JetStreamError {
    /// The message's subject cannot be built. Permanent.
    #[error(transparent)]
    InvalidSubject(#[from] InvalidSubject),
    /// No stream stores the subject: NATS answered "no responders" to the
    /// publish. Transient: the stream may be created later.
    #[error(
        "no JetStream stream stores subject `{subject}` (NATS answered \"no responders\" to \
         message {message_id}): create a stream whose subjects include it \
         (`JetStreamSink::stream_config` makes one for every subject of the sink), and check \
         that the server runs with JetStream enabled; the shard backs off and retries"
    )]
    NoStream {
        /// The subject.
        subject: String,
        /// The message id.
        message_id: Uuid,
    },
    /// JetStream did not acknowledge the publish in time (the context's
    /// timeout). Transient: the message may have been stored or not; the
    /// retry carries the same `Nats-Msg-Id`.
    #[error(
        "JetStream did not acknowledge message {message_id} on `{subject}` in time; it may have \
         been stored or not: the shard backs off and retries, and the stream's duplicate window \
         drops a second copy (is the server up, and JetStream not overloaded?)"
    )]
    Timeout {
        /// The subject.
        subject: String,
        /// The message id.
        message_id: Uuid,
    },
    /// The message is larger than the server's `max_payload` or the
    /// stream's `max_message_size`. Permanent: it will not shrink.
    #[error(
        "message {message_id} on `{subject}` is too large for NATS: {source}; raise the server's \
         `max_payload` or the stream's `max_message_size`, or make the payload smaller, then \
         release the message (it is quarantined, or dead-lettered where its scope allows)"
    )]
    TooLarge {
        /// The subject.
        subject: String,
        /// The message id.
        message_id: Uuid,
        /// What the client or the server said.
        source: PublishError,
    },
    /// The message's stored payload is not JSON (a row written by hand on
    /// SQLite, whose `json` column is text): not published. Permanent: it
    /// will not become JSON.
    #[error(
        "message {message_id}'s stored payload is not JSON (written outside the library?), so it \
         is not published; it is quarantined, or dead-lettered where its scope allows, until an \
         operator sets it aside"
    )]
    PayloadNotJson {
        /// The message id.
        message_id: Uuid,
    },
    /// Any other failure: the connection is lost, the stream refused the
    /// message (full, with `discard: new`), JetStream answered an error.
    /// Transient.
    #[error(
        "publishing message {message_id} to JetStream on `{subject}` failed: {source}; the shard \
         backs off and retries"
    )]
    Publish {
        /// The subject.
        subject: String,
        /// The message id.
        message_id: Uuid,
        /// The client's error.
        source: PublishError,
    },
}

crate::error_debug::debug_with_message!(JetStreamError {
    InvalidSubject,
    NoStream,
    Timeout,
    TooLarge,
    PayloadNotJson,
    Publish
});

impl JetStreamError {
    /// Whether retrying cannot help: [`InvalidSubject`](Self::InvalidSubject),
    /// [`TooLarge`](Self::TooLarge) and [`PayloadNotJson`](Self::PayloadNotJson). [`JetStreamSink::receiver`](super::JetStreamSink::receiver)
    /// returns those as [`permanent`](crate::permanent) errors.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Self::InvalidSubject(_) | Self::TooLarge { .. } | Self::PayloadNotJson { .. }
        )
    }

    pub(super) fn from_publish(subject: &str, message_id: Uuid, source: PublishError) -> Self {
        let subject = subject.to_owned();
        match source.kind() {
            PublishErrorKind::StreamNotFound => Self::NoStream {
                subject,
                message_id,
            },
            PublishErrorKind::TimedOut => Self::Timeout {
                subject,
                message_id,
            },
            PublishErrorKind::MaxPayloadExceeded => Self::TooLarge {
                subject,
                message_id,
                source,
            },
            _ if exceeds_stream_maximum(&source) => Self::TooLarge {
                subject,
                message_id,
                source,
            },
            _ => Self::Publish {
                subject,
                message_id,
                source,
            },
        }
    }
}

/// Whether JetStream refused the message for the stream's
/// `max_message_size`.
fn exceeds_stream_maximum(error: &PublishError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<async_nats::jetstream::Error>())
        .is_some_and(|error| {
            error.error_code() == async_nats::jetstream::ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_without_separators_wildcards_or_whitespace_are_valid() {
        for token in ["us", "eu-west", "region_1", "-1", "Ünïcode"] {
            assert_eq!(check_token(SubjectPart::Region, token), Ok(()), "{token}");
        }
        for token in [
            "", "eu.west", "*", "a>", "eu west", "eu\twest", "eu\nwest", "\u{7f}",
        ] {
            assert!(
                check_token(SubjectPart::Region, token).is_err(),
                "{token:?}"
            );
        }
    }

    #[test]
    fn the_error_for_a_region_says_what_happens_to_the_message() {
        let error = InvalidSubject {
            part: SubjectPart::Region,
            value: "eu.west".to_owned(),
            reason: "it contains `.`, the token separator",
        };
        let text = error.to_string();
        assert!(text.contains("region name \"eu.west\""), "{text}");
        assert!(text.contains("quarantined"), "{text}");
    }
}
