//! [`PlanWriter`]: how every policy writes its plan, micro-batch by micro-batch, keeping the
//! token loads and the summary as it goes.

use crate::config::Config;
use crate::config::budget::Budget;
use crate::config::chunking::Chunking;
use crate::plan::types::{CHUNKED, MicroBatch, Placement, Plan, PlanBuffers, SHARDED, Summary};

/// Writes a plan micro-batch by micro-batch (used by every policy).
pub(crate) struct PlanWriter<'b> {
    out: PlanBuffers<'b>,
    dp: u32,
    cp: u32,
    budget: Budget,
    lockstep: bool,
    n_mbs: usize,
    n_members: usize,
    /// Whole-group shares pushed into the open micro-batch and not yet added to its ranks:
    /// every rank gets the same sum, added once when the micro-batch closes.
    pending: u64,
    /// The open micro-batch's loads are not written yet (they are all zero): the first local
    /// or sub-group push zeroes them, or closing it writes the pending shares directly.
    fresh: bool,
    summary: Summary,
}

impl<'b> PlanWriter<'b> {
    /// Starts an empty plan. The buffers must have passed
    /// [`PlanSizes::check`](crate::PlanSizes::check).
    pub(crate) fn new(out: PlanBuffers<'b>, cfg: &Config, total_tokens: u64) -> Self {
        let summary = Summary {
            total_tokens,
            ..Summary::default()
        };
        PlanWriter {
            out,
            dp: cfg.dp,
            cp: cfg.cp,
            budget: cfg.budget(),
            lockstep: cfg.lockstep_counts(),
            n_mbs: 0,
            n_members: 0,
            pending: 0,
            fresh: false,
            summary,
        }
    }

    /// Closes the open micro-batch: adds its pending whole-group shares to every rank (a
    /// chain of saturating additions of non-negative values equals one saturating addition
    /// of their sum, so the loads are those of adding each share as it came) and takes the
    /// peak over its final loads. Called once per micro-batch, by the next `open` or by
    /// `finish`; without an open micro-batch it does nothing.
    #[inline]
    fn close(&mut self) {
        let cp = self.cp as usize;
        let shared = u32::try_from(self.pending).unwrap_or(u32::MAX);
        let fresh = self.fresh;
        (self.pending, self.fresh) = (0, false);
        let Some(g) = self.n_mbs.checked_sub(1) else {
            return;
        };
        let Some(tokens) = self.out.rank_tokens.get_mut(g * cp..(g + 1) * cp) else {
            return;
        };
        let mut peak = self.summary.peak_rank_tokens;
        if fresh {
            tokens.fill(shared);
            peak = peak.max(shared);
        } else {
            for t in tokens.iter_mut() {
                *t = t.saturating_add(shared);
                peak = peak.max(*t);
            }
        }
        self.summary.peak_rank_tokens = peak;
    }

    /// The open micro-batch's loads, zeroed first if still fresh (None before any `open`).
    #[inline]
    fn open_tokens(&mut self) -> Option<&mut [u32]> {
        let g = self.n_mbs.checked_sub(1)?;
        loads_row(self.out.rank_tokens, g, self.cp as usize, &mut self.fresh)
    }

    /// Scratch access to the placements while a policy is still deciding.
    pub(crate) fn placements_mut(&mut self) -> &mut [Placement] {
        self.out.placements
    }

    /// Opens the next micro-batch of `dp_rank` (indices must arrive in order).
    #[inline]
    pub(crate) fn open(&mut self, dp_rank: u32, index: u32) {
        self.close();
        if let Some(mb) = self.out.micro_batches.get_mut(self.n_mbs) {
            *mb = MicroBatch {
                dp_rank,
                index,
                first: self.n_members as u32,
                count: 0,
            };
        }
        // Its loads are written when first needed, or when it closes.
        self.fresh = true;
        self.n_mbs += 1;
        self.summary.micro_batches += 1;
    }

    /// Adds sequence `seq` of `len` tokens to the open micro-batch, local on `cp_rank` or
    /// [`SHARDED`] over the whole CP group.
    #[inline]
    pub(crate) fn push(&mut self, seq: u32, len: u32, cp_rank: i32) {
        self.push_in(seq, len, cp_rank, 0, 0);
    }

    /// [`PlanWriter::push`] for a sequence sharded over the sub-group of `size` ranks from
    /// `first` (`size` 0 or the CP size: the whole group); `first` and `size` are ignored for a
    /// local sequence. The group must be valid ([`crate::plan::CpGroup::is_valid_shard`]).
    // Always inlined: `balanced`'s writer loop has two instances (with and without chunking),
    // and LLVM left it out of line there (15 more instructions per sequence).
    #[inline(always)]
    pub(crate) fn push_in(&mut self, seq: u32, len: u32, cp_rank: i32, first: u32, size: u32) {
        let whole = cp_rank != SHARDED || size == 0 || size == self.cp;
        let (first, size) = if whole { (0, 0) } else { (first, size) };
        if !self.record(seq, cp_rank, first, size) {
            return;
        }
        if cp_rank == SHARDED && size == 0 {
            // The whole group: every rank gets the share, added when the micro-batch closes.
            self.summary.sharded += 1;
            self.pending += u64::from(self.budget.share(len));
            return;
        }
        let budget = self.budget;
        let Some(tokens) = self.open_tokens() else {
            return;
        };
        let sharded = cp_rank == SHARDED;
        if sharded {
            let share = budget.for_group(size).share(len);
            let group = tokens.iter_mut().skip(first as usize).take(size as usize);
            for t in group {
                *t = t.saturating_add(share);
            }
        } else if let Some(t) = tokens.get_mut(cp_rank as usize) {
            *t = t.saturating_add(budget.local(len));
        }
        self.summary.sharded += u32::from(sharded);
    }

    /// Lists sequence `seq` in the open micro-batch and writes its placement (`cp_rank` and
    /// group fields as given); false when no micro-batch is open.
    #[inline(always)]
    fn record(&mut self, seq: u32, cp_rank: i32, first: u32, size: u32) -> bool {
        let Some(g) = self.n_mbs.checked_sub(1) else {
            return false;
        };
        let Some(mb) = self.out.micro_batches.get_mut(g) else {
            return false;
        };
        mb.count += 1;
        if let Some(p) = self.out.placements.get_mut(seq as usize) {
            *p = Placement {
                dp_rank: mb.dp_rank,
                micro_batch: mb.index,
                cp_rank,
                cp_first: first as u16,
                cp_size: size as u16,
            };
        }
        if let Some(m) = self.out.members.get_mut(self.n_members) {
            *m = seq;
        }
        self.n_members += 1;
        true
    }

    /// Adds sequence `seq` of `len` tokens to the open micro-batch, chunked by `chunking` on
    /// the aligned group of `size` ranks from `first` (a valid chunk group,
    /// [`crate::plan::CpGroup::is_valid_chunk_group`]); each rank of the group is charged the
    /// chunked peak ([`Budget::chunked`]).
    pub(crate) fn push_chunked(
        &mut self,
        seq: u32,
        len: u32,
        (first, size): (u32, u32),
        chunking: &Chunking,
    ) {
        if !self.record(seq, CHUNKED, first, size) {
            return;
        }
        self.summary.chunked += 1;
        let peak = self.budget.chunked(chunking, len, size);
        let peak = u32::try_from(peak).unwrap_or(u32::MAX);
        let Some(tokens) = self.open_tokens() else {
            return;
        };
        for t in tokens.iter_mut().skip(first as usize).take(size as usize) {
            *t = t.saturating_add(peak);
        }
    }

    /// Adds `seqs` to the open micro-batch, in order, each at the CP rank already recorded in
    /// its placement's `cp_rank`: the same as [`PlanWriter::push`] for each, with the lookups
    /// hoisted (the sharded shares join the pending sum that closing the micro-batch adds).
    pub(crate) fn push_placed(&mut self, seqs: &[u32], lengths: &[u32]) {
        let cp = self.cp as usize;
        let (first, k) = (self.n_members, seqs.len());
        let fresh = &mut self.fresh;
        let ready = self.n_mbs.checked_sub(1).and_then(|g| {
            let mb = self.out.micro_batches.get_mut(g)?;
            let members = self.out.members.get_mut(first..first + k)?;
            let tokens = loads_row(self.out.rank_tokens, g, cp, fresh)?;
            Some((mb, tokens, members))
        });
        let Some((mb, tokens, members)) = ready else {
            for &seq in seqs {
                let len = lengths.get(seq as usize).copied().unwrap_or(0);
                let cp_rank = self
                    .out
                    .placements
                    .get(seq as usize)
                    .map_or(0, |p| p.cp_rank);
                self.push(seq, len, cp_rank);
            }
            return;
        };
        mb.count += k as u32;
        let (dp_rank, micro_batch) = (mb.dp_rank, mb.index);
        let mut shared = 0u64;
        let mut sharded = 0u32;
        for (m, &seq) in members.iter_mut().zip(seqs) {
            *m = seq;
            let len = lengths.get(seq as usize).copied().unwrap_or(0);
            let Some(p) = self.out.placements.get_mut(seq as usize) else {
                continue;
            };
            // Whole-group shards only (the policies that call this never use sub-groups).
            let cp_rank = p.cp_rank;
            *p = Placement {
                dp_rank,
                micro_batch,
                cp_rank,
                cp_first: 0,
                cp_size: 0,
            };
            if cp_rank == SHARDED {
                sharded += 1;
                shared += u64::from(self.budget.share(len));
            } else if let Some(t) = tokens.get_mut(cp_rank as usize) {
                *t = t.saturating_add(self.budget.local(len));
            }
        }
        self.n_members += k;
        self.summary.sharded += sharded;
        self.pending += shared;
    }

    /// Records how many micro-batches `dp_rank` runs.
    pub(crate) fn set_count(&mut self, dp_rank: u32, count: u32) {
        if let Some(c) = self.out.micro_batches_per_dp.get_mut(dp_rank as usize) {
            *c = count;
        }
    }

    /// Adds rollbacks to the summary.
    pub(crate) fn add_rollbacks(&mut self, rollbacks: u32) {
        self.summary.rollbacks += rollbacks;
    }

    /// Ends the plan and returns the read-only view. With lockstep, every DP rank's count is
    /// raised to the largest (the extra micro-batches are empty and not in the table).
    pub(crate) fn finish(mut self, n: usize) -> Plan<'b> {
        self.close();
        let cp = self.cp as usize;
        let dp = self.dp as usize;
        if self.lockstep
            && let Some(counts) = self.out.micro_batches_per_dp.get_mut(..dp)
        {
            let most = counts.iter().copied().max().unwrap_or(0);
            counts.fill(most);
        }
        let PlanBuffers {
            placements,
            micro_batches,
            members,
            rank_tokens,
            micro_batches_per_dp,
        } = self.out;
        let (placements, members): (&'b [Placement], &'b [u32]) = (placements, members);
        let (micro_batches, rank_tokens): (&'b [MicroBatch], &'b [u32]) =
            (micro_batches, rank_tokens);
        let per_dp: &'b [u32] = micro_batches_per_dp;
        Plan {
            dp: self.dp,
            cp: self.cp,
            placements: placements.get(..n).unwrap_or(&[]),
            micro_batches: micro_batches.get(..self.n_mbs).unwrap_or(&[]),
            members: members.get(..n).unwrap_or(&[]),
            rank_tokens: rank_tokens.get(..self.n_mbs * cp).unwrap_or(&[]),
            micro_batches_per_dp: per_dp.get(..dp).unwrap_or(&[]),
            summary: self.summary,
        }
    }
}

/// Row `g` of the loads (`cp` ranks), zeroed first when `fresh` says it was never written.
#[inline]
fn loads_row<'t>(
    rank_tokens: &'t mut [u32],
    g: usize,
    cp: usize,
    fresh: &mut bool,
) -> Option<&'t mut [u32]> {
    let row = rank_tokens.get_mut(g * cp..(g + 1) * cp)?;
    if core::mem::take(fresh) {
        row.fill(0);
    }
    Some(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::limits::MAX_SEQ_LEN;
    use crate::config::shape::ModelShape;
    use crate::plan::types::PlanBuffers;
    use std::vec;
    use std::vec::Vec;

    use crate::test_support::SplitMix64 as Rng;

    /// Plan buffers for driving the writer by hand: `n` sequences, `mbs` micro-batch rows of
    /// `cp` ranks (loads pre-filled with `stale`), `dps` DP ranks.
    struct Buffers {
        placements: Vec<Placement>,
        micro_batches: Vec<MicroBatch>,
        members: Vec<u32>,
        rank_tokens: Vec<u32>,
        per_dp: Vec<u32>,
    }

    impl Buffers {
        fn new(n: usize, mbs: usize, cp: u32, dps: usize, stale: u32) -> Buffers {
            Buffers {
                placements: vec![Placement::default(); n],
                micro_batches: vec![MicroBatch::default(); mbs],
                members: vec![0; n],
                rank_tokens: vec![stale; mbs * cp as usize],
                per_dp: vec![0; dps],
            }
        }

        fn out(&mut self) -> PlanBuffers<'_> {
            PlanBuffers {
                placements: &mut self.placements,
                micro_batches: &mut self.micro_batches,
                members: &mut self.members,
                rank_tokens: &mut self.rank_tokens,
                micro_batches_per_dp: &mut self.per_dp,
            }
        }
    }

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

    #[test]
    fn push_placed_equals_push_one_by_one() {
        let mut rng = Rng::new(5);
        for case in 0..if cfg!(miri) { 5 } else { 100 } {
            let cp = 1 + rng.below_mod(9) as u32;
            let n = 1 + rng.below_mod(60) as usize;
            let lengths = random_lengths(&mut rng, n);
            let mut cfg = Config::new(2, cp, 1 << 30, ModelShape::QWEN2_5_0_5B);
            if case % 2 == 0 {
                cfg.shard_padding = crate::config::options::ShardPadding::Zigzag;
            }
            let ranks: Vec<i32> = (0..n)
                .map(|_| match rng.below_mod(u64::from(cp) + 2) {
                    0 => SHARDED,
                    r => (r as i32 - 1).min(cp as i32 - 1),
                })
                .collect();
            let split = rng.below_mod(n as u64 + 1) as usize;
            let run = |bulk: bool| {
                let mut bufs = Buffers::new(n, n, cp, 2, 0);
                for (p, &r) in bufs.placements.iter_mut().zip(&ranks) {
                    p.cp_rank = r;
                }
                let mut w = PlanWriter::new(bufs.out(), &cfg, 0);
                let seqs: Vec<u32> = (0..n as u32).rev().collect();
                w.open(1, 0);
                for part in [&seqs[..split], &seqs[split..]] {
                    if bulk {
                        w.push_placed(part, &lengths);
                    } else {
                        for &s in part {
                            w.push(s, lengths[s as usize], ranks[s as usize]);
                        }
                    }
                }
                w.set_count(1, 1);
                let plan = w.finish(n);
                (
                    plan.placements().to_vec(),
                    plan.micro_batches().to_vec(),
                    plan.members().to_vec(),
                    plan.rank_tokens(0).to_vec(),
                    plan.summary(),
                )
            };
            assert_eq!(run(true), run(false), "case {case}");
        }
    }

    /// The writer adds whole-group shares when a micro-batch closes and writes a micro-batch's
    /// loads only when first needed: the loads and the peak must equal adding every share to
    /// its ranks as it comes (saturating), for any mix of local, whole-group and sub-group
    /// pushes, empty micro-batches and saturated sums.
    #[test]
    fn deferred_loads_equal_adding_each_share_as_it_comes() {
        let mut rng = Rng::new(0xDEFE_44ED);
        for case in 0..if cfg!(miri) { 5 } else { 200 } {
            let cp = 1u32 << rng.below_mod(5);
            let n = rng.below_mod(40) as usize;
            let mut lengths = random_lengths(&mut rng, n.max(1));
            lengths.truncate(n);
            if case % 7 == 0 {
                lengths.iter_mut().for_each(|l| *l = MAX_SEQ_LEN); // saturates the sums
            }
            let mut cfg = Config::new(1, cp, 1 << 30, ModelShape::QWEN2_5_0_5B);
            if case % 2 == 0 {
                cfg.shard_padding = crate::config::options::ShardPadding::Zigzag;
            }
            let budget = cfg.budget();
            let cpu = cp as usize;
            // Stale loads that the writer must overwrite.
            let mut bufs = Buffers::new(n, n + 3, cp, 1, u32::MAX);
            let mut w = PlanWriter::new(bufs.out(), &cfg, 0);
            let mut want: Vec<Vec<u32>> = Vec::new();
            let mut sharded = 0;
            for (s, &len) in lengths.iter().enumerate() {
                if want.is_empty() || rng.below_mod(4) == 0 {
                    w.open(0, want.len() as u32);
                    want.push(vec![0; cpu]);
                    if rng.below_mod(5) == 0 {
                        w.open(0, want.len() as u32); // an empty micro-batch
                        want.push(vec![0; cpu]);
                    }
                }
                let row = want.last_mut().unwrap();
                let size = if cp >= 2 {
                    1 << rng.below_mod(u64::from(cp.ilog2()) + 1)
                } else {
                    1
                };
                match rng.below_mod(3) {
                    0 => {
                        let r = rng.below_mod(u64::from(cp)) as usize;
                        row[r] = row[r].saturating_add(budget.local(len));
                        w.push(s as u32, len, r as i32);
                    }
                    1 if size >= 2 && size < cp => {
                        let first = size * rng.below_mod(u64::from(cp / size)) as u32;
                        let share = budget.for_group(size).share(len);
                        for t in &mut row[first as usize..(first + size) as usize] {
                            *t = t.saturating_add(share);
                        }
                        w.push_in(s as u32, len, SHARDED, first, size);
                        sharded += 1;
                    }
                    _ => {
                        row.iter_mut()
                            .for_each(|t| *t = t.saturating_add(budget.share(len)));
                        w.push(s as u32, len, SHARDED);
                        sharded += 1;
                    }
                }
            }
            w.set_count(0, want.len() as u32);
            let plan = w.finish(n);
            assert_eq!(plan.micro_batches().len(), want.len(), "case {case}");
            for (g, row) in want.iter().enumerate() {
                assert_eq!(
                    plan.rank_tokens(g),
                    row.as_slice(),
                    "case {case}, micro-batch {g}"
                );
            }
            let peak = want.iter().flatten().copied().max().unwrap_or(0);
            assert_eq!(plan.summary().peak_rank_tokens, peak, "case {case}");
            assert_eq!(plan.summary().sharded, sharded, "case {case}");
        }
    }
}
