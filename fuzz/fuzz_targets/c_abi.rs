//! Fuzz target `c_abi`: see `harness.rs` for the input format and what is asserted.
#![no_main]

mod check;
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = harness::c_abi(data);
});
