//! The admin's words for what it shows: scopes, categories, targets and
//! dead letters by name and number, as the audit log records them (`ops`)
//! and the dashboard's page shows them. Both read them here: the
//! operations never depend on the page.

use outbox_core::{Category, ControlTarget, OutboxKind, Scope, ShardKey};

use super::model::{Kind, TargetRef};

/// A scope by name and number, as the page and the audit log show it:
/// `OrganizationScope (0)`, or `scope 7` for one this binary does not
/// declare.
pub(crate) fn scope_label(value: i32, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{name} ({value})"),
        None => format!("scope {value}"),
    }
}

/// A category likewise: `OrganizationUpdate (1)`, or `category 9`.
pub(crate) fn category_label(value: i32, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{name} ({value})"),
        None => format!("category {value}"),
    }
}

/// "region-outbox shard OrganizationScope (0) 42" or "region-outbox scope
/// OrganizationScope (0)" (with the region of a control-outbox target).
pub(crate) fn target_label<C: Category>(target: &TargetRef) -> String {
    describe(target, |value| {
        scope_label(
            value,
            C::Scope::try_from(value).ok().map(|scope| scope.name()),
        )
    })
}

/// A control target as [`target_label`] names it.
pub(crate) fn control_target_label<C: Category>(target: &ControlTarget) -> String {
    target_label::<C>(&TargetRef::of::<C>(target))
}

/// Shards as [`target_label`] names them, joined by `, `.
pub(crate) fn shards_label<C: Category>(shards: &[ShardKey]) -> String {
    shards
        .iter()
        .map(|shard| control_target_label::<C>(&ControlTarget::Shard(shard.clone())))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `region dead letters 4, 7` (the first 20 ids, then `… (n ids)`).
pub(crate) fn ids_label(kind: OutboxKind, ids: &[i64]) -> String {
    let shown: Vec<String> = ids.iter().take(20).map(ToString::to_string).collect();
    let more = if ids.len() > shown.len() {
        format!(", … ({} ids)", ids.len())
    } else {
        String::new()
    };
    format!("{kind} dead letters {}{more}", shown.join(", "))
}

/// `target` with its scope named by `scope_label`.
pub(crate) fn describe(target: &TargetRef, scope_label: impl Fn(i32) -> String) -> String {
    let scope = scope_label(target.scope);
    let region = target
        .region
        .as_ref()
        .map(|region| format!(" → {region}"))
        .unwrap_or_default();
    match target.identifier {
        Some(identifier) => format!(
            "{} shard {scope} {identifier}{region}",
            kind_name(target.kind)
        ),
        None => format!("{} scope {scope}{region}", kind_name(target.kind)),
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Region => "region-outbox",
        Kind::Control => "control-outbox",
    }
}
