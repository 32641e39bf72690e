//! What names a shard or a control's target, in requests and answers, with
//! its scope by number and by name.

use serde::{Deserialize, Serialize};

use outbox_core::{Category, ControlTarget, Scope, ShardKey};

use super::super::error::AdminError;
use super::query::region;
use super::Kind;

/// A shard: `region` is required for the control outbox and refused for
/// the region outbox. Answers carry `scope_name` beside `scope`; a request
/// may leave it out (or send back what it read: it must then be the name
/// of `scope`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardRef {
    /// Its table.
    #[schema(value_type = String, example = "region")]
    pub kind: Kind,
    /// Its region (control outbox only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Its scope's value.
    pub scope: i32,
    /// Its scope's declared name (`null` for a scope this binary does not
    /// declare). Optional in a request; if given, it must name `scope`.
    #[serde(default)]
    #[schema(example = "OrganizationScope")]
    pub scope_name: Option<String>,
    /// Its identifier.
    pub identifier: i64,
}

fn checked_region(kind: Kind, region: Option<&String>) -> Result<Option<String>, AdminError> {
    match (kind, region) {
        (Kind::Region, None) => Ok(None),
        (Kind::Region, Some(_)) => Err(AdminError::bad_request(
            "`region` names a region of the control outbox; the region outbox has none",
        )),
        (Kind::Control, Some(region)) if !region.is_empty() && region.len() <= 64 => {
            Ok(Some(region.clone()))
        }
        (Kind::Control, _) => Err(AdminError::bad_request(
            "the control outbox needs `region` (1 to 64 characters)",
        )),
    }
}

/// The declared name of the scope with this value in `C`'s registry.
pub(crate) fn scope_name<C: Category>(value: i32) -> Option<String> {
    C::Scope::try_from(value)
        .ok()
        .map(|scope| scope.name().to_owned())
}

/// The declared name of the category with this value in `C`'s registry.
pub(crate) fn category_name<C: Category>(value: i32) -> Option<String> {
    C::try_from(value)
        .ok()
        .map(|category| category.name().to_owned())
}

/// A `scope_name` sent with `scope` is the name `C` declares for it.
fn checked_scope_name<C: Category>(scope: i32, given: Option<&str>) -> Result<(), AdminError> {
    let Some(given) = given else {
        return Ok(());
    };
    match scope_name::<C>(scope) {
        Some(declared) if declared == given => Ok(()),
        Some(declared) => Err(AdminError::bad_request(format!(
            "`scope_name` {given:?} is not the name of scope {scope}, which is {declared:?}: \
             send that, or leave `scope_name` out"
        ))),
        None => Err(AdminError::bad_request(format!(
            "scope {scope} is not declared by this binary and has no name: \
             leave `scope_name` out (or null), not {given:?}"
        ))),
    }
}

impl ShardRef {
    /// The shard key, checked (`C`: the registry `scope_name` must agree
    /// with).
    pub(crate) fn key<C: Category>(&self) -> Result<ShardKey, AdminError> {
        checked_scope_name::<C>(self.scope, self.scope_name.as_deref())?;
        let region = checked_region(self.kind, self.region.as_ref())?;
        Ok(ShardKey::from_raw(
            self.kind,
            self.scope,
            self.identifier,
            region,
        ))
    }

    /// `shard`, its scope named by `C`'s registry.
    pub(crate) fn of<C: Category>(shard: &ShardKey) -> Self {
        Self {
            kind: shard.kind(),
            region: shard.region_name().map(str::to_owned),
            scope: shard.scope(),
            scope_name: scope_name::<C>(shard.scope()),
            identifier: shard.identifier(),
        }
    }
}

/// What a control applies to: a shard, or a whole scope when `identifier`
/// is absent. `scope_name` as in [`ShardRef`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetRef {
    /// The table.
    #[schema(value_type = String, example = "region")]
    pub kind: Kind,
    /// The region (control outbox only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The scope's value.
    pub scope: i32,
    /// The scope's declared name (`null` for a scope this binary does not
    /// declare). Optional in a request; if given, it must name `scope`.
    #[serde(default)]
    #[schema(example = "OrganizationScope")]
    pub scope_name: Option<String>,
    /// The shard; absent: every shard of the scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier: Option<i64>,
}

impl TargetRef {
    /// The control target, checked (`C`: the registry `scope_name` must
    /// agree with).
    pub(crate) fn target<C: Category>(&self) -> Result<ControlTarget, AdminError> {
        checked_scope_name::<C>(self.scope, self.scope_name.as_deref())?;
        let region = checked_region(self.kind, self.region.as_ref())?;
        Ok(match self.identifier {
            Some(identifier) => ControlTarget::Shard(ShardKey::from_raw(
                self.kind, self.scope, identifier, region,
            )),
            None => ControlTarget::Scope {
                kind: self.kind,
                region,
                scope: self.scope,
            },
        })
    }

    /// The shard this target names, if it names one.
    pub(crate) fn shard(&self) -> Option<ShardRef> {
        Some(ShardRef {
            kind: self.kind,
            region: self.region.clone(),
            scope: self.scope,
            scope_name: self.scope_name.clone(),
            identifier: self.identifier?,
        })
    }

    /// `target`, its scope named by `C`'s registry.
    pub(crate) fn of<C: Category>(target: &ControlTarget) -> Self {
        match target {
            ControlTarget::Shard(shard) => {
                let shard = ShardRef::of::<C>(shard);
                Self {
                    kind: shard.kind,
                    region: shard.region,
                    scope: shard.scope,
                    scope_name: shard.scope_name,
                    identifier: Some(shard.identifier),
                }
            }
            ControlTarget::Scope {
                kind,
                region,
                scope,
            } => Self {
                kind: *kind,
                region: region.clone(),
                scope: *scope,
                scope_name: scope_name::<C>(*scope),
                identifier: None,
            },
        }
    }
}

/// `?kind=region&scope=0&identifier=65` (and `&region=us` for the control
/// outbox, `&scope_name=...` if the client sends it): one shard.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShardQuery {
    #[serde(default = "region")]
    pub(crate) kind: Kind,
    pub(crate) scope: i32,
    #[serde(default)]
    pub(crate) scope_name: Option<String>,
    pub(crate) identifier: i64,
    #[serde(default)]
    pub(crate) region: Option<String>,
}

impl ShardQuery {
    pub(crate) fn key<C: Category>(self) -> Result<ShardKey, AdminError> {
        ShardRef {
            kind: self.kind,
            region: self.region,
            scope: self.scope,
            scope_name: self.scope_name,
            identifier: self.identifier,
        }
        .key::<C>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    outbox_core::registry! {
        OrganizationScope = 0 (shard_field = "organization_id") {
            OrganizationUpdate = 1,
        }
    }

    fn shard(scope: i32, scope_name: Option<&str>) -> ShardRef {
        ShardRef {
            kind: Kind::Region,
            region: None,
            scope,
            scope_name: scope_name.map(str::to_owned),
            identifier: 7,
        }
    }

    #[test]
    fn a_scope_name_sent_back_must_name_the_scope() {
        assert!(shard(0, None).key::<OutboxCategory>().is_ok());
        assert!(shard(0, Some("OrganizationScope"))
            .key::<OutboxCategory>()
            .is_ok());
        for (scope, name) in [(0, "AuditLogScope"), (0, "organizationscope"), (9, "X")] {
            let error = shard(scope, Some(name))
                .key::<OutboxCategory>()
                .unwrap_err();
            assert_eq!(error.code, "bad_request", "{scope} {name}");
            assert!(error.message.contains("scope_name"), "{}", error.message);
        }
        // An undeclared scope is still a shard; it has no name.
        assert!(shard(9, None).key::<OutboxCategory>().is_ok());
    }

    #[test]
    fn answers_name_the_scope_beside_its_number() {
        let key = ShardKey::region(OutboxScope::OrganizationScope, 7);
        let shard = ShardRef::of::<OutboxCategory>(&key);
        assert_eq!(
            serde_json::to_value(&shard).unwrap(),
            serde_json::json!({"kind": "region", "scope": 0, "scope_name": "OrganizationScope", "identifier": 7})
        );
        let unknown = ShardRef::of::<OutboxCategory>(&ShardKey::from_raw(Kind::Region, 9, 7, None));
        assert_eq!(unknown.scope_name, None);
        let scope = TargetRef::of::<OutboxCategory>(&ControlTarget::Scope {
            kind: Kind::Region,
            region: None,
            scope: 0,
        });
        assert_eq!(scope.scope_name.as_deref(), Some("OrganizationScope"));
    }
}
