//! [`fill_in_place`]: gives every DP rank the same micro-batch count with no avoidable empty
//! micro-batch, by splitting a rank's multi-sequence micro-batches after a policy wrote the
//! plan.
//!
//! Trainers whose micro-batch loop count is global need every DP rank to run the same number
//! of micro-batches: lockstep gives each rank the longest rank's count and leaves the extra
//! ones empty, and a fixed count ([`Config::micro_batches`], Hugging Face's
//! `gradient_accumulation_steps`) asks for exactly `G`. An empty micro-batch crashes the
//! packing code of Hugging Face, TRL and Megatron. This pass moves sequences out of a rank's
//! multi-sequence micro-batches into new single-sequence micro-batches appended after its
//! last one, until the rank runs the target count or every micro-batch of it holds one
//! sequence (then the rest stay empty: the rank has fewer sequences than slots).
//!
//! Which sequence moves, in one pass per kind over the rank's micro-batches in order (each
//! keeps at least one sequence):
//! 1. with CP > 1, sequences sharded over the whole CP group first: the new micro-batch then
//!    has tokens on every CP rank, which fixed-CP trainers need;
//! 2. then sequences sharded over a sub-group;
//! 3. then local sequences.
//!
//! A moved sequence keeps its placement (CP rank or group), so every load only drops or is a
//! lone sequence's, and the budget still holds. Runs in `O(n + micro-batches x cp)` with no
//! scratch memory: the plan's own buffers are rearranged in place.

use crate::config::Config;
use crate::config::budget::Budget;
use crate::error::Error;
use crate::plan::types::{MicroBatch, Placement, Plan, PlanBuffers, Summary};

/// Marks a member slot whose sequence moved to a new micro-batch (sequence indices are below
/// [`MAX_SEQS`](crate::config::limits::MAX_SEQS)).
const MOVED: u32 = u32::MAX;

/// Which sequences one pass over a DP rank's micro-batches may move.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Sharded over the whole CP group.
    Whole,
    /// Sharded over a proper sub-group.
    SubGroup,
    /// Kept whole on one CP rank.
    Local,
    /// Any placement (CP 1: every sequence is local).
    Any,
}

impl Kind {
    fn matches(self, p: &Placement, cp: u32) -> bool {
        match self {
            Kind::Whole => p.is_sharded() && !p.is_subgroup(cp),
            Kind::SubGroup => p.is_subgroup(cp),
            Kind::Local => !p.is_sharded(),
            // A chunked sequence moves with the local ones: it keeps its group.
            Kind::Any => true,
        }
    }
}

/// The plan a policy wrote: its summary and how many micro-batch table entries it used.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Written {
    /// The policy's summary.
    pub(crate) summary: Summary,
    /// Entries of the micro-batch table in use.
    pub(crate) micro_batches: usize,
}

/// Fills the empty micro-batches of the plan a policy wrote into `out` (see the module
/// documentation) in place, and returns what it now holds ([`view`] reads it back). Without
/// [`Config::fills_empty`] the plan is left as written.
///
/// # Errors
/// [`Error::MicroBatchCount`] when a DP rank needs more micro-batches than the fixed count
/// [`Config::micro_batches`], naming the smallest count that fits.
pub(crate) fn fill_in_place(
    cfg: &Config,
    lengths: &[u32],
    out: PlanBuffers<'_>,
    written: Written,
) -> Result<Written, Error> {
    let (dp, cp) = (cfg.dp as usize, cfg.cp as usize);
    let PlanBuffers {
        placements,
        micro_batches: table,
        members,
        rank_tokens,
        micro_batches_per_dp,
    } = out;
    let (mut summary, mut k) = (written.summary, written.micro_batches);
    if cfg.fills_empty() {
        let added = split(cfg, lengths, placements, table, members, rank_tokens, k)?;
        if let Some(counts) = micro_batches_per_dp.get_mut(..dp) {
            counts.fill(added.target);
        }
        k += added.micro_batches;
        summary.micro_batches = u32::try_from(k).unwrap_or(u32::MAX);
        let loads = rank_tokens.get(..k * cp).unwrap_or(&[]);
        summary.peak_rank_tokens = loads.iter().copied().max().unwrap_or(0);
    }
    Ok(Written {
        summary,
        micro_batches: k,
    })
}

/// The read-only plan of `n` sequences that `out` holds, as `written` describes it.
pub(crate) fn view<'b>(cfg: &Config, n: usize, out: PlanBuffers<'b>, written: Written) -> Plan<'b> {
    let (dp, cp, k) = (cfg.dp as usize, cfg.cp as usize, written.micro_batches);
    let PlanBuffers {
        placements,
        micro_batches: table,
        members,
        rank_tokens,
        micro_batches_per_dp,
    } = out;
    let (placements, members): (&'b [Placement], &'b [u32]) = (placements, members);
    let (table, rank_tokens, per_dp): (&'b [MicroBatch], &'b [u32], &'b [u32]) =
        (table, rank_tokens, micro_batches_per_dp);
    Plan {
        dp: cfg.dp,
        cp: cfg.cp,
        placements: placements.get(..n).unwrap_or(&[]),
        micro_batches: table.get(..k).unwrap_or(&[]),
        members: members.get(..n).unwrap_or(&[]),
        rank_tokens: rank_tokens.get(..k * cp).unwrap_or(&[]),
        micro_batches_per_dp: per_dp.get(..dp).unwrap_or(&[]),
        summary: written.summary,
    }
}

/// What [`split`] added.
struct Added {
    /// The count every DP rank now reports.
    target: u32,
    /// Micro-batches added to the table.
    micro_batches: usize,
}

/// One DP rank's run of the micro-batch table: entries `[start, stop)`.
#[derive(Clone, Copy)]
struct Block {
    dp_rank: u32,
    start: usize,
    stop: usize,
    /// Sequences in its micro-batches.
    seqs: usize,
}

impl Block {
    fn listed(&self) -> usize {
        self.stop - self.start
    }

    /// Micro-batches this rank gains: up to the target, one per sequence at most.
    fn moves(&self, target: usize) -> usize {
        target.min(self.seqs).saturating_sub(self.listed())
    }
}

/// The block of the DP rank whose last table entry is `stop - 1`.
fn block_ending(table: &[MicroBatch], stop: usize) -> Block {
    let dp_rank = table.get(stop - 1).map_or(0, |m| m.dp_rank);
    let mut start = stop - 1;
    while start > 0 && table.get(start - 1).is_some_and(|m| m.dp_rank == dp_rank) {
        start -= 1;
    }
    let seqs = table
        .get(start..stop)
        .unwrap_or(&[])
        .iter()
        .map(|m| m.count as usize)
        .sum();
    Block {
        dp_rank,
        start,
        stop,
        seqs,
    }
}

/// Picks the target count, then splits every DP rank's micro-batches up to it, moving each
/// rank's block of the table (and of the loads) to make room for its new entries.
fn split(
    cfg: &Config,
    lengths: &[u32],
    placements: &mut [Placement],
    table: &mut [MicroBatch],
    members: &mut [u32],
    rank_tokens: &mut [u32],
    k: usize,
) -> Result<Added, Error> {
    let cp = cfg.cp as usize;
    // The most micro-batches any rank lists, and the first rank that lists that many.
    let (mut most, mut most_rank, mut stop) = (0usize, 0u32, k);
    let mut added = 0usize;
    while stop > 0 {
        let b = block_ending(table, stop);
        if b.listed() >= most {
            (most, most_rank) = (b.listed(), b.dp_rank);
        }
        stop = b.start;
    }
    let target = if cfg.micro_batches != 0 {
        if most > cfg.micro_batches as usize {
            return Err(Error::MicroBatchCount {
                dp_rank: most_rank,
                count: cfg.micro_batches,
                needed: u32::try_from(most).unwrap_or(u32::MAX),
            });
        }
        cfg.micro_batches as usize
    } else {
        most
    };
    stop = k;
    while stop > 0 {
        let b = block_ending(table, stop);
        added += b.moves(target);
        stop = b.start;
    }
    // Back to front: rank d's block moves up by the entries the ranks before it gain, so
    // every destination lies at or past its source and past what is still to be read.
    let budget = cfg.budget();
    let mut shift = added;
    stop = k;
    while stop > 0 {
        let b = block_ending(table, stop);
        let moves = b.moves(target);
        shift -= moves;
        if shift > 0 {
            table.copy_within(b.start..b.stop, b.start + shift);
            rank_tokens.copy_within(b.start * cp..b.stop * cp, (b.start + shift) * cp);
        }
        let moved = Block {
            start: b.start + shift,
            stop: b.stop + shift,
            ..b
        };
        if moves > 0 {
            split_rank(
                cfg,
                &budget,
                lengths,
                placements,
                table,
                members,
                rank_tokens,
                moved,
                moves,
            );
        }
        stop = b.start;
    }
    Ok(Added {
        target: u32::try_from(target).unwrap_or(u32::MAX),
        micro_batches: added,
    })
}

/// Tokens a sequence placed at `p` costs each GPU of its group, and that group.
fn cost(cfg: &Config, budget: &Budget, p: &Placement, len: u32) -> (u32, usize, usize) {
    let g = p.group(cfg.cp);
    let tokens = if p.is_chunked() {
        let peak = budget.chunked(&cfg.chunking, len, g.size);
        u32::try_from(peak).unwrap_or(u32::MAX)
    } else if p.is_sharded() {
        budget.for_group(g.size).share(len)
    } else {
        budget.local(len)
    };
    (tokens, g.first as usize, g.size as usize)
}

/// Moves `moves` sequences of one DP rank (its block already at its final table position)
/// into new single-sequence micro-batches appended after its last one.
#[allow(clippy::too_many_arguments)]
fn split_rank(
    cfg: &Config,
    budget: &Budget,
    lengths: &[u32],
    placements: &mut [Placement],
    table: &mut [MicroBatch],
    members: &mut [u32],
    rank_tokens: &mut [u32],
    b: Block,
    moves: usize,
) {
    let cp = cfg.cp as usize;
    let listed = b.listed();
    let Some(first) = table.get(b.start).map(|m| m.first as usize) else {
        return;
    };
    let end = first + b.seqs;
    let kinds: &[Kind] = if cfg.cp > 1 {
        &[Kind::Whole, Kind::SubGroup, Kind::Local]
    } else {
        &[Kind::Any]
    };
    let mut done = 0usize;
    for &kind in kinds {
        for e in 0..listed {
            let g = b.start + e;
            let (lo, hi) = member_slots(table, b, e, end);
            for slot in lo..hi {
                if done == moves || table.get(g).is_none_or(|m| m.count < 2) {
                    break;
                }
                let Some(&s) = members.get(slot) else { break };
                let (Some(p), Some(&len)) =
                    (placements.get_mut(s as usize), lengths.get(s as usize))
                else {
                    continue;
                };
                if s == MOVED || !kind.matches(p, cfg.cp) {
                    continue;
                }
                let (tokens, gfirst, gsize) = cost(cfg, budget, p, len);
                let index = listed + done;
                p.micro_batch = index as u32;
                if let Some(m) = table.get_mut(g) {
                    m.count -= 1;
                }
                if let Some(row) = rank_tokens.get_mut(g * cp..(g + 1) * cp) {
                    for t in row.iter_mut().skip(gfirst).take(gsize) {
                        *t = t.saturating_sub(tokens);
                    }
                }
                let new = b.start + index;
                if let Some(row) = rank_tokens.get_mut(new * cp..(new + 1) * cp) {
                    row.fill(0);
                    row.iter_mut()
                        .skip(gfirst)
                        .take(gsize)
                        .for_each(|t| *t = tokens);
                }
                if let Some(m) = table.get_mut(new) {
                    // `first` holds the sequence until the members are compacted below.
                    *m = MicroBatch {
                        dp_rank: b.dp_rank,
                        index: index as u32,
                        first: s,
                        count: 1,
                    };
                }
                if let Some(m) = members.get_mut(slot) {
                    *m = MOVED;
                }
                done += 1;
            }
        }
    }
    compact(table, members, b, first, end, done);
}

/// The member slots `[lo, hi)` of the rank's `e`-th original micro-batch, read from the
/// `first` fields (which tile the rank's members up to `end` until `compact` rewrites them:
/// it reads entry `e + 1` before it rewrites it).
fn member_slots(table: &[MicroBatch], b: Block, e: usize, end: usize) -> (usize, usize) {
    let first = |g: usize| table.get(g).map_or(end, |m| m.first as usize);
    let hi = if e + 1 < b.listed() {
        first(b.start + e + 1)
    } else {
        end
    };
    (first(b.start + e), hi)
}

/// Closes the gaps the moved sequences left in the rank's members (stable), then lists the
/// moved ones after them, one per new micro-batch, and points every entry at its members.
fn compact(
    table: &mut [MicroBatch],
    members: &mut [u32],
    b: Block,
    first: usize,
    end: usize,
    moved: usize,
) {
    let listed = b.listed();
    let mut w = first;
    for e in 0..listed {
        let g = b.start + e;
        let (lo, hi) = member_slots(table, b, e, end);
        if let Some(m) = table.get_mut(g) {
            m.first = w as u32;
        }
        for r in lo..hi {
            let Some(&s) = members.get(r) else { break };
            if s != MOVED {
                if let Some(slot) = members.get_mut(w) {
                    *slot = s;
                }
                w += 1;
            }
        }
    }
    for j in 0..moved {
        let g = b.start + listed + j;
        if let Some(m) = table.get_mut(g) {
            if let Some(slot) = members.get_mut(w + j) {
                *slot = m.first;
            }
            m.first = (w + j) as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::options::{Policy, ShardPadding};
    use crate::config::shape::ModelShape;
    use crate::plan::check::{CheckError, check};
    use crate::test_support::OwnedPlan;
    use crate::test_support::setup_of;
    use std::vec::Vec;

    use crate::test_support::SplitMix64 as Rng;

    /// A plan's placements and per-rank micro-batch table, owned.
    struct Snapshot {
        placements: Vec<Placement>,
        table: Vec<MicroBatch>,
        members: Vec<u32>,
        per_dp: Vec<u32>,
    }

    fn snapshot(plan: &Plan<'_>) -> Snapshot {
        Snapshot {
            placements: plan.placements().to_vec(),
            table: plan.micro_batches().to_vec(),
            members: plan.members().to_vec(),
            per_dp: plan.micro_batches_per_dp().to_vec(),
        }
    }

    fn plan(cfg: &Config, lengths: &[u32]) -> Result<Snapshot, Error> {
        let mut owned = OwnedPlan::filled(lengths.len(), cfg, 3);
        let plan = owned.schedule(cfg, lengths)?;
        assert_eq!(check(&setup_of(cfg), lengths, &plan), Ok(()), "{cfg:?}");
        let s = snapshot(&plan);
        assert_eq!(plan.summary().micro_batches as usize, s.table.len());
        let peak = plan.rank_tokens.iter().copied().max().unwrap_or(0);
        assert_eq!(plan.summary().peak_rank_tokens, peak);
        Ok(s)
    }

    fn random_case(rng: &mut Rng) -> (Config, Vec<u32>) {
        let cp = 1 << rng.below_mod(4);
        let dp = 1 + rng.below_mod(4) as u32;
        let bucket = 64 + rng.below_mod(192) as u32;
        let mut cfg = Config::new(dp, cp, bucket, ModelShape::QWEN2_5_0_5B)
            .with_policy(Policy::ALL[rng.below_mod(5) as usize]);
        cfg.shard_padding = if rng.below_mod(2) == 0 {
            ShardPadding::None
        } else {
            ShardPadding::Zigzag
        };
        cfg.subgroups = rng.below_mod(2) == 0;
        let n = 1 + rng.below_mod(40) as usize;
        let longest = u64::from(bucket) * u64::from(cp) / 2;
        let lengths = (0..n).map(|_| 1 + rng.below_mod(longest) as u32).collect();
        (cfg, lengths)
    }

    /// Sequences per DP rank.
    fn seqs_per_rank(s: &Snapshot, dp: u32) -> Vec<u32> {
        let mut seqs = std::vec![0u32; dp as usize];
        for p in &s.placements {
            seqs[p.dp_rank as usize] += 1;
        }
        seqs
    }

    /// What filling promises, against the plan the policy made unfilled.
    fn assert_filled(cfg: &Config, base: &Snapshot, got: &Snapshot, target: u32) {
        assert!(got.per_dp.iter().all(|&c| c == target), "{cfg:?}");
        let seqs = seqs_per_rank(got, cfg.dp);
        for d in 0..cfg.dp {
            let rows: Vec<&MicroBatch> = got.table.iter().filter(|m| m.dp_rank == d).collect();
            let base_rows = base.table.iter().filter(|m| m.dp_rank == d).count();
            // As many micro-batches as the target or the rank's sequences allow, never fewer
            // than before.
            assert_eq!(
                rows.len() as u32,
                target.min(seqs[d as usize]).max(base_rows as u32)
            );
            // Sequences sharded over the whole group move first: once a local one moved,
            // no micro-batch of several sequences holds a whole-group shard.
            let moved_local = got.placements.iter().enumerate().any(|(s, p)| {
                p.dp_rank == d && !p.is_sharded() && p.micro_batch != base.placements[s].micro_batch
            });
            if cfg.cp > 1 && moved_local {
                for m in rows.iter().filter(|m| m.count > 1) {
                    let members = &got.members[m.first as usize..(m.first + m.count) as usize];
                    assert!(members.iter().all(|&s| {
                        let p = got.placements[s as usize];
                        !p.is_sharded() || p.is_subgroup(cfg.cp)
                    }));
                }
            }
        }
        for (s, (a, b)) in base.placements.iter().zip(&got.placements).enumerate() {
            // Placements are kept; a sequence either stays in its micro-batch or moves to a
            // new one past the rank's first micro-batches.
            assert_eq!(
                (a.dp_rank, a.cp_rank, a.cp_first, a.cp_size),
                (b.dp_rank, b.cp_rank, b.cp_first, b.cp_size)
            );
            let listed = base.table.iter().filter(|m| m.dp_rank == a.dp_rank).count() as u32;
            assert!(
                b.micro_batch == a.micro_batch || b.micro_batch >= listed,
                "seq {s}"
            );
        }
    }

    #[test]
    fn a_fixed_count_fills_every_rank_to_it_and_keeps_placements() {
        let mut rng = Rng::new(20);
        let cases = if cfg!(miri) { 2 } else { 400 };
        for _ in 0..cases {
            let (mut cfg, lengths) = random_case(&mut rng);
            let base = plan(&cfg, &lengths).unwrap();
            let most = base.per_dp.iter().copied().max().unwrap();
            let target = most.max(1) + rng.below_mod(6) as u32;
            cfg.micro_batches = target;
            let got = plan(&cfg, &lengths).unwrap();
            assert_filled(&cfg, &base, &got, target);
        }
    }

    #[test]
    fn a_count_too_small_names_the_smallest_that_fits() {
        let mut rng = Rng::new(21);
        let cases = if cfg!(miri) { 2 } else { 300 };
        let mut refused = 0;
        for _ in 0..cases {
            let (mut cfg, lengths) = random_case(&mut rng);
            let base = plan(&cfg, &lengths).unwrap();
            let most = base.per_dp.iter().copied().max().unwrap();
            if most < 2 {
                continue;
            }
            let first = base.per_dp.iter().position(|&c| c == most).unwrap() as u32;
            cfg.micro_batches = most - 1;
            let err = plan(&cfg, &lengths).err();
            assert_eq!(
                err,
                Some(Error::MicroBatchCount {
                    dp_rank: first,
                    count: most - 1,
                    needed: most
                })
            );
            refused += 1;
            cfg.micro_batches = most;
            assert!(plan(&cfg, &lengths).is_ok());
        }
        // Under miri (2 cases) a batch needing two micro-batches may not come up.
        assert!(cfg!(miri) || refused > cases / 4, "{refused}");
    }

    #[test]
    fn fill_empty_with_lockstep_leaves_no_avoidable_empty_micro_batch() {
        let mut rng = Rng::new(22);
        let cases = if cfg!(miri) { 2 } else { 400 };
        let mut split = 0;
        for _ in 0..cases {
            let (mut cfg, lengths) = random_case(&mut rng);
            cfg.lockstep = true;
            let base = plan(&cfg, &lengths).unwrap();
            cfg.fill_empty = true;
            let got = plan(&cfg, &lengths).unwrap();
            assert_filled(&cfg, &base, &got, base.per_dp[0]);
            split += got.table.len() - base.table.len();
            // Without lockstep there is nothing to fill: the plan is the policy's own.
            cfg.lockstep = false;
            let free = plan(&cfg, &lengths).unwrap();
            cfg.fill_empty = false;
            let plain = plan(&cfg, &lengths).unwrap();
            assert_eq!(free.placements, plain.placements);
            assert_eq!(free.per_dp, plain.per_dp);
        }
        assert!(cfg!(miri) || split > cases / 10, "{split}");
    }

    #[test]
    fn the_checker_refuses_an_avoidable_empty_micro_batch() {
        // DP 2: one rank needs two micro-batches for two long sequences, the other holds a
        // long and two short ones in one.
        let mut cfg = Config::new(2, 1, 100, ModelShape::QWEN2_5_0_5B).with_policy(Policy::Skrull);
        cfg.lockstep = true;
        let lengths = [60, 60, 60, 5, 5];
        let mut owned = OwnedPlan::new(lengths.len(), &cfg);
        let plan = owned.schedule(&cfg, &lengths).unwrap();
        assert!(plan.micro_batches().iter().any(|m| m.count > 1));
        assert!(plan.micro_batches().len() < 4);
        assert_eq!(check(&setup_of(&cfg), &lengths, &plan), Ok(()));
        cfg.fill_empty = true;
        assert!(matches!(
            check(&setup_of(&cfg), &lengths, &plan),
            Err(CheckError::AvoidableEmpty { .. })
        ));
    }

    #[test]
    fn a_count_above_the_sequences_leaves_the_rest_empty() {
        let mut cfg = Config::new(3, 4, 64, ModelShape::QWEN2_5_0_5B).with_policy(Policy::Packed);
        cfg.micro_batches = 1000;
        let lengths = [10, 200, 3, 7, 50];
        let got = plan(&cfg, &lengths).unwrap();
        assert!(got.per_dp.iter().all(|&c| c == 1000));
        assert_eq!(got.table.len(), lengths.len());
        assert!(got.table.iter().all(|m| m.count == 1));
        // A fixed count above a micro-batch limit is refused before planning.
        cfg.max_micro_batches = 999;
        assert_eq!(
            plan(&cfg, &lengths).err(),
            Some(Error::MicroBatchLimit {
                dp_rank: 0,
                limit: 999,
                needed: 1000
            })
        );
    }
}
