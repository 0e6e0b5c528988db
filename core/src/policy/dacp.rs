//! DACP: inside one micro-batch, decide which sequences stay whole on one CP rank and which
//! are sharded over the CP group, under the per-GPU budget C, with the paper's three errata
//! fixed (the rollback frees memory, the other ranks pay for the newly sharded sequence, and a
//! final recount is authoritative; `docs/algorithms.md`).
//!
//! The placement loop itself is the shared CP-rank state machine
//! (`kernel::ranks`); this module supplies its rules: DACP's (least
//! FLOPs load, then most room) and the paper's round-robin baseline, Algorithm 4 (most room;
//! FLOPs ignored).

use crate::setup::Setup;
use heapless::Vec as HVec;

use crate::config::Config;
use crate::config::budget::Budget;
use crate::config::cp_group::Decision;
use crate::config::limits::MAX_CP;
use crate::error::Error;
use crate::kernel::ranks::{self, Ledger, Rooms, Slots, Stop, argmax, argmin};
use crate::model::flops::FlopsModel;
use crate::plan::{Placement, SHARDED};

/// Micro-batches up to this size are sorted on the stack by [`place`] (2 KiB of keys).
const SMALL_SORT: usize = 256;

/// How placements are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Skrull's DACP: least FLOPs load first, then most remaining budget, then shard.
    Dacp,
    /// Algorithm 4: most remaining budget, then shard; FLOPs are ignored.
    WorstFit,
}

/// A micro-batch given as sequence indices; decisions go to `placements[seq].cp_rank` as
/// their code ([`Decision::to_code`]: the CP rank, or [`SHARDED`] for the whole group; DACP
/// never uses sub-groups).
pub(crate) struct MemberSlots<'a> {
    pub(crate) members: &'a [u32],
    pub(crate) lengths: &'a [u32],
    pub(crate) placements: &'a mut [Placement],
}

impl Slots for MemberSlots<'_> {
    fn count(&self) -> usize {
        self.members.len()
    }
    fn seq_at(&self, k: usize) -> u32 {
        self.members.get(k).copied().unwrap_or(0)
    }
    fn len_at(&self, k: usize) -> u32 {
        let seq = self.members.get(k).copied().unwrap_or(0) as usize;
        self.lengths.get(seq).copied().unwrap_or(0)
    }
    fn get(&self, k: usize) -> Decision {
        let seq = self.members.get(k).copied().unwrap_or(0) as usize;
        self.placements
            .get(seq)
            .map_or(Decision::Unset, |p| Decision::from_code(p.cp_rank))
    }
    fn set(&mut self, k: usize, d: Decision) {
        let seq = self.members.get(k).copied().unwrap_or(0) as usize;
        if let Some(p) = self.placements.get_mut(seq) {
            p.cp_rank = d.to_code();
        }
    }
}

/// A FLOPs load: `u64` when the micro-batch's whole FLOPs fit (the usual case: cheaper
/// arithmetic and comparisons), else `u128`. Both give the same values, so the same plan.
trait Load: Copy + Default + PartialOrd + core::ops::AddAssign + core::ops::SubAssign {
    /// FLOPs of a whole sequence, as [`FlopsModel::of`].
    fn of(flops: &FlopsModel, len: u32) -> Self;
    /// One rank's share of a sharded sequence, as [`FlopsModel::shard`].
    fn shard(flops: &FlopsModel, len: u32, cp: u32) -> Self;
}

impl Load for u64 {
    #[inline(always)]
    fn of(flops: &FlopsModel, len: u32) -> u64 {
        // The caller checked that `linear·T + quadratic·T²` fits for the micro-batch's `T`
        // tokens, so no term overflows; wrapping keeps the code panic-free regardless.
        let s = u64::from(len);
        flops
            .linear
            .wrapping_mul(s)
            .wrapping_add(flops.quadratic.wrapping_mul(s).wrapping_mul(s))
    }
    #[inline(always)]
    fn shard(flops: &FlopsModel, len: u32, cp: u32) -> u64 {
        Self::of(flops, len) / u64::from(cp.max(1))
    }
}

impl Load for u128 {
    #[inline(always)]
    fn of(flops: &FlopsModel, len: u32) -> u128 {
        flops.of(len)
    }
    #[inline(always)]
    fn shard(flops: &FlopsModel, len: u32, cp: u32) -> u128 {
        flops.shard(len, cp)
    }
}

/// DACP's rule: the least-loaded rank (FLOPs) if it has room, else the roomiest if it has.
struct FlopsLedger<'f, L> {
    flops: &'f FlopsModel,
    cp: u32,
    load: HVec<L, { MAX_CP as usize }>,
}

impl<L: Load> Ledger for FlopsLedger<'_, L> {
    #[inline(always)]
    fn reset(&mut self, cp: usize) {
        self.load.clear();
        for _ in 0..cp.min(MAX_CP as usize) {
            // Capacity is MAX_CP: the push cannot fail.
            let _ = self.load.push(L::default());
        }
    }

    #[inline(always)]
    fn pick(&self, _seq: u32, room: &[i64], need: i64) -> Option<usize> {
        let t = argmin(&self.load);
        if room.get(t).is_some_and(|&x| x >= need) {
            return Some(t);
        }
        let t = argmax(room);
        room.get(t).is_some_and(|&x| x >= need).then_some(t)
    }

    #[inline(always)]
    fn local(&mut self, r: usize, _seq: u32, len: u32) {
        if let Some(l) = self.load.get_mut(r) {
            *l += L::of(self.flops, len);
        }
    }

    fn unlocal(&mut self, r: usize, _seq: u32, len: u32) {
        if let Some(l) = self.load.get_mut(r) {
            *l -= L::of(self.flops, len);
        }
    }

    fn shard(&mut self, _seq: u32, len: u32) {
        let part = L::shard(self.flops, len, self.cp);
        for l in self.load.iter_mut() {
            *l += part;
        }
    }
}

/// Algorithm 4's rule: the roomiest rank if it has room (memory only, no loads).
struct WorstFitLedger;

impl Ledger for WorstFitLedger {
    fn reset(&mut self, _cp: usize) {}

    #[inline(always)]
    fn pick(&self, _seq: u32, room: &[i64], need: i64) -> Option<usize> {
        let t = argmax(room);
        room.get(t).is_some_and(|&x| x >= need).then_some(t)
    }

    fn local(&mut self, _r: usize, _seq: u32, _len: u32) {}
    fn unlocal(&mut self, _r: usize, _seq: u32, _len: u32) {}
    fn shard(&mut self, _seq: u32, _len: u32) {}
}

/// Places every sequence of `slots`, in order, by `rule`; returns the number of rollbacks.
///
/// Every sequence must fit sharded (checked up front by the caller).
///
/// # Errors
/// [`Error::DacpFailed`] when a rollback finds no local sequence on the fullest rank, or when
/// the final recount finds a rank above the budget.
pub(crate) fn run<S: Slots>(
    slots: &mut S,
    cfg: &Config,
    budget: &Budget,
    flops: &FlopsModel,
    rule: Rule,
) -> Result<u32, Error> {
    let mut rooms = Rooms::new();
    rooms.reset(cfg.cp, budget.bucket());
    let cp = cfg.cp.min(MAX_CP) as usize;
    let result = match rule {
        Rule::WorstFit => {
            let mut ledger = WorstFitLedger;
            ranks::place(slots, 0, budget, cfg.victim, &mut rooms, &mut ledger)
        }
        Rule::Dacp => {
            // Every load is at most the micro-batch's whole FLOPs, at most
            // `linear·T + quadratic·T²` for its `T` tokens (T < 2^47, so the bound fits u128).
            let t: u64 = (0..slots.count()).map(|k| u64::from(slots.len_at(k))).sum();
            let t = u128::from(t);
            let bound = u128::from(flops.linear) * t + u128::from(flops.quadratic) * t * t;
            if bound <= u128::from(u64::MAX) {
                let mut ledger = FlopsLedger::<u64> {
                    flops,
                    cp: cfg.cp,
                    load: HVec::new(),
                };
                ledger.reset(cp);
                ranks::place(slots, 0, budget, cfg.victim, &mut rooms, &mut ledger)
            } else {
                let mut ledger = FlopsLedger::<u128> {
                    flops,
                    cp: cfg.cp,
                    load: HVec::new(),
                };
                ledger.reset(cp);
                ranks::place(slots, 0, budget, cfg.victim, &mut rooms, &mut ledger)
            }
        }
    };
    result.map_err(|stop| match stop {
        Stop::Failed { cp_rank } => Error::DacpFailed { cp_rank },
        // These ledgers never give up.
        Stop::Abandoned => Error::DacpFailed { cp_rank: 0 },
    })
}

/// A standalone micro-batch: decisions are written to `out[seq]` in input order.
struct OrderSlots<'a> {
    order: &'a [u32],
    lengths: &'a [u32],
    out: &'a mut [i32],
}

impl Slots for OrderSlots<'_> {
    fn count(&self) -> usize {
        self.order.len()
    }
    fn seq_at(&self, k: usize) -> u32 {
        self.order.get(k).copied().unwrap_or(0)
    }
    fn len_at(&self, k: usize) -> u32 {
        let seq = self.order.get(k).copied().unwrap_or(0) as usize;
        self.lengths.get(seq).copied().unwrap_or(0)
    }
    fn get(&self, k: usize) -> Decision {
        let seq = self.order.get(k).copied().unwrap_or(0) as usize;
        self.out
            .get(seq)
            .map_or(Decision::Unset, |&c| Decision::from_code(c))
    }
    fn set(&mut self, k: usize, d: Decision) {
        let seq = self.order.get(k).copied().unwrap_or(0) as usize;
        if let Some(o) = self.out.get_mut(seq) {
            *o = d.to_code();
        }
    }
}

/// What [`place`] decided, besides the per-sequence placements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DacpOutcome {
    /// Sequences sharded over the CP group.
    pub sharded: u32,
    /// Rollbacks performed.
    pub rollbacks: u32,
}

/// Runs DACP on one micro-batch of `lengths` under `setup`'s configuration (its `cp`, `bucket`, padding,
/// `victim`, model and FLOPs formula), writing `out[k]` = -1 (sharded) or the CP rank that
/// holds sequence `k`.
///
/// `order` is scratch of at least `lengths.len()` elements. On error `out` is unspecified.
///
/// # Errors
/// The configuration and length errors of [`schedule`](crate::schedule()), an
/// [`Error::BufferTooSmall`], or [`Error::DacpFailed`] when the micro-batch cannot fit.
pub fn place(
    setup: &Setup,
    lengths: &[u32],
    order: &mut [u32],
    out: &mut [i32],
) -> Result<DacpOutcome, Error> {
    use crate::error::Buffer;
    let cfg = setup.config();
    let budget = setup.budget();
    budget.check_lengths(lengths)?;
    let n = lengths.len();
    if order.len() < n {
        return Err(Error::BufferTooSmall {
            buffer: Buffer::Workspace,
            needed: n,
            got: order.len(),
        });
    }
    if out.len() < n {
        return Err(Error::BufferTooSmall {
            buffer: Buffer::Placements,
            needed: n,
            got: out.len(),
        });
    }
    let order = &mut order[..n];
    for (k, o) in order.iter_mut().enumerate() {
        *o = k as u32;
    }
    // Ascending by length, ties in input order (a total order, so the unstable sort is
    // deterministic). Small micro-batches sort packed `(len << 32) | k` keys on the stack,
    // which is the same order and much cheaper than comparing through `lengths`.
    if n <= SMALL_SORT {
        let mut keys: HVec<u64, SMALL_SORT> = HVec::new();
        for (k, &len) in lengths.iter().enumerate() {
            // n <= SMALL_SORT: the push cannot fail.
            let _ = keys.push((u64::from(len) << 32) | k as u64);
        }
        keys.sort_unstable();
        for (o, &key) in order.iter_mut().zip(keys.iter()) {
            *o = key as u32;
        }
    } else {
        order.sort_unstable_by_key(|&k| (lengths.get(k as usize).copied().unwrap_or(0), k));
    }
    let flops = FlopsModel::new(&cfg.model, cfg.flops);
    let mut slots = OrderSlots {
        order,
        lengths,
        out: &mut out[..n],
    };
    let rollbacks = run(&mut slots, cfg, &budget, &flops, Rule::Dacp)?;
    let sharded = slots.out.iter().filter(|&&r| r == SHARDED).count() as u32;
    Ok(DacpOutcome { sharded, rollbacks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::options::Victim;
    use crate::config::shape::ModelShape;
    use crate::test_support::setup_of;

    fn dacp(
        lengths: &[u32],
        cp: u32,
        bucket: u32,
        victim: Victim,
    ) -> Result<([i32; 9], u32), Error> {
        let cfg = Config::new(1, cp, bucket, ModelShape::QWEN2_5_0_5B).with_victim(victim);
        let mut order = [0u32; 9];
        let mut out = [0i32; 9];
        let o = place(&setup_of(&cfg), lengths, &mut order, &mut out)?;
        Ok((out, o.rollbacks))
    }

    const EXAMPLE: [u32; 9] = [1, 2, 2, 3, 4, 6, 9, 14, 30];

    fn tokens(lengths: &[u32], ret: &[i32], cp: u32) -> [u32; 4] {
        let mut t = [0u32; 4];
        for (&l, &r) in lengths.iter().zip(ret) {
            if r == SHARDED {
                t.iter_mut().for_each(|x| *x += l.div_ceil(cp));
            } else {
                t[r as usize] += l;
            }
        }
        t
    }

    /// Paper-notes section 4.4, Example 1, with integer ceil(S/N): the placement of the
    /// fractional version survives and per-GPU tokens become 14, 17, 20, 23 (<= 24).
    #[test]
    fn worked_example_1_integer_shares() {
        let (ret, rollbacks) = dacp(&EXAMPLE, 4, 24, Victim::Shortest).unwrap();
        assert_eq!(ret, [0, 1, 2, -1, 0, 1, 2, 3, -1]);
        assert_eq!(rollbacks, 1);
        assert_eq!(tokens(&EXAMPLE, &ret, 4), [14, 17, 20, 23]);
    }

    /// Example 2 (C = 20): with integer shares even the all-sharded placement needs 22 tokens
    /// on one GPU (1+1+1+1+1+2+3+4+8), so DACP must fail with either victim rule.
    #[test]
    fn worked_example_2_is_infeasible_with_integer_shares() {
        for v in [Victim::Shortest, Victim::Longest] {
            assert!(
                matches!(dacp(&EXAMPLE, 4, 20, v), Err(Error::DacpFailed { .. })),
                "{v:?}"
            );
        }
    }

    /// Erratum: the printed rollback subtracts the freed memory. With the sign fixed the
    /// rollback must leave the victim's rank with more budget, so a micro-batch that needs one
    /// rollback succeeds.
    #[test]
    fn rollback_frees_memory_on_the_victims_rank() {
        let (ret, rollbacks) = dacp(&EXAMPLE, 4, 24, Victim::Shortest).unwrap();
        assert!(rollbacks >= 1);
        assert!(tokens(&EXAMPLE, &ret, 4).iter().all(|&t| t <= 24));
    }

    /// Erratum: the printed rollback never charges the other ranks. Reproduces the notes'
    /// counter-example (C = 20 fractional) in integers at the tightest feasible budget and
    /// checks every rank's recount, including the ranks that did not roll back.
    #[test]
    fn rollback_charges_every_other_rank() {
        for bucket in 22..=30 {
            for v in [Victim::Shortest, Victim::Longest] {
                if let Ok((ret, _)) = dacp(&EXAMPLE, 4, bucket, v) {
                    assert!(
                        tokens(&EXAMPLE, &ret, 4).iter().all(|&t| t <= bucket),
                        "{bucket}"
                    );
                }
            }
        }
    }

    #[test]
    fn longest_victim_needs_fewer_rollbacks_at_the_tight_budget() {
        let (_, short) = dacp(&EXAMPLE, 4, 22, Victim::Shortest).unwrap();
        let (ret, long) = dacp(&EXAMPLE, 4, 22, Victim::Longest).unwrap();
        assert!(long <= short, "{long} > {short}");
        assert!(tokens(&EXAMPLE, &ret, 4).iter().all(|&t| t <= 22));
    }

    /// The `u64` and `u128` load paths decide identically (the bound makes `u64` exact).
    #[test]
    fn load_widths_agree() {
        let mut state = 3u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n.max(1)
        };
        for case in 0..if cfg!(miri) { 8 } else { 400 } {
            let cp = 1 + next(16) as u32;
            let n = 1 + next(80) as usize;
            let lengths: std::vec::Vec<u32> = (0..n).map(|_| 1 + next(5000) as u32).collect();
            let longest = *lengths.iter().max().unwrap();
            let bucket = longest.div_ceil(cp) + next(u64::from(longest)) as u32;
            let victim = if case % 2 == 0 {
                Victim::Shortest
            } else {
                Victim::Longest
            };
            let cfg = Config::new(1, cp, bucket, ModelShape::QWEN2_5_7B).with_victim(victim);
            let flops = FlopsModel::new(&cfg.model, cfg.flops);
            let mut order: std::vec::Vec<u32> = (0..n as u32).collect();
            order.sort_by_key(|&k| (lengths[k as usize], k));
            let run = |wide: bool| {
                let mut out = std::vec![0i32; n];
                let mut slots = OrderSlots {
                    order: &order,
                    lengths: &lengths,
                    out: &mut out,
                };
                let budget = cfg.budget();
                let mut rooms = Rooms::new();
                rooms.reset(cp, budget.bucket());
                let r = if wide {
                    let mut l = FlopsLedger::<u128> {
                        flops: &flops,
                        cp,
                        load: HVec::new(),
                    };
                    l.reset(cp as usize);
                    ranks::place(&mut slots, 0, &budget, cfg.victim, &mut rooms, &mut l)
                } else {
                    let mut l = FlopsLedger::<u64> {
                        flops: &flops,
                        cp,
                        load: HVec::new(),
                    };
                    l.reset(cp as usize);
                    ranks::place(&mut slots, 0, &budget, cfg.victim, &mut rooms, &mut l)
                };
                (r, out)
            };
            assert_eq!(run(false), run(true), "case {case}");
        }
    }

    #[test]
    fn everything_local_when_the_budget_is_ample() {
        let (ret, rollbacks) = dacp(&EXAMPLE, 4, 1000, Victim::Shortest).unwrap();
        assert_eq!(rollbacks, 0);
        assert!(ret.iter().all(|&r| (0..4).contains(&r)));
    }
}
