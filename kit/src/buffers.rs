//! Heap-backed buffers for the std side (CLI, tests, benches): allocate once for the largest
//! batch, plan many times.

use skrull_core::{
    Config, Error, MicroBatch, Placement, Plan, PlanBuffers, PlanSizes, Workspace, WorkspaceSizes,
    schedule,
};

/// Owns a [`Workspace`] and [`PlanBuffers`] sized for up to `capacity` sequences.
#[derive(Debug, Clone, Default)]
pub struct OwnedBuffers {
    keys: Vec<u64>,
    seqs: Vec<u32>,
    scratch: Vec<u32>,
    dp_loads: Vec<u128>,
    dp_heap: Vec<u32>,
    dp_start: Vec<u32>,
    costs: Vec<u64>,
    marks: Vec<u32>,
    placements: Vec<Placement>,
    micro_batches: Vec<MicroBatch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
}

impl OwnedBuffers {
    /// Buffers for batches of up to `n` sequences under `cfg`'s DP and CP sizes.
    pub fn for_batch(n: usize, cfg: &Config) -> OwnedBuffers {
        let mut b = OwnedBuffers::default();
        b.reserve(n, cfg);
        b
    }

    fn reserve(&mut self, n: usize, cfg: &Config) {
        // Sized for every policy, so one set of buffers serves any of them.
        let ws = WorkspaceSizes::for_any_policy(n, cfg);
        let ps = PlanSizes::for_batch(n, cfg);
        grow(&mut self.keys, ws.keys);
        grow(&mut self.seqs, ws.seqs);
        grow(&mut self.scratch, ws.scratch);
        grow(&mut self.dp_loads, ws.dp_loads);
        grow(&mut self.dp_heap, ws.dp_heap);
        grow(&mut self.dp_start, ws.dp_start);
        grow(&mut self.costs, ws.costs);
        grow(&mut self.marks, ws.marks);
        grow(&mut self.placements, ps.placements);
        grow(&mut self.micro_batches, ps.micro_batches);
        grow(&mut self.members, ps.members);
        grow(&mut self.rank_tokens, ps.rank_tokens);
        grow(&mut self.per_dp, ps.micro_batches_per_dp);
    }

    /// Plans `lengths` under `cfg`, growing the buffers first if they are too small.
    ///
    /// # Errors
    /// Whatever [`schedule()`] returns.
    pub fn schedule(&mut self, cfg: &Config, lengths: &[u32]) -> Result<Plan<'_>, Error> {
        // Validate first so an absurd configuration cannot make us allocate absurdly.
        cfg.validate()?;
        if lengths.len() <= skrull_core::config::MAX_SEQS {
            self.reserve(lengths.len(), cfg);
        }
        self.schedule_no_grow(cfg, lengths)
    }

    /// Plans `lengths` into the buffers as they are (no allocation).
    ///
    /// # Errors
    /// Whatever [`schedule()`] returns, including [`Error::BufferTooSmall`].
    pub fn schedule_no_grow(&mut self, cfg: &Config, lengths: &[u32]) -> Result<Plan<'_>, Error> {
        let mut ws = Workspace {
            keys: &mut self.keys,
            seqs: &mut self.seqs,
            scratch: &mut self.scratch,
            dp_loads: &mut self.dp_loads,
            dp_heap: &mut self.dp_heap,
            dp_start: &mut self.dp_start,
            costs: &mut self.costs,
            marks: &mut self.marks,
        };
        let out = PlanBuffers {
            placements: &mut self.placements,
            micro_batches: &mut self.micro_batches,
            members: &mut self.members,
            rank_tokens: &mut self.rank_tokens,
            micro_batches_per_dp: &mut self.per_dp,
        };
        schedule(cfg, lengths, &mut ws, out)
    }
}

/// Resizes `v` to `n` default elements if it is shorter (never shrinks).
pub(crate) fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}
