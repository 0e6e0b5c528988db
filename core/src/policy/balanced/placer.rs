//! One micro-batch's placement: a few attempts, each sharding its `s` heaviest members first
//! and placing the rest through the shared CP-rank state machine with the [`TimeLedger`]'s
//! rule ([`attempt`]), with sub-groups where the ring crosses nodes ([`attempt_groups`]) and
//! a closed form for one sequence ([`Placer::lone`]); the fastest is kept ([`Placer`]).

use heapless::Vec as HVec;

use super::costs::{Prefix, Rows, forms};
use super::ledger::TimeLedger;
use crate::config::Config;
use crate::config::budget::Budget;
use crate::config::cp_group::{CpGroup, Decision};
use crate::config::limits::MAX_CP;
use crate::kernel::ranks::{self, Ledger, Rooms, Slots, Stop};
use crate::model::fixed::{CAP, IntModel};

/// One micro-batch's members (heaviest first) with their working decisions, for the CP-rank
/// state machine.
struct MemberSlots<'a> {
    members: &'a [u32],
    lengths: &'a [u32],
    /// Decision per member, as [`Decision`] words.
    cur: &'a mut [u32],
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
        self.cur
            .get(k)
            .map_or(Decision::Unset, |&w| Decision::from_word(w))
    }
    fn set(&mut self, k: usize, d: Decision) {
        if let Some(c) = self.cur.get_mut(k) {
            *c = d.to_word();
        }
    }
    #[inline(always)]
    fn is_local_on(&self, k: usize, r: usize) -> bool {
        self.cur
            .get(k)
            .is_some_and(|&w| Decision::word_is_local_on(w, r))
    }
}

/// Plans one micro-batch attempt that shards its `s` heaviest members first; its time, or
/// `None` when memory cannot be met or it would take at least `ledger.bound`.
fn attempt(
    cfg: &Config,
    budget: &Budget,
    slots: &mut MemberSlots<'_>,
    s: usize,
    rooms: &mut Rooms,
    ledger: &mut TimeLedger<'_>,
) -> Option<u64> {
    rooms.reset(cfg.cp, budget.bucket());
    ledger.reset(cfg.cp as usize);
    ranks::shard_first(slots, s, budget, rooms, ledger);
    match ranks::place(slots, s, budget, cfg.victim, rooms, ledger) {
        Ok(_) => {
            // Without a bound yet any time is kept (a saturated one too).
            let t = ledger.time();
            (ledger.bound == u64::MAX || t < ledger.bound).then_some(t)
        }
        Err(Stop::Failed { .. } | Stop::Abandoned) => None,
    }
}

/// The sharded counts one micro-batch tries, and the sums their lower bounds need.
struct Candidates {
    /// `k0`, `k0 + 1`, `max(k0 - 1, forced)` and `k` (a count past `k` or repeated is
    /// skipped).
    counts: [usize; 4],
    /// The members.
    k: usize,
    /// Every member sharded.
    all: Prefix,
    /// The members' summed [`work`](super::costs::work), ps.
    work_all: u64,
}

/// Everything the placement of micro-batches reads, and its state (built once per call).
pub(super) struct Placer<'a> {
    /// The configuration.
    pub(super) cfg: &'a Config,
    budget: Budget,
    rooms: Rooms,
    /// The rule and time bookkeeping (its ring is set per DP rank).
    pub(super) ledger: TimeLedger<'a>,
    /// Whether the shortcuts that change no plan are on: attempts skipped by their lower
    /// bound, and the closed form of a one-sequence micro-batch ([`Placer::lone`]). Always,
    /// except in the tests that check they change no plan.
    shortcuts: bool,
}

impl<'a> Placer<'a> {
    /// A placer for `cfg` under `im`, reading the cost `rows`.
    pub(super) fn new(
        cfg: &'a Config,
        im: &'a IntModel,
        rows: Rows<'a>,
        budget: Budget,
        shortcuts: bool,
    ) -> Placer<'a> {
        Placer {
            cfg,
            budget,
            shortcuts,
            rooms: Rooms::new(),
            ledger: TimeLedger::new(im, rows, cfg.cp),
        }
    }
}

impl Placer<'_> {
    /// Plans one micro-batch (`members`, heaviest first; `cur`: one word per member): tries a
    /// few sharded counts, then sub-groups where they may pay, and writes the fastest
    /// decisions into `dec` (per sequence). Returns its time, or `None` when no attempt meets
    /// memory.
    // Inlined (one caller), as before the split: fewer instructions per micro-batch.
    #[inline(always)]
    pub(super) fn micro_batch(
        &mut self,
        members: &[u32],
        cur: &mut [u32],
        dec: &mut [u32],
    ) -> Option<u64> {
        let c = self.candidates(members);
        let found = self.try_counts(members, &c, cur, dec);
        // Sub-group attempts only where the whole group's ring crosses nodes: there a
        // sub-group's ring can stay in a node, which is where they pay (inside a node they
        // gained at most 3 % on the measured rows and cost three times the planning time).
        if self.cfg.subgroups && self.cfg.cp >= 4 && self.ledger.crosses {
            return self.try_subgroups(members, &c, cur, dec, found);
        }
        found
    }

    /// The sharded counts to try: around `k0`, where the heaviest remaining sequence whole no
    /// longer outweighs a balanced rank, and `k` (everything sharded).
    #[inline(always)]
    fn candidates(&self, members: &[u32]) -> Candidates {
        let (im, rows) = (self.ledger.im, self.ledger.rows);
        let k = members.len();
        let n = u64::from(im.cp());
        // One pass: the members' summed whole cost and work, and the sums a lower bound needs
        // with every member sharded. (Terms are clamped at `CAP`, 2^46 ps, and there are at
        // most 2^16 members: the sums of whole costs cannot overflow.)
        let (mut total, mut work_all) = (0u64, 0u64);
        let mut all = Prefix::default();
        for &seq in members {
            let (whole, work) = all.add(im, &rows, seq);
            total += whole;
            work_all = work_all.saturating_add(work);
        }
        // Members longer than the budget can only run sharded: a prefix (longest first).
        let forced = members
            .iter()
            .take_while(|&&seq| im.local(rows.len(seq)) > self.cfg.bucket)
            .count();
        let mut k0 = 0;
        while k0 < k {
            let seq = members[k0];
            let (_, whole, sharded) = forms(im, rows.len(seq), rows.aw(seq), rows.ash(seq));
            if k0 >= forced && whole.saturating_mul(n) <= total {
                break;
            }
            total = total - whole + sharded;
            k0 += 1;
        }
        Candidates {
            counts: [k0, k0 + 1, k0.saturating_sub(1).max(forced), k],
            k,
            all,
            work_all,
        }
    }

    /// A lower bound on attempt `s`, from two facts about the slowest rank. It is at least
    /// the average: every member adds at least the cheaper of whole and sharded to the ranks'
    /// summed time (see `work`), the first `s` their sharded cost. And it is at least the ring
    /// of the first `s` plus their shares' GEMM (and their attention, when it runs after the
    /// window).
    #[inline(always)]
    fn lower(&self, members: &[u32], c: &Candidates, s: usize) -> u64 {
        let (im, rows) = (self.ledger.im, self.ledger.rows);
        let p = if s >= c.k {
            c.all
        } else {
            let mut p = Prefix::default();
            for &seq in members.get(..s).unwrap_or(members) {
                p.add(im, &rows, seq);
            }
            p
        };
        let after = if im.all_attention() { 0 } else { p.attn };
        let ring = im
            .comm(&self.ledger.link, p.len)
            .saturating_add(im.gemm_linear(p.tok))
            .saturating_add(after)
            .saturating_add(im.seqs_fixed(p.seqs));
        // The average holds only while no rank's GEMM term reaches the model's clamp (`CAP`):
        // the summed per-member terms, plus one unit of rounding each, stay below it.
        let summed = c.work_all.saturating_add(p.extra);
        let average = if summed.saturating_add(c.k as u64) < CAP {
            summed / u64::from(im.cp()).max(1)
        } else {
            0
        };
        im.fixed().saturating_add(average.max(ring))
    }

    /// The attempts of every candidate count; the best time, its decisions in `dec`.
    #[inline(always)]
    fn try_counts(
        &mut self,
        members: &[u32],
        c: &Candidates,
        cur: &mut [u32],
        dec: &mut [u32],
    ) -> Option<u64> {
        // An attempt whose bound reaches the best time so far cannot be kept (ties go to the
        // earlier candidate): it is skipped, and the plan is the one every candidate would
        // give.
        let mut found: Option<u64> = None;
        for (i, &s) in c.counts.iter().enumerate() {
            if s > c.k || c.counts[..i].contains(&s) {
                continue;
            }
            if self.shortcuts && found.is_some_and(|f| self.lower(members, c, s) >= f) {
                continue;
            }
            self.ledger.bound = found.unwrap_or(u64::MAX);
            let t = match members {
                [seq] if self.shortcuts => self.lone(*seq, s, cur),
                _ => {
                    let mut slots = MemberSlots {
                        members,
                        lengths: self.ledger.rows.lengths,
                        cur: &mut *cur,
                    };
                    let (cfg, budget) = (self.cfg, &self.budget);
                    attempt(
                        cfg,
                        budget,
                        &mut slots,
                        s,
                        &mut self.rooms,
                        &mut self.ledger,
                    )
                }
            };
            if let Some(t) = t {
                found = Some(t);
                keep(members, cur, dec);
            }
        }
        found
    }

    /// A lower bound on a sub-group attempt sharding the first `s` members: as
    /// [`Placer::lower`]'s average, with each of those members at its cheapest group (the
    /// whole group or a sub-group its share fits: `g` ranks hold its share and its shard
    /// attention).
    fn lower_groups(&self, members: &[u32], c: &Candidates, s: usize) -> u64 {
        let (im, rows) = (self.ledger.im, self.ledger.rows);
        let mut summed = c.work_all;
        for &seq in members.get(..s).unwrap_or(members) {
            summed = summed
                .saturating_add(rows.grp(seq))
                .saturating_sub(rows.work(seq));
        }
        if summed.saturating_add(c.k as u64) < CAP {
            im.fixed()
                .saturating_add(summed / u64::from(im.cp()).max(1))
        } else {
            0
        }
    }

    /// Sub-group attempts: the same sharded counts (`k0` and `k`), each sharded member on the
    /// group (the whole group or an aligned sub-group) that grows the ranks' time least, by
    /// both [`GroupRule`]s. Kept only when strictly faster than `found`, so a plan without
    /// sub-groups is never replaced by an equal one.
    #[inline(always)]
    fn try_subgroups(
        &mut self,
        members: &[u32],
        c: &Candidates,
        cur: &mut [u32],
        dec: &mut [u32],
        mut found: Option<u64>,
    ) -> Option<u64> {
        // The bounds of the two sharded counts tried, once each.
        let (lower_k0, lower_k) = (
            self.lower_groups(members, c, c.counts[0]),
            self.lower_groups(members, c, c.k),
        );
        let cands = &c.counts;
        for (i, &s, rule) in cands
            .iter()
            .enumerate()
            .flat_map(|(i, s)| [(i, s, GroupRule::Total), (i, s, GroupRule::Balance)])
        {
            if s == 0 || s > c.k || cands[..i].contains(&s) || i == 1 || i == 2 {
                continue;
            }
            let bound = if i == 0 { lower_k0 } else { lower_k };
            if found.is_some_and(|f| bound >= f) {
                continue;
            }
            self.ledger.bound = found.unwrap_or(u64::MAX);
            let mut slots = MemberSlots {
                members,
                lengths: self.ledger.rows.lengths,
                cur: &mut *cur,
            };
            let (cfg, budget) = (self.cfg, &self.budget);
            let t = attempt_groups(
                cfg,
                budget,
                &mut slots,
                s,
                &mut self.rooms,
                &mut self.ledger,
                rule,
            );
            if let Some(t) = t
                && found.is_none_or(|f| t < f)
            {
                found = Some(t);
                keep(members, cur, dec);
            }
        }
        found
    }

    /// [`attempt`] for a micro-batch of one sequence, in closed form (a DP rank with one
    /// sequence, as when there are as many DP ranks as sequences, would otherwise run the
    /// CP-rank state machine twice for it). With `s = 0` the machine puts the sequence whole
    /// on rank 0 (every rank is empty and ties go to the lowest) if it fits there, else shards
    /// it, as `s = 1` does; a shard that does not fit fails the recount; no rollback can
    /// happen. The time is the machine's: [`IntModel::slowest`] of the ranks it leaves (the
    /// other ranks of a whole placement are empty and never slower). Writes the decision to
    /// `cur[0]`; `None` when memory fails or the time reaches `ledger.bound`, as `attempt`.
    // Out of line: inlined into the candidate loop it slowed every micro-batch, not only the
    // one-sequence ones (1.5 % more instructions with one sequence per DP rank).
    #[inline(never)]
    fn lone(&self, seq: u32, s: usize, cur: &mut [u32]) -> Option<u64> {
        let (im, rows) = (self.ledger.im, self.ledger.rows);
        let len = rows.len(seq);
        let bucket = self.budget.bucket();
        let local = im.local(len);
        let whole = s == 0 && local <= bucket;
        let t = if whole {
            im.slowest(&[rows.aw(seq)], &[u64::from(local)], 0, 0, 0, 0)
        } else {
            let share = im.share(len);
            if share > bucket {
                return None;
            }
            let comm = im.comm(&self.ledger.link, u64::from(len));
            im.slowest(&[0], &[0], u64::from(share), rows.ash(seq), comm, 1)
        };
        if let Some(c) = cur.first_mut() {
            *c = if whole {
                Decision::Local(0)
            } else {
                Decision::Whole
            }
            .to_word();
        }
        let bound = self.ledger.bound;
        (bound == u64::MAX || t < bound).then_some(t)
    }
}

/// Keeps an attempt's decisions: each member's working decision into its sequence's word of
/// `dec`.
#[inline(always)]
fn keep(members: &[u32], cur: &[u32], dec: &mut [u32]) {
    for (&s, &d) in members.iter().zip(cur.iter()) {
        if let Some(x) = dec.get_mut(s as usize) {
            *x = d;
        }
    }
}

/// How [`attempt_groups`] ranks the groups a member may be sharded over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupRule {
    /// The least summed time of every rank, then the least slowest rank.
    Total,
    /// The least slowest-rank time plus average-rank time.
    Balance,
}

/// Like [`attempt`], but each of the `s` heaviest members is sharded over the group of the
/// CP ranks (the whole group, or an aligned sub-group with room for its share) that adds the
/// least to the slowest rank's time plus the average rank's time (so that a second long
/// sequence goes to the other half of the group rather than on top of the first); the rest are
/// placed as in [`attempt`].
fn attempt_groups(
    cfg: &Config,
    budget: &Budget,
    slots: &mut MemberSlots<'_>,
    s: usize,
    rooms: &mut Rooms,
    ledger: &mut TimeLedger<'_>,
    rule: GroupRule,
) -> Option<u64> {
    rooms.reset(cfg.cp, budget.bucket());
    ledger.reset(cfg.cp as usize);
    let n = cfg.cp;
    let im = ledger.im;
    for k in 0..s.min(slots.count()) {
        let (seq, len) = (slots.seq_at(k), slots.len_at(k));
        let (most, group) = pick_group(ledger, rooms, len, rule)?;
        // Rank times only grow from here: past the best time so far, give up.
        if ledger.bound != u64::MAX && most >= ledger.bound {
            return None;
        }
        if group.size == n {
            rooms.take_group(group, budget.share(len));
            ledger.shard(seq, len);
            slots.set(k, Decision::Whole);
        } else {
            rooms.take_group(group, im.share_in(len, group.size));
            ledger.group(seq, len, group);
            slots.set(k, Decision::Sub(group));
        }
    }
    match ranks::place(slots, s, budget, cfg.victim, rooms, ledger) {
        Ok(_) => {
            let t = ledger.time();
            (ledger.bound == u64::MAX || t < ledger.bound).then_some(t)
        }
        Err(Stop::Failed { .. } | Stop::Abandoned) => None,
    }
}

/// The group a sequence of `len` tokens is sharded over by `rule`, among the whole group and
/// the aligned sub-groups (largest first, first rank ascending) with room for its share, and
/// the slowest rank's time with it there; `None` when none has room.
///
/// A group changes only its own ranks' times, so each candidate visits only those: the ranks
/// below it are folded into a running maximum and sum as the groups of one size advance, the
/// ranks above it are read from suffix maxima and sums, and the share, attention and ring
/// traffic are computed once per group size or group, not per rank. A pick costs
/// `O(cp · levels)` rank times instead of `O(cp²)` (BENCHMARKS.md, "Sub-groups at large CP":
/// 5.9x fewer instructions per call at CP 256). Sums saturate, as before: a saturating sum of
/// non-negative terms is `min(Σ, u64::MAX)` in any order, so the costs, and the plans, are
/// the ones the rank-by-rank loop gave (`tests/golden.rs` pins CP 64 and CP 256 plans).
fn pick_group(
    ledger: &TimeLedger<'_>,
    rooms: &Rooms,
    len: u32,
    rule: GroupRule,
) -> Option<(u64, CpGroup)> {
    const CAP: usize = MAX_CP as usize;
    let im = ledger.im;
    let n = im.cp();
    let count = n as usize;
    // From the last rank down, entry `count - 1 - r`: rank r's time so far, and the maximum
    // and saturating sum of the times of ranks `r..`.
    let mut from_top: HVec<(u64, u64, u64), CAP> = HVec::new();
    let (mut m, mut total) = (0u64, 0u64);
    for r in (0..count).rev() {
        let t = ledger.rank_time(r);
        (m, total) = (m.max(t), total.saturating_add(t));
        let _ = from_top.push((t, m, total));
    }
    // (time of rank r, max and sum over ranks r..); zeros for r == count.
    let at = |r: usize| {
        from_top
            .get(count.wrapping_sub(r + 1))
            .copied()
            .unwrap_or((0, 0, 0))
    };
    let room = rooms.as_slice();
    let mut pick: Option<((u64, u64), u64, CpGroup)> = None;
    for size in core::iter::once(n).chain(CpGroup::sub_sizes(n).rev()) {
        // Every group of one size adds the same share and attention to each of its ranks.
        let share = im.share_in(len, size);
        let attn = im.attention(share, len);
        let (mut below_max, mut below_sum) = (0u64, 0u64);
        for group in CpGroup::aligned(n, size) {
            let (first, end) = (group.first as usize, (group.first + group.size) as usize);
            let fits = room
                .get(first..end)
                .is_some_and(|rs| rs.iter().all(|&x| x >= i64::from(share)));
            if fits {
                let comm = ledger.group_comm(group, len);
                let (_, high_max, high_sum) = at(end);
                let mut most = below_max.max(high_max);
                let mut sum = below_sum.saturating_add(high_sum);
                for r in first..end {
                    let t = ledger.rank_time_in(r, u64::from(share), attn, comm);
                    most = most.max(t);
                    sum = sum.saturating_add(t);
                }
                // Least total time (every rank's), then the least slowest rank; or the slowest
                // rank plus the average one.
                let cost = match rule {
                    GroupRule::Total => (sum, most),
                    GroupRule::Balance => (most.saturating_add(sum / u64::from(n)), 0),
                };
                if pick.is_none_or(|(c, _, _)| cost < c) {
                    pick = Some((cost, most, group));
                }
            }
            for r in first..end {
                let (t, _, _) = at(r);
                below_max = below_max.max(t);
                below_sum = below_sum.saturating_add(t);
            }
        }
    }
    pick.map(|(_, most, group)| (most, group))
}
