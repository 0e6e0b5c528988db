//! Fuzz target `layout`: see `layout_harness.rs` for the input format and what is asserted.
#![no_main]

mod check;
mod harness;
mod layout_harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = layout_harness::layout(data);
});
