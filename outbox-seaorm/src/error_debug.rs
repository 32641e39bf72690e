//! `Debug` for the error types whose `Display` says what to do (as in
//! `outbox-core`, whose macro is private to it).
//!
//! `unwrap()`, `expect()` and `?` out of `main` print an error's `Debug`;
//! a derived one shows a variant and its fields, never the sentence that
//! says what to do. These types write their variant, then their message:
//! `SchemaError::NotMigrated: the outbox tables are not migrated: …; run
//! …`. The message is the `Display` text, so it holds nothing that
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
