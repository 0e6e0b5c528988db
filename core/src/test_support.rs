//! Test-only owned storage for one plan, so unit tests do not each rebuild the workspace and
//! plan buffers by hand.

#[path = "test_support/splitmix.rs"]
mod splitmix;
pub(crate) use splitmix::SplitMix64;

use crate::config::Config;
use crate::error::Error;
use crate::owned::OwnedBuffers;
use crate::plan::{MicroBatch, Placement, Plan, PlanBuffers};
use crate::setup::Setup;
use crate::setup::workspace::Workspace;

/// A workspace and plan buffers sized for one batch.
pub(crate) struct OwnedPlan(OwnedBuffers);

impl OwnedPlan {
    /// Zeroed buffers for `n` sequences under `cfg`.
    pub(crate) fn new(n: usize, cfg: &Config) -> OwnedPlan {
        OwnedPlan::filled(n, cfg, 0)
    }

    /// Buffers for `n` sequences with garbage derived from `g` in every element, to show a
    /// policy does not depend on their previous contents.
    pub(crate) fn filled(n: usize, cfg: &Config, g: u32) -> OwnedPlan {
        let mut b = OwnedBuffers::for_batch(n, cfg);
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
        let w = u128::from(g).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
        b.words.fill(w);
        b.placements.fill(pl);
        b.micro_batches.fill(mb);
        b.members.fill(g.wrapping_mul(5));
        b.rank_tokens.fill(g.wrapping_mul(6));
        b.per_dp.fill(g.wrapping_mul(8));
        OwnedPlan(b)
    }

    /// The workspace and plan buffers, for calling a policy directly.
    pub(crate) fn parts(&mut self) -> (Workspace<'_>, PlanBuffers<'_>) {
        self.0.parts()
    }

    /// Plans `lengths` under `cfg` into these buffers.
    pub(crate) fn schedule(&mut self, cfg: &Config, lengths: &[u32]) -> Result<Plan<'_>, Error> {
        let setup = Setup::single_use(cfg)?;
        self.0.schedule_no_grow(&setup, lengths)
    }
}

/// The prepared setup of a configuration the test knows is valid.
pub(crate) fn setup_of(cfg: &Config) -> Setup {
    Setup::single_use(cfg).expect("a valid test configuration")
}
