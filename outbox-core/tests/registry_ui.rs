//! Compile-fail tests: the registry rejects what would corrupt stored data.

#[test]
fn registry_rejects_ambiguous_declarations() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass_registry.rs");
    cases.compile_fail("tests/ui/category_in_two_scopes.rs");
    cases.compile_fail("tests/ui/reused_category_number.rs");
    cases.compile_fail("tests/ui/reused_scope_number.rs");
    cases.compile_fail("tests/ui/unknown_category_flag.rs");
}

#[test]
fn a_typed_category_takes_its_payload_type_only() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass_typed_registry.rs");
    cases.compile_fail("tests/ui/typed_write_wrong_payload.rs");
    cases.compile_fail("tests/ui/typed_receiver_wrong_payload.rs");
    cases.compile_fail("tests/ui/typed_payload_not_a_contract.rs");
    cases.compile_fail("tests/ui/typed_unknown_key.rs");
}
