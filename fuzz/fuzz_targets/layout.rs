//! Fuzz target `layout`: see `skrull_kit::fuzz::layout` (`kit/src/fuzz/layout.rs`) for the
//! input format and what is asserted.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = skrull_kit::fuzz::layout(data);
});
