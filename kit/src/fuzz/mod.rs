//! The fuzz harnesses: each decodes arbitrary bytes into calls of the C ABI or the Rust API,
//! runs them and panics on any broken promise. The cargo-fuzz targets (`fuzz/fuzz_targets/`)
//! are one-line wrappers of [`c_abi()`], [`rust_api()`], [`layout()`] and [`refit()`], and
//! `tests/regressions_fuzz.rs` replays crash inputs and the committed seed corpus through the
//! same functions, so the decoding here gives the corpora (`fuzz/corpus/`) their meaning.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a panic is the report

pub mod c_abi;
pub mod decode;
pub mod layout;
pub mod refit;
pub mod rust_api;

pub use c_abi::c_abi;
pub use layout::layout;
pub use refit::refit;
pub use rust_api::rust_api;
