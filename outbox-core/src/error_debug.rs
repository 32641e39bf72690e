//! `Debug` for the error types whose `Display` says what to do.
//!
//! `unwrap()`, `expect()` and `?` out of `main` print an error's `Debug`;
//! a derived one shows a variant and its fields, never the sentence that
//! says what to do. These types write their variant, then their message:
//! `IncompleteReceivers: outbox receivers are incomplete: …; register one
//! with …`. The message is the `Display` text, so it holds nothing that
//! `Display` keeps out (no secret, no password of a URL).

/// Implements `Debug` as `Type::Variant: <Display>` for an enum (every
/// variant listed), or `Type: <Display>` for a struct.
macro_rules! debug_with_message {
    ($type:ident $(<$param:ident>)? { $($variant:ident),+ $(,)? }) => {
        impl$(<$param>)? ::std::fmt::Debug for $type$(<$param>)?
        where
            Self: ::std::fmt::Display,
        {
            #[allow(deprecated)]
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let variant = match self {
                    $(Self::$variant { .. } => stringify!($variant),)+
                };
                write!(f, "{}::{}: {}", stringify!($type), variant, self)
            }
        }
    };
    ($type:ident) => {
        impl ::std::fmt::Debug for $type {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "{}: {}", stringify!($type), self)
            }
        }
    };
}

pub(crate) use debug_with_message;

#[cfg(test)]
mod tests {
    use crate::{OutboxKind, Receivers, UnknownCategory};

    crate::registry! { OrgScope = 0 { OrgUpdate = 1 } }

    #[test]
    fn debug_writes_the_variant_and_the_hint() {
        let incomplete = Receivers::<OutboxCategory>::new()
            .ensure_complete()
            .unwrap_err();
        let debug = format!("{incomplete:?}");
        assert!(
            debug.starts_with("IncompleteReceivers: ")
                && debug.contains("register one with `Receivers::on`"),
            "{debug}"
        );

        let debug = format!("{:?}", UnknownCategory(9));
        assert!(
            debug.contains("deploy a binary that does, or cull the row"),
            "{debug}"
        );

        let kind = "regoin".parse::<OutboxKind>().unwrap_err();
        let debug = format!("{kind:?}");
        assert!(debug.contains("expected `region` or `control`"), "{debug}");
    }

    #[cfg(feature = "webhook")]
    #[test]
    fn a_secrets_error_shows_the_fix_and_not_the_secret() {
        let error = "c2VjcmV0LWtleQ=="
            .parse::<crate::sink::webhook::WebhookSecret>()
            .unwrap_err();
        let debug = format!("{error:?}");
        assert!(
            debug.starts_with("InvalidSecret::NoPrefix: ") && debug.contains("give `whsec_`"),
            "{debug}"
        );
        assert!(!debug.contains("c2VjcmV0"), "{debug}");
    }
}
