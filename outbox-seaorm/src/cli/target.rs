//! From command-line arguments to shards and control targets, and from
//! shards to their views (with the registry's names).

use outbox_core::{Category, ControlTarget, Scope, ShardKey};

use super::command::{ShardArgs, TargetArgs};
use super::error::CliError;
use super::output::{Kind, TargetView};

/// The longest region name: 64 characters.
const REGION_MAX: usize = 64;

/// The value of the scope named (or numbered) `given` in `C`'s registry.
pub(crate) fn scope_value<C: Category>(given: &str) -> Result<i32, CliError> {
    let given_trimmed = given.trim();
    let found = <C::Scope as Scope>::ALL.iter().find(|scope| {
        scope.name().eq_ignore_ascii_case(given_trimmed)
            || given_trimmed.parse::<i32>().ok() == Some(scope.value())
    });
    match found {
        Some(scope) => Ok(scope.value()),
        None => Err(CliError::UnknownScope {
            given: given.to_owned(),
            known: <C::Scope as Scope>::ALL
                .iter()
                .map(|scope| format!("{} ({})", scope.name(), scope.value()))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

fn checked_region(kind: Kind, region: Option<&str>) -> Result<Option<String>, CliError> {
    match (kind, region) {
        (Kind::Region, None) => Ok(None),
        (Kind::Region, Some(_)) => Err(CliError::RegionNotAllowed),
        (Kind::Control, Some(region))
            if !region.is_empty() && region.chars().count() <= REGION_MAX =>
        {
            Ok(Some(region.to_owned()))
        }
        (Kind::Control, _) => Err(CliError::RegionRequired),
    }
}

/// The control target of `args`, checked against `C`'s registry.
pub(crate) fn control_target<C: Category>(args: &TargetArgs) -> Result<ControlTarget, CliError> {
    let scope = scope_value::<C>(&args.scope)?;
    let region = checked_region(args.kind, args.region.as_deref())?;
    let kind = args.kind;
    Ok(match args.shard {
        Some(identifier) => {
            ControlTarget::Shard(ShardKey::from_raw(kind, scope, identifier, region))
        }
        None => ControlTarget::Scope {
            kind,
            region,
            scope,
        },
    })
}

/// The shard of `args`, checked against `C`'s registry.
pub(crate) fn shard_key<C: Category>(args: &ShardArgs) -> Result<ShardKey, CliError> {
    let scope = scope_value::<C>(&args.scope)?;
    let region = checked_region(args.kind, args.region.as_deref())?;
    Ok(ShardKey::from_raw(args.kind, scope, args.shard, region))
}

/// The name of the scope with this stored value, if `C` declares it.
pub(crate) fn scope_name<C: Category>(value: i32) -> Option<String> {
    <C::Scope as TryFrom<i32>>::try_from(value)
        .ok()
        .map(|scope| scope.name().to_owned())
}

/// The name of the category with this stored value, if `C` declares it.
pub(crate) fn category_name<C: Category>(value: i32) -> Option<String> {
    C::try_from(value)
        .ok()
        .map(|category| category.name().to_owned())
}

/// A shard's view.
pub(crate) fn shard_view<C: Category>(shard: &ShardKey) -> TargetView {
    TargetView {
        kind: shard.kind(),
        region: shard.region_name().map(str::to_owned),
        scope: shard.scope(),
        scope_name: scope_name::<C>(shard.scope()),
        identifier: Some(shard.identifier()),
    }
}

/// A control target's view.
pub(crate) fn target_view<C: Category>(target: &ControlTarget) -> TargetView {
    match target {
        ControlTarget::Shard(shard) => shard_view::<C>(shard),
        ControlTarget::Scope {
            kind,
            region,
            scope,
        } => TargetView {
            kind: (*kind),
            region: region.clone(),
            scope: *scope,
            scope_name: scope_name::<C>(*scope),
            identifier: None,
        },
    }
}
