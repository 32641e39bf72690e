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
