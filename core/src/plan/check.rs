//! [`check`]: the independent checker every plan passes, from its placements alone.

use crate::config::Config;
use crate::config::limits::{MAX_CP, MAX_SEQS};
use crate::plan::types::{CHUNKED, MicroBatch, Plan, PlanParts, SHARDED, Summary};
use crate::setup::Setup;

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
    /// A DP rank runs an empty micro-batch although one of its micro-batches holds several
    /// sequences, where the configuration fills empty micro-batches
    /// ([`Config::fills_empty`](crate::Config::fills_empty)).
    AvoidableEmpty {
        /// The DP rank.
        dp_rank: usize,
    },
}

/// Validates `plan` against `setup`'s configuration and `lengths` from the placements alone, without trusting any
/// of the scheduler's bookkeeping: every sequence placed exactly once with ranks in range, the
/// micro-batch table consistent, and every GPU within BucketSize in every micro-batch.
///
/// Runs in `O(n x cp)` time with 10 KiB of stack.
///
/// # Errors
/// The first violation found, as a [`CheckError`].
pub fn check(setup: &Setup, lengths: &[u32], plan: &Plan<'_>) -> Result<(), CheckError> {
    let cfg = setup.config();
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
    check_placements(cfg, lengths, plan)?;
    let (longest, listed) = check_table(setup, lengths, plan)?;
    check_counts(cfg, plan, longest, listed, n)?;
    check_listed_once(plan, n)
}

/// Every placement's DP rank, micro-batch and CP rank or group in range, and every DP rank's
/// count within the micro-batch limit.
fn check_placements(cfg: &Config, lengths: &[u32], plan: &Plan<'_>) -> Result<(), CheckError> {
    let cp = cfg.cp as usize;
    for (seq, p) in plan.placements.iter().enumerate() {
        let per_dp = plan.micro_batches_per_dp.get(p.dp_rank as usize);
        // A chunked sequence needs chunking on and more than one chunk.
        let chunk_ok = || lengths.get(seq).is_some_and(|&l| cfg.chunking.can_chunk(l));
        let in_range = per_dp.is_some_and(|&c| p.micro_batch < c)
            && (p.cp_rank == SHARDED
                || (p.cp_rank == CHUNKED && chunk_ok())
                || (p.cp_rank >= 0 && (p.cp_rank as usize) < cp));
        // A sharded sequence names a valid group; a local one names none.
        let group_ok = p.group_is_valid(cfg.cp) && (cfg.subgroups || !p.is_subgroup(cfg.cp));
        let in_range = in_range && group_ok;
        if !in_range {
            return Err(CheckError::OutOfRange { seq });
        }
    }
    for (dp_rank, &c) in plan.micro_batches_per_dp.iter().enumerate() {
        if cfg.max_micro_batches != 0 && c > cfg.max_micro_batches {
            return Err(CheckError::OverMicroBatchLimit { dp_rank });
        }
    }
    Ok(())
}

/// The micro-batch table: it must list, in order, micro-batches `(d, 0..listed_d)` for the DP
/// ranks `d` that hold sequences, with `listed_d = count_d` (with lockstep: `<= count_d`, the
/// rest empty), the members must tile `0..n` in order, and every micro-batch's loads must be
/// the recount ([`check_loads`]). Returns the longest rank's listing and the members listed.
fn check_table(
    setup: &Setup,
    lengths: &[u32],
    plan: &Plan<'_>,
) -> Result<(u32, usize), CheckError> {
    let cfg = setup.config();
    let per_dp = plan.micro_batches_per_dp;
    // Whether DP rank `d` may end after `listed` micro-batches of the table.
    let complete = |d: u32, listed: u32| {
        per_dp
            .get(d as usize)
            .is_some_and(|&c| listed == c || (cfg.uniform_counts() && listed <= c))
    };
    // With filling, a rank that lists fewer micro-batches than it runs holds one sequence in
    // each (it has fewer sequences than slots).
    let filled = |d: u32, listed: u32, multi: bool| {
        !cfg.fills_empty() || !multi || per_dp.get(d as usize).is_some_and(|&c| listed == c)
    };
    let mut multi = false;
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
        if let Some((d, i)) = prev
            && mb.dp_rank != d
        {
            if !filled(d, i.saturating_add(1), multi) {
                return Err(CheckError::AvoidableEmpty {
                    dp_rank: d as usize,
                });
            }
            multi = false;
        }
        multi |= mb.count > 1;
        let in_range = per_dp
            .get(mb.dp_rank as usize)
            .is_some_and(|&c| mb.index < c);
        if !follows || !in_range || mb.first != next_first || mb.count == 0 {
            return Err(CheckError::MicroBatchTable { g });
        }
        prev = Some((mb.dp_rank, mb.index));
        longest = longest.max(mb.index + 1);
        check_loads(setup, lengths, plan, g, mb)?;
        listed = listed.saturating_add(mb.count as usize);
        next_first = next_first.saturating_add(mb.count);
    }
    if let Some((d, i)) = prev {
        if !complete(d, i.saturating_add(1)) {
            return Err(CheckError::MicroBatchTable {
                g: plan.micro_batches.len(),
            });
        }
        if !filled(d, i.saturating_add(1), multi) {
            return Err(CheckError::AvoidableEmpty {
                dp_rank: d as usize,
            });
        }
    }
    Ok((longest, listed))
}

/// Micro-batch `g` (`mb`): its members are placed in it, and the recount of every CP rank's
/// tokens (local, sharded share, chunked peak) matches the plan's and fits BucketSize.
fn check_loads(
    setup: &Setup,
    lengths: &[u32],
    plan: &Plan<'_>,
    g: usize,
    mb: &MicroBatch,
) -> Result<(), CheckError> {
    let cfg = setup.config();
    let cp = cfg.cp as usize;
    let budget = setup.budget();
    let mut tokens = [0u64; MAX_CP as usize];
    for &seq in plan.members_of(mb) {
        let s = seq as usize;
        let (Some(p), Some(&len)) = (plan.placements.get(s), lengths.get(s)) else {
            return Err(CheckError::Membership { seq: s });
        };
        if p.dp_rank != mb.dp_rank || p.micro_batch != mb.index {
            return Err(CheckError::Membership { seq: s });
        }
        if p.cp_rank == CHUNKED {
            let group = p.group(cfg.cp);
            let peak = budget.chunked(&cfg.chunking, len, group.size);
            let ranks = tokens.iter_mut().take(cp).skip(group.first as usize);
            ranks.take(group.size as usize).for_each(|t| *t += peak);
        } else if p.cp_rank == SHARDED {
            let group = p.group(cfg.cp);
            let share = u64::from(budget.for_group(group.size).share(len));
            let ranks = tokens.iter_mut().take(cp).skip(group.first as usize);
            ranks.take(group.size as usize).for_each(|t| *t += share);
        } else if let Some(t) = tokens.get_mut(p.cp_rank as usize) {
            *t += u64::from(budget.local(len));
        }
    }
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
    Ok(())
}

/// The micro-batch counts: a fixed count on every rank, the longest rank's with lockstep, else
/// the table's; and every sequence listed.
fn check_counts(
    cfg: &Config,
    plan: &Plan<'_>,
    longest: u32,
    listed: usize,
    n: usize,
) -> Result<(), CheckError> {
    let per_dp = plan.micro_batches_per_dp;
    let counts_agree = if cfg.micro_batches != 0 {
        // A fixed count: every rank reports it.
        per_dp.iter().all(|&c| c == cfg.micro_batches)
    } else if cfg.lockstep_counts() {
        // Every rank reports the longest rank's count; only trailing micro-batches are empty.
        per_dp.iter().all(|&c| c == longest)
    } else {
        let total: u64 = per_dp.iter().map(|&c| u64::from(c)).sum();
        total == plan.micro_batches.len() as u64
    };
    if listed != n || !counts_agree {
        return Err(CheckError::Shape);
    }
    Ok(())
}

/// Every listing matched its sequence's placement and there are `n` listings; a bitset over
/// at most `MAX_SEQS` sequences (8 KiB of stack) proves none is listed twice.
fn check_listed_once(plan: &Plan<'_>, n: usize) -> Result<(), CheckError> {
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

impl<'a> Plan<'a> {
    /// Rebuilds the read-only view of a plan of `setup` and `lengths` from its raw slices, and
    /// validates it with the independent [`check`] (so every accessor and the layout see a
    /// consistent plan). The summary is recounted from the parts; `rollbacks` is taken as
    /// given.
    ///
    /// # Errors
    /// The first violation [`check`] finds; [`CheckError::MicroBatchTable`] when the micro-batch counts add
    /// up to more than the members. Never panics, whatever the slices hold.
    pub fn from_parts(
        setup: &Setup,
        lengths: &[u32],
        parts: PlanParts<'a>,
    ) -> Result<Plan<'a>, CheckError> {
        let cfg = setup.config();
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
        check(setup, lengths, &plan)?;
        // `check` bounded the table by the sequence count (at most MAX_SEQS).
        let count = |k: usize| u32::try_from(k).map_err(|_| CheckError::Shape);
        plan.summary = Summary {
            micro_batches: count(parts.micro_batches.len())?,
            sharded: count(parts.placements.iter().filter(|p| p.is_sharded()).count())?,
            chunked: count(parts.placements.iter().filter(|p| p.is_chunked()).count())?,
            rollbacks: parts.rollbacks,
            peak_rank_tokens: parts.rank_tokens.iter().copied().max().unwrap_or(0),
            total_tokens: lengths.iter().map(|&l| u64::from(l)).sum(),
        };
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::options::Policy;
    use crate::config::shape::ModelShape;
    use crate::plan::types::{MicroBatch, Placement, PlanParts, Summary};
    use crate::test_support::OwnedPlan;
    use crate::test_support::setup_of;

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
            let plan = Plan::from_parts(&setup_of(&cfg), &LENGTHS, o.parts()).unwrap();
            assert_eq!(plan.summary(), o.summary, "{policy:?}");
            assert_eq!((plan.dp(), plan.cp()), (2, 2));
            assert_eq!(plan.placements(), &o.placements[..]);
            assert_eq!(plan.micro_batches(), &o.micro_batches[..]);
            assert_eq!(plan.members(), &o.members[..]);
            assert_eq!(plan.micro_batches_per_dp(), &o.per_dp[..]);
            for g in 0..o.micro_batches.len() {
                assert_eq!(plan.rank_tokens(g), &o.rank_tokens[g * 2..g * 2 + 2]);
            }
            assert_eq!(check(&setup_of(&cfg), &LENGTHS, &plan), Ok(()));
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
        let plan = Plan::from_parts(&setup_of(&cfg), &[], parts).unwrap();
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
                Plan::from_parts(&setup_of(&cfg), &LENGTHS, o.parts()).unwrap_err(),
                want,
                "edit {k}"
            );
        }
        // A duplicated member (and so a missing one).
        let mut o = good.clone();
        let g = o.micro_batches[0];
        let (a, b) = (g.first as usize, g.first as usize + 1);
        o.members[b] = o.members[a];
        assert!(Plan::from_parts(&setup_of(&cfg), &LENGTHS, o.parts()).is_err());
        // Another configuration or batch than the plan was made for.
        let mut other = cfg;
        other.cp = 4;
        assert_eq!(
            Plan::from_parts(&setup_of(&other), &LENGTHS, good.parts()).unwrap_err(),
            CheckError::Shape
        );
        // An invalid configuration never reaches the checker: it has no `Setup`.
        other.cp = 0;
        assert!(Setup::new(&other).is_err());
        assert_eq!(
            Plan::from_parts(&setup_of(&cfg), &LENGTHS[1..], good.parts()).unwrap_err(),
            CheckError::Shape
        );
        let mut longer = LENGTHS;
        longer[1] = 60; // a different batch of the same size: over budget or recount differs
        assert!(Plan::from_parts(&setup_of(&cfg), &longer, good.parts()).is_err());
    }

    /// A sharded placement that names the whole group must not name a first rank, and a
    /// local one no group at all; a sub-group must be aligned (found reviewing the CLI's own
    /// check, which was stricter than the core's).
    #[test]
    fn group_fields_must_be_well_formed() {
        let cfg = Config::new(2, 2, 24, ModelShape::QWEN2_5_0_5B);
        let good = scheduled(&cfg, &LENGTHS);
        let sharded = good.placements.iter().position(|p| p.is_sharded()).unwrap();
        let local = good
            .placements
            .iter()
            .position(|p| !p.is_sharded())
            .unwrap();
        type Edit = fn(&mut Placement);
        let edits: [(usize, Edit); 3] = [
            (sharded, |p| p.cp_first = 1),
            (local, |p| p.cp_size = 1),
            (local, |p| p.cp_first = 1),
        ];
        for (seq, edit) in edits {
            let mut o = good.clone();
            edit(&mut o.placements[seq]);
            assert_eq!(
                Plan::from_parts(&setup_of(&cfg), &LENGTHS, o.parts()).unwrap_err(),
                CheckError::OutOfRange { seq }
            );
        }
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
                Plan::from_parts(&setup_of(&cfg), &LENGTHS, o.parts()).is_err(),
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
            if let Ok(plan) = Plan::from_parts(&setup_of(&cfg), &LENGTHS, o.parts()) {
                assert_eq!(check(&setup_of(&cfg), &LENGTHS, &plan), Ok(()));
                assert_eq!(plan.summary().total_tokens, good.summary.total_tokens);
            }
        }
    }
}
