//! `chunkflow`: ChunkFlow's own scheme (ICML 2025, its Algorithms 1 and 2) as a baseline in
//! the same plan format, at the configured ChunkSize and K ([`Config::chunking`]).
//!
//! 1. **Chunk construction** (Algorithm 1): every sequence longer than ChunkSize becomes a
//!    unit of its own, run chunked over the whole CP group (its chunks in order, the last K
//!    kept, the rest recomputed: Algorithm 2). The others are packed first-fit-decreasing
//!    into bins of at most ChunkSize tokens whose shares fit BucketSize on every GPU; each bin
//!    is one unit, its sequences sharded over the group. First fit scans the
//!    [`FIRST_FIT_WINDOW`] most recently opened bins, so packing stays `O(n)`.
//! 2. **DP ranks**: units go to DP ranks by LPT on tokens (ChunkFlow balances tokens: equal
//!    chunks are its balancing target), and each unit is one micro-batch, in ascending order
//!    of tokens on its rank.
//!
//! A long sequence whose chunked peak ([`Budget::chunked`](crate::Budget::chunked)) exceeds
//! BucketSize is refused with [`Error::ChunkOverBudget`]: ChunkFlow has no other placement.

use crate::config::Config;
use crate::error::Error;
use crate::kernel::lpt::{group_by_dp, lpt};
use crate::kernel::sort::{key_index, sort_ascending_radix};
use crate::plan::{PlanWriter, SHARDED};
use crate::setup::workspace::Scratch;

/// How many of the most recently opened bins first fit tries before opening a new one.
pub const FIRST_FIT_WINDOW: usize = 64;

/// Unit ids from this value up are long sequences (`id - LONG`-th long unit); below it, bins.
const NO_SEQ: u32 = u32::MAX;

/// The bins and long units of one batch, in the workspace.
struct Units {
    /// Bins opened.
    bins: usize,
    /// Long sequences (units `bins..bins + longs`).
    longs: usize,
}

/// Plans the batch ChunkFlow's way (see the module docs).
pub(crate) fn run(
    cfg: &Config,
    lengths: &[u32],
    ws: &mut Scratch<'_>,
    w: &mut PlanWriter<'_>,
) -> Result<(), Error> {
    let n = lengths.len();
    sort_ascending_radix(lengths, ws.keys, ws.seqs, ws.scratch);
    check_longs(cfg, lengths, &ws.keys[..n])?;
    let units = build_units(cfg, lengths, ws);
    let count = units.bins + units.longs;
    assign_dp(cfg, ws, n, count);
    write(cfg, lengths, ws, w, &units)
}

/// Refuses a long sequence whose chunked peak on the whole group exceeds BucketSize.
fn check_longs(cfg: &Config, lengths: &[u32], keys: &[u64]) -> Result<(), Error> {
    let budget = cfg.budget();
    for &key in keys.iter().rev() {
        let len = (key >> 32) as u32;
        if !cfg.chunking.can_chunk(len) {
            break;
        }
        let peak = budget.chunked(&cfg.chunking, len, cfg.cp);
        if peak > u64::from(cfg.bucket) {
            let index = key_index(key);
            let len = lengths.get(index).copied().unwrap_or(len);
            return Err(Error::ChunkOverBudget { index, len, peak });
        }
    }
    Ok(())
}

/// Rows of the workspace the units live in: `marks[..n]` the head of each bin's member list
/// (sequence + 1, 0: empty), `marks[n..2n]` the next member of each sequence's bin,
/// `marks[2n..3n]` the sequence of each long unit, `marks[3n..4n]` each unit's DP rank;
/// `costs[..n]` each bin's tokens and shares (`tokens << 32 | shares`), `costs[n..2n]` the
/// units' sort keys (`tokens << 32 | unit`).
fn build_units(cfg: &Config, lengths: &[u32], ws: &mut Scratch<'_>) -> Units {
    let n = lengths.len();
    let budget = cfg.budget();
    let chunk = u64::from(cfg.chunking.size);
    let (heads, rest) = ws.marks.split_at_mut(n);
    let (next, rest) = rest.split_at_mut(n);
    let long_seq = &mut rest[..n];
    heads.fill(0);
    let bins_row = &mut ws.costs[..n];
    let mut units = Units { bins: 0, longs: 0 };
    for &key in ws.keys[..n].iter().rev() {
        let (len, seq) = ((key >> 32) as u32, key_index(key));
        if cfg.chunking.can_chunk(len) {
            long_seq[units.longs] = seq as u32;
            units.longs += 1;
            continue;
        }
        let share = u64::from(budget.share(len));
        let fits = |b: u64| {
            (b >> 32) + u64::from(len) <= chunk
                && (b & 0xFFFF_FFFF) + share <= u64::from(cfg.bucket)
        };
        let from = units.bins.saturating_sub(FIRST_FIT_WINDOW);
        let bin = (from..units.bins)
            .find(|&b| fits(bins_row[b]))
            .unwrap_or_else(|| {
                bins_row[units.bins] = 0;
                units.bins += 1;
                units.bins - 1
            });
        bins_row[bin] += (u64::from(len) << 32) + share;
        next[seq] = heads[bin];
        heads[bin] = seq as u32 + 1;
    }
    // Unit sort keys: tokens, then the unit id.
    let (bins_row, keys_row) = ws.costs.split_at_mut(n);
    for b in 0..units.bins {
        keys_row[b] = (bins_row[b] >> 32 << 32) | b as u64;
    }
    for l in 0..units.longs {
        let len = lengths[long_seq[l] as usize];
        keys_row[units.bins + l] = (u64::from(len) << 32) | (units.bins + l) as u64;
    }
    keys_row[..units.bins + units.longs].sort_unstable();
    units
}

/// LPT of the `count` units over the DP ranks by tokens; each rank's units, ascending, into
/// `ws.seqs[ws.dp_start[d]..ws.dp_start[d + 1]]`.
fn assign_dp(cfg: &Config, ws: &mut Scratch<'_>, n: usize, count: usize) {
    let dp = cfg.dp as usize;
    let keys = &ws.costs[n..n + count];
    let dp_of = &mut ws.marks[3 * n..3 * n + count];
    let total: u128 = keys.iter().map(|&k| u128::from(k >> 32)).sum();
    lpt(
        keys,
        &mut ws.dp_loads[..dp],
        ws.dp_heap,
        total,
        |len, _| u128::from(len),
        |unit, bin| {
            if let Some(d) = dp_of.get_mut(unit) {
                *d = bin;
            }
        },
    );
    let dp_of = &ws.marks[3 * n..3 * n + count];
    group_by_dp(keys, dp, ws.dp_start, ws.dp_heap, ws.seqs, |unit| {
        dp_of.get(unit).copied().unwrap_or(0)
    });
}

/// Writes each DP rank's units as its micro-batches.
fn write(
    cfg: &Config,
    lengths: &[u32],
    ws: &Scratch<'_>,
    w: &mut PlanWriter<'_>,
    units: &Units,
) -> Result<(), Error> {
    let n = lengths.len();
    let (heads, next, long_seq) = (&ws.marks[..n], &ws.marks[n..2 * n], &ws.marks[2 * n..3 * n]);
    for d in 0..cfg.dp as usize {
        let (a, b) = (ws.dp_start[d] as usize, ws.dp_start[d + 1] as usize);
        let count = (b - a) as u32;
        if cfg.max_micro_batches != 0 && count > cfg.max_micro_batches {
            return Err(Error::MicroBatchLimit {
                dp_rank: d as u32,
                limit: cfg.max_micro_batches,
                needed: count,
            });
        }
        for (j, &unit) in ws.seqs[a..b].iter().enumerate() {
            w.open(d as u32, j as u32);
            let unit = unit as usize;
            if unit >= units.bins {
                let seq = long_seq.get(unit - units.bins).copied().unwrap_or(NO_SEQ);
                let len = lengths.get(seq as usize).copied().unwrap_or(0);
                w.push_chunked(seq, len, (0, cfg.cp), &cfg.chunking);
                continue;
            }
            let mut member = heads.get(unit).copied().unwrap_or(0);
            while member != 0 {
                let seq = member - 1;
                w.push(seq, lengths[seq as usize], SHARDED);
                member = next.get(seq as usize).copied().unwrap_or(0);
            }
        }
        w.set_count(d as u32, count);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::chunking::Chunking;
    use crate::config::options::Policy;
    use crate::config::shape::ModelShape;
    use crate::error::ChunkingField;
    use crate::plan::{CHUNKED, CheckError, Placement, check};
    use crate::test_support::{OwnedPlan, SplitMix64, setup_of};
    use std::vec::Vec;

    fn cfg(dp: u32, cp: u32, bucket: u32, chunk: u32, keep: u32) -> Config {
        let mut c =
            Config::new(dp, cp, bucket, ModelShape::QWEN2_5_7B).with_policy(Policy::ChunkFlow);
        c.chunking = Chunking::new(chunk, keep);
        c
    }

    #[test]
    fn long_sequences_run_chunked_alone_and_short_ones_fill_chunk_sized_bins() {
        let c = cfg(2, 8, 13 * 1024, 8192, 1);
        let lengths = [
            100_000, 300, 7000, 5000, 20_000, 4000, 3000, 1200, 9000, 800,
        ];
        let mut b = OwnedPlan::new(lengths.len(), &c);
        let plan = b.schedule(&c, &lengths).unwrap();
        check(&setup_of(&c), &lengths, &plan).unwrap();
        for mb in plan.micro_batches() {
            let members = plan.members_of(mb);
            let tokens: u32 = members.iter().map(|&s| lengths[s as usize]).sum();
            let chunked = members
                .iter()
                .filter(|&&s| plan.placements()[s as usize].is_chunked())
                .count();
            if chunked > 0 {
                assert_eq!(members.len(), 1, "a chunked sequence runs alone");
            } else {
                assert!(tokens <= 8192, "a bin holds at most ChunkSize tokens");
            }
        }
        for (s, p) in plan.placements().iter().enumerate() {
            if lengths[s] > 8192 {
                assert_eq!((p.cp_rank, p.cp_first, p.cp_size), (CHUNKED, 0, 8));
            } else {
                assert!(p.is_sharded());
            }
        }
        assert_eq!(plan.summary().chunked, 3);
        // 7,000 + 1,200 | 5,000 + 3,000 | 4,000 + 800 + 300 (first fit decreasing), plus
        // three long units: six micro-batches over two DP ranks.
        assert_eq!(plan.summary().micro_batches, 6);
    }

    #[test]
    fn a_chunk_over_the_budget_is_refused_with_its_peak() {
        // 2 GPUs of 4,096: chunks of 16,384 cost 8,192 each.
        let c = cfg(1, 2, 4096, 16_384, 1);
        let mut b = OwnedPlan::new(2, &c);
        let err = b.schedule(&c, &[100, 8000]).err();
        assert_eq!(err, None, "8,000 tokens is one chunk, sharded");
        let err = b.schedule(&c, &[100, 8192]).err();
        assert_eq!(err, None);
        let c = cfg(1, 2, 8500, 16_384, 1);
        let mut b = OwnedPlan::new(2, &c);
        let lengths = [100, 17_000];
        let want = c.budget().chunked(&c.chunking, 17_000, 2);
        assert_eq!(want, 8192 + 544);
        assert_eq!(
            b.schedule(&c, &lengths).err(),
            Some(Error::ChunkOverBudget {
                index: 1,
                len: 17_000,
                peak: want
            })
        );
    }

    #[test]
    fn chunkflow_needs_chunking_on() {
        let mut c = cfg(1, 8, 1024, 0, 1);
        assert_eq!(
            c.validate(),
            Err(Error::InvalidChunking {
                field: ChunkingField::Size,
                value: 0,
                max: 0
            })
        );
        c.chunking = Chunking::new(1024, 0);
        let keep = Error::InvalidChunking {
            field: ChunkingField::Keep,
            value: 0,
            max: 64,
        };
        assert_eq!(c.validate(), Err(keep));
        c.chunking = Chunking::new(1024, 65);
        assert!(matches!(
            c.validate(),
            Err(Error::InvalidChunking { value: 65, .. })
        ));
        c.chunking.keep = 1;
        c.chunking.state_permille = 1001;
        let state = Error::InvalidChunking {
            field: ChunkingField::StatePermille,
            value: 1001,
            max: 1000,
        };
        assert_eq!(c.validate(), Err(state));
        assert_eq!(
            std::format!("{state}"),
            "chunk_state_permille = 1001 is out of range (at most 1000, chunk_keep at least 1)"
        );
    }

    #[test]
    fn random_batches_plan_and_pass_the_checker() {
        let mut rng = SplitMix64::new(24);
        for _ in 0..if cfg!(miri) { 10 } else { 300 } {
            let dp = 1 + rng.below_mod(4) as u32;
            let cp = [1, 2, 4, 8, 16][rng.below_mod(5) as usize];
            let bucket = 1024 + rng.below_mod(16_384) as u32;
            let chunk = 256 + rng.below_mod(u64::from(bucket)) as u32;
            let keep = 1 + rng.below_mod(3) as u32;
            let mut c = cfg(dp, cp, bucket, chunk, keep);
            c.lockstep = rng.below_mod(2) == 0;
            // The fill pass moves chunked sequences with the local ones.
            c.fill_empty = rng.below_mod(2) == 0;
            if rng.below_mod(4) == 0 {
                c.micro_batches = 1 + rng.below_mod(30) as u32;
            }
            let n = 1 + rng.below_mod(60) as usize;
            let longest = u64::from(bucket) * u64::from(cp);
            let lengths: Vec<u32> = (0..n).map(|_| 1 + rng.below_mod(longest) as u32).collect();
            let mut b = OwnedPlan::new(n, &c);
            match b.schedule(&c, &lengths) {
                Ok(plan) => check(&setup_of(&c), &lengths, &plan).unwrap(),
                Err(Error::ChunkOverBudget { index, len, peak }) => {
                    assert_eq!(lengths[index], len);
                    assert!(peak > u64::from(bucket));
                }
                Err(Error::MicroBatchCount { count, needed, .. }) => assert!(needed > count),
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn the_checker_refuses_chunked_placements_it_cannot_honour() {
        let c = cfg(1, 4, 13 * 1024, 8192, 1);
        let lengths = [20_000, 500];
        let mut b = OwnedPlan::new(2, &c);
        let plan = b.schedule(&c, &lengths).unwrap();
        let setup = setup_of(&c);
        check(&setup, &lengths, &plan).unwrap();
        let bad = |p: Placement| {
            let mut placements = plan.placements().to_vec();
            placements[0] = p;
            let mut copy = plan;
            copy.placements = &placements;
            check(&setup, &lengths, &copy)
        };
        let good = plan.placements()[0];
        // A group that is not aligned, or larger than CP.
        let p = Placement {
            cp_first: 1,
            cp_size: 2,
            ..good
        };
        assert_eq!(bad(p), Err(CheckError::OutOfRange { seq: 0 }));
        let p = Placement {
            cp_first: 0,
            cp_size: 8,
            ..good
        };
        assert_eq!(bad(p), Err(CheckError::OutOfRange { seq: 0 }));
        // The recorded loads no longer match a chunked sequence on another group.
        let p = Placement {
            cp_first: 0,
            cp_size: 2,
            ..good
        };
        assert!(matches!(bad(p), Err(CheckError::TokenMismatch { .. })));
        // Chunking off, or a sequence of one chunk: not chunkable.
        let mut off = c;
        off.chunking = Chunking::OFF;
        off.policy = Policy::Skrull;
        assert_eq!(
            check(&setup_of(&off), &lengths, &plan),
            Err(CheckError::OutOfRange { seq: 0 })
        );
        let short = [8192, 500];
        assert_eq!(
            check(&setup, &short, &plan),
            Err(CheckError::OutOfRange { seq: 0 })
        );
    }

    /// A sequence too long to fit sharded over the group still trains under `chunkflow`
    /// when its chunked peak fits: it is planned chunked and the plan passes the checker;
    /// `balanced` with the same chunking refuses it (it chunks only sequences it could
    /// shard), and a chunked peak over BucketSize is `ChunkOverBudget`.
    #[test]
    fn chunkflow_plans_a_sequence_too_long_to_fit_sharded() {
        let c = cfg(1, 2, 1000, 512, 1);
        let lengths = [3000, 100, 200];
        assert!(!c.budget().fits_sharded(3000));
        let mut b = OwnedPlan::new(3, &c);
        let plan = b.schedule(&c, &lengths).unwrap();
        check(&setup_of(&c), &lengths, &plan).unwrap();
        let p = plan.placements()[0];
        assert_eq!(
            (p.cp_rank, p.cp_first, p.cp_size),
            (crate::plan::CHUNKED, 0, 2)
        );
        assert!(c.longest_accepted() >= 3000);
        let mut balanced = c;
        balanced.policy = Policy::Balanced;
        let mut b = OwnedPlan::new(3, &balanced);
        assert!(matches!(
            b.schedule(&balanced, &lengths),
            Err(Error::SequenceTooLong {
                index: 0,
                len: 3000,
                ..
            })
        ));
        // The state alone (64/1000 per token) over the group is over BucketSize.
        let long = [40_000];
        let mut b = OwnedPlan::new(1, &c);
        assert!(matches!(
            b.schedule(&c, &long),
            Err(Error::ChunkOverBudget {
                index: 0,
                len: 40_000,
                ..
            })
        ));
    }
}
