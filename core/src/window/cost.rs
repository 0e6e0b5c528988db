//! The outlier rule and the step estimate the window decides on, from the cost model's
//! integer form (the one `balanced` plans with, [`Setup::int_model`]).
//!
//! Per sequence the window keeps two times, in picoseconds ([`SeqCost`]):
//!
//! - `alone`: the sequence alone in a micro-batch, in its cheaper fitting placement (whole on
//!   one GPU, or sharded over the whole CP group with its ring communication), fixed cost
//!   included. Whatever the plan, the DP rank that runs it takes at least this long.
//! - `work`: its share of a DP rank's time when packed with others: the cheaper of its whole
//!   and sharded GPU time over the `N` GPUs of the group, plus its share by tokens of the
//!   fixed cost of a full micro-batch (`balanced`'s LPT weight over `N`).
//!
//! Every DP rank that runs anything pays at least one micro-batch's **floor**: its fixed cost
//! and the weights streamed for its GEMMs (the roofline's memory-bound time, `gemm(1)`).
//! A step's estimate ([`Load::estimate`]) is the largest of: its longest sequence alone;
//! `ceil(sum of work / DP) + floor` (a perfect split of the work over the DP ranks); and, with
//! `DP < TOP`, the `DP`-th and `DP + 1`-th longest alone added up less one floor (two of the
//! `DP + 1` longest share a DP rank, and may share a micro-batch). A sequence is an
//! **outlier** of its batch when `alone > ceil(batch work / DP) + floor`: alone it outlasts
//! the batch's fair share per DP rank, so it sets the iteration time and the other ranks
//! wait. Only outliers may be deferred. See `docs/outlier_delay.md`.
//!
//! [`Setup::int_model`]: crate::Setup::int_model

use crate::model::fixed::{IntModel, Link};
use crate::setup::Setup;

/// What the window knows of one sequence, ps (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeqCost {
    /// Alone in a micro-batch, cheaper fitting placement, fixed cost included.
    pub alone: u64,
    /// Its share of a DP rank's time when packed.
    pub work: u64,
}

/// The integer cost model bound to one setup, for [`SeqCost`]s.
#[derive(Debug, Clone)]
pub struct Costs {
    im: IntModel,
    link: Link,
    bucket: u32,
    /// Tokens of a full micro-batch, `C x N` (at least 1).
    per_mb: u64,
}

impl Costs {
    /// The costs under `setup`'s integer model (its ring is DP rank 0's whole CP group).
    pub fn new(setup: &Setup) -> Costs {
        let im = setup.int_model();
        let link = im.link(im.time_model().group_ring(0));
        let bucket = setup.config().bucket;
        let per_mb = u64::from(bucket).saturating_mul(u64::from(im.cp())).max(1);
        Costs {
            im,
            link,
            bucket,
            per_mb,
        }
    }

    /// One micro-batch's floor, ps: its fixed cost and the GEMM time of one token (the
    /// weight streaming of the memory-bound roofline).
    pub fn floor(&self) -> u64 {
        self.im.fixed().saturating_add(self.im.gemm(1))
    }

    /// The costs of a sequence of `len` tokens.
    pub fn of(&self, len: u32) -> SeqCost {
        let im = &self.im;
        let n = u64::from(im.cp().max(1));
        let (aw, ash) = (im.attn_whole(len), im.attn_shard(len));
        let (share, local) = (im.share(len), im.local(len));
        let whole_fits = local <= self.bucket;
        // A sharded sequence alone pays its own fixed cost on every GPU of the group.
        let sharded_alone = im.rank(
            0,
            u64::from(share),
            ash,
            im.comm(&self.link, u64::from(len)),
            1,
        );
        let sharded_gpu = n.saturating_mul(
            ash.saturating_add(im.gemm_linear(u64::from(share)))
                .saturating_add(im.seq_fixed()),
        );
        let (alone, gpu) = if whole_fits {
            let whole_alone = im.rank(aw, u64::from(local), 0, 0, 0);
            let whole_gpu = aw.saturating_add(im.gemm_linear(u64::from(local)));
            (whole_alone.min(sharded_alone), whole_gpu.min(sharded_gpu))
        } else {
            (sharded_alone, sharded_gpu)
        };
        let by_tokens = u128::from(im.fixed()) * u128::from(len) / u128::from(self.per_mb);
        let work = (gpu / n).saturating_add(u64::try_from(by_tokens).unwrap_or(u64::MAX));
        SeqCost { alone, work }
    }
}

/// A DP rank's fair share of `work` over `dp` ranks, plus one micro-batch's `floor`, ps.
#[inline]
pub fn share(work: u64, dp: u32, floor: u64) -> u64 {
    work.div_ceil(u64::from(dp.max(1))).saturating_add(floor)
}

/// Whether a sequence that takes `alone` is an outlier of a batch of total `work`.
#[inline]
pub fn is_outlier(alone: u64, work: u64, dp: u32, floor: u64) -> bool {
    alone > share(work, dp, floor)
}

/// The longest `alone` times a [`Load`] keeps: enough for the pair term up to DP 8.
pub const TOP: usize = 9;
/// Words of a [`Load`] in storage.
pub const LOAD_WORDS: usize = TOP + 1;

/// What a step holds, as its estimate needs it: the [`TOP`] longest `alone` times
/// (descending, 0 for none) and the work summed, ps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    /// The longest `alone` times, descending.
    pub top: [u64; TOP],
    /// The work summed.
    pub work: u64,
}

impl Load {
    /// Adds a sequence.
    pub fn add(&mut self, c: SeqCost) {
        self.work = self.work.saturating_add(c.work);
        let mut v = c.alone;
        for slot in self.top.iter_mut() {
            if v > *slot {
                core::mem::swap(slot, &mut v);
            }
        }
    }

    /// The estimated iteration time over `dp` DP ranks with a micro-batch `floor` (see the
    /// [module docs](self)).
    pub fn estimate(&self, dp: u32, floor: u64) -> u64 {
        let d = dp.max(1) as usize;
        // Two sequences on one DP rank can share a micro-batch: one floor between them.
        let pair = match (self.top.get(d - 1), self.top.get(d)) {
            (Some(a), Some(b)) => a.saturating_add(*b).saturating_sub(floor),
            _ => 0,
        };
        self.top[0].max(share(self.work, dp, floor)).max(pair)
    }

    /// The load stored in `w` (at least [`LOAD_WORDS`] words; missing words read as 0).
    pub fn read(w: &[u64]) -> Load {
        let mut l = Load::default();
        for (t, x) in l.top.iter_mut().zip(w) {
            *t = *x;
        }
        l.work = w.get(TOP).copied().unwrap_or(0);
        l
    }

    /// Stores the load in `w` (at least [`LOAD_WORDS`] words).
    pub fn write(&self, w: &mut [u64]) {
        for (x, t) in w.iter_mut().zip(self.top.iter().chain([&self.work])) {
            *x = *t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::shape::ModelShape;

    #[test]
    fn alone_grows_with_length_and_covers_the_work() {
        let cfg = Config::recommended(2, 8, 13 * 1024, ModelShape::QWEN2_5_7B);
        let costs = Costs::new(&Setup::new(&cfg).unwrap());
        let mut last = SeqCost::default();
        for len in [1u32, 100, 1000, 8000, 13 * 1024, 50_000, 100_000] {
            let c = costs.of(len);
            assert!(c.alone >= last.alone && c.work >= last.work, "{len}");
            // Alone it pays a full floor and at least its share of the GPU time.
            assert!(
                c.alone >= c.work && c.alone >= costs.floor(),
                "{len}: {c:?}"
            );
            last = c;
        }
    }

    #[test]
    fn the_rule_compares_alone_with_the_fair_share_plus_one_floor() {
        assert_eq!(share(10, 4, 5), 3 + 5);
        assert_eq!(share(0, 0, 7), 7);
        assert!(is_outlier(9, 10, 4, 5) && !is_outlier(8, 10, 4, 5));
        assert_eq!(share(u64::MAX, 1, 1), u64::MAX);
    }

    #[test]
    fn the_estimate_is_the_longest_the_share_or_the_pair_that_must_share_a_rank() {
        let mut l = Load::default();
        let seq = |alone, work| SeqCost { alone, work };
        l.add(seq(20, 10));
        assert_eq!(l.estimate(2, 5), 20);
        l.add(seq(3, 30));
        assert_eq!(l.estimate(2, 5), 20 + 5); // ceil(40 / 2) + 5
        assert_eq!(l.estimate(1, 5), 45); // ceil(40 / 1) + 5 over the pair 20 + 3 - 5
        l.add(seq(18, 10));
        // Three long ones on two ranks: the second and third add up.
        assert_eq!(l.top[..4], [20, 18, 3, 0]);
        assert_eq!(l.estimate(2, 0), 25); // the share (25) over the pair (18 + 3)
        l.add(seq(17, 0));
        assert_eq!(l.estimate(2, 0), 18 + 17);
        assert_eq!(l.estimate(2, 4), 18 + 17 - 4);
        assert_eq!(l.estimate(3, 0), 17 + 3);
        // Past TOP - 1 DP ranks no pair term.
        assert_eq!(l.estimate(9, 0), 20);
        let mut w = [0u64; LOAD_WORDS];
        l.write(&mut w);
        assert_eq!(Load::read(&w), l);
    }
}
