//! Test-only owned storage for one plan, so unit tests do not each rebuild the workspace and
//! plan buffers by hand.

#[path = "test_support/splitmix.rs"]
mod splitmix;
pub(crate) use splitmix::SplitMix64;

use std::vec;
use std::vec::Vec;

use crate::config::Config;
use crate::error::Error;
use crate::plan::{MicroBatch, Placement, Plan, PlanBuffers, PlanSizes};
use crate::plan::{Workspace, WorkspaceSizes};
use crate::policy::schedule;

/// A workspace and plan buffers sized for one batch.
pub(crate) struct OwnedPlan {
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

impl OwnedPlan {
    /// Zeroed buffers for `n` sequences under `cfg`.
    pub(crate) fn new(n: usize, cfg: &Config) -> OwnedPlan {
        OwnedPlan::filled(n, cfg, 0)
    }

    /// Buffers for `n` sequences with garbage derived from `g` in every element, to show a
    /// policy does not depend on their previous contents.
    pub(crate) fn filled(n: usize, cfg: &Config, g: u32) -> OwnedPlan {
        let (ws, ps) = (
            WorkspaceSizes::for_any_policy(n, cfg),
            PlanSizes::for_batch(n, cfg),
        );
        let mb = MicroBatch {
            dp_rank: g,
            index: g.wrapping_mul(2),
            first: g.wrapping_mul(3),
            count: g.wrapping_mul(4),
        };
        let pl = Placement {
            dp_rank: g.wrapping_mul(7),
            micro_batch: g.wrapping_mul(9),
            cp_rank: g as i32 * 3,
            ..Placement::default()
        };
        OwnedPlan {
            keys: vec![u64::from(g); ws.keys],
            seqs: vec![g.wrapping_mul(2); ws.seqs],
            scratch: vec![g.wrapping_mul(3); ws.scratch],
            dp_loads: vec![u128::from(g) * 4; ws.dp_loads],
            dp_heap: vec![g.wrapping_mul(5); ws.dp_heap],
            dp_start: vec![g.wrapping_mul(6); ws.dp_start],
            costs: vec![u64::from(g) * 11; ws.costs],
            marks: vec![g.wrapping_mul(13); ws.marks],
            placements: vec![pl; ps.placements],
            micro_batches: vec![mb; ps.micro_batches],
            members: vec![g.wrapping_mul(5); ps.members],
            rank_tokens: vec![g.wrapping_mul(6); ps.rank_tokens],
            per_dp: vec![g.wrapping_mul(8); ps.micro_batches_per_dp],
        }
    }

    /// The workspace and plan buffers, for calling a policy directly.
    pub(crate) fn parts(&mut self) -> (Workspace<'_>, PlanBuffers<'_>) {
        let work = Workspace {
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
        (work, out)
    }

    /// Plans `lengths` under `cfg` into these buffers.
    pub(crate) fn schedule(&mut self, cfg: &Config, lengths: &[u32]) -> Result<Plan<'_>, Error> {
        let mut work = Workspace {
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
        schedule(cfg, lengths, &mut work, out)
    }
}
