//! Compile-fail tests of `#[tile_kernel]`'s errors (each `tests/ui/*.rs` has
//! one mistake; its expected compiler output is the `.stderr` beside it) and
//! compile-pass tests (`tests/ui/pass/*.rs`).
//!
//! Refresh the expected output with `TRYBUILD=overwrite cargo test --test ui`,
//! then read every changed `.stderr`.

#[test]
fn ui() {
    // No PTX targets: the cases test the frontend, independently of the
    // code generator (an empty TILE_ARCHS embeds the IR for the interpreter only).
    std::env::set_var("TILE_ARCHS", "");
    std::env::remove_var("TILE_DUMP");
    std::env::remove_var("TILE_PTXAS");
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
