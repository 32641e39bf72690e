//! The registry's AsyncAPI document validates with the AsyncAPI parser
//! (the `@asyncapi/parser` npm package, a second implementation), and
//! says what the registry says: a channel per category, a message per
//! version with the payload's schema, the shard as a parameter.
//!
//! The parser is installed with the machine's npm into
//! `OUTBOX_ASYNCAPI_PARSER_DIR` (`scripts/test.sh` sets it), or into this
//! crate's test scratch directory, on first use. Without Node.js and npm
//! the test fails and says so: it never skips.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;

use outbox_core::asyncapi::{document, Info};
use outbox_core::contract::Upcasts;
use outbox_core::Contract;
use serde_json::Value;

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Owner {
    pub email: String,
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct OrgV1 {
    pub name: String,
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct OrgV2 {
    pub name: String,
    pub seats: u32,
    pub owner: Option<Owner>,
}

impl Contract for OrgV1 {
    const VERSION: u32 = 1;
}

impl From<OrgV1> for OrgV2 {
    fn from(v1: OrgV1) -> Self {
        Self {
            name: v1.name,
            seats: 1,
            owner: None,
        }
    }
}

impl Contract for OrgV2 {
    const VERSION: u32 = 2;
    fn older() -> Upcasts<Self> {
        Upcasts::from::<OrgV1>()
    }
}

outbox_core::registry! {
    OrgScope = 0 (shard_field = "organization_id") {
        OrgUpdate = 1 (payload = OrgV2),
        OrgPing = 2,
        OrgLegacy = 3 (retired),
    }
    AuditScope = 1 {
        AuditEvent = 10 (no_coalesce),
    }
}

fn the_document() -> Value {
    document::<OutboxCategory>(&Info::new("Organizations", "1.4.0").with_description("Test"))
}

#[test]
fn the_document_says_what_the_registry_says() {
    let doc = the_document();
    assert_eq!(doc["asyncapi"], "3.0.0");
    assert_eq!(doc["info"]["title"], "Organizations");
    let channels = doc["channels"].as_object().unwrap();
    let mut names: Vec<&String> = channels.keys().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "AuditScope.AuditEvent",
            "OrgScope.OrgPing",
            "OrgScope.OrgUpdate"
        ],
        "one channel per live category"
    );
    let update = &channels["OrgScope.OrgUpdate"];
    assert_eq!(
        update["address"],
        "outbox/{kind}/OrgScope/{shard}/OrgUpdate"
    );
    assert!(update["parameters"]["shard"]["description"]
        .as_str()
        .unwrap()
        .contains("organization_id"));
    let versions: Vec<&String> = update["messages"].as_object().unwrap().keys().collect();
    assert_eq!(versions, ["OrgUpdate.v1", "OrgUpdate.v2"]);
    let messages = &doc["components"]["messages"];
    assert_eq!(messages["OrgUpdate.v2"]["x-outbox-payload-version"], 2);
    assert_eq!(
        messages["OrgUpdate.v2"]["payload"]["$ref"],
        "#/components/schemas/OrgV2"
    );
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["OrgV2"]["properties"]["seats"]["type"], "integer");
    assert_eq!(schemas["OrgV1"]["properties"]["name"]["type"], "string");
    assert!(
        schemas["Owner"].is_object(),
        "nested types are components: {schemas}"
    );
    assert!(messages["OrgPing"]["payload"]["description"]
        .as_str()
        .unwrap()
        .contains("Untyped"));
    assert!(channels["AuditScope.AuditEvent"]["description"]
        .as_str()
        .unwrap()
        .contains("none coalesced"));
    assert_eq!(doc["operations"]["sendOrgUpdate"]["action"], "send");
}

#[test]
fn the_document_validates_with_the_asyncapi_parser() {
    let parser = parser_dir();
    let scratch = tempdir();
    let good = scratch.join("asyncapi.json");
    std::fs::write(&good, serde_json::to_vec_pretty(&the_document()).unwrap()).unwrap();
    let (ok, output) = validate(&parser, &good);
    assert!(ok, "the parser refused the document:\n{output}");

    // The validator can fail: the same document without its `info`.
    let mut broken = the_document();
    broken.as_object_mut().unwrap().remove("info");
    let bad = scratch.join("broken.json");
    std::fs::write(&bad, serde_json::to_vec_pretty(&broken).unwrap()).unwrap();
    let (ok, output) = validate(&parser, &bad);
    assert!(!ok, "a document without info passed:\n{output}");
    std::fs::remove_dir_all(&scratch).unwrap();
}

const VALIDATE: &str = r#"
import { Parser } from '@asyncapi/parser';
import { readFileSync } from 'node:fs';
const parser = new Parser();
const { document, diagnostics } = await parser.parse(readFileSync(process.argv[2], 'utf8'));
for (const d of diagnostics) {
  console.log(JSON.stringify({ severity: d.severity, code: d.code, message: d.message, path: d.path }));
}
const errors = diagnostics.filter((d) => d.severity === 0);
process.exit(document && errors.length === 0 ? 0 : 1);
"#;

/// Runs the parser on `file`: whether it accepted it, and what it said.
fn validate(parser: &Path, file: &Path) -> (bool, String) {
    let output = Command::new("node")
        .arg(parser.join("validate.mjs"))
        .arg(file)
        .output()
        .expect("node runs (Node.js is installed by scripts/test.sh)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// Where `@asyncapi/parser` is installed, installing it on first use.
fn parser_dir() -> PathBuf {
    let dir = std::env::var_os("OUTBOX_ASYNCAPI_PARSER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("asyncapi-parser"));
    std::fs::create_dir_all(&dir).unwrap();
    if !dir
        .join("node_modules/@asyncapi/parser/package.json")
        .exists()
    {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&dir)
            .arg("@asyncapi/parser@3.6.6")
            .status()
            .expect(
                "npm runs: the AsyncAPI check needs Node.js and npm (apt-get install nodejs npm)",
            );
        assert!(status.success(), "npm install @asyncapi/parser failed");
    }
    std::fs::write(dir.join("validate.mjs"), VALIDATE).unwrap();
    dir
}

fn tempdir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "asyncapi-{}-{}",
        std::process::id(),
        outbox_core::uuid::Uuid::now_v7()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
