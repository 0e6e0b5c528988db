//! GDS: spread the global batch over DP ranks and cut each rank's share into micro-batches.
//!
//! 1. **Bin-packing over DP ranks by FLOPs, LPT**: sequences longest-first (ties: input
//!    order), each into the DP rank with the least FLOPs so far (ties: lowest rank). LPT is
//!    deterministic, `O(n log dp)`, and within 4/3 of the optimal makespan; the paper does not
//!    name its bin-packer.
//! 2. **Strided micro-batches**: each rank's sequences sorted ascending (ties: input order);
//!    with `m` micro-batches, micro-batch `j` takes sorted positions `j, j+m, j+2m, ...`, which
//!    pairs long and short sequences.
//! 3. **Growing `m`** from `max(1, ceil(sum / (C·N)))` until every micro-batch holds at most
//!    `C·N` tokens and its placement routine (DACP, or Algorithm 4 for `roundrobin`)
//!    succeeds. `m = |sub|` (one sequence per micro-batch) always succeeds once every
//!    sequence passed the `ceil(S/N) <= C` check.

use crate::config::Config;
use crate::error::Error;
use crate::kernel::group::{max_strided_sum, strided};
use crate::kernel::lpt::{group_by_dp, lpt};
use crate::kernel::sort::sort_ascending_radix;
use crate::model::flops::FlopsModel;
use crate::plan::{Placement, PlanWriter};
use crate::policy::dacp::{self, MemberSlots, Rule};
use crate::setup::workspace::Scratch;

/// Greatest common divisor (`gcd(0, 0) = 0`).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// LPT over DP ranks by FLOPs, then each rank's sequences ascending into
/// `ws.seqs[ws.dp_start[d]..ws.dp_start[d + 1]]`; on return `ws.dp_loads[d]` holds rank `d`'s
/// FLOPs load.
///
/// `ws.keys[..n]` must hold the ascending sort keys. `dp_of` is scratch of `n` entries that
/// receives each sequence's DP rank.
///
/// Every load is a multiple of `g = gcd(linear, quadratic)`, so LPT in units of `g` makes the
/// same choices; when the whole batch then stays below `2^48` units (the usual case) the
/// packed keys fit `u64`, which compare and select without branches. Loads stay below
/// `2^109` (see [`crate::model::flops`]), so the `u128` keys cannot overflow either.
pub(crate) fn bin_pack(
    cfg: &Config,
    flops: &FlopsModel,
    ws: &mut Scratch<'_>,
    n: usize,
    dp_of: &mut [Placement],
) {
    let dp = cfg.dp as usize;
    let g = gcd(flops.linear, flops.quadratic).max(1);
    let reduced = FlopsModel {
        linear: flops.linear / g,
        quadratic: flops.quadratic / g,
    };
    // The batch's load in units of g bounds every rank's: sum(S) < 2^47, sum(S^2) < 2^78.
    let (mut sum, mut sum_sq) = (0u64, 0u128);
    for &key in &ws.keys[..n] {
        let s = key >> 32;
        sum += s;
        sum_sq += u128::from(s * s);
    }
    let total =
        u128::from(reduced.linear) * u128::from(sum) + u128::from(reduced.quadratic) * sum_sq;
    let loads = &mut ws.dp_loads[..dp];
    lpt(
        &ws.keys[..n],
        loads,
        ws.dp_heap,
        total,
        |len, _| reduced.of(len),
        |seq, bin| {
            if let Some(p) = dp_of.get_mut(seq) {
                p.dp_rank = bin;
            }
        },
    );
    for l in loads.iter_mut() {
        *l *= u128::from(g);
    }
    group_by_dp(&ws.keys[..n], dp, ws.dp_start, ws.dp_heap, ws.seqs, |seq| {
        dp_of.get(seq).map_or(0, |p| p.dp_rank)
    });
}

/// Runs GDS with `rule` placing each micro-batch, writing the plan through `w`.
pub(crate) fn run(
    cfg: &Config,
    lengths: &[u32],
    ws: &mut Scratch<'_>,
    w: &mut PlanWriter<'_>,
    rule: Rule,
) -> Result<(), Error> {
    let n = lengths.len();
    let dp = cfg.dp as usize;
    let flops = FlopsModel::new(&cfg.model, cfg.flops);
    let budget = cfg.budget();
    sort_ascending_radix(lengths, ws.keys, ws.seqs, ws.scratch);
    bin_pack(cfg, &flops, ws, n, w.placements_mut());
    let cap = u64::from(cfg.bucket) * u64::from(cfg.cp);
    for d in 0..dp {
        let (a, b) = (ws.dp_start[d] as usize, ws.dp_start[d + 1] as usize);
        let sub = &ws.seqs[a..b];
        let k = sub.len();
        let total: u64 = sub.iter().map(|&s| u64::from(lengths[s as usize])).sum();
        let mut m = total.div_ceil(cap).max(1) as usize;
        let mut accepted = None;
        while m <= k {
            if max_strided_sum(sub, lengths, m) <= cap {
                let mut rollbacks = 0u32;
                let mut ok = true;
                for j in 0..m {
                    let count = strided(sub, j, m, rule == Rule::WorstFit, ws.scratch);
                    let mut slots = MemberSlots {
                        members: &ws.scratch[..count],
                        lengths,
                        placements: w.placements_mut(),
                    };
                    match dacp::run(&mut slots, cfg, &budget, &flops, rule) {
                        Ok(r) => rollbacks += r,
                        Err(_) => {
                            ok = false;
                            break;
                        }
                    }
                }
                if ok {
                    accepted = Some((m, rollbacks));
                    break;
                }
            }
            m += 1;
        }
        let (m, rollbacks) = match accepted {
            Some(found) => found,
            // Unreachable once every sequence fits sharded (one per micro-batch), kept as
            // a defensive error rather than a panic.
            None if k > 0 => return Err(Error::DacpFailed { cp_rank: 0 }),
            None => (0, 0),
        };
        if cfg.max_micro_batches != 0 && m > cfg.max_micro_batches as usize {
            return Err(Error::MicroBatchLimit {
                dp_rank: d as u32,
                limit: cfg.max_micro_batches,
                needed: m as u32,
            });
        }
        for j in 0..m {
            let count = strided(sub, j, m, rule == Rule::WorstFit, ws.scratch);
            w.open(d as u32, j as u32);
            w.push_placed(&ws.scratch[..count], lengths);
        }
        w.set_count(d as u32, m as u32);
        w.add_rollbacks(rollbacks);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::limits::MAX_SEQ_LEN;
    use crate::config::shape::ModelShape;
    use crate::kernel::sort::sort_ascending;
    use std::vec;
    use std::vec::Vec;

    use crate::test_support::SplitMix64 as Rng;

    fn random_lengths(rng: &mut Rng, n: usize) -> Vec<u32> {
        let max = match rng.below_mod(4) {
            0 => 3,
            1 => 1 << 11,
            2 => 1 << 17,
            _ => MAX_SEQ_LEN,
        };
        (0..n)
            .map(|_| 1 + rng.below_mod(u64::from(max)) as u32)
            .collect()
    }

    /// LPT by the book: a linear scan for the least `(load, rank)`, loads in `u128`.
    fn reference_lpt(cfg: &Config, flops: &FlopsModel, lengths: &[u32]) -> (Vec<u32>, Vec<u128>) {
        let mut order: Vec<usize> = (0..lengths.len()).collect();
        order.sort_by_key(|&k| (core::cmp::Reverse(lengths[k]), k));
        let mut loads = vec![0u128; cfg.dp as usize];
        let mut rank = vec![0u32; lengths.len()];
        for k in order {
            let d = (0..loads.len()).min_by_key(|&d| (loads[d], d)).unwrap();
            loads[d] += flops.of(lengths[k]);
            rank[k] = d as u32;
        }
        (rank, loads)
    }

    #[test]
    fn both_lpt_key_widths_match_the_reference() {
        let mut rng = Rng::new(11);
        for case in 0..if cfg!(miri) { 3 } else { 200 } {
            let n = rng.below_mod(if cfg!(miri) { 300 } else { 3000 }) as usize;
            let lengths = random_lengths(&mut rng, n);
            let dp = 1 + rng.below_mod(if case % 4 == 0 && !cfg!(miri) {
                1500
            } else {
                70
            }) as u32;
            let shape = if case % 2 == 0 {
                ModelShape::QWEN2_5_0_5B
            } else {
                ModelShape::QWEN2_5_7B
            };
            let mut cfg = Config::new(dp, 4, u32::MAX >> 1, shape);
            if case % 3 == 0 {
                cfg.flops = crate::config::options::FlopsFormula::Megatron;
            }
            let flops = FlopsModel::new(&cfg.model, cfg.flops);
            let (want_rank, want_loads) = reference_lpt(&cfg, &flops, &lengths);
            let d = dp as usize;
            let (mut keys, mut seqs, mut scratch) = (vec![0u64; n], vec![0u32; n], vec![0u32; n]);
            let (mut loads, mut heap, mut start) =
                (vec![0u128; d], vec![0u32; d], vec![0u32; d + 1]);
            let mut ws = Scratch {
                keys: &mut keys,
                seqs: &mut seqs,
                scratch: &mut scratch,
                dp_loads: &mut loads,
                dp_heap: &mut heap,
                dp_start: &mut start,
                costs: &mut [],
                marks: &mut [],
            };
            sort_ascending(&lengths, ws.keys);
            // The chosen path (u64 when the batch fits), then the u128 path forced.
            let mut dp_of = vec![Placement::default(); n];
            bin_pack(&cfg, &flops, &mut ws, n, &mut dp_of);
            let got: Vec<u32> = dp_of.iter().map(|p| p.dp_rank).collect();
            assert_eq!(got, want_rank, "case {case}");
            assert_eq!(ws.dp_loads, &want_loads[..], "case {case}");
            let mut dp_of = vec![Placement::default(); n];
            lpt(
                &ws.keys[..n],
                &mut ws.dp_loads[..d],
                ws.dp_heap,
                u128::MAX,
                |len, _| flops.of(len),
                |seq, bin| dp_of[seq].dp_rank = bin,
            );
            let got: Vec<u32> = dp_of.iter().map(|p| p.dp_rank).collect();
            assert_eq!(got, want_rank, "case {case} (u128)");
            assert_eq!(ws.dp_loads, &want_loads[..], "case {case} (u128)");
            // The grouping lists every rank's sequences ascending.
            group_by_dp(&ws.keys[..n], d, ws.dp_start, ws.dp_heap, ws.seqs, |s| {
                dp_of[s].dp_rank
            });
            for r in 0..d {
                let run = &ws.seqs[ws.dp_start[r] as usize..ws.dp_start[r + 1] as usize];
                assert!(run.iter().all(|&s| want_rank[s as usize] == r as u32));
                assert!(
                    run.windows(2)
                        .all(|w| (lengths[w[0] as usize], w[0]) < (lengths[w[1] as usize], w[1]))
                );
            }
        }
    }
}
