//! Fuzz target `c_abi`: see `skrull_kit::fuzz::harness` (`kit/src/fuzz/harness.rs`) for the
//! input format and what is asserted.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = skrull_kit::fuzz::c_abi(data);
});
