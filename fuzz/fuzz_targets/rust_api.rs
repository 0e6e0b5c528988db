//! Fuzz target `rust_api`: see `harness.rs` for the input format and what is asserted.
#![no_main]

mod check;
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::rust_api(data);
});
