//! The baselines skrull is measured against, in the same plan format:
//!
//! - `deepspeed`: each DP rank takes its share of consecutive sequences in sample order; one
//!   sequence per micro-batch; every sequence sharded over the CP group.
//! - `packed`: the same split; next-fit packing into micro-batches while every GPU's share
//!   (the sum of `ceil(S/N)`) stays within C; everything sharded.
//! - `roundrobin`: the paper's Algorithm 4 inside GDS (see [`gds`](crate::policy::gds)).
//!
//! "Consecutive shares" split `n` sequences into `dp` runs whose sizes differ by at most one,
//! the longer runs first (`n = 10, dp = 4` gives 3, 3, 2, 2).

use crate::config::Config;
use crate::error::Error;
use crate::kernel::group::{consecutive_share, next_fit};
use crate::plan::{PlanWriter, SHARDED};

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
        let count = next_fit(&budget, lengths[share.clone()].iter().copied(), |_, _| {});
        check_limit(cfg, d, count)?;
        let first = share.start;
        next_fit(&budget, lengths[share].iter().copied(), |k, new_mb| {
            if let Some(j) = new_mb {
                w.open(d as u32, j);
            }
            w.push((first + k) as u32, lengths[first + k], SHARDED);
        });
        w.set_count(d as u32, count);
    }
    Ok(())
}
