//! Every path `ARCHITECTURE.md` names exists: a rename that forgets the map
//! fails here. A path is a backticked token with a `/`, found from the
//! repository root or from a crate's `src`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;

const CRATES: &[&str] = &[
    "outbox-core",
    "outbox-core/testing",
    "outbox-seaorm",
    "outbox-axum",
    "migrations",
    "example-app",
];

#[test]
fn every_path_in_the_architecture_map_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut checked = 0;
    let mut missing = Vec::new();
    for (i, token) in text.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || !token.contains('/') || token.contains(' ') || token.contains("::") {
            continue;
        }
        let found = std::iter::once(root.join(token))
            .chain(
                CRATES
                    .iter()
                    .map(|name| root.join(name).join("src").join(token)),
            )
            .any(|path| path.exists());
        checked += 1;
        if !found {
            missing.push(token.to_owned());
        }
    }
    assert!(
        checked >= 20,
        "only {checked} paths found: is the map still there?"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}
