//! The baselines skrull is measured against, in the same plan format:
//!
//! - `deepspeed`: each DP rank takes its share of consecutive sequences in sample order; one
//!   sequence per micro-batch; every sequence sharded over the CP group.
//! - `packed`: the same split; next-fit packing into micro-batches while every GPU's share
//!   (the sum of `ceil(S/N)`) stays within C; everything sharded.
//! - `roundrobin`: the paper's Algorithm 4 inside GDS (see [`gds`](crate::gds)).
//!
//! "Consecutive shares" split `n` sequences into `dp` runs whose sizes differ by at most one,
//! the longer runs first (`n = 10, dp = 4` gives 3, 3, 2, 2).

use crate::budget::Budget;
use crate::config::Config;
use crate::error::Error;
use crate::plan::{PlanWriter, SHARDED};

/// The consecutive run of sequence indices DP rank `d` takes in sample order.
pub fn consecutive_share(n: usize, dp: usize, d: usize) -> core::ops::Range<usize> {
    let dp = dp.max(1);
    let (base, rem) = (n / dp, n % dp);
    let start = d * base + d.min(rem);
    let len = base + usize::from(d < rem);
    start..(start + len).min(n)
}

fn check_limit(cfg: &Config, d: usize, m: u32) -> Result<(), Error> {
    if cfg.max_micro_batches != 0 && m > cfg.max_micro_batches {
        return Err(Error::MicroBatchLimit {
            dp_rank: d as u32,
            limit: cfg.max_micro_batches,
            needed: m,
        });
    }
    Ok(())
}

/// The paper's DeepSpeed baseline: one sharded sequence per micro-batch.
pub(crate) fn deepspeed(
    cfg: &Config,
    lengths: &[u32],
    w: &mut PlanWriter<'_>,
) -> Result<(), Error> {
    let dp = cfg.dp as usize;
    for d in 0..dp {
        let share = consecutive_share(lengths.len(), dp, d);
        check_limit(cfg, d, share.len() as u32)?;
        for (j, seq) in share.clone().enumerate() {
            w.open(d as u32, j as u32);
            w.push(seq as u32, lengths[seq], SHARDED);
        }
        w.set_count(d as u32, share.len() as u32);
    }
    Ok(())
}

/// Next-fit packing of sharded sequences in sample order.
pub(crate) fn packed(cfg: &Config, lengths: &[u32], w: &mut PlanWriter<'_>) -> Result<(), Error> {
    let dp = cfg.dp as usize;
    let budget = cfg.budget();
    for d in 0..dp {
        let share = consecutive_share(lengths.len(), dp, d);
        // First pass counts micro-batches so the limit is checked before anything is written.
        let count = next_fit(&budget, &lengths[share.clone()], |_, _| {});
        check_limit(cfg, d, count)?;
        let first = share.start;
        next_fit(&budget, &lengths[share], |k, new_mb| {
            if let Some(j) = new_mb {
                w.open(d as u32, j);
            }
            w.push((first + k) as u32, lengths[first + k], SHARDED);
        });
        w.set_count(d as u32, count);
    }
    Ok(())
}

/// Walks `lens` with next-fit packing under the per-GPU budget; calls `visit(k, Some(j))` when
/// sequence `k` opens micro-batch `j`, `visit(k, None)` when it joins the open one. Returns
/// the number of micro-batches.
fn next_fit(budget: &Budget, lens: &[u32], mut visit: impl FnMut(usize, Option<u32>)) -> u32 {
    let mut count = 0u32;
    let mut used = 0u64;
    for (k, &len) in lens.iter().enumerate() {
        let share = u64::from(budget.share(len));
        if count == 0 || used + share > u64::from(budget.bucket()) {
            visit(k, Some(count));
            count += 1;
            used = share;
        } else {
            visit(k, None);
            used += share;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_shares_tile_the_batch() {
        assert_eq!(consecutive_share(10, 4, 0), 0..3);
        assert_eq!(consecutive_share(10, 4, 1), 3..6);
        assert_eq!(consecutive_share(10, 4, 2), 6..8);
        assert_eq!(consecutive_share(10, 4, 3), 8..10);
        assert_eq!(consecutive_share(2, 4, 3), 2..2);
        for (n, dp) in [(0, 3), (7, 7), (5, 8), (256, 4), (1000, 7)] {
            let mut next = 0;
            for d in 0..dp {
                let r = consecutive_share(n, dp, d);
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, n);
        }
    }
}
