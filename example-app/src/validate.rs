//! Input checks at the edge, shared by every silo so that what one silo
//! accepts, the silos it replicates to accept too.
//!
//! Every JSON body is checked by [`ApiJson`](crate::extract::ApiJson) through
//! [`Validate`] before a handler runs, so nothing invalid reaches the
//! database (PostgreSQL rejects NUL characters in text; index entries have a
//! size limit) or an outbox row (a replication call the other silo would
//! refuse for ever).

use crate::error::ApiError;

/// Slugs: at most this many characters.
pub const SLUG_MAX: usize = 64;
/// Names: at most this many characters.
pub const NAME_MAX: usize = 200;
/// Email addresses: at most this many characters (RFC 5321's path limit).
pub const EMAIL_MAX: usize = 254;
/// Membership roles: at most this many characters.
pub const ROLE_MAX: usize = 32;
/// Audit actions: at most this many characters.
pub const ACTION_MAX: usize = 100;
/// Audit details: at most this many characters.
pub const DETAIL_MAX: usize = 2_000;
/// Timestamps as text: at most this many characters.
pub const TIMESTAMP_MAX: usize = 64;
/// The longest audit actor (`admin`, `user_<id>`).
pub const ACTOR_MAX: usize = 64;
/// Organizations created by one bulk request: at most this many.
pub const BULK_MAX: usize = 1_000;

/// A request body that can say whether it is acceptable.
pub trait Validate {
    /// `Ok` when every field is acceptable; a 400 naming the first bad
    /// field otherwise.
    fn validate(&self) -> Result<(), ApiError>;
}

impl<T: Validate> Validate for Vec<T> {
    fn validate(&self) -> Result<(), ApiError> {
        if self.len() > BULK_MAX {
            return Err(ApiError::bad_request(format!(
                "at most {BULK_MAX} items per request"
            )));
        }
        self.iter().try_for_each(Validate::validate)
    }
}

impl<T: Validate> Validate for Option<T> {
    fn validate(&self) -> Result<(), ApiError> {
        self.as_ref().map_or(Ok(()), Validate::validate)
    }
}

/// Text of at most `max` characters without NUL.
///
/// # Errors
///
/// 400 naming `field`.
pub fn text(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "`{field}` contains a NUL character"
        )));
    }
    if value.chars().count() > max {
        return Err(ApiError::bad_request(format!(
            "`{field}` is longer than {max} characters"
        )));
    }
    Ok(())
}

/// Text that is not blank, of at most `max` characters, without NUL.
///
/// # Errors
///
/// 400 naming `field`.
pub fn required(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.trim().is_empty() {
        return Err(ApiError::bad_request(format!(
            "`{field}` must not be empty"
        )));
    }
    text(field, value, max)
}

/// A region this deployment knows.
///
/// # Errors
///
/// 400 naming the region: a write for an unknown region would leave an
/// outbox row that can never be delivered.
pub fn region(value: &str) -> Result<(), ApiError> {
    if crate::ids::region_code(value).is_none() {
        return Err(ApiError::bad_request(format!(
            "unknown region {:?}",
            value.chars().take(SLUG_MAX).collect::<String>()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_length_blank_and_unknown_regions_are_refused() {
        assert!(text("name", "Acme", NAME_MAX).is_ok());
        assert!(text("name", "Ac\0me", NAME_MAX).is_err());
        assert!(
            text("name", &"é".repeat(NAME_MAX), NAME_MAX).is_ok(),
            "characters, not bytes"
        );
        assert!(text("name", &"é".repeat(NAME_MAX + 1), NAME_MAX).is_err());
        assert!(required("slug", "  ", SLUG_MAX).is_err());
        assert!(region("us").is_ok() && region("de").is_ok());
        assert!(region("mars").is_err());
        let many: Vec<Option<()>> = vec![None; BULK_MAX + 1];
        assert!(many.validate().is_err());
    }

    impl Validate for () {
        fn validate(&self) -> Result<(), ApiError> {
            Ok(())
        }
    }
}
