//! Shards: the unit of ordering and of mutual exclusion.

use std::fmt;

use crate::registry::Scope;

/// Which outbox table a row lives in.
///
/// A *region* outbox is written in a region silo and usually replicates toward
/// control; a *control* outbox is written in the control silo and targets one
/// region per row (its `region_name`, part of the shard).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

impl fmt::Display for OutboxKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
