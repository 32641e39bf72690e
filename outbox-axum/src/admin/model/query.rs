//! The query strings of the list routes, and their limits.

use serde::Deserialize;

use super::super::error::AdminError;
use super::Kind;

/// `?kind=region&limit=100` (`GET /shards`, `GET /dead-letters`).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    #[serde(default = "region")]
    pub(crate) kind: Kind,
    #[serde(default = "hundred")]
    pub(crate) limit: usize,
}

/// The default table of a query: the region outbox.
pub(super) fn region() -> Kind {
    Kind::Region
}

/// The default `limit` of a query.
pub(super) fn hundred() -> usize {
    100
}

/// The largest `limit` and replay batch.
pub(crate) const MAX_LIMIT: usize = 10_000;

impl ListQuery {
    pub(crate) fn checked(self) -> Result<Self, AdminError> {
        check_limit(self.limit)?;
        Ok(self)
    }
}

/// A `limit` of a query: 1 to [`MAX_LIMIT`].
pub(super) fn check_limit(limit: usize) -> Result<usize, AdminError> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(AdminError::bad_request(format!(
            "`limit` must be between 1 and {MAX_LIMIT}"
        )));
    }
    Ok(limit)
}
