//! # skrull-kit
//!
//! The std helpers that skrull's CLI, integration tests, benchmarks and fuzz targets share, in
//! one place instead of each borrowing them from another (the tests from the CLI, the tests
//! from the fuzz targets by `#[path]`):
//!
//! - [`buffers`]: [`OwnedBuffers`], the workspace and plan buffers on the heap;
//! - [`eval`]: [`OwnedEval`], the evaluator's buffers on the heap;
//! - [`sample`]: seeded length samplers (the paper's Table 1, histograms, real lengths, fitted
//!   mixtures);
//! - [`refit`]: per-GPU times of a plan under a truth model, and measurement noise;
//! - [`batch`]: the built-in default batch of `skrull plan` and its constants;
//! - [`guarded`]: [`Guarded`] buffers (fill value, guard elements, "untouched" checks) and
//!   the fill values of plan records;
//! - [`check`]: the independent checker of a Rust API plan;
//! - `cases` (feature `quickcheck`): the random configurations and batches of the property
//!   tests;
//! - `c_check` (feature `ffi`): the independent checker of a plan as the C ABI writes it;
//! - `c_plan` (feature `ffi`): `OwnedCPlan`, the output buffers of `skrull_schedule()` on the
//!   heap;
//! - `fuzz` (feature `ffi`): the fuzz harnesses (bytes to calls to checks) behind the
//!   cargo-fuzz targets and `tests/regressions_fuzz.rs`.
//!
//! The CLI uses the default features (no C ABI, no quickcheck); the tests, benchmarks and fuzz
//! targets turn on what they need. Nothing here schedules: every decision is `skrull-core`'s.
//! Not published.
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod batch;
pub mod buffers;
#[cfg(feature = "ffi")]
pub mod c_check;
#[cfg(feature = "ffi")]
pub mod c_plan;
#[cfg(feature = "quickcheck")]
pub mod cases;
pub mod check;
pub mod eval;
#[cfg(feature = "ffi")]
pub mod fuzz;
pub mod guarded;
pub mod refit;
pub mod sample;

pub use buffers::OwnedBuffers;
pub use eval::OwnedEval;
pub use guarded::Guarded;
