//! Heap-backed buffers for the std side (CLI, tests, benches): core's [`OwnedBuffers`] with a
//! stateless entry that takes a [`Config`] and prepares a [`Setup`] per call.

use skrull_core::{Config, Error, Plan, Setup};

pub use skrull_core::OwnedBuffers as CoreBuffers;

/// Owns a workspace slab and plan buffers sized for up to `capacity` sequences.
#[derive(Debug, Clone, Default)]
pub struct OwnedBuffers(CoreBuffers);

impl OwnedBuffers {
    /// Buffers for batches of up to `n` sequences under `cfg`'s DP and CP sizes.
    pub fn for_batch(n: usize, cfg: &Config) -> OwnedBuffers {
        OwnedBuffers(CoreBuffers::for_batch(n, cfg))
    }

    /// Plans `lengths` under `cfg` (a [`Setup`] prepared for this call), growing the buffers
    /// first if they are too small.
    ///
    /// # Errors
    /// Whatever [`Setup::new`] or [`skrull_core::schedule()`] returns.
    pub fn schedule(&mut self, cfg: &Config, lengths: &[u32]) -> Result<Plan<'_>, Error> {
        // Validate first so an absurd configuration cannot make us allocate absurdly.
        let setup = Setup::single_use(cfg)?;
        self.0.schedule(&setup, lengths)
    }

    /// Plans `lengths` into the buffers as they are (no allocation).
    ///
    /// # Errors
    /// Whatever [`skrull_core::schedule()`] returns, including [`Error::BufferTooSmall`].
    pub fn schedule_no_grow(&mut self, cfg: &Config, lengths: &[u32]) -> Result<Plan<'_>, Error> {
        let setup = Setup::single_use(cfg)?;
        self.0.schedule_no_grow(&setup, lengths)
    }

    /// Plans `lengths` with a prepared `setup`, growing the buffers if needed.
    ///
    /// # Errors
    /// Whatever [`skrull_core::schedule()`] returns.
    pub fn schedule_prepared(&mut self, setup: &Setup, lengths: &[u32]) -> Result<Plan<'_>, Error> {
        self.0.schedule(setup, lengths)
    }

    /// The core buffers.
    pub fn core(&mut self) -> &mut CoreBuffers {
        &mut self.0
    }
}

/// Resizes `v` to `n` default elements if it is shorter (never shrinks).
pub(crate) fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

/// The prepared [`Setup`] of a configuration the caller knows is valid (a plan was made with
/// it), for tests and checkers.
///
/// # Panics
/// When `cfg` is invalid: a bug in the caller.
#[allow(clippy::expect_used)]
pub fn setup_of(cfg: &Config) -> Setup {
    Setup::without_models(cfg).expect("a configuration that already planned is valid")
}
