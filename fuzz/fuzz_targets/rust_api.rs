//! Fuzz target `rust_api`: see `skrull_kit::fuzz::harness` (`kit/src/fuzz/harness.rs`) for the
//! input format and what is asserted.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    skrull_kit::fuzz::rust_api(data);
});
