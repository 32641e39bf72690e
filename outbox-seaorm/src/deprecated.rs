//! Deprecated paths of the test support that is in `outbox-testing`, kept
//! until 0.2 so that an upgrade says what to change.
//!
//! - `#[outbox_seaorm::test]` and `outbox_seaorm::on_both_backends!` still
//!   work (their expansions name `outbox_testing`, a dev-dependency the
//!   test databases need anyway) and warn with their new paths.
//! - The feature `test-utils` gated `outbox_seaorm::testing`, which cannot
//!   come back here (`outbox-testing` depends on this crate): a build of
//!   a crate that turns it on fails at once, with what to write instead.
//!   Builds of this crate itself (`--all-features`: docs.rs, `cargo
//!   package`, the workspace's lints) are not refused: there it is the
//!   primary package.

pub use outbox_seaorm_derive::seaorm_test as test;

/// `outbox_testing::on_both_backends!`, at its old path.
#[deprecated(
    since = "0.1.1",
    note = "use `outbox_testing::on_both_backends!`: add `outbox-testing = { version = \"0.1\", features = [\"seaorm\"] }` to [dev-dependencies]"
)]
#[doc(hidden)]
#[macro_export]
macro_rules! on_both_backends {
    ($($tokens:tt)*) => {
        ::outbox_testing::on_both_backends! { $($tokens)* }
    };
}

#[cfg(feature = "test-utils")]
const _: () = if option_env!("CARGO_PRIMARY_PACKAGE").is_none() {
    panic!(
        "outbox-seaorm's feature `test-utils` is gone: test databases are in the `outbox-testing` \
         crate. In Cargo.toml, remove `test-utils` and add `outbox-testing = {{ version = \"0.1\", \
         features = [\"seaorm\"] }}` under [dev-dependencies]; in code, replace \
         `outbox_seaorm::testing::` with `outbox_testing::database::`, `#[outbox_seaorm::test]` \
         with `#[outbox_testing::test]` and `outbox_seaorm::on_both_backends!` with \
         `outbox_testing::on_both_backends!`."
    )
};
