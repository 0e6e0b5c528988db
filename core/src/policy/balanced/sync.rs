//! `balanced`'s plan for the trainer's synchronisation ([`Config::sync`]): once the plan is
//! written (and filled), it is arranged for the composition the trainer runs. With the
//! default (`CpGroup`) nothing happens and plans are bit-identical to before.
//!
//! - **`Sharded`** (DDP under `no_sync`): a micro-batch of whole sequences runs on each CP rank
//!   at its own pace, so what counts is each rank's running total between two collective
//!   micro-batches, not each micro-batch's slowest rank. Permuting which CP rank holds which
//!   bin of whole sequences in such a micro-batch changes no GPU's tokens (each bin already
//!   fits BucketSize) and no other micro-batch: each one's bins go heaviest first to the rank
//!   with the least time so far (longest processing time over ranks), so the ranks' totals
//!   stay level; a collective micro-batch levels them (its ranks meet in it).
//! - **`EveryGpu`** (ZeRO-2/3): micro-batch `m` waits for every GPU's micro-batch `m`, so each
//!   DP rank's micro-batches are ordered by estimated time, slowest first: pairing the
//!   ranks' micro-batches in the same order minimises the sum over indices of the slowest.
//!
//! Estimates are the integer model's per-sequence GPU time (whole on its rank, or its share
//! on each rank of its group); ties keep the written order. Runs in place, with no scratch
//! memory, in `O(n + micro-batches x cp log cp)` for `Sharded` and `O(n x micro-batches per
//! DP rank)` for `EveryGpu`.

use crate::config::Config;
use crate::config::limits::MAX_CP;
use crate::config::options::Synchronisation;
use crate::model::fixed::IntModel;
use crate::plan::{MicroBatch, Placement, PlanBuffers};

/// Arranges the first `k` micro-batches of the written plan in `out` for `cfg.sync`.
pub(crate) fn arrange(
    cfg: &Config,
    im: &IntModel,
    lengths: &[u32],
    out: PlanBuffers<'_>,
    k: usize,
) {
    match cfg.sync {
        Synchronisation::Sharded => level_ranks(cfg, im, lengths, out, k),
        Synchronisation::EveryGpu => order_by_time(cfg, im, lengths, out, k),
        _ => {}
    }
}

/// A sequence's estimated time on one GPU of its placement, ps.
fn cost(im: &IntModel, p: &Placement, len: u32, cp: u32) -> u64 {
    if p.is_local() {
        im.attn_whole(len) + im.gemm_linear(u64::from(im.local(len)))
    } else {
        let g = p.group(cp).size.max(1);
        let share = im.share_in(len, g);
        im.attention(share, len) + im.gemm_linear(u64::from(share))
    }
}

/// `Sharded`: per DP rank, each micro-batch of whole sequences gets its bins placed on the
/// ranks by longest processing time against the ranks' running totals.
fn level_ranks(cfg: &Config, im: &IntModel, lengths: &[u32], out: PlanBuffers<'_>, k: usize) {
    let cp = cfg.cp as usize;
    if cp < 2 {
        return;
    }
    let PlanBuffers {
        placements,
        micro_batches: table,
        members,
        rank_tokens,
        ..
    } = out;
    let mut clock = [0u64; MAX_CP as usize];
    let mut dp_rank = u32::MAX;
    for (g, mb) in table.iter().take(k).enumerate() {
        if mb.dp_rank != dp_rank {
            dp_rank = mb.dp_rank;
            clock[..cp].fill(0);
        }
        let seqs = members
            .get(mb.first as usize..(mb.first + mb.count) as usize)
            .unwrap_or(&[]);
        let local = |s: &u32| placements.get(*s as usize).is_some_and(Placement::is_local);
        if !seqs.iter().all(local) {
            // The ranks meet in a collective micro-batch: their totals are level after it.
            clock[..cp].fill(0);
            continue;
        }
        let mut bin = [0u64; MAX_CP as usize];
        for &s in seqs {
            let (p, len) = (placements[s as usize], lengths[s as usize]);
            bin[p.cp_rank as usize] += cost(im, &p, len, cfg.cp);
        }
        // Bins heaviest first (ties: lower rank), ranks least loaded first (ties: lower rank).
        let mut by_bin: [u16; MAX_CP as usize] = core::array::from_fn(|r| r as u16);
        let mut by_clock = by_bin;
        by_bin[..cp].sort_unstable_by_key(|&r| (core::cmp::Reverse(bin[r as usize]), r));
        by_clock[..cp].sort_unstable_by_key(|&r| (clock[r as usize], r));
        let mut to = [0u16; MAX_CP as usize];
        for (&from, &dest) in by_bin[..cp].iter().zip(&by_clock[..cp]) {
            to[from as usize] = dest;
            clock[dest as usize] += bin[from as usize];
        }
        for &s in seqs {
            let p = &mut placements[s as usize];
            p.cp_rank = i32::from(to[p.cp_rank as usize]);
        }
        if let Some(row) = rank_tokens.get_mut(g * cp..(g + 1) * cp) {
            let old: [u32; MAX_CP as usize] =
                core::array::from_fn(|r| row.get(r).copied().unwrap_or(0));
            for (from, &dest) in to[..cp].iter().enumerate() {
                row[dest as usize] = old[from];
            }
        }
    }
}

/// A micro-batch's estimated time: its slowest GPU's, ps.
fn mb_time(
    cfg: &Config,
    im: &IntModel,
    lengths: &[u32],
    placements: &[Placement],
    seqs: &[u32],
) -> u64 {
    let mut load = [0u64; MAX_CP as usize];
    for &s in seqs {
        let (p, len) = (placements[s as usize], lengths[s as usize]);
        let c = cost(im, &p, len, cfg.cp);
        let group = p.group(cfg.cp);
        for r in group.first..group.first + group.size {
            if let Some(x) = load.get_mut(r as usize) {
                *x += c;
            }
        }
    }
    load[..cfg.cp as usize].iter().copied().max().unwrap_or(0)
}

/// `EveryGpu`: each DP rank's micro-batches, slowest first (a stable selection: ties keep
/// their order), moving the table entries, their members and token rows together.
fn order_by_time(cfg: &Config, im: &IntModel, lengths: &[u32], out: PlanBuffers<'_>, k: usize) {
    let cp = cfg.cp as usize;
    let PlanBuffers {
        placements,
        micro_batches: table,
        members,
        rank_tokens,
        ..
    } = out;
    let k = k.min(table.len());
    let table = &mut table[..k];
    let mut start = 0;
    while start < table.len() {
        let d = table[start].dp_rank;
        let stop = start + table[start..].iter().take_while(|m| m.dp_rank == d).count();
        for i in start..stop {
            // The slowest of the rest (the first of equals) moves to position i.
            let time = |m: &MicroBatch| {
                let seqs = members
                    .get(m.first as usize..(m.first + m.count) as usize)
                    .unwrap_or(&[]);
                mb_time(cfg, im, lengths, placements, seqs)
            };
            let mut best = (time(&table[i]), i);
            for (j, m) in table.iter().enumerate().take(stop).skip(i + 1) {
                let t = time(m);
                if t > best.0 {
                    best = (t, j);
                }
            }
            if best.1 != i {
                move_before(table, members, rank_tokens, cp, i, best.1);
            }
        }
        for (index, m) in table[start..stop].iter_mut().enumerate() {
            m.index = index as u32;
            for &s in members
                .get(m.first as usize..(m.first + m.count) as usize)
                .unwrap_or(&[])
            {
                if let Some(p) = placements.get_mut(s as usize) {
                    p.micro_batch = index as u32;
                }
            }
        }
        start = stop;
    }
}

/// Moves table entry `j` to position `i < j` (entries `i..j` shift one later), with its
/// members (contiguous, in table order) and its row of token loads.
fn move_before(
    table: &mut [MicroBatch],
    members: &mut [u32],
    rank_tokens: &mut [u32],
    cp: usize,
    i: usize,
    j: usize,
) {
    let (a, b) = (
        table[i].first as usize,
        (table[j].first + table[j].count) as usize,
    );
    let moved = table[j].count as usize;
    if let Some(span) = members.get_mut(a..b) {
        span.rotate_right(moved);
    }
    if let Some(rows) = rank_tokens.get_mut(i * cp..(j + 1) * cp) {
        rows.rotate_right(cp);
    }
    table[i..=j].rotate_right(1);
    let mut first = a as u32;
    for m in &mut table[i..=j] {
        m.first = first;
        first += m.count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::shape::ModelShape;
    use crate::plan::check;
    use crate::test_support::{OwnedPlan, setup_of};

    fn cfg(dp: u32, cp: u32, bucket: u32, sync: Synchronisation) -> Config {
        let mut c = Config::new(dp, cp, bucket, ModelShape::QWEN2_5_0_5B)
            .with_policy(crate::Policy::Balanced);
        c.sync = sync;
        c
    }

    fn batch(n: usize, seed: u64) -> std::vec::Vec<u32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (x >> 33) % 1000;
                if r < 20 {
                    3000 + (x >> 13) as u32 % 4000
                } else {
                    50 + (x >> 20) as u32 % 900
                }
            })
            .collect()
    }

    /// The arranged plans pass the checker, keep every GPU's tokens within BucketSize, and
    /// differ from the default's only by the arrangement: the same sequences per DP rank and
    /// micro-batch count, the same placements up to which rank holds a bin.
    #[test]
    fn arranged_plans_are_valid_and_keep_the_default_assignment() {
        for seed in 0..20 {
            for (dp, cp) in [(1, 4), (2, 2), (2, 8)] {
                let lengths = batch(64, seed);
                let base = cfg(dp, cp, 4096, Synchronisation::CpGroup);
                let mut b0 = OwnedPlan::new(lengths.len(), &base);
                let p0 = b0.schedule(&base, &lengths).unwrap();
                for sync in [Synchronisation::Sharded, Synchronisation::EveryGpu] {
                    let c = cfg(dp, cp, 4096, sync);
                    let mut b = OwnedPlan::new(lengths.len(), &c);
                    let p = b.schedule(&c, &lengths).unwrap();
                    check(&setup_of(&c), &lengths, &p).unwrap();
                    for (a, z) in p0.placements().iter().zip(p.placements()) {
                        assert_eq!(a.dp_rank, z.dp_rank);
                        assert_eq!(a.is_local(), z.is_local(), "{sync:?}");
                        if sync == Synchronisation::EveryGpu {
                            assert_eq!(a.cp_rank, z.cp_rank);
                        }
                    }
                    if sync == Synchronisation::EveryGpu {
                        let counts = p.micro_batches_per_dp;
                        assert!(counts.iter().all(|&c| c == counts[0]), "lockstep counts");
                    }
                }
            }
        }
    }

    /// By hand, CP 2: a micro-batch whose heavy bin sits on rank 0 is followed by another
    /// whose heavy bin also sits on rank 0; under `Sharded` the second's bins swap ranks.
    #[test]
    fn the_second_heavy_bin_goes_to_the_idle_rank() {
        let c = cfg(1, 2, 8192, Synchronisation::Sharded);
        let im = setup_of(&c).int_model();
        let lengths = [4000u32, 100, 4000, 100];
        let mut placements = [
            Placement {
                dp_rank: 0,
                micro_batch: 0,
                cp_rank: 0,
                ..Placement::default()
            },
            Placement {
                dp_rank: 0,
                micro_batch: 0,
                cp_rank: 1,
                ..Placement::default()
            },
            Placement {
                dp_rank: 0,
                micro_batch: 1,
                cp_rank: 0,
                ..Placement::default()
            },
            Placement {
                dp_rank: 0,
                micro_batch: 1,
                cp_rank: 1,
                ..Placement::default()
            },
        ];
        let mut table = [
            MicroBatch {
                dp_rank: 0,
                index: 0,
                first: 0,
                count: 2,
            },
            MicroBatch {
                dp_rank: 0,
                index: 1,
                first: 2,
                count: 2,
            },
        ];
        let mut members = [0u32, 1, 2, 3];
        let mut rank_tokens = [4000u32, 100, 4000, 100];
        let mut per_dp = [2u32];
        let out = PlanBuffers {
            placements: &mut placements,
            micro_batches: &mut table,
            members: &mut members,
            rank_tokens: &mut rank_tokens,
            micro_batches_per_dp: &mut per_dp,
        };
        arrange(&c, &im, &lengths, out, 2);
        assert_eq!([placements[2].cp_rank, placements[3].cp_rank], [1, 0]);
        assert_eq!(rank_tokens, [4000, 100, 100, 4000]);
        // The first micro-batch keeps its ranks (both start idle).
        assert_eq!([placements[0].cp_rank, placements[1].cp_rank], [0, 1]);
    }
}
