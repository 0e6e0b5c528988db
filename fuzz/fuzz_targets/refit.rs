//! Fuzz target `refit`: see `skrull_kit::fuzz::refit` (`kit/src/fuzz/refit.rs`) for the input
//! format and what is asserted.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    skrull_kit::fuzz::refit(data);
});
