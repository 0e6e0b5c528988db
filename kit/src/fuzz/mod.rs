//! The fuzz harnesses: each decodes arbitrary bytes into calls of the C ABI or the Rust API,
//! runs them and panics on any broken promise. The cargo-fuzz targets (`fuzz/fuzz_targets/`)
//! are one-line wrappers of [`c_abi`], [`rust_api`] and [`layout()`], and
//! `tests/regressions_fuzz.rs` replays crash inputs and the committed seed corpus through the
//! same functions, so the decoding here gives the corpora (`fuzz/corpus/`) their meaning.

pub mod harness;
pub mod layout;

pub use harness::{c_abi, rust_api};
pub use layout::layout;
