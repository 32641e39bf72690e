//! Shards: the unit of ordering; and their claim buckets, the unit of mutual
//! exclusion.
//!
//! A worker never claims a single shard: shards are hashed into
//! [`CLAIM_BUCKETS`] buckets per outbox kind, and a worker leases whole
//! buckets (see [`ShardKey::bucket`]). One lease covers every shard of its
//! bucket, so a round that delivers many small shards pays for a few leases
//! instead of one per shard, and a sync flush and a background round can never
//! work on one shard at once.

use std::fmt;

use crate::registry::Scope;

/// Which outbox table a row lives in.
///
/// A *region* outbox is written in a region silo and usually replicates toward
/// control; a *control* outbox is written in the control silo and targets one
/// region per row (its `region_name`, part of the shard).
///
/// Written and parsed (`serde`, [`FromStr`](std::str::FromStr)) as
/// `region` or `control`, as the admin API and the CLI take it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum OutboxKind {
    /// The `region_outbox` table.
    Region,
    /// The `control_outbox` table.
    Control,
}

impl OutboxKind {
    /// Both kinds, region first.
    pub const ALL: [OutboxKind; 2] = [OutboxKind::Region, OutboxKind::Control];

    /// A short lowercase name for logs, metric tags and the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutboxKind::Region => "region",
            OutboxKind::Control => "control",
        }
    }

    /// The small integer stored for this kind in auxiliary tables.
    pub const fn as_i16(self) -> i16 {
        match self {
            OutboxKind::Region => 0,
            OutboxKind::Control => 1,
        }
    }
}

/// A text that is not `region` or `control`.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown outbox kind {0:?}: expected `region` or `control`")]
pub struct UnknownOutboxKind(pub String);

crate::error_debug::debug_with_message!(UnknownOutboxKind);

impl std::str::FromStr for OutboxKind {
    type Err = UnknownOutboxKind;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "region" => Ok(Self::Region),
            "control" => Ok(Self::Control),
            other => Err(UnknownOutboxKind(other.to_owned())),
        }
    }
}

impl fmt::Display for OutboxKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Claim buckets per outbox kind: 1,024. Part of the storage contract: every
/// store maps a shard to the same bucket ([`ShardKey::bucket`]), and the SQL
/// stores compute it in their statements.
pub const CLAIM_BUCKETS: i32 = 1024;

/// Buckets one background claim leases at most: 512, half of them. The rest
/// stay free for other workers and for synchronous flushes, which wait when a
/// background round holds their shard's bucket. (A quarter wasted more of
/// each claim's scan on rows of buckets it could not take; all of them let
/// one round keep every flush waiting.)
pub const MAX_BUCKETS_PER_CLAIM: usize = 512;

/// A shard: `(shard_scope, shard_identifier)`, plus the target region for the
/// control outbox. Rows of one shard are delivered in order, by at most one
/// worker at a time.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardKey {
    kind: OutboxKind,
    region: Option<String>,
    scope: i32,
    identifier: i64,
}

impl ShardKey {
    /// A shard of the region outbox.
    pub fn region<S: Scope>(scope: S, identifier: i64) -> Self {
        Self::from_raw(OutboxKind::Region, scope.value(), identifier, None)
    }

    /// A shard of the control outbox, targeting `region_name`.
    pub fn control<S: Scope>(region_name: impl Into<String>, scope: S, identifier: i64) -> Self {
        Self::from_raw(
            OutboxKind::Control,
            scope.value(),
            identifier,
            Some(region_name.into()),
        )
    }

    /// A shard from its stored values. A region-outbox shard never has a region
    /// name and a control-outbox shard always has one (empty when absent).
    pub fn from_raw(kind: OutboxKind, scope: i32, identifier: i64, region: Option<String>) -> Self {
        let region = match kind {
            OutboxKind::Region => None,
            OutboxKind::Control => Some(region.unwrap_or_default()),
        };
        Self {
            kind,
            region,
            scope,
            identifier,
        }
    }

    /// The outbox table of this shard.
    pub fn kind(&self) -> OutboxKind {
        self.kind
    }

    /// The stored `shard_scope` value.
    pub fn scope(&self) -> i32 {
        self.scope
    }

    /// The stored `shard_identifier` value (e.g. an organization id).
    pub fn identifier(&self) -> i64 {
        self.identifier
    }

    /// The target region of a control-outbox shard.
    pub fn region_name(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// The claim bucket of this shard, in `0..CLAIM_BUCKETS`: `((identifier
    /// mod 1024) + (scope mod 1024) × 37) mod 1024`, with remainders taken
    /// toward zero as SQL's `%` does, then made non-negative. The region of a
    /// control-outbox shard is left out: one organization's shards for every
    /// region share a bucket, which costs a little parallelism and nothing
    /// else.
    ///
    /// ```
    /// # outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
    /// use outbox_core::ShardKey;
    /// assert_eq!(ShardKey::region(OutboxScope::OrgScope, 7).bucket(), 7);
    /// assert_eq!(ShardKey::region(OutboxScope::OrgScope, 1031).bucket(), 7);
    /// assert_eq!(ShardKey::control("us", OutboxScope::OrgScope, 7).bucket(), 7);
    /// ```
    pub fn bucket(&self) -> i32 {
        bucket_of(self.scope, self.identifier)
    }
}

/// The bucket of a `(scope, identifier)` pair; see [`ShardKey::bucket`].
pub fn bucket_of(scope: i32, identifier: i64) -> i32 {
    let n = i64::from(CLAIM_BUCKETS);
    // `%` truncates toward zero in Rust as in PostgreSQL and SQLite.
    let mixed = (identifier % n + (i64::from(scope) % n) * 37) % n;
    // In 0..CLAIM_BUCKETS after the adjustment, so the cast cannot truncate.
    ((mixed + n) % n) as i32
}

impl fmt::Display for ShardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.region {
            Some(region) => write!(
                f,
                "{}[{}]:{}/{}",
                self.kind, region, self.scope, self.identifier
            ),
            None => write!(f, "{}:{}/{}", self.kind, self.scope, self.identifier),
        }
    }
}

/// Text that is not a shard as [`ShardKey`]'s `Display` writes it
/// (`region:0/42`, `control[us]:0/42`).
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a shard (`region:<scope>/<identifier>` or `control[<region>]:<scope>/<identifier>`): {0:?}")]
pub struct InvalidShardKey(pub String);

crate::error_debug::debug_with_message!(InvalidShardKey);

impl std::str::FromStr for ShardKey {
    type Err = InvalidShardKey;

    /// Reads what `Display` writes: `region:0/42`, `control[us]:0/42`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidShardKey(text.to_owned());
        let (head, numbers) = text.split_once(':').ok_or_else(invalid)?;
        let (kind, region) = match head.split_once('[') {
            Some((kind, rest)) => {
                let region = rest
                    .strip_suffix(']')
                    .filter(|r| !r.is_empty())
                    .ok_or_else(invalid)?;
                (kind, Some(region.to_owned()))
            }
            None => (head, None),
        };
        let kind: OutboxKind = kind.parse().map_err(|_| invalid())?;
        if (kind == OutboxKind::Control) != region.is_some() {
            return Err(invalid());
        }
        let (scope, identifier) = numbers.split_once('/').ok_or_else(invalid)?;
        let scope = scope.parse().map_err(|_| invalid())?;
        let identifier = identifier.parse().map_err(|_| invalid())?;
        Ok(Self::from_raw(kind, scope, identifier, region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_reads_back_what_it_writes() {
        for shard in [
            ShardKey::from_raw(OutboxKind::Region, 0, 42, None),
            ShardKey::from_raw(OutboxKind::Region, 3, -7, None),
            ShardKey::from_raw(OutboxKind::Control, 1, i64::MAX, Some("eu-west".to_owned())),
        ] {
            assert_eq!(shard.to_string().parse::<ShardKey>(), Ok(shard.clone()));
        }
        for text in [
            "",
            "region",
            "region:0",
            "region:x/1",
            "region[us]:0/1",
            "control:0/1",
            "control[]:0/1",
            "queue:0/1",
            "region:0/1/2",
        ] {
            assert!(text.parse::<ShardKey>().is_err(), "{text:?}");
        }
    }

    #[test]
    fn kinds_are_written_and_parsed_as_their_names() {
        for kind in OutboxKind::ALL {
            assert_eq!(kind.as_str().parse::<OutboxKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
            assert_eq!(serde_json::from_str::<OutboxKind>(&json).unwrap(), kind);
        }
        assert_eq!(
            "Region".parse::<OutboxKind>(),
            Err(UnknownOutboxKind("Region".to_owned()))
        );
        assert!(serde_json::from_str::<OutboxKind>("\"moon\"").is_err());
    }

    #[test]
    fn buckets_cover_the_range_and_handle_negative_values() {
        for (scope, identifier) in [
            (0, 0),
            (0, -1),
            (-3, 5),
            (i32::MIN, i64::MIN),
            (i32::MAX, i64::MAX),
            (7, 1_000_000_007),
        ] {
            let bucket = bucket_of(scope, identifier);
            assert!(
                (0..CLAIM_BUCKETS).contains(&bucket),
                "{scope}/{identifier}: {bucket}"
            );
        }
        assert_eq!(bucket_of(0, -1), 1023);
        assert_eq!(bucket_of(1, 0), 37);
        assert_eq!(bucket_of(0, 1024 * 5 + 3), 3);
    }
}
