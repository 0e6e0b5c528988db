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
//! - [`batch`]: the built-in default batch of `skrull plan` and its constants.
//!
//! Nothing here schedules: every decision is `skrull-core`'s. Not published.
#![deny(missing_docs)]

pub mod batch;
pub mod buffers;
pub mod eval;
pub mod sample;

pub use buffers::OwnedBuffers;
pub use eval::OwnedEval;
