//! An AsyncAPI 3.0 document of the registry: what the outbox sends, per
//! scope and category, with each typed category's payload schemas by
//! version (see [`crate::registry::contract`]).
//!
//! One channel per category, at the address
//! `outbox/{kind}/{scope}/{shard}/{category}` (the `kind` is `region` or
//! `control`, the `shard` the shard identifier: the scope's
//! `shard_field` when declared); one message per version the category's
//! receivers read (`<Category>.v<version>`; an untyped category has one
//! message, `<Category>`, whose payload is any JSON), with the delivery
//! headers (message id, shard, object, fencing token) as its headers
//! schema and the object key as its correlation id; and one `send`
//! operation per channel. Retired categories are left out.
//!
//! The admin router of `outbox-axum` serves it at `GET /asyncapi.json`,
//! beside `GET /openapi.json`.
//!
//! ```
//! #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//! pub struct Rename { pub name: String }
//! impl outbox_core::Contract for Rename { const VERSION: u32 = 1; }
//!
//! outbox_core::registry! {
//!     OrgScope = 0 (shard_field = "organization_id") {
//!         OrgRename = 1 (payload = Rename),
//!         OrgPing = 2,
//!     }
//! }
//!
//! let document = outbox_core::asyncapi::document::<OutboxCategory>(
//!     &outbox_core::asyncapi::Info::new("Organizations", "1.4.0"),
//! );
//! assert_eq!(document["asyncapi"], "3.0.0");
//! let message = &document["components"]["messages"]["OrgRename.v1"];
//! assert_eq!(message["payload"]["$ref"], "#/components/schemas/Rename");
//! let schema = &document["components"]["schemas"]["Rename"];
//! assert_eq!(schema["properties"]["name"]["type"], "string");
//! ```

use serde_json::{json, Map, Value};

use crate::registry::{Category, Scope};

/// The document's `info`: the service's title and version.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Info {
    /// The title (the service's name).
    pub title: String,
    /// The service's version (not the AsyncAPI version).
    pub version: String,
    /// A description, if any.
    pub description: Option<String>,
}

impl Info {
    /// The info of `title` at `version`.
    pub fn new(title: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            version: version.into(),
            description: None,
        }
    }

    /// With a description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// The AsyncAPI 3.0 document of `C`'s registry (see the [module](self)).
pub fn document<C: Category>(info: &Info) -> Value {
    let mut channels = Map::new();
    let mut operations = Map::new();
    let mut messages = Map::new();
    let mut schemas = Map::new();
    for &category in C::ALL.iter().filter(|category| !category.is_retired()) {
        let scope = category.scope();
        let channel_id = format!("{}.{}", scope.name(), category.name());
        let mut channel_messages = Map::new();
        match category.contract() {
            Some(contract) => {
                for version in &contract.versions {
                    let id = format!("{}.v{}", category.name(), version.version);
                    let schema_id = schema_name(version.type_name);
                    let (schema, definitions) = split_definitions(version.schema.clone());
                    for (name, definition) in definitions {
                        schemas.entry(name).or_insert(definition);
                    }
                    schemas.insert(schema_id.clone(), schema);
                    messages.insert(
                        id.clone(),
                        message(
                            category,
                            &format!("{} (version {})", category.name(), version.version),
                            json!({ "$ref": format!("#/components/schemas/{schema_id}") }),
                            Some((version.version, version.version == contract.version)),
                        ),
                    );
                    channel_messages.insert(
                        id.clone(),
                        json!({ "$ref": format!("#/components/messages/{id}") }),
                    );
                }
            }
            None => {
                let id = category.name().to_owned();
                messages.insert(
                    id.clone(),
                    message(
                        category,
                        category.name(),
                        json!({ "description": "Untyped: any JSON value, or none." }),
                        None,
                    ),
                );
                channel_messages.insert(
                    id.clone(),
                    json!({ "$ref": format!("#/components/messages/{id}") }),
                );
            }
        }
        let shard_description = match scope.shard_field() {
            Some(field) => format!(
                "The shard identifier: the {field} of the scope {}.",
                scope.name()
            ),
            None => format!("The shard identifier within the scope {}.", scope.name()),
        };
        let message_refs: Vec<Value> = channel_messages
            .keys()
            .map(|id| json!({ "$ref": format!("#/channels/{channel_id}/messages/{id}") }))
            .collect();
        channels.insert(
            channel_id.clone(),
            json!({
                "address": format!("outbox/{{kind}}/{}/{{shard}}/{}", scope.name(), category.name()),
                "title": category.name(),
                "description": format!(
                    "Messages of {} (category {}) in the scope {} (scope {}), delivered in \
                     order per shard{}.",
                    category.name(),
                    category.value(),
                    scope.name(),
                    scope.value(),
                    if category.coalesces() {
                        "; only the newest message about an object is delivered when several wait"
                    } else {
                        "; every message is delivered, none coalesced"
                    },
                ),
                "parameters": {
                    "kind": {
                        "enum": ["region", "control"],
                        "description": "The outbox table: region, or control (then per region).",
                    },
                    "shard": { "description": shard_description },
                },
                "messages": Value::Object(channel_messages),
            }),
        );
        operations.insert(
            format!("send{}", category.name()),
            json!({
                "action": "send",
                "channel": { "$ref": format!("#/channels/{channel_id}") },
                "summary": format!("The outbox delivers {}.", category.name()),
                "messages": message_refs,
            }),
        );
    }
    let mut info_value = json!({ "title": info.title, "version": info.version });
    if let Some(description) = &info.description {
        info_value["description"] = json!(description);
    }
    json!({
        "asyncapi": "3.0.0",
        "info": info_value,
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {
            "messages": messages,
            "schemas": schemas,
        },
    })
}

/// A message of `category`: its headers, correlation id and payload.
fn message<C: Category>(
    category: C,
    title: &str,
    payload: Value,
    version: Option<(u32, bool)>,
) -> Value {
    let mut message = json!({
        "name": category.name(),
        "title": title,
        "contentType": "application/json",
        "headers": headers(),
        "correlationId": {
            "description": "The object the message is about: with the category, what \
                            coalesces.",
            "location": "$message.header#/outbox-object",
        },
        "payload": payload,
    });
    if let Some((version, current)) = version {
        message["summary"] = json!(if current {
            format!("Version {version}: what this build writes.")
        } else {
            format!("Version {version}: read by this build's receivers, upcast.")
        });
        message["x-outbox-payload-version"] = json!(version);
    }
    message
}

/// The delivery headers every message carries.
fn headers() -> Value {
    json!({
        "type": "object",
        "properties": {
            "outbox-message-id": {
                "type": "string",
                "format": "uuid",
                "description": "The message id: the same on every delivery of one row.",
            },
            "outbox-shard": {
                "type": "string",
                "description": "The shard: scope and identifier (and region, for the control outbox).",
            },
            "outbox-object": {
                "type": "string",
                "description": "The object the message is about.",
            },
            "outbox-fence": {
                "type": "string",
                "description": "The claim's fencing token: only grows per shard.",
            },
        },
    })
}

/// A schema's name in `components/schemas`: its Rust type's last segment.
fn schema_name(type_name: &str) -> String {
    let base = type_name.split('<').next().unwrap_or(type_name);
    base.rsplit("::").next().unwrap_or(base).to_owned()
}

/// Takes `$defs` out of a schemars schema, rewriting references to them
/// into the document's `components/schemas`.
fn split_definitions(mut schema: Value) -> (Value, Vec<(String, Value)>) {
    let definitions = schema
        .as_object_mut()
        .and_then(|object| {
            object.remove("$schema");
            object.remove("$defs")
        })
        .and_then(|defs| match defs {
            Value::Object(defs) => Some(defs.into_iter().collect::<Vec<_>>()),
            _ => None,
        })
        .unwrap_or_default();
    let mut definitions: Vec<(String, Value)> = definitions
        .into_iter()
        .map(|(name, mut definition)| {
            rewrite_refs(&mut definition);
            (name, definition)
        })
        .collect();
    definitions.sort_by(|a, b| a.0.cmp(&b.0));
    rewrite_refs(&mut schema);
    (schema, definitions)
}

fn rewrite_refs(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(reference)) = object.get_mut("$ref") {
                if let Some(name) = reference.strip_prefix("#/$defs/") {
                    *reference = format!("#/components/schemas/{name}");
                }
            }
            for value in object.values_mut() {
                rewrite_refs(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_the_types_last_segment() {
        assert_eq!(schema_name("app::contracts::OrgV2"), "OrgV2");
        assert_eq!(schema_name("OrgV2"), "OrgV2");
        assert_eq!(schema_name("app::Wrapper<app::Inner>"), "Wrapper");
    }

    #[test]
    fn definitions_move_to_components_with_their_references() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "properties": { "owner": { "$ref": "#/$defs/Owner" } },
            "$defs": { "Owner": { "properties": { "next": { "$ref": "#/$defs/Owner" } } } },
        });
        let (schema, definitions) = split_definitions(schema);
        assert_eq!(
            schema["properties"]["owner"]["$ref"],
            "#/components/schemas/Owner"
        );
        assert!(schema.get("$schema").is_none());
        assert_eq!(definitions.len(), 1);
        assert_eq!(
            definitions[0].1["properties"]["next"]["$ref"],
            "#/components/schemas/Owner"
        );
    }
}
