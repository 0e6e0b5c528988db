//! Owned buffers for callers with a heap (the `alloc` feature): size them once for the largest
//! batch, then plan every batch into them.
//!
//! ```
//! use skrull_core::{Config, ModelShape, OwnedBuffers, Setup};
//! let setup = Setup::new(&Config::new(2, 4, 24, ModelShape::QWEN2_5_0_5B)).unwrap();
//! let mut bufs = OwnedBuffers::new();
//! let plan = bufs.schedule(&setup, &[1, 2, 2, 3, 4, 6, 9, 14, 30, 5]).unwrap();
//! assert_eq!(plan.placements().len(), 10);
//! ```

use alloc::vec::Vec;

use crate::config::Config;
use crate::config::limits::MAX_SEQS;
use crate::error::Error;
use crate::plan::{MicroBatch, Placement, Plan, PlanBuffers, PlanSizes};
use crate::policy::schedule;
use crate::setup::Setup;
use crate::setup::workspace::{Word, Workspace, WorkspaceSizes};

/// A [`Workspace`] slab and [`PlanBuffers`] on the heap, grown on demand.
#[derive(Debug, Clone, Default)]
pub struct OwnedBuffers {
    pub(crate) words: Vec<Word>,
    pub(crate) placements: Vec<Placement>,
    pub(crate) micro_batches: Vec<MicroBatch>,
    pub(crate) members: Vec<u32>,
    pub(crate) rank_tokens: Vec<u32>,
    pub(crate) per_dp: Vec<u32>,
}

impl OwnedBuffers {
    /// Empty buffers; [`OwnedBuffers::schedule`] grows them.
    pub fn new() -> OwnedBuffers {
        OwnedBuffers::default()
    }

    /// Buffers for batches of up to `n` sequences under `cfg`'s DP and CP sizes, for any
    /// policy.
    pub fn for_batch(n: usize, cfg: &Config) -> OwnedBuffers {
        let mut b = OwnedBuffers::default();
        b.reserve(n, cfg);
        b
    }

    /// Grows the buffers to hold a batch of `n` sequences under `cfg` (never shrinks).
    pub fn reserve(&mut self, n: usize, cfg: &Config) {
        let ws = WorkspaceSizes::for_any_policy(n, cfg);
        let ps = PlanSizes::for_batch(n, cfg);
        grow(&mut self.words, ws.words);
        grow(&mut self.placements, ps.placements);
        grow(&mut self.micro_batches, ps.micro_batches);
        grow(&mut self.members, ps.members);
        grow(&mut self.rank_tokens, ps.rank_tokens);
        grow(&mut self.per_dp, ps.micro_batches_per_dp);
    }

    /// Plans `lengths` with `setup`, growing the buffers first if they are too small.
    ///
    /// # Errors
    /// Whatever [`schedule()`] returns.
    pub fn schedule(&mut self, setup: &Setup, lengths: &[u32]) -> Result<Plan<'_>, Error> {
        // A batch over the sequence limit is refused by the planner; never allocate for it.
        if lengths.len() <= MAX_SEQS {
            self.reserve(lengths.len(), setup.config());
        }
        self.schedule_no_grow(setup, lengths)
    }

    /// Plans `lengths` into the buffers as they are (no allocation).
    ///
    /// # Errors
    /// Whatever [`schedule()`] returns, including [`Error::BufferTooSmall`].
    pub fn schedule_no_grow(&mut self, setup: &Setup, lengths: &[u32]) -> Result<Plan<'_>, Error> {
        let (mut ws, out) = self.parts();
        schedule(setup, lengths, &mut ws, out)
    }

    /// The workspace and plan buffers, for calling [`schedule()`] directly.
    pub fn parts(&mut self) -> (Workspace<'_>, PlanBuffers<'_>) {
        let out = PlanBuffers {
            placements: &mut self.placements,
            micro_batches: &mut self.micro_batches,
            members: &mut self.members,
            rank_tokens: &mut self.rank_tokens,
            micro_batches_per_dp: &mut self.per_dp,
        };
        (Workspace::new(&mut self.words), out)
    }
}

/// Resizes `v` to `n` default elements if it is shorter (never shrinks).
fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}
