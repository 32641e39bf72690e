//! Compile tests for `#[outbox_testing::test]`: its mistakes are compile
//! errors that point at what to fix.

#[test]
fn test_attribute_rejects_what_it_cannot_run() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/test_attr_pass.rs");
    cases.compile_fail("tests/ui/test_attr_not_async.rs");
    cases.compile_fail("tests/ui/test_attr_unknown_option.rs");
    cases.compile_fail("tests/ui/test_attr_wrong_arguments.rs");
}
