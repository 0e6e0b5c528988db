//! The one plan type every policy writes, the buffers it lives in, and an independent checker
//! that validates a plan from its placements alone.

use crate::budget::Budget;
use crate::config::{Config, MAX_CP, MAX_SEQS};
use crate::error::{Buffer, Error};

/// `Placement::cp_rank` of a sequence sharded over the whole CP group.
pub const SHARDED: i32 = -1;

/// Where one sequence runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Placement {
    /// The data-parallel rank.
    pub dp_rank: u32,
    /// The micro-batch index on that DP rank (0-based, run in this order).
    pub micro_batch: u32,
    /// [`SHARDED`] (-1), or the CP rank that holds the sequence whole.
    pub cp_rank: i32,
}

impl Placement {
    /// Whether the sequence is sharded over the CP group.
    pub fn is_sharded(&self) -> bool {
        self.cp_rank == SHARDED
    }
}

/// One micro-batch: which DP rank runs it, and where its sequences sit in `members`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct MicroBatch {
    /// The DP rank that runs it.
    pub dp_rank: u32,
    /// Its index among that rank's micro-batches.
    pub index: u32,
    /// Offset of its first sequence in [`Plan::members`].
    pub first: u32,
    /// How many sequences it holds (at least one).
    pub count: u32,
}

/// Counts that summarise a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Summary {
    /// Micro-batches over all DP ranks.
    pub micro_batches: u32,
    /// Sequences sharded over their CP group.
    pub sharded: u32,
    /// DACP rollbacks (local sequences turned sharded to free memory).
    pub rollbacks: u32,
    /// The most tokens any GPU holds in any micro-batch.
    pub peak_rank_tokens: u32,
    /// Tokens in the batch.
    pub total_tokens: u64,
}

/// How many elements each [`PlanBuffers`] slice needs for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanSizes {
    /// `n`: one per sequence.
    pub placements: usize,
    /// `n`: at most one micro-batch per sequence.
    pub micro_batches: usize,
    /// `n`: every sequence appears once.
    pub members: usize,
    /// `n x cp`: one per (micro-batch, CP rank).
    pub rank_tokens: usize,
    /// `dp`.
    pub micro_batches_per_dp: usize,
}

impl PlanSizes {
    /// The sizes for a batch of `n` sequences under `cfg` (an upper bound for every policy).
    pub fn for_batch(n: usize, cfg: &Config) -> PlanSizes {
        PlanSizes {
            placements: n,
            micro_batches: n,
            members: n,
            rank_tokens: n.saturating_mul(cfg.cp as usize),
            micro_batches_per_dp: cfg.dp as usize,
        }
    }

    /// Checks that `out` is at least this large.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] naming the first short buffer.
    pub fn check(&self, out: &PlanBuffers<'_>) -> Result<(), Error> {
        let pairs = [
            (Buffer::Placements, self.placements, out.placements.len()),
            (
                Buffer::MicroBatches,
                self.micro_batches,
                out.micro_batches.len(),
            ),
            (Buffer::Members, self.members, out.members.len()),
            (Buffer::RankTokens, self.rank_tokens, out.rank_tokens.len()),
            (
                Buffer::MicroBatchesPerDp,
                self.micro_batches_per_dp,
                out.micro_batches_per_dp.len(),
            ),
        ];
        for (buffer, needed, got) in pairs {
            if got < needed {
                return Err(Error::BufferTooSmall {
                    buffer,
                    needed,
                    got,
                });
            }
        }
        Ok(())
    }
}

/// Caller-provided storage a policy writes the plan into (sizes: [`PlanSizes`]).
#[derive(Debug)]
pub struct PlanBuffers<'a> {
    /// Per sequence, in input order.
    pub placements: &'a mut [Placement],
    /// Per micro-batch, grouped by DP rank, then by index.
    pub micro_batches: &'a mut [MicroBatch],
    /// Sequence indices grouped by micro-batch.
    pub members: &'a mut [u32],
    /// Tokens per (micro-batch, CP rank): entry `g * cp + r`.
    pub rank_tokens: &'a mut [u32],
    /// Micro-batches per DP rank.
    pub micro_batches_per_dp: &'a mut [u32],
}

/// A finished plan: read-only views into the [`PlanBuffers`] it was written to.
#[derive(Debug, Clone, Copy)]
pub struct Plan<'a> {
    dp: u32,
    cp: u32,
    placements: &'a [Placement],
    micro_batches: &'a [MicroBatch],
    members: &'a [u32],
    rank_tokens: &'a [u32],
    micro_batches_per_dp: &'a [u32],
    summary: Summary,
}

impl<'a> Plan<'a> {
    /// Data-parallel size of the plan.
    pub fn dp(&self) -> u32 {
        self.dp
    }
    /// Context-parallel size of the plan.
    pub fn cp(&self) -> u32 {
        self.cp
    }
    /// Per sequence, in input order.
    pub fn placements(&self) -> &'a [Placement] {
        self.placements
    }
    /// Every micro-batch, grouped by DP rank, then by index.
    pub fn micro_batches(&self) -> &'a [MicroBatch] {
        self.micro_batches
    }
    /// Sequence indices grouped by micro-batch (see [`MicroBatch::first`]).
    pub fn members(&self) -> &'a [u32] {
        self.members
    }
    /// Micro-batches per DP rank.
    pub fn micro_batches_per_dp(&self) -> &'a [u32] {
        self.micro_batches_per_dp
    }
    /// Counts that summarise the plan.
    pub fn summary(&self) -> Summary {
        self.summary
    }
    /// The sequences of micro-batch `mb`, in the order the policy placed them.
    pub fn members_of(&self, mb: &MicroBatch) -> &'a [u32] {
        let first = mb.first as usize;
        first
            .checked_add(mb.count as usize)
            .and_then(|end| self.members.get(first..end))
            .unwrap_or(&[])
    }
    /// Tokens per CP rank of the `g`-th micro-batch (global index into [`Plan::micro_batches`]).
    pub fn rank_tokens(&self, g: usize) -> &'a [u32] {
        let cp = self.cp as usize;
        self.rank_tokens.get(g * cp..(g + 1) * cp).unwrap_or(&[])
    }
    /// The global index of micro-batch `index` of DP rank `dp_rank`, if it exists.
    pub fn find(&self, dp_rank: u32, index: u32) -> Option<usize> {
        self.micro_batches
            .binary_search_by_key(&(dp_rank, index), |m| (m.dp_rank, m.index))
            .ok()
    }
}

/// The slices of a plan held outside a [`Plan`], e.g. the arrays a C caller got from
/// `skrull_schedule()`, for [`Plan::from_parts`]. Each slice holds exactly the plan's entries
/// (not the capacity of the buffer it came from).
#[derive(Debug, Clone, Copy)]
pub struct PlanParts<'a> {
    /// Per sequence, in input order (`n` entries).
    pub placements: &'a [Placement],
    /// Every micro-batch, grouped by DP rank, then by index.
    pub micro_batches: &'a [MicroBatch],
    /// Sequence indices grouped by micro-batch (`n` entries).
    pub members: &'a [u32],
    /// Tokens per (micro-batch, CP rank): `micro_batches.len() x cp` entries.
    pub rank_tokens: &'a [u32],
    /// Micro-batches per DP rank (`dp` entries).
    pub micro_batches_per_dp: &'a [u32],
    /// DACP rollbacks, copied into [`Summary::rollbacks`] (the arrays do not record them).
    pub rollbacks: u32,
}

impl<'a> Plan<'a> {
    /// Rebuilds the read-only view of a plan of `cfg` and `lengths` from its raw slices, and
    /// validates it with the independent [`check`] (so every accessor and the layout see a
    /// consistent plan). The summary is recounted from the parts; `rollbacks` is taken as
    /// given.
    ///
    /// # Errors
    /// The first violation [`check`] finds; [`CheckError::Shape`] also when `cfg` is invalid
    /// ([`Config::validate`]), [`CheckError::MicroBatchTable`] when the micro-batch counts add
    /// up to more than the members. Never panics, whatever the slices hold.
    pub fn from_parts(
        cfg: &Config,
        lengths: &[u32],
        parts: PlanParts<'a>,
    ) -> Result<Plan<'a>, CheckError> {
        cfg.validate().map_err(|_| CheckError::Shape)?;
        let mut plan = Plan {
            dp: cfg.dp,
            cp: cfg.cp,
            placements: parts.placements,
            micro_batches: parts.micro_batches,
            members: parts.members,
            rank_tokens: parts.rank_tokens,
            micro_batches_per_dp: parts.micro_batches_per_dp,
            summary: Summary::default(),
        };
        check(cfg, lengths, &plan)?;
        // `check` bounded the table by the sequence count (at most MAX_SEQS).
        let count = |k: usize| u32::try_from(k).map_err(|_| CheckError::Shape);
        plan.summary = Summary {
            micro_batches: count(parts.micro_batches.len())?,
            sharded: count(parts.placements.iter().filter(|p| p.is_sharded()).count())?,
            rollbacks: parts.rollbacks,
            peak_rank_tokens: parts.rank_tokens.iter().copied().max().unwrap_or(0),
            total_tokens: lengths.iter().map(|&l| u64::from(l)).sum(),
        };
        Ok(plan)
    }
}

/// Writes a plan micro-batch by micro-batch (used by every policy).
pub(crate) struct PlanWriter<'b> {
    out: PlanBuffers<'b>,
    dp: u32,
    cp: u32,
    budget: Budget,
    lockstep: bool,
    n_mbs: usize,
    n_members: usize,
    summary: Summary,
}

impl<'b> PlanWriter<'b> {
    /// Starts an empty plan. The buffers must have passed [`PlanSizes::check`].
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
            lockstep: cfg.lockstep,
            n_mbs: 0,
            n_members: 0,
            summary,
        }
    }

    /// Scratch access to the placements while a policy is still deciding.
    pub(crate) fn placements_mut(&mut self) -> &mut [Placement] {
        self.out.placements
    }

    /// Opens the next micro-batch of `dp_rank` (indices must arrive in order).
    pub(crate) fn open(&mut self, dp_rank: u32, index: u32) {
        let cp = self.cp as usize;
        if let Some(mb) = self.out.micro_batches.get_mut(self.n_mbs) {
            *mb = MicroBatch {
                dp_rank,
                index,
                first: self.n_members as u32,
                count: 0,
            };
        }
        if let Some(t) = self
            .out
            .rank_tokens
            .get_mut(self.n_mbs * cp..(self.n_mbs + 1) * cp)
        {
            t.fill(0);
        }
        self.n_mbs += 1;
        self.summary.micro_batches += 1;
    }

    /// Adds sequence `seq` of `len` tokens to the open micro-batch, local on `cp_rank` or
    /// [`SHARDED`].
    pub(crate) fn push(&mut self, seq: u32, len: u32, cp_rank: i32) {
        let Some(g) = self.n_mbs.checked_sub(1) else {
            return;
        };
        let Some(mb) = self.out.micro_batches.get_mut(g) else {
            return;
        };
        mb.count += 1;
        if let Some(p) = self.out.placements.get_mut(seq as usize) {
            *p = Placement {
                dp_rank: mb.dp_rank,
                micro_batch: mb.index,
                cp_rank,
            };
        }
        if let Some(m) = self.out.members.get_mut(self.n_members) {
            *m = seq;
        }
        self.n_members += 1;
        let cp = self.cp as usize;
        let Some(tokens) = self.out.rank_tokens.get_mut(g * cp..(g + 1) * cp) else {
            return;
        };
        if cp_rank == SHARDED {
            self.summary.sharded += 1;
            let share = self.budget.share(len);
            for t in tokens.iter_mut() {
                *t = t.saturating_add(share);
                self.summary.peak_rank_tokens = self.summary.peak_rank_tokens.max(*t);
            }
        } else if let Some(t) = tokens.get_mut(cp_rank as usize) {
            *t = t.saturating_add(self.budget.local(len));
            self.summary.peak_rank_tokens = self.summary.peak_rank_tokens.max(*t);
        }
    }

    /// Adds `seqs` to the open micro-batch, in order, each at the CP rank already recorded in
    /// its placement's `cp_rank`: the same as [`PlanWriter::push`] for each, with the lookups
    /// hoisted. A sharded sequence's share is added to every rank once, at the end (a chain
    /// of saturating additions of non-negative values equals one saturating addition of their
    /// sum), and the peak is the largest of the micro-batch's final counts (they only grow).
    pub(crate) fn push_placed(&mut self, seqs: &[u32], lengths: &[u32]) {
        let cp = self.cp as usize;
        let (first, k) = (self.n_members, seqs.len());
        let ready = self.n_mbs.checked_sub(1).and_then(|g| {
            let mb = self.out.micro_batches.get_mut(g)?;
            let tokens = self.out.rank_tokens.get_mut(g * cp..(g + 1) * cp)?;
            let members = self.out.members.get_mut(first..first + k)?;
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
            let cp_rank = p.cp_rank;
            *p = Placement {
                dp_rank,
                micro_batch,
                cp_rank,
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
        let shared = u32::try_from(shared).unwrap_or(u32::MAX);
        let mut peak = self.summary.peak_rank_tokens;
        for t in tokens.iter_mut() {
            *t = t.saturating_add(shared);
            peak = peak.max(*t);
        }
        self.summary.peak_rank_tokens = peak;
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
    pub(crate) fn finish(self, n: usize) -> Plan<'b> {
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

/// Why [`check`] rejected a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckError {
    /// The plan's layout or lengths differ from the configuration and batch.
    Shape,
    /// A sequence's DP rank, micro-batch or CP rank is out of range.
    OutOfRange {
        /// The sequence.
        seq: usize,
    },
    /// The micro-batch table is not grouped by DP rank and index, or a micro-batch is empty.
    MicroBatchTable {
        /// Global micro-batch index.
        g: usize,
    },
    /// A sequence is missing from `members`, listed twice, or listed under another micro-batch
    /// than its placement says.
    Membership {
        /// The sequence.
        seq: usize,
    },
    /// The plan's recorded token count differs from the recount.
    TokenMismatch {
        /// Global micro-batch index.
        g: usize,
        /// CP rank.
        cp_rank: usize,
    },
    /// A GPU holds more than BucketSize tokens.
    OverBudget {
        /// Global micro-batch index.
        g: usize,
        /// CP rank.
        cp_rank: usize,
        /// Tokens it holds.
        tokens: u64,
    },
    /// A DP rank runs more micro-batches than the configured limit.
    OverMicroBatchLimit {
        /// The DP rank.
        dp_rank: usize,
    },
}

/// Validates `plan` against `cfg` and `lengths` from the placements alone, without trusting any
/// of the scheduler's bookkeeping: every sequence placed exactly once with ranks in range, the
/// micro-batch table consistent, and every GPU within BucketSize in every micro-batch.
///
/// Runs in `O(n x cp)` time with 10 KiB of stack.
///
/// # Errors
/// The first violation found, as a [`CheckError`].
pub fn check(cfg: &Config, lengths: &[u32], plan: &Plan<'_>) -> Result<(), CheckError> {
    let n = lengths.len();
    let cp = cfg.cp as usize;
    if plan.dp != cfg.dp
        || plan.cp != cfg.cp
        || plan.placements.len() != n
        || plan.members.len() != n
        || plan.micro_batches_per_dp.len() != cfg.dp as usize
        || plan.rank_tokens.len() != plan.micro_batches.len() * cp
    {
        return Err(CheckError::Shape);
    }
    for (seq, p) in plan.placements.iter().enumerate() {
        let per_dp = plan.micro_batches_per_dp.get(p.dp_rank as usize);
        let in_range = per_dp.is_some_and(|&c| p.micro_batch < c)
            && (p.cp_rank == SHARDED || (p.cp_rank >= 0 && (p.cp_rank as usize) < cp));
        if !in_range {
            return Err(CheckError::OutOfRange { seq });
        }
    }
    for (dp_rank, &c) in plan.micro_batches_per_dp.iter().enumerate() {
        if cfg.max_micro_batches != 0 && c > cfg.max_micro_batches {
            return Err(CheckError::OverMicroBatchLimit { dp_rank });
        }
    }
    // The table must list, in order, micro-batches (d, 0..listed_d) for the DP ranks d that
    // hold sequences, with listed_d = count_d (with lockstep: <= count_d, the rest empty), and
    // the members must tile 0..n in order.
    let budget = cfg.budget();
    let per_dp = plan.micro_batches_per_dp;
    // Whether DP rank `d` may end after `listed` micro-batches of the table.
    let complete = |d: u32, listed: u32| {
        per_dp
            .get(d as usize)
            .is_some_and(|&c| listed == c || (cfg.lockstep && listed <= c))
    };
    let mut prev: Option<(u32, u32)> = None;
    let mut longest = 0u32;
    let mut next_first = 0u32;
    let mut listed = 0usize;
    for (g, mb) in plan.micro_batches.iter().enumerate() {
        let follows = match prev {
            None => mb.index == 0,
            Some((d, i)) => {
                (mb.dp_rank == d && mb.index == i.saturating_add(1))
                    || (mb.dp_rank > d && mb.index == 0 && complete(d, i.saturating_add(1)))
            }
        };
        let in_range = per_dp
            .get(mb.dp_rank as usize)
            .is_some_and(|&c| mb.index < c);
        if !follows || !in_range || mb.first != next_first || mb.count == 0 {
            return Err(CheckError::MicroBatchTable { g });
        }
        prev = Some((mb.dp_rank, mb.index));
        longest = longest.max(mb.index + 1);
        let mut tokens = [0u64; MAX_CP as usize];
        for &seq in plan.members_of(mb) {
            let s = seq as usize;
            let (Some(p), Some(&len)) = (plan.placements.get(s), lengths.get(s)) else {
                return Err(CheckError::Membership { seq: s });
            };
            if p.dp_rank != mb.dp_rank || p.micro_batch != mb.index {
                return Err(CheckError::Membership { seq: s });
            }
            if p.cp_rank == SHARDED {
                let share = u64::from(budget.share(len));
                tokens.iter_mut().take(cp).for_each(|t| *t += share);
            } else if let Some(t) = tokens.get_mut(p.cp_rank as usize) {
                *t += u64::from(budget.local(len));
            }
        }
        listed = listed.saturating_add(mb.count as usize);
        next_first = next_first.saturating_add(mb.count);
        for (cp_rank, &t) in tokens.iter().take(cp).enumerate() {
            if plan.rank_tokens(g).get(cp_rank).map(|&x| u64::from(x)) != Some(t) {
                return Err(CheckError::TokenMismatch { g, cp_rank });
            }
            if t > u64::from(cfg.bucket) {
                return Err(CheckError::OverBudget {
                    g,
                    cp_rank,
                    tokens: t,
                });
            }
        }
    }
    if let Some((d, i)) = prev
        && !complete(d, i.saturating_add(1))
    {
        return Err(CheckError::MicroBatchTable {
            g: plan.micro_batches.len(),
        });
    }
    let counts_agree = if cfg.lockstep {
        // Every rank reports the longest rank's count; only trailing micro-batches are empty.
        per_dp.iter().all(|&c| c == longest)
    } else {
        let total: u64 = per_dp.iter().map(|&c| u64::from(c)).sum();
        total == plan.micro_batches.len() as u64
    };
    if listed != n || !counts_agree {
        return Err(CheckError::Shape);
    }
    // Every listing matched its sequence's placement and there are n listings; a bitset over
    // at most MAX_SEQS sequences (8 KiB of stack) proves none is listed twice.
    if n > MAX_SEQS {
        return Err(CheckError::Shape);
    }
    let mut seen = [0u64; MAX_SEQS / 64];
    for &seq in plan.members {
        let (word, bit) = (seq as usize / 64, 1u64 << (seq % 64));
        match seen.get_mut(word) {
            Some(w) if *w & bit == 0 => *w |= bit,
            _ => return Err(CheckError::Membership { seq: seq as usize }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ModelShape, Policy};
    use crate::test_support::OwnedPlan;

    use std::vec::Vec;

    /// A plan's slices in owned vectors, trimmed to the plan's entries.
    #[derive(Clone)]
    struct Owned {
        placements: Vec<Placement>,
        micro_batches: Vec<MicroBatch>,
        members: Vec<u32>,
        rank_tokens: Vec<u32>,
        per_dp: Vec<u32>,
        summary: Summary,
    }

    impl Owned {
        fn parts(&self) -> PlanParts<'_> {
            PlanParts {
                placements: &self.placements,
                micro_batches: &self.micro_batches,
                members: &self.members,
                rank_tokens: &self.rank_tokens,
                micro_batches_per_dp: &self.per_dp,
                rollbacks: self.summary.rollbacks,
            }
        }
    }

    fn scheduled(cfg: &Config, lengths: &[u32]) -> Owned {
        let mut bufs = OwnedPlan::new(lengths.len(), cfg);
        let plan = bufs.schedule(cfg, lengths).unwrap();
        Owned {
            placements: plan.placements().to_vec(),
            micro_batches: plan.micro_batches().to_vec(),
            members: plan.members().to_vec(),
            rank_tokens: plan.rank_tokens.to_vec(),
            per_dp: plan.micro_batches_per_dp().to_vec(),
            summary: plan.summary(),
        }
    }

    const LENGTHS: [u32; 12] = [12, 40, 7, 33, 25, 3, 18, 9, 21, 30, 2, 16];

    #[test]
    fn from_parts_rebuilds_the_scheduled_plan() {
        for policy in [
            Policy::Skrull,
            Policy::DeepSpeed,
            Policy::Packed,
            Policy::RoundRobin,
        ] {
            let cfg = Config::new(2, 2, 24, ModelShape::QWEN2_5_0_5B).with_policy(policy);
            let o = scheduled(&cfg, &LENGTHS);
            let plan = Plan::from_parts(&cfg, &LENGTHS, o.parts()).unwrap();
            assert_eq!(plan.summary(), o.summary, "{policy:?}");
            assert_eq!((plan.dp(), plan.cp()), (2, 2));
            assert_eq!(plan.placements(), &o.placements[..]);
            assert_eq!(plan.micro_batches(), &o.micro_batches[..]);
            assert_eq!(plan.members(), &o.members[..]);
            assert_eq!(plan.micro_batches_per_dp(), &o.per_dp[..]);
            for g in 0..o.micro_batches.len() {
                assert_eq!(plan.rank_tokens(g), &o.rank_tokens[g * 2..g * 2 + 2]);
            }
            assert_eq!(check(&cfg, &LENGTHS, &plan), Ok(()));
        }
        // The empty batch: every DP rank runs no micro-batch.
        let cfg = Config::new(3, 2, 8, ModelShape::QWEN2_5_0_5B);
        let parts = PlanParts {
            placements: &[],
            micro_batches: &[],
            members: &[],
            rank_tokens: &[],
            micro_batches_per_dp: &[0, 0, 0],
            rollbacks: 0,
        };
        let plan = Plan::from_parts(&cfg, &[], parts).unwrap();
        assert_eq!(plan.summary(), Summary::default());
    }

    #[test]
    fn from_parts_rejects_inconsistent_parts() {
        let cfg = Config::new(2, 2, 24, ModelShape::QWEN2_5_0_5B);
        let good = scheduled(&cfg, &LENGTHS);
        type Edit = fn(&mut Owned);
        let edits: [(Edit, CheckError); 10] = [
            (|o| o.placements.truncate(11), CheckError::Shape),
            (|o| o.per_dp.push(0), CheckError::Shape),
            (|o| o.rank_tokens.truncate(1), CheckError::Shape),
            (
                |o| o.placements[3].dp_rank = 2,
                CheckError::OutOfRange { seq: 3 },
            ),
            (
                |o| o.placements[5].cp_rank = 2,
                CheckError::OutOfRange { seq: 5 },
            ),
            (
                |o| o.placements[0].micro_batch = 9,
                CheckError::OutOfRange { seq: 0 },
            ),
            (
                |o| o.micro_batches[1].first += 1,
                CheckError::MicroBatchTable { g: 1 },
            ),
            (|o| o.members[0] = 99, CheckError::Membership { seq: 99 }),
            (
                |o| o.rank_tokens[0] += 1,
                CheckError::TokenMismatch { g: 0, cp_rank: 0 },
            ),
            (
                |o| o.micro_batches.swap(0, 1),
                CheckError::MicroBatchTable { g: 0 },
            ),
        ];
        for (k, (edit, want)) in edits.into_iter().enumerate() {
            let mut o = good.clone();
            edit(&mut o);
            assert_eq!(
                Plan::from_parts(&cfg, &LENGTHS, o.parts()).unwrap_err(),
                want,
                "edit {k}"
            );
        }
        // A duplicated member (and so a missing one).
        let mut o = good.clone();
        let g = o.micro_batches[0];
        let (a, b) = (g.first as usize, g.first as usize + 1);
        o.members[b] = o.members[a];
        assert!(Plan::from_parts(&cfg, &LENGTHS, o.parts()).is_err());
        // Another configuration or batch than the plan was made for.
        let mut other = cfg;
        other.cp = 4;
        assert_eq!(
            Plan::from_parts(&other, &LENGTHS, good.parts()).unwrap_err(),
            CheckError::Shape
        );
        other.cp = 0;
        assert_eq!(
            Plan::from_parts(&other, &LENGTHS, good.parts()).unwrap_err(),
            CheckError::Shape
        );
        assert_eq!(
            Plan::from_parts(&cfg, &LENGTHS[1..], good.parts()).unwrap_err(),
            CheckError::Shape
        );
        let mut longer = LENGTHS;
        longer[1] = 60; // a different batch of the same size: over budget or recount differs
        assert!(Plan::from_parts(&cfg, &longer, good.parts()).is_err());
    }

    /// Regression (found by the corruption test below): a micro-batch count near `u32::MAX`
    /// overflowed the checker's running offset (a panic in debug builds, a wrap in release).
    /// It must be reported as a bad table, by `check` itself.
    #[test]
    fn a_huge_micro_batch_count_is_an_error_not_an_overflow() {
        let cfg = Config::new(2, 2, 24, ModelShape::QWEN2_5_0_5B);
        let mut o = scheduled(&cfg, &LENGTHS);
        for count in [u32::MAX, u32::MAX - 1, u32::MAX / 2 + 1] {
            o.micro_batches[0].count = count;
            assert!(
                Plan::from_parts(&cfg, &LENGTHS, o.parts()).is_err(),
                "{count}"
            );
        }
    }

    /// Arbitrary corruption of every field never panics, and whatever is accepted passes the
    /// independent checker.
    #[test]
    fn from_parts_never_panics_on_corrupt_parts() {
        let cfg = Config::new(2, 2, 24, ModelShape::QWEN2_5_0_5B);
        let good = scheduled(&cfg, &LENGTHS);
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let values = [0u32, 1, 2, 3, 11, 12, 13, 24, 25, u32::MAX, u32::MAX - 1];
        for _ in 0..if cfg!(miri) { 100 } else { 5000 } {
            let mut o = good.clone();
            for _ in 0..1 + next() % 3 {
                let v = values[(next() % values.len() as u64) as usize];
                let i = next() as usize;
                match next() % 9 {
                    0 => o.placements[i % 12].dp_rank = v,
                    1 => o.placements[i % 12].micro_batch = v,
                    2 => o.placements[i % 12].cp_rank = v as i32,
                    3 => o.members[i % 12] = v,
                    4 => {
                        let k = i % o.rank_tokens.len();
                        o.rank_tokens[k] = v;
                    }
                    5 => o.per_dp[i % 2] = v,
                    6 => {
                        let k = i % o.micro_batches.len();
                        o.micro_batches[k].first = v;
                    }
                    7 => {
                        let k = i % o.micro_batches.len();
                        o.micro_batches[k].count = v;
                    }
                    _ => {
                        let k = i % o.micro_batches.len();
                        o.micro_batches[k].index = v;
                    }
                }
            }
            if let Ok(plan) = Plan::from_parts(&cfg, &LENGTHS, o.parts()) {
                assert_eq!(check(&cfg, &LENGTHS, &plan), Ok(()));
                assert_eq!(plan.summary().total_tokens, good.summary.total_tokens);
            }
        }
    }
}
