//! Compile tests for the replicated-model derives.

#[test]
fn derives_reject_what_they_cannot_replicate() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass_dense_and_classic.rs");
    cases.pass("tests/ui/pass_typed_model.rs");
    cases.compile_fail("tests/ui/missing_category.rs");
    cases.compile_fail("tests/ui/uninferable_shard.rs");
    cases.compile_fail("tests/ui/unknown_scope_field.rs");
    cases.compile_fail("tests/ui/unknown_shard_attribute.rs");
    cases.compile_fail("tests/ui/typed_model_payload_mismatch.rs");
}
